// SPDX-License-Identifier: GPL-2.0
/* Parameters of kretprobe_example (see params.h). */
#include "params.h"
KP_STRING_PARAM(func, 512, "do_sys_open", "function whose returns to time");
