// SPDX-License-Identifier: GPL-2.0

//! This kernel's register accessors, for the client API (`src/api.rs`,
//! which client modules include): the one place outside `src/arch.rs` that
//! picks an architecture.

#[cfg(CONFIG_X86_64)]
#[path = "x86_64/regs.rs"]
mod imp;

#[cfg(CONFIG_ARM64)]
#[path = "arm64/regs.rs"]
mod imp;

pub use imp::*;
