// SPDX-License-Identifier: GPL-2.0
/*
 * arm64 C glue for the Rust backend. Empty until the arm64 backend lands
 * (the BRK entry through ftrace and cache maintenance will live here).
 */
#include <linux/kernel.h>
