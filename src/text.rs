// SPDX-License-Identifier: GPL-2.0

//! Writing to kernel and module text through a temporary writable alias.
//!
//! Text is mapped read-only. We find the `struct page` behind the address
//! (`vmalloc_to_page()` for module text, `__pa_symbol()` for the kernel image),
//! `vmap()` it with `PAGE_KERNEL`, write through that alias and unmap. The
//! caller then makes the other CPUs see the change (arch backend). `vmap` and
//! `vunmap` may sleep: process context only, never from a trap.

use kernel::ffi::c_void;
use kernel::prelude::*;

extern "C" {
    fn kp_helper_text_page(addr: usize) -> *mut c_void;
    fn kp_helper_vmap_page(page: *mut c_void) -> *mut c_void;
    fn vunmap(addr: *const c_void);
}

const PAGE_SIZE: usize = 4096;

/// A temporary writable mapping of the page holding a text address.
///
/// INVARIANT: `ptr` is a live `vmap()` alias of that page, at the same
/// offset as the address; dropping unmaps it.
pub(crate) struct Alias {
    page: *mut c_void,
    ptr: *mut u8,
}

impl Alias {
    /// Maps the page of `addr`. Process context.
    ///
    /// # Safety
    ///
    /// `addr` is kernel or module text, and what is written through the
    /// alias keeps [`write`]'s contract.
    pub(crate) unsafe fn new(addr: usize) -> Result<Self> {
        // SAFETY: `addr` is a text address (the caller's contract).
        let page = unsafe { kp_helper_text_page(addr) };
        if page.is_null() {
            return Err(EFAULT);
        }
        // SAFETY: `page` is a valid page backing kernel or module text.
        let base = unsafe { kp_helper_vmap_page(page) };
        if base.is_null() {
            return Err(ENOMEM);
        }
        Ok(Alias {
            page: base,
            // SAFETY: the offset stays within the mapped page.
            ptr: unsafe { base.cast::<u8>().add(addr % PAGE_SIZE) },
        })
    }

    /// The writable address corresponding to the mapped text address.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for Alias {
    fn drop(&mut self) {
        // SAFETY: mapped in `new` (type invariant).
        unsafe { vunmap(self.page) };
    }
}

/// Copies `bytes` over the text at `addr`, under the kernel's `text_mutex`
/// as every text writer. Process context; the caller holds the registration
/// lock (taken before `text_mutex`, never after), so that no two of our
/// writers race on one page. (arm64: text that no CPU runs yet; live text
/// is written through `Alias` under `stop_machine()`.)
///
/// # Safety
///
/// `[addr, addr + bytes.len())` is kernel or module text the engine owns
/// for this write, and no CPU can execute a torn instruction there: the
/// first byte of an instruction the engine prepared (its breakpoint or the
/// original byte back; one byte is written atomically), bytes under an
/// armed breakpoint or prepared jump that no CPU executes, or a slot or
/// stub of the engine's own area that nothing branches to yet (or any
/// more).
pub(crate) unsafe fn write(addr: usize, bytes: &[u8]) -> Result {
    let _text = crate::symbols::TextLock::lock();
    // SAFETY: the caller's contract.
    unsafe { write_locked(addr, bytes) }
}

/// [`write`], but only if the text at `addr` still holds `expect` (as long
/// as `bytes`), checked under the same hold of `text_mutex`: `EBUSY` when
/// another writer (the kernel's kprobes, a static key, kgdb) changed it
/// since the caller looked.
///
/// # Safety
///
/// As [`write`], for `bytes`; `expect` is no longer than `bytes`.
// A backend service: the x86_64 backend writes over bytes it checked
// earlier (arm64 checks inside its stop_machine() callback instead, and
// leaves it unused).
#[allow(dead_code)]
pub(crate) unsafe fn write_if_unchanged(addr: usize, expect: &[u8], bytes: &[u8]) -> Result {
    let _text = crate::symbols::TextLock::lock();
    for (i, &e) in expect.iter().enumerate() {
        // SAFETY: kernel text the caller owns a probe in: mapped, readable.
        if unsafe { core::ptr::read_volatile((addr + i) as *const u8) } != e {
            return Err(EBUSY);
        }
    }
    // SAFETY: the caller's contract.
    unsafe { write_locked(addr, bytes) }
}

/// [`write`] with `text_mutex` held.
///
/// # Safety
///
/// As [`write`].
unsafe fn write_locked(addr: usize, bytes: &[u8]) -> Result {
    let mut done = 0;
    while done < bytes.len() {
        let at = addr + done;
        let n = core::cmp::min(bytes.len() - done, PAGE_SIZE - at % PAGE_SIZE);
        // SAFETY: `at` is inside the caller's range (the contract).
        let alias = unsafe { Alias::new(at) }?;
        // SAFETY: the alias maps the whole page writable; `n` bytes from
        // `at` stay in it; `bytes[done..done + n]` is readable.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr().add(done), alias.ptr(), n) };
        done += n;
    }
    Ok(())
}
