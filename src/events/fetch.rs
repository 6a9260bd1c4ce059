// SPDX-License-Identifier: GPL-2.0

//! Running a fetch program at a hit: registers, stack, memory (never
//! faulting: `copy_from_kernel_nofault` / `_user_`), strings.

use super::*;
use crate::arch::regs::{self, Location, Regs};
use crate::event_parse::Type;
use kernel::bindings::{self, pt_regs};

/// Whether a plain (`+OFFS`) read of `addr` goes to user memory: like the
/// kernel's probe_mem_read(), addresses below the kernel half are user
/// addresses (a system call's pointer arguments).
pub(super) fn is_user_addr(addr: usize) -> bool {
    (addr as isize) >= 0
}

pub(super) fn read_word(addr: usize, user: bool, size: usize) -> Option<u64> {
    let user = user || is_user_addr(addr);
    let mut v = 0u64;
    // SAFETY: nofault copies of at most 8 bytes into `v`.
    let r = unsafe {
        if user {
            bindings::copy_from_user_nofault((&mut v as *mut u64).cast(), addr as *const _, size)
        } else {
            bindings::copy_from_kernel_nofault((&mut v as *mut u64).cast(), addr as *const _, size)
        }
    };
    (r == 0).then_some(v)
}

/// What a fetch program reads at a hit: the registers, and on a return
/// probe the values of `$argN` saved at the function's entry.
#[derive(Clone, Copy)]
pub(super) struct Hit<'a> {
    pub(super) regs: &'a pt_regs,
    /// The argument numbers the event saves at entry (`Event::entry_args`)
    /// and their values for this call; empty on entry probes.
    pub(super) saved: (&'a [u32], &'a [u64]),
}

/// The value of function argument `k` (0-based) in `regs`, at an entry.
pub(super) fn arg_value(regs: &pt_regs, k: u32) -> Option<u64> {
    // SAFETY: `Regs` is a transparent `pt_regs`; shared view.
    match unsafe { &*(regs as *const pt_regs).cast::<Regs>() }.arg_location(k as usize) {
        Location::Register(x) => Some(x as u64),
        Location::Stack(a) => read_word(a, false, 8),
    }
}

/// Runs `ops`; the last op, when it is a dereference and `last` says so, is
/// not executed: its address is returned (for strings and sized reads).
pub(super) fn run(
    ops: &[COp],
    hit: Hit<'_>,
    stop_before_last_deref: bool,
) -> Option<(u64, Option<bool>)> {
    let regs = hit.regs;
    let mut v = 0u64;
    let n = ops.len();
    for (i, op) in ops.iter().enumerate() {
        v = match *op {
            // SAFETY: `r` is an index into `struct pt_regs` words from the
            // arch's register table.
            COp::Reg(r) => unsafe { *(regs as *const pt_regs).cast::<u64>().add(usize::from(r)) },
            COp::Stack(k) => read_word(
                regs::sp(regs).wrapping_add((k as usize).wrapping_mul(8)),
                false,
                8,
            )?,
            COp::StackAddr => regs::sp(regs) as u64,
            // On a return probe, the value saved at the entry.
            COp::Arg(k) => match hit.saved.0.iter().position(|&s| s == k) {
                Some(i) => *hit.saved.1.get(i)?,
                None if hit.saved.0.is_empty() => arg_value(regs, k)?,
                None => return None,
            },
            COp::Retval => regs::return_value(regs) as u64,
            // Resolved at compile time; `$comm` is read as a string.
            COp::Comm | COp::ImmStr(_) | COp::Symbol { .. } | COp::BadSymbol(_) => 0,
            COp::Imm(x) | COp::Addr(x) => x,
            COp::Deref { offset, user } => {
                let a = v.wrapping_add(offset as u64);
                if i + 1 == n && stop_before_last_deref {
                    return Some((a, Some(user)));
                }
                read_word(a as usize, user, 8)?
            }
        };
    }
    Some((v, None))
}

