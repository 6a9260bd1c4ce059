// SPDX-License-Identifier: GPL-2.0

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
//! Parsing of the kernel's `%pS`-style symbol strings and probe specs.
//!
//! Pure logic (`core` only, no allocation, no kernel types): built into the
//! engine and by cargo for host tests (`host/lib.rs`).

/// One symbol as `sprint_symbol()` prints it: `name+0xoff/0xsize [module]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymInfo<'a> {
    /// Symbol name.
    pub name: &'a [u8],
    /// Offset of the looked-up address from the symbol's start.
    pub offset: u64,
    /// Size of the symbol.
    pub size: u64,
    /// Owning module, `None` for vmlinux.
    pub module: Option<&'a [u8]>,
}

fn parse_hex(s: &[u8]) -> Option<u64> {
    let digits = s.strip_prefix(b"0x")?;
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in digits {
        let d = match c {
            b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => char::from(c).to_digit(16)?,
            _ => return None,
        };
        // At most 16 digits (checked above): the shift never drops a bit.
        v = (v << 4) | u64::from(d);
    }
    Some(v)
}

/// Parses `sprint_symbol()` output (up to the first NUL, if any).
///
/// Returns `None` for an address with no symbol (the kernel then prints the
/// bare hex address) or any text not in the `name+off/size[ [mod]]` form.
pub fn parse_sprint_symbol(buf: &[u8]) -> Option<SymInfo<'_>> {
    let end = buf.iter().position(|&c| c == 0).unwrap_or(buf.len());
    let s = buf.get(..end)?;
    let (sym, module) = match s.iter().position(|&c| c == b' ') {
        Some(sp) => {
            let rest = s.get(sp.checked_add(1)?..)?;
            let m = rest.strip_prefix(b"[")?;
            // Modules with a build id print "[mod buildid]"; keep the name.
            let m = m.strip_suffix(b"]")?;
            let m = match m.iter().position(|&c| c == b' ') {
                Some(i) => m.get(..i)?,
                None => m,
            };
            if m.is_empty() {
                return None;
            }
            (s.get(..sp)?, Some(m))
        }
        None => (s, None),
    };
    let plus = sym.iter().rposition(|&c| c == b'+')?;
    let name = sym.get(..plus)?;
    let rest = sym.get(plus.checked_add(1)?..)?;
    let slash = rest.iter().position(|&c| c == b'/')?;
    let offset = parse_hex(rest.get(..slash)?)?;
    let size = parse_hex(rest.get(slash.checked_add(1)?..)?)?;
    if name.is_empty() {
        return None;
    }
    Some(SymInfo {
        name,
        offset,
        size,
        module,
    })
}

/// A probe location written as `[module:]symbol`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymSpec<'a> {
    /// Module name, when given.
    pub module: Option<&'a [u8]>,
    /// Symbol name.
    pub name: &'a [u8],
}

/// Longest symbol name the kernel keeps (`KSYM_NAME_LEN`).
pub const KSYM_NAME_LEN: usize = 512;

/// Characters allowed in a symbol or module name.
fn is_sym_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'$')
}

/// Splits and checks `[module:]symbol`.
pub fn parse_sym_spec(s: &[u8]) -> Option<SymSpec<'_>> {
    let (module, name) = match s.iter().position(|&c| c == b':') {
        Some(i) => (Some(s.get(..i)?), s.get(i.checked_add(1)?..)?),
        None => (None, s),
    };
    let ok =
        |p: &[u8]| !p.is_empty() && p.len() < KSYM_NAME_LEN && p.iter().all(|&c| is_sym_char(c));
    if !ok(name) || module.is_some_and(|m| !ok(m)) {
        return None;
    }
    Some(SymSpec { module, name })
}

/// Bytes to keep free before the buffer handed to `sprint_symbol()`. For a
/// module symbol whose name does not fit `KSYM_NAME_LEN` (Rust's mangled
/// generic names can be longer), 6.12's `module_address_lookup()` returns
/// `strscpy()`'s -E2BIG (-7) as the name's length, and `__sprint_symbol()`
/// then writes `+off/size [module]` 7 bytes *before* the buffer: on the
/// stack, over the callee's saved return address.
pub const SPRINT_HEADROOM: usize = 8;

/// How far before its buffer the kernel writes then (-E2BIG taken as a
/// length).
const E2BIG: usize = 7;

/// After `sprint_symbol()` wrote into `buf[SPRINT_HEADROOM..]` of a zeroed
/// `buf`, moves its text to the start of `buf`: from where the kernel
/// really started writing (7 bytes early when the name did not fit: the
/// text is then `+off/size [module]` without the name).
pub fn settle_sprint_symbol(buf: &mut [u8]) {
    let early = SPRINT_HEADROOM.saturating_sub(E2BIG);
    let from = if buf.get(early).is_some_and(|&b| b != 0) {
        early
    } else {
        SPRINT_HEADROOM
    };
    if from >= buf.len() {
        return;
    }
    buf.copy_within(from.., 0);
    let len = buf.len();
    for b in buf.iter_mut().skip(len.saturating_sub(from)) {
        *b = 0;
    }
}
