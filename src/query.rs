// SPDX-License-Identifier: GPL-2.0

//! Read-only queries for probe writers: resolve a symbol, decode an
//! instruction (to place offset probes, for example right after a call).
//!
//! C: `kp_lookup_symbol()`, `kp_decode_insn()` in `include/kp_kprobes.h`;
//! Rust: `kp::lookup_symbol()`, `kp::Insn` in `src/api.rs`.

use crate::abi::{KpInsn, KP_INSN_BRANCH, KP_INSN_CALL};
use crate::arch::Steps;
use crate::{arch, symbols};
use kernel::ffi::{c_char, c_int, c_ulong};
use kernel::prelude::*;
use kernel::str::CStr;

/// `kp_lookup_symbol()`: the address of `name` (`"sym"` or `"module:sym"`),
/// 0 if unknown; `*size` (if not null) gets the symbol's size.
///
/// # Safety
///
/// `name` is null or NUL-terminated; `size` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn kp_lookup_symbol(name: *const c_char, size: *mut c_ulong) -> c_ulong {
    if name.is_null() {
        return 0;
    }
    // SAFETY: NUL-terminated per the contract.
    let name = unsafe { CStr::from_char_ptr(name) };
    let Some(addr) = symbols::lookup_name(name) else {
        return 0;
    };
    if !size.is_null() {
        let s = symbols::symbol_at(addr).map_or(0, |s| s.size);
        // SAFETY: writable per the contract.
        unsafe { *size = s };
    }
    addr
}

/// `kp_decode_insn()`: describes the instruction at `addr` (kernel or module
/// text). 0, or `-EFAULT` (unreadable), `-EILSEQ` (not an instruction the
/// decoder knows), `-EINVAL` (null `out`, misaligned on arm64).
///
/// # Safety
///
/// `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn kp_decode_insn(addr: c_ulong, out: *mut KpInsn) -> c_int {
    if out.is_null() {
        return EINVAL.to_errno();
    }
    match arch::Arch::describe(addr) {
        Ok(i) => {
            let mut flags = 0;
            if i.call {
                flags |= KP_INSN_CALL;
            }
            if i.target.is_some() {
                flags |= KP_INSN_BRANCH;
            }
            // SAFETY: writable per the contract.
            unsafe {
                out.write(KpInsn {
                    addr,
                    len: i.len as u32,
                    flags,
                    target: i.target.unwrap_or(0),
                })
            };
            0
        }
        Err(e) => e.to_errno(),
    }
}
