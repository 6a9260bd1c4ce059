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

/// Copies `bytes` over the text at `addr`. Process context; the caller holds
/// the registration lock so that no two writers race on one page.
pub(crate) fn write(addr: usize, bytes: &[u8]) -> Result {
    let mut done = 0;
    while done < bytes.len() {
        let at = addr + done;
        let in_page = at % PAGE_SIZE;
        let n = core::cmp::min(bytes.len() - done, PAGE_SIZE - in_page);
        // SAFETY: `at` is a text address the caller validated.
        let page = unsafe { kp_helper_text_page(at) };
        if page.is_null() {
            return Err(EFAULT);
        }
        // SAFETY: `page` is a valid page backing kernel or module text.
        let alias = unsafe { kp_helper_vmap_page(page) };
        if alias.is_null() {
            return Err(ENOMEM);
        }
        // SAFETY: `alias` maps the whole page writable; `in_page + n` stays in
        // it; `bytes[done..done + n]` is readable.
        unsafe {
            core::ptr::copy_nonoverlapping(
                bytes.as_ptr().add(done),
                alias.cast::<u8>().add(in_page),
                n,
            );
            vunmap(alias);
        }
        done += n;
    }
    Ok(())
}
