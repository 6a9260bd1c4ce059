// SPDX-License-Identifier: GPL-2.0

//! `kp_trap_path`: the trap path cannot be probed into recursion.
//!
//! The engine derives, at load, every function a kernel breakpoint runs
//! through before its re-entry guard can see the hit, and after it (the
//! arch's roots and their direct callees, `src/blacklist.rs`). This suite
//! checks that derivation on the running kernel from the other side:
//!
//! - `every_listed_instruction_refused`: every instruction of every range
//!   the engine refuses (the trap path, the kernel's `NOKPROBE_SYMBOL`
//!   list, the noinstr and entry sections and their callees, ftrace's
//!   trampolines) is refused by the query, and registration refuses the
//!   first and a middle instruction of each with `-EINVAL`; the functions
//!   that once took the machine down (`__rcu_read_lock+5`,
//!   `__rcu_read_unlock+5`, `ftrace_caller`, `__fentry__`) among them.
//! - `one_call_beyond_the_trap_path`: the functions one call deeper than the
//!   engine follows (direct callees of the trap-path functions that the
//!   blacklist lets through) get a probe on every instruction (up to a cap
//!   per function), each either refused or armed; while they are armed a
//!   probe elsewhere is hit, so the whole trap path runs over them, and
//!   must still deliver exactly one hit and the right result. A miss in the
//!   derivation hangs or panics the guest here.

use crate::kp::{self, KpKprobe};
use crate::kp_random::read_text;
use crate::kunit::Test;
use crate::util::{ranges, register, unregister, EINVAL};
use core::ffi::CStr;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::bindings;
use kernel::ffi::c_int;
use kernel::prelude::*;

/// The engine's reasons for the trap path (`src/blacklist.rs`).
const TRAP: &[u8] = b"engine trap path";
const TRAP_CALLEE: &[u8] = b"called on the engine trap path";

/// Longest range walked instruction by instruction (the sections are a few
/// tens of KiB; a larger range would be a bug in the list, reported).
const MAX_RANGE: usize = 1 << 20;
/// At most this many instructions probed per boundary function, and this
/// many boundary functions in all (arming costs a text patch each).
const MAX_INSNS_PER_FN: usize = 48;
const MAX_BOUNDARY_FNS: usize = 160;

static TRIGGER_HITS: AtomicU64 = AtomicU64::new(0);
static BOUNDARY_HITS: AtomicU64 = AtomicU64::new(0);

/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn count_trigger(_p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
    TRIGGER_HITS.fetch_add(1, Ordering::Relaxed);
    0
}

/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn count_boundary(_p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
    BOUNDARY_HITS.fetch_add(1, Ordering::Relaxed);
    0
}

/// Instruction boundaries of `text` (at `start`), with, for each, the
/// direct call/jump target it has, if any: x86_64 decodes from the start,
/// arm64 steps by 4 bytes.
fn instructions(start: usize, text: &[u8], mut f: impl FnMut(usize, Option<usize>) -> bool) {
    #[cfg(CONFIG_X86_64)]
    {
        use crate::decode::{decode, Class, MAX_INSN_LEN};
        let mut off = 0usize;
        while off < text.len() {
            let mut b = [0u8; MAX_INSN_LEN];
            let k = (text.len() - off).min(b.len());
            b[..k].copy_from_slice(&text[off..off + k]);
            let Ok(i) = decode(&b) else {
                off += 1;
                continue;
            };
            let at = start + off;
            let target = matches!(i.class, Class::CallRel | Class::JmpRel | Class::Jcc)
                .then(|| i.rel_target(at as u64, &b))
                .flatten()
                .map(|t| t as usize);
            if !f(at, target) {
                return;
            }
            off += usize::from(i.len);
        }
    }
    #[cfg(CONFIG_ARM64)]
    {
        use crate::decode::{classify, Class};
        let mut off = (4 - start % 4) % 4;
        while off + 4 <= text.len() {
            let w = u32::from_le_bytes([text[off], text[off + 1], text[off + 2], text[off + 3]]);
            let at = start + off;
            let target = match classify(w) {
                Class::B { offset }
                | Class::Bl { offset }
                | Class::BCond { offset, .. }
                | Class::Cbz { offset, .. }
                | Class::Tbz { offset, .. } => Some((at as i64).wrapping_add(offset) as usize),
                _ => None,
            };
            if !f(at, target) {
                return;
            }
            off += 4;
        }
    }
}

/// Registers a probe at `addr` and, if it registered, unregisters it;
/// returns the registration's result.
fn try_register(addr: usize) -> c_int {
    let mut p = KpKprobe::new();
    p.addr = addr as *mut _;
    p.pre_handler = Some(count_boundary);
    let r = register(&mut p);
    if r == 0 {
        unregister(&mut p);
    }
    r
}