/// `%pS` of `addr` into `out` (NUL-terminated; nothing written when `out`
/// is empty): the length of the whole text, as snprintf() returns it.
pub(super) fn format_symbol(out: &mut [u8], addr: usize) -> usize {
    let (p, n) = if out.is_empty() {
        (core::ptr::null_mut(), 0)
    } else {
        (out.as_mut_ptr(), out.len())
    };
    // SAFETY: snprintf() writes at most `n` bytes at `p`.
    let r = unsafe { snprintf(p, n, c"%pS".as_ptr().cast(), addr) };
    r.max(0) as usize
}

/// Applies a bitfield type to a value read.
fn bits(ty: Type, v: u64) -> u64 {
    match ty {
        Type::Bitfield { width, offset, .. } => {
            (v >> offset) & (u64::MAX >> (64 - u32::from(width)))
        }
        _ => v,
    }
}

/// The value of a non-string argument.
pub(super) fn fetch_value(a: &Arg, hit: Hit<'_>) -> u64 {
    let ops = &a.ops[..a.nops];
    let v = match run(ops, hit, true) {
        Some((addr, Some(user))) => read_word(addr as usize, user, value_size(a.ty)).unwrap_or(0),
        Some((v, None)) => v,
        None => 0,
    };
    bits(a.ty, v)
}

/// Stores the elements of a non-string array argument into `out` (its
/// field): values one after the other from the memory the program's last
/// dereference reads; one that faults is 0.
pub(super) fn fetch_array(a: &Arg, hit: Hit<'_>, out: &mut [u8]) {
    let esize = value_size(a.ty);
    let base = match run(&a.ops[..a.nops], hit, true) {
        Some((addr, Some(user))) => Some((addr as usize, user)),
        _ => None,
    };
    for (j, dst) in out.chunks_exact_mut(esize).enumerate() {
        let v = base
            .and_then(|(addr, user)| read_word(addr.wrapping_add(j * esize), user, esize))
            .map_or(0, |v| bits(a.ty, v));
        store_value(dst, v);
    }
}

/// `v` into a field of 1, 2, 4 or 8 bytes, one store each (a copy of a
/// length known only at run time is an out-of-line memcpy(), `rep movsb`
/// on x86_64, which QEMU's TCG runs byte by byte).
#[inline(always)]
pub(super) fn store_value(field: &mut [u8], v: u64) {
    if let Ok(f) = <&mut [u8; 8]>::try_from(&mut *field) {
        *f = v.to_ne_bytes();
    } else if let Ok(f) = <&mut [u8; 4]>::try_from(&mut *field) {
        *f = (v as u32).to_ne_bytes();
    } else if let Ok(f) = <&mut [u8; 2]>::try_from(&mut *field) {
        *f = (v as u16).to_ne_bytes();
    } else if let Some(f) = field.first_mut() {
        *f = v as u8;
    }
}

/// Copies string `j` of a string argument into `out` (NUL-terminated,
/// truncated); returns the bytes used (0: fault). One string: `j` is 0 and
/// the string is at the address the program's last dereference reads; an
/// array (`string[N]`): there are N pointers, and `j` picks one.
pub(super) fn fetch_string(a: &Arg, hit: Hit<'_>, j: usize, out: &mut [u8]) -> usize {
    if out.is_empty() {
        return 0;
    }
    let ops = &a.ops[..a.nops];
    if matches!(ops.first(), Some(COp::Comm)) {
        // SAFETY: `current` is valid; `comm` is a NUL-terminated array.
        let comm = unsafe { (*bindings::get_current()).comm };
        let n = comm.iter().position(|&c| c == 0).unwrap_or(comm.len());
        let n = n.min(out.len() - 1);
        out[..n].copy_from_slice(&comm[..n]);
        out[n] = 0;
        return n + 1;
    }
    if matches!(ops.first(), Some(COp::ImmStr(_))) {
        let n = a.imm.len().min(out.len() - 1);
        out[..n].copy_from_slice(&a.imm[..n]);
        out[n] = 0;
        return n + 1;
    }
    if a.ty == Type::SymStr {
        let v = fetch_value(a, hit);
        return format_symbol(out, v as usize).min(out.len() - 1) + 1;
    }
    match string_source(a, hit, j) {
        Some((addr, user)) => read_string(addr, user, out),
        None => 0,
    }
}

