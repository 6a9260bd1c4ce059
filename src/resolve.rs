// SPDX-License-Identifier: GPL-2.0

//! Where a registration request probes: the address, `symbol` or
//! `module:symbol` plus offset, moved off a function's entry to its ftrace
//! site or past what the backend reserves there, and validated (text, an
//! instruction of a known function, not blacklisted, not someone else's
//! reserved text). The first stage of registration; the registry takes
//! what comes out of it.

use crate::abi::KpKprobe;
use crate::arch;
use crate::arch::Entries;
use crate::lock::RegGuard;
use crate::symbols;
use kernel::prelude::*;
use kernel::str::CStr;

/// Resolves where `p` asks to probe, before any validation.
pub(crate) fn requested_address(p: &KpKprobe) -> Result<usize> {
    match (p.addr.is_null(), p.symbol_name.is_null()) {
        (false, true) => (p.addr as usize)
            .checked_add(p.offset as usize)
            .ok_or(EINVAL),
        (true, false) => {
            // SAFETY: the client promises a NUL-terminated string.
            let name = unsafe { CStr::from_char_ptr(p.symbol_name) };
            let shown = name.to_str().unwrap_or("?");
            if crate::ksym::parse_sym_spec(name.as_bytes()).is_none() {
                pr_err!("'{}' is not a symbol name\n", shown);
                return Err(EINVAL);
            }
            let Some(base) = symbols::lookup_name(name) else {
                pr_err!("unknown symbol '{}'\n", shown);
                return Err(ENOENT);
            };
            // The offset must stay inside the named symbol (landing in the
            // next function would probe something else than asked).
            let size = symbols::bounds(base).map_or(0, |s| s.size);
            if p.offset as usize >= size.max(1) {
                pr_err!(
                    "offset {:#x} is past the end of '{}' ({} bytes)\n",
                    p.offset,
                    shown,
                    size
                );
                return Err(EINVAL);
            }
            base.checked_add(p.offset as usize).ok_or(EINVAL)
        }
        (false, false) => {
            pr_err!("give either addr or symbol_name, not both\n");
            Err(EINVAL)
        }
        (true, true) => {
            pr_err!("neither addr nor symbol_name given\n");
            Err(EINVAL)
        }
    }
}

/// Checks that `addr` is probe-able text and finds its function. `ftrace`:
/// the probe takes the ftrace path, so the site being ftrace's is fine.
pub(crate) fn validate(addr: usize, ftrace: bool) -> Result<symbols::Bounds> {
    let Some(bounds) = symbols::bounds(addr) else {
        pr_err!("{:#x} is in no symbol\n", addr);
        return Err(EINVAL);
    };
    // The symbol by name is printed for refusals only: that costs more
    // than all the checks.
    let name = || symbols::Shown(addr);
    if addr - bounds.start >= bounds.size {
        pr_err!("{:#x} is past the end of {}\n", addr, name());
        return Err(EINVAL);
    }
    // Kernel text, or a loaded module's core text.
    if !symbols::in_kernel_text(addr) && !symbols::in_module_text(addr) {
        pr_err!("{} ({:#x}) is not in kernel or module text\n", name(), addr);
        return Err(EINVAL);
    }
    if let Some(why) = symbols::reserved_by(addr, arch::FTRACE_GUARD) {
        // Inside an ftrace site's instruction (x86_64: past the first byte
        // of its 5-byte call or NOP): not an instruction boundary, as the
        // kernel's kprobes say (-EILSEQ), not someone else's text. (A
        // misaligned address is the arch's to refuse, as the kernel's
        // arm64 kprobes do: -EINVAL.)
        if why == symbols::FTRACE_SITE
            && arch::insn_aligned(addr)
            && !symbols::is_ftrace_site(addr)
            && symbols::reserved_by(addr, 0) == Some(symbols::FTRACE_SITE)
        {
            pr_err!("{} is inside an ftrace call site's instruction\n", name());
            return Err(crate::errno::eilseq());
        }
        if !(ftrace && why == symbols::FTRACE_SITE) {
            pr_err!("{} is {}: other kernel code rewrites it\n", name(), why);
            return Err(EBUSY);
        }
    }
    // Blacklisted first: -EINVAL for every address of a refused range.
    if let Some(reason) = crate::blacklist::check(addr) {
        pr_err!(
            "{} is blacklisted: {}\n",
            name(),
            reason.to_str().unwrap_or("?")
        );
        return Err(EINVAL);
    }
    if symbols::has_extable_entry(addr) {
        // A fault there is fixed up through the exception table by the
        // faulting address; from an out-of-line copy that lookup would fail
        // and the fault would become an oops. The kernel's kprobes recover
        // through their page-fault hook, which a module cannot install.
        pr_err!(
            "{} has an exception-table fixup; refusing to probe it\n",
            name()
        );
        return Err(crate::errno::eopnotsupp());
    }
    Ok(bounds)
}

/// Where a request for `addr` really probes, and whether through ftrace: a
/// function entry (or its ftrace site) goes to the ftrace site when the
/// ftrace path is on and the arch has it (and, for handlers that need
/// every register, `full_regs`, gives them there), else past what the arch
/// reserves there (see the backends).
pub(crate) fn adjust_entry(g: &RegGuard, addr: usize, full_regs: bool) -> (usize, bool) {
    let ftrace = crate::ftrace::entry_enabled() && (!full_regs || arch::FTRACE_FULL_REGS);
    match symbols::bounds(addr) {
        Some(s) if s.start == addr => match arch::Arch::ftrace_entry_site(g, s.start, s.size) {
            Some(site) if ftrace => (site, true),
            _ => (arch::Arch::entry_probe_address(g, s.start, s.size), false),
        },
        _ if ftrace && symbols::is_ftrace_site(addr) => (addr, true),
        _ => (addr, false),
    }
}

/// Whether `p`'s handlers need every register (`KP_FLAG_FULL_REGS`).
fn wants_full_regs(p: &KpKprobe) -> bool {
    p.flags & crate::abi::KP_FLAG_FULL_REGS != 0
}

/// Where `p` will really probe (entry adjustment included), whether through
/// ftrace, validated, and the function it is in. Registration lock held: the
/// text cannot change under the checks (no point is freed, no module
/// finishes going away).
pub(crate) fn resolve(g: &RegGuard, p: &KpKprobe) -> Result<(usize, bool, symbols::Bounds)> {
    let (addr, ftrace) = adjust_entry(g, requested_address(p)?, wants_full_regs(p));
    let sym = validate(addr, ftrace)?;
    Ok((addr, ftrace, sym))
}

/// For kretprobes: checks that `p` names a function entry (symbol + 0, or
/// the address of a function's first byte) that can be probed, and returns
/// that function. Registration lock held (the entry adjustment reads text
/// as the engine found it).
pub(crate) fn function_entry(g: &RegGuard, p: &KpKprobe) -> Result<symbols::Symbol> {
    let addr = requested_address(p)?;
    let Some(sym) = symbols::symbol_at(addr).filter(|s| s.start == addr) else {
        pr_err!("kretprobe: {:#x} is not a function entry\n", addr);
        return Err(EINVAL);
    };
    let (at, ftrace) = adjust_entry(g, addr, wants_full_regs(p));
    validate(at, ftrace)?;
    Ok(sym)
}
