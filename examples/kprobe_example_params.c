// SPDX-License-Identifier: GPL-2.0
/* Parameters of kprobe_example (see params.h). */
#include "params.h"
KP_STRING_PARAM(symbol, 512, "do_sys_open", "function to probe (default do_sys_open)");
KP_STRING_PARAM(testfile, 256, "", "only report opens of this file (do_sys_open only)");