/// The bytes string `j` of a string argument takes in a record (NUL
/// included, at most [`MAX_STRING`]; 0: fault), as [`fetch_string`] would
/// store it, measured through a small buffer (a hit's stack is no place
/// for a `PATH_MAX` one).
pub(super) fn string_len(a: &Arg, hit: Hit<'_>, j: usize) -> usize {
    let ops = &a.ops[..a.nops];
    match ops.first() {
        Some(COp::Comm) => {
            // SAFETY: `current` is valid; `comm` is a NUL-terminated array.
            let comm = unsafe { (*bindings::get_current()).comm };
            return comm.iter().position(|&c| c == 0).unwrap_or(comm.len()) + 1;
        }
        Some(COp::ImmStr(_)) => return a.imm.len().min(MAX_STRING - 1) + 1,
        _ => {}
    }
    if a.ty == Type::SymStr {
        // What `%pS` prints, measured without a buffer (up to the
        // kernel's KSYM_SYMBOL_LEN, some 600 bytes).
        let v = fetch_value(a, hit);
        return format_symbol(&mut [], v as usize).min(MAX_STRING - 1) + 1;
    }
    let Some((addr, user)) = string_source(a, hit, j) else {
        return 0;
    };
    let mut chunk = [0u8; 64];
    let mut done = 0;
    while done < MAX_STRING - 1 {
        let at = addr.wrapping_add(done);
        let n = chunk.len().min(4096 - at % 4096).min(MAX_STRING - 1 - done);
        if !copy_nofault(&mut chunk[..n], at, user) {
            return if done == 0 { 0 } else { done + 1 };
        }
        if let Some(z) = chunk[..n].iter().position(|&c| c == 0) {
            return done + z + 1;
        }
        done += n;
    }
    MAX_STRING
}

/// Where string `j` of a (non-`$comm`) string argument is: its address
/// and whether it is user memory.
fn string_source(a: &Arg, hit: Hit<'_>, j: usize) -> Option<(usize, bool)> {
    let (addr, user) = run(&a.ops[..a.nops], hit, true)?;
    let user = user.unwrap_or(false);
    let (addr, user) = if a.count == 0 {
        (addr, user)
    } else {
        // The jth pointer, read as the dereference it replaces would.
        let at = (addr as usize).wrapping_add(j.wrapping_mul(8));
        (read_word(at, user, 8)?, user)
    };
    let user = user || a.ty == Type::UString || is_user_addr(addr as usize);
    Some((addr as usize, user))
}

/// A nofault copy of `out.len()` bytes at `at`.
fn copy_nofault(out: &mut [u8], at: usize, user: bool) -> bool {
    // SAFETY: nofault copies into `out`.
    let r = unsafe {
        let dst = out.as_mut_ptr().cast();
        if user {
            bindings::copy_from_user_nofault(dst, at as *const _, out.len())
        } else {
            bindings::copy_from_kernel_nofault(dst, at as *const _, out.len())
        }
    };
    r == 0
}

/// Copies the string at `addr` into `out` (NUL-terminated, truncated);
/// the bytes used (0: fault).
fn read_string(addr: usize, user: bool, out: &mut [u8]) -> usize {
    let mut done = 0;
    while done < out.len() - 1 {
        let at = addr.wrapping_add(done);
        let chunk = (4096 - at % 4096).min(out.len() - 1 - done);
        if !copy_nofault(&mut out[done..done + chunk], at, user) {
            if done == 0 {
                return 0;
            }
            break;
        }
        if let Some(z) = out[done..done + chunk].iter().position(|&c| c == 0) {
            return done + z + 1;
        }
        done += chunk;
    }
    out[done] = 0;
    done + 1
}
