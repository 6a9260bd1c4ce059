// SPDX-License-Identifier: GPL-2.0

//! The kernel's own never-probe list by name: what it marks
//! `NOKPROBE_SYMBOL()`, `__kprobes` or `nokprobe_inline`, and in assembly
//! `NOKPROBE()`/`_ASM_NOKPROBE()`, read from its source by
//! `scripts/gen-nokprobe.py` (`nokprobe_names.rs` here and in each arch).
//! A kernel built without kprobes keeps no trace of any of them; the
//! blacklist (`blacklist.rs`) refuses them on every kernel.

use kernel::c_str;
use kernel::prelude::*;
use kernel::str::CStr;

/// Reason: a `NOKPROBE_SYMBOL()` or `.kprobes.text` function of the running
/// kernel's that the list from the source lacks (`kp_smoke.smoke_blacklist_covers_the_kernels`
/// fails on it).
pub(crate) const STALE: &CStr =
    c_str!("NOKPROBE_SYMBOL, not in the engine's list (scripts/gen-nokprobe.py)");

/// Whether the kernel source marks the function `name` (a clone's
/// `name.isra.0`, `name.llvm.123`, ... included) never to probe. A kernel
/// without kprobes keeps no trace of that, and still must not have them
/// probed: `return_address()`, which lockdep's
/// irq tracing calls on arm64's exception exit, hit itself until `die()`
/// deadlocked the machine (kp_mass on arm64-hardened).
pub(crate) fn listed(name: &[u8]) -> bool {
    let base = name.split(|&c| c == b'.').next().unwrap_or(name);
    super::nokprobe_names::GENERIC.binary_search(&base).is_ok()
        || crate::arch::NOKPROBE_NAMES.binary_search(&base).is_ok()
}

/// `__<section>_start`, `__<section>_end`: a section's bounds (another
/// section's end shares the address of `.kprobes.text`'s first function).
pub(crate) fn is_section_marker(name: &[u8]) -> bool {
    name.starts_with(b"__") && (name.ends_with(b"_start") || name.ends_with(b"_end"))
}

/// Says which function the list lacks, once, at load.
pub(crate) fn warn_stale(func: &[u8]) {
    pr_warn!(
        "blacklist: the kernel refuses {} to its kprobes; the list from its source lacks it \
         (run scripts/gen-nokprobe.py)\n",
        core::str::from_utf8(func).unwrap_or("?")
    );
}
