// SPDX-License-Identifier: GPL-2.0

//! Finding a function and walking its instructions ([`lookup_symbol`],
//! [`instructions`]).

use super::*;

/// A function (or other symbol) found by name.
#[derive(Clone, Copy, Debug)]
pub struct Symbol {
    /// Its address.
    pub addr: usize,
    /// Its size in bytes (0 if unknown).
    pub size: usize,
}

/// Finds `name` (`"sym"` or `"module:sym"`) in the kernel's symbol table.
pub fn lookup_symbol(name: &CStr) -> Option<Symbol> {
    let mut size: c_ulong = 0;
    // SAFETY: `name` is NUL-terminated, `size` writable.
    let addr = unsafe { kp_lookup_symbol(name.as_ptr().cast(), &mut size) };
    (addr != 0).then_some(Symbol { addr, size })
}

/// One instruction of kernel or module text, decoded by the engine's arch
/// backend.
#[derive(Clone, Copy, Debug)]
pub struct Insn {
    /// Its address.
    pub addr: usize,
    /// Its length in bytes.
    pub len: usize,
    /// A call (direct or indirect).
    pub is_call: bool,
    /// Where it branches or calls to, for a direct branch.
    pub target: Option<usize>,
}

impl Insn {
    /// Decodes the instruction at `addr`: `EFAULT` if unreadable, `EILSEQ` if
    /// not a known instruction, `EINVAL` if misaligned (arm64).
    pub fn decode(addr: usize) -> Result<Insn> {
        let mut raw = KpInsn {
            addr: 0,
            len: 0,
            flags: 0,
            target: 0,
        };
        // SAFETY: `raw` is writable.
        to_result(unsafe { kp_decode_insn(addr, &mut raw) })?;
        Ok(Insn {
            addr,
            len: raw.len as usize,
            is_call: raw.flags & KP_INSN_CALL != 0,
            target: (raw.flags & KP_INSN_BRANCH != 0).then_some(raw.target),
        })
    }

    /// The address of the next instruction.
    pub fn next(&self) -> usize {
        self.addr.saturating_add(self.len)
    }
}

/// The instructions of a function, decoded linearly from its start (the
/// iteration stops at the end or at the first undecodable byte).
pub fn instructions(f: Symbol) -> impl Iterator<Item = Insn> {
    let end = f.addr.saturating_add(f.size);
    let mut at = f.addr;
    core::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let i = Insn::decode(at).ok()?;
        // A zero length (never from the decoders) must not loop for ever.
        at = if i.len == 0 { end } else { i.next() };
        Some(i)
    })
}