fn every_listed_instruction_refused(t: &mut Test) {
    let Ok(list) = ranges() else {
        kp_expect!(t, false, "out of memory");
        return;
    };
    kp_expect!(t, !list.is_empty());
    let (mut funcs, mut insns, mut trap_funcs, mut trap_insns) = (0u64, 0u64, 0u64, 0u64);
    for r in list.iter() {
        let len = r.end.saturating_sub(r.start);
        if len == 0 || len > MAX_RANGE {
            kp_expect!(
                t,
                false,
                "range {:#x}-{:#x} of {} bytes ({})",
                r.start,
                r.end,
                len,
                kernel::str::BStr::from_bytes(r.reason)
            );
            continue;
        }
        let Some(text) = read_text(r.start, len) else {
            // Freed init text, or a range that is not mapped: nothing runs
            // there.
            continue;
        };
        let trap = r.reason == TRAP || r.reason == TRAP_CALLEE;
        funcs += 1;
        trap_funcs += u64::from(trap);
        let mut n = 0u64;
        let mut unrefused = 0u64;
        instructions(r.start, &text, |at, _| {
            // SAFETY: a query, any address.
            if unsafe { kp::kp_blacklisted(at) }.is_null() {
                unrefused += 1;
            }
            n += 1;
            true
        });
        kp_expect_eq!(t, unrefused, 0, "{:#x}-{:#x}", r.start, r.end);
        insns += n;
        if trap {
            trap_insns += n;
            // Registration refuses too (the first and a middle instruction:
            // each refusal is logged, so not all of them).
            kp_expect_eq!(t, try_register(r.start), EINVAL, "{:#x}", r.start);
            let mut mid = None;
            let half = r.start + len / 2;
            instructions(r.start, &text, |at, _| {
                mid = Some(at);
                at < half
            });
            if let Some(m) = mid {
                kp_expect_eq!(t, try_register(m), EINVAL, "{:#x}", m);
            }
        }
    }
    kp_expect!(t, trap_funcs > 0);
    t.info(format_args!(
        "{} refused ranges, {} instructions, all refused; on the trap path: {} functions, {} instructions",
        funcs, insns, trap_funcs, trap_insns
    ));
    // The probe points that once took the machine down, and ftrace's own
    // code, by name (each present on the kernels that have it).
    #[cfg(CONFIG_X86_64)]
    let named = [
        (c"__rcu_read_lock", 5usize),
        (c"__rcu_read_unlock", 5),
        (c"ftrace_caller", 0),
        (c"__fentry__", 0),
        (c"ftrace_stub", 0),
        (c"notify_die", 0),
    ];
    #[cfg(CONFIG_ARM64)]
    let named = [
        (c"do_el1_brk64", 8usize),
        (c"ftrace_ops_list_func", 8),
        (c"ftrace_caller", 0),
        (c"ftrace_caller", 64),
        (c"ftrace_stub", 0),
        (c"notify_die", 8),
        // Called by the engine's breakpoint path; from a module out of a
        // `bl`'s reach (KASLR) through a PLT entry, which the derivation
        // follows.
        (c"__rcu_read_lock", 8),
    ];
    // arm64: all of ftrace's entry assembly, whose inner labels split it
    // in kallsyms differently per kernel (without direct calls, as on the
    // kCFI kernel, there is no `ftrace_stub_direct_tramp` after it and
    // `ftrace_call` is a symbol of its own: a probe at `ftrace_call+0x28`
    // hung arm64-hardened, the BRK hook's own ftrace call hitting it).
    #[cfg(CONFIG_ARM64)]
    if let (Some(first), Some(stub)) = (
        kp::lookup_symbol(c"ftrace_caller").map(|s| s.addr),
        kp::lookup_symbol(c"ftrace_stub").map(|s| s.addr),
    ) {
        kp_expect!(
            t,
            first < stub && stub - first < 4096,
            "{:#x}..{:#x}",
            first,
            stub
        );
        let mut unlisted = 0;
        for at in (first..stub.min(first + 4096)).step_by(4) {
            // SAFETY: a query, any address.
            if unsafe { kp::kp_blacklisted(at) }.is_null() {
                if unlisted == 0 {
                    t.info(format_args!("ftrace_caller+{:#x} not listed", at - first));
                }
                unlisted += 1;
            }
        }
        kp_expect_eq!(
            t,
            unlisted,
            0,
            "instructions of ftrace_caller..ftrace_stub not listed"
        );
    }
    // arm64: what the hit path calls through a pointer (a kretprobe's
    // entry pins the engine): a BRK there is a second level inside the
    // BRK hook's ftrace dispatch, which ftrace's recursion guard does not
    // let through (kp_mass hung arm64-hardened so).
    #[cfg(CONFIG_ARM64)]
    let more: &[(&CStr, usize)] = &[(c"try_module_get", 8), (c"module_put", 8)];
    #[cfg(not(CONFIG_ARM64))]
    let more: &[(&CStr, usize)] = &[];
    for &(name, off) in Iterator::chain(named.iter(), more.iter()) {
        let Some(a) = kp::lookup_symbol(name).map(|s| s.addr) else {
            t.info(format_args!("{:?}: not in this kernel", name));
            continue;
        };
        // On the list, whatever the offset is to the decoder; registration
        // refuses it (-EINVAL, or -EBUSY/-EILSEQ where the offset is inside
        // ftrace's patchable entry or an instruction).
        // SAFETY: a query, any address.
        let listed = !unsafe { kp::kp_blacklisted(a + off) }.is_null();
        kp_expect!(t, listed, "{:?}+{} not listed", name, off);
        let r = try_register(a + off);
        kp_expect!(t, r < 0, "{:?}+{} accepted", name, off);
    }
}

