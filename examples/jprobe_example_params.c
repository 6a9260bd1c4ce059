// SPDX-License-Identifier: GPL-2.0
/* Parameters of jprobe_example (see params.h). */
#include "params.h"
KP_STRING_PARAM(testfile, 256, "", "only report opens of this file");
