/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Module parameters for the Rust examples. The `module!` macro of Rust for
 * Linux 6.12 cannot declare parameters, so each example links a three-line C
 * file that declares them with module_param_string() through this macro; the
 * Rust side reads the NUL-terminated buffer (see kp::param in the examples).
 */
#ifndef _KP_EXAMPLE_PARAMS_H
#define _KP_EXAMPLE_PARAMS_H
#include <linux/module.h>

/* A read-only string parameter `name` in `char kp_param_<name>[]`. */
#define KP_STRING_PARAM(name, size, deflt, desc)			\
	char kp_param_##name[size] = deflt;				\
	module_param_string(name, kp_param_##name, size, 0444);	\
	MODULE_PARM_DESC(name, desc)

#endif