fn one_call_beyond_the_trap_path(t: &mut Test) {
    let Ok(list) = ranges() else {
        kp_expect!(t, false, "out of memory");
        return;
    };
    let listed = |a: usize| list.iter().any(|r| (r.start..r.end).contains(&a));
    // The callees of trap-path functions that no range covers.
    let mut boundary: KVec<(usize, usize)> = KVec::new();
    for r in list
        .iter()
        .filter(|r| r.reason == TRAP || r.reason == TRAP_CALLEE)
    {
        let Some(text) = read_text(r.start, r.end.saturating_sub(r.start).min(MAX_RANGE)) else {
            continue;
        };
        instructions(r.start, &text, |_, target| {
            let outside = |tg: &usize| !(r.start..r.end).contains(tg) && !listed(*tg);
            if let Some((s, size)) = target
                .filter(outside)
                .and_then(crate::kp_random::function_at)
            {
                if size > 0
                    && boundary.len() < MAX_BOUNDARY_FNS
                    && !boundary.iter().any(|&(b, _)| b == s)
                {
                    let _ = boundary.push((s, size), GFP_KERNEL);
                }
            }
            true
        });
    }
    // The trigger: a probe whose every hit runs the whole trap path.
    let mut trigger = KpKprobe::new();
    trigger.addr = crate::targets::addr_of(crate::targets::kp_kunit_target as *const ()) as *mut _;
    trigger.pre_handler = Some(count_trigger);
    kp_expect_eq!(t, register(&mut trigger), 0);
    let want = crate::targets::kp_kunit_target(300);
    let (mut armed, mut refused, mut funcs) = (0u64, 0u64, 0u64);
    for &(start, size) in boundary.iter() {
        let Some(text) = read_text(start, size.min(MAX_RANGE)) else {
            continue;
        };
        // Room for every probe first: a registered probe is never dropped.
        let Ok(mut probes) = KVec::<KBox<KpKprobe>>::with_capacity(MAX_INSNS_PER_FN, GFP_KERNEL)
        else {
            continue;
        };
        let mut tried = 0;
        instructions(start, &text, |at, _| {
            tried += 1;
            let Ok(mut p) = KBox::new(KpKprobe::new(), GFP_KERNEL) else {
                return false;
            };
            p.addr = at as *mut _;
            p.pre_handler = Some(count_boundary);
            if register(&mut p) == 0 {
                armed += 1;
                // Within the capacity reserved above: cannot fail.
                let _ = probes.push(p, GFP_KERNEL);
            } else {
                refused += 1;
            }
            tried < MAX_INSNS_PER_FN
        });
        funcs += 1;
        let before = TRIGGER_HITS.load(Ordering::Relaxed);
        let got = crate::targets::kp_kunit_target(300);
        kp_expect_eq!(t, got, want, "with {} probes in {:#x}", probes.len(), start);
        kp_expect_eq!(
            t,
            TRIGGER_HITS.load(Ordering::Relaxed),
            before + 1,
            "with {} probes in {:#x}",
            probes.len(),
            start
        );
        for p in probes.iter_mut() {
            unregister(p);
        }
    }
    unregister(&mut trigger);
    kp_expect!(t, funcs > 0);
    if boundary.len() == MAX_BOUNDARY_FNS {
        t.info(format_args!("(capped at {} functions)", MAX_BOUNDARY_FNS));
    }
    t.info(format_args!(
        "{} functions one call beyond the trap path: {} instructions armed, {} refused; \
         the trap path ran over each, {} hits on them",
        funcs,
        armed,
        refused,
        BOUNDARY_HITS.load(Ordering::Relaxed)
    ));
}

kunit_suite!(
    kp_trap_path,
    "kp_trap_path",
    [
        every_listed_instruction_refused,
        one_call_beyond_the_trap_path
    ]
);
