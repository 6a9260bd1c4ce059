// SPDX-License-Identifier: GPL-2.0
/* Parameters of offset_example (see params.h). */
#include "params.h"
KP_STRING_PARAM(offset, 32, "", "offset into kernel_clone (default: found by decoding)");
