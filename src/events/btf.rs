// SPDX-License-Identifier: GPL-2.0

//! The kernel's BTF for probe events' argument names (`$arg*`, `file`,
//! `file->f_path.dentry`, a typed `$retval`): the `vmlinux` BTF the kernel
//! keeps between `__start_BTF` and `__stop_BTF` (what
//! `/sys/kernel/btf/vmlinux` shows; `CONFIG_DEBUG_INFO_BTF`), read in place
//! with an index of its types built at load. Without it (a kernel without
//! BTF, or the symbols not found) lines are parsed as on a kernel without
//! BTF, which is what the kernel's own parser does there too.
//!
//! Modules' BTF (`CONFIG_DEBUG_INFO_BTF_MODULES`) is not read: a module's
//! function has no BTF here (README, "kprobe_events").

use super::*;
use crate::btf::Btf;
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// The index (type id - 1 to its record's offset), leaked from a
/// `KVVec<u32>` at load and taken back at unload; and the blob.
static INDEX: AtomicPtr<u32> = AtomicPtr::new(core::ptr::null_mut());
static INDEX_LEN: AtomicUsize = AtomicUsize::new(0);
static BLOB: AtomicPtr<u8> = AtomicPtr::new(core::ptr::null_mut());
static BLOB_LEN: AtomicUsize = AtomicUsize::new(0);

/// The largest blob taken (a distribution kernel's is 5-6 MB).
const MAX_BLOB: usize = 256 << 20;

/// Finds and indexes the kernel's BTF. Load time, before the control
/// files exist.
pub(crate) fn init() {
    use crate::symbols::lookup_name;
    let (Some(start), Some(stop)) = (
        lookup_name(kernel::c_str!("__start_BTF")),
        lookup_name(kernel::c_str!("__stop_BTF")),
    ) else {
        return;
    };
    let len = stop.saturating_sub(start);
    // Inside the kernel's read-only data, where the linker puts `.BTF`.
    let rodata = match (
        lookup_name(kernel::c_str!("__start_rodata")),
        lookup_name(kernel::c_str!("__end_rodata")),
    ) {
        (Some(lo), Some(hi)) => lo <= start && stop <= hi,
        _ => false,
    };
    if len == 0 || len > MAX_BLOB || !rodata {
        pr_warn!(
            "vmlinux BTF at {:#x}..{:#x} not taken: BTF argument names off\n",
            start,
            stop
        );
        return;
    }
    // SAFETY: the kernel's `.BTF` section, read-only data of the image
    // that lives as long as the kernel.
    let data: &'static [u8] = unsafe { core::slice::from_raw_parts(start as *const u8, len) };
    let Some(n) = Btf::count(data) else {
        pr_warn!("vmlinux BTF not readable: BTF argument names off\n");
        return;
    };
    let mut index = KVVec::new();
    if index.extend_with(n, 0u32, GFP_KERNEL).is_err() {
        pr_warn!("no memory for the BTF index: BTF argument names off\n");
        return;
    }
    if Btf::fill_index(data, &mut index).is_none() {
        pr_warn!("vmlinux BTF not readable: BTF argument names off\n");
        return;
    }
    let (p, len_idx, cap) = index.into_raw_parts();
    debug_assert_eq!(len_idx, cap);
    if len_idx != cap {
        // SAFETY: the parts just taken.
        drop(unsafe { KVVec::from_raw_parts(p, len_idx, cap) });
        return;
    }
    INDEX_LEN.store(len_idx, Ordering::Relaxed);
    INDEX.store(p, Ordering::Release);
    BLOB_LEN.store(len, Ordering::Relaxed);
    BLOB.store(start as *mut u8, Ordering::Release);
    pr_info!("vmlinux BTF: {} types, {} bytes\n", n, len);
}

/// The kernel's BTF, where there is one. Under the events lock (`_g`):
/// [`exit`] frees the index only once no line can be written.
pub(super) fn vmlinux(_g: &Locked) -> Option<Btf<'static>> {
    let p = INDEX.load(Ordering::Acquire);
    let b = BLOB.load(Ordering::Acquire);
    if p.is_null() || b.is_null() {
        return None;
    }
    // SAFETY: set in `init` from a leaked vector and the kernel's `.BTF`;
    // both live until `exit`, which runs after the files are gone.
    let (index, data) = unsafe {
        (
            core::slice::from_raw_parts(p, INDEX_LEN.load(Ordering::Relaxed)),
            core::slice::from_raw_parts(b, BLOB_LEN.load(Ordering::Relaxed)),
        )
    };
    Btf::new(data, index)
}

/// Frees the index. Unload, after every writer is gone.
pub(crate) fn exit() {
    let p = INDEX.swap(core::ptr::null_mut(), Ordering::AcqRel);
    BLOB.store(core::ptr::null_mut(), Ordering::Release);
    if !p.is_null() {
        let n = INDEX_LEN.load(Ordering::Relaxed);
        // SAFETY: the parts `init` leaked (length = capacity).
        drop(unsafe { KVVec::from_raw_parts(p, n, n) });
    }
}
