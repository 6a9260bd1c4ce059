// SPDX-License-Identifier: GPL-2.0
/*
 * kp_target's C function: compiled with an ftrace call site, unlike the
 * module's Rust code, so that probe events may probe it (they refuse
 * functions without one, as the kernel's do). The guest's module churn
 * defines an event on it while the module comes and goes.
 */
#include <linux/compiler.h>
#include <linux/types.h>

u64 kp_target_c_func(u64 x);

/* Read by a probe event's `@kp_target_c_word` defined before the module
 * loads (resolved when it comes). */
u64 kp_target_c_word = 0x5eed;

noinline u64 kp_target_c_func(u64 x)
{
	barrier_data(&x);
	return x * 2 + 1;
}
