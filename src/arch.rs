// SPDX-License-Identifier: GPL-2.0

//! The contract between the engine (`src/`) and an architecture backend
//! (`arch/<arch>/`): the traits below, which this kernel's backend type
//! [`Arch`] implements, are everything the core uses (besides the pure
//! `decode`, `event_regs` and `regs` modules); [`Core`] is everything the
//! backend uses of the core. Each trait is implemented in the backend file that
//! does the work (`insn.rs`, `step.rs`, `ftrace.rs`, `kretprobe.rs`,
//! `opt.rs`, ...), so no backend carries forwarders. Capabilities a backend
//! may lack (entry probes through ftrace, jump optimization) have default
//! "unsupported" bodies, as `kernel/kprobes.c` has `__weak` arch hooks:
//! a third architecture is one new folder implementing [`Backend`]'s
//! parts. `docs/arch-interface.md` says what the types cannot.

use crate::lock::RegGuard;
use kernel::bindings::pt_regs;
use kernel::prelude::*;
use kernel::str::CStr;

#[cfg(CONFIG_X86_64)]
#[path = "../arch/x86_64/mod.rs"]
mod imp;

#[cfg(CONFIG_ARM64)]
#[path = "../arch/arm64/mod.rs"]
mod imp;

/// This kernel's backend.
pub(crate) use imp::Arch;
pub(crate) use imp::{event_regs, regs};

/// One decoded instruction, as the arch backend describes it.
pub(crate) struct InsnInfo {
    /// Length in bytes.
    pub(crate) len: usize,
    /// A call (direct or indirect).
    pub(crate) call: bool,
    /// The target of a direct (relative) branch or call.
    pub(crate) target: Option<usize>,
}

/// The reasons the backends' refusal tables ([`Refusals`]) give, as
/// debugfs `blacklist` and the registration error log show them.
pub(crate) mod reason {
    use kernel::str::CStr;

    /// On the engine's own trap path.
    pub(crate) const TRAP: &CStr = kernel::c_str!("engine trap path");
    /// ftrace's assembly trampolines.
    pub(crate) const FTRACE_ASM: &CStr = kernel::c_str!("ftrace trampoline");
}

/// A jump-optimization refusal: why, and whether for good (until the
/// function's probes change).
pub(crate) type Refusal = (&'static str, bool);

/// Preparing a probed instruction and writing its breakpoint.
pub(crate) trait Insns {
    /// A prepared probed instruction: original bytes, how it executes,
    /// its slot.
    type Insn: Copy;
    /// Bytes per out-of-line slot, and slots in the area the backend
    /// reserves in the engine's text (symbol `kp_insn_slots`).
    const SLOT_SIZE: usize;
    const NSLOTS: usize;
    /// The largest a registry `Point` may be here (memory per probe).
    const POINT_MAX_SIZE: usize;
    /// What every instruction's address is a multiple of.
    const INSN_ALIGN: usize = 1;
    /// Decodes from the function start, checks the boundary, classifies,
    /// refuses what cannot be probed (`-EILSEQ`, `-EOPNOTSUPP`, `-EBUSY`),
    /// writes the slot.
    fn prepare(g: &RegGuard, addr: usize, fstart: usize, fsize: usize) -> Result<Self::Insn>;
    /// Gives the slot back (after a grace period).
    fn release(insn: Self::Insn);
    /// Refills a slot before a deferred reuse.
    fn clear_slot(slot: usize);
    /// Writes the breakpoint over the original bytes (`-EBUSY` when they
    /// are no longer there), with the synchronisation the arch needs.
    fn arm(addr: usize, insn: &Self::Insn) -> Result;
    /// Puts the original back over the engine's breakpoint (`-EBUSY` when
    /// someone else's patch is on top of it).
    fn disarm(addr: usize, insn: &Self::Insn) -> Result;
    /// The address through which the engine calls the kernel function at
    /// `target`, one it resolved by name (src/kfuncs.c makes the calls):
    /// the function itself where an indirect call may land on it, or a
    /// gate in the engine's text that jumps there where the kernel may
    /// have sealed it (x86_64 IBT). Process context, at load.
    fn call_gate(target: usize) -> Result<usize> {
        Ok(target)
    }
}

/// Running a prepared instruction at a hit.
pub(crate) trait Steps: Insns {
    /// Executes the instruction in place (emulation or simulation); false:
    /// step it out of line.
    fn simulate(addr: usize, insn: &Self::Insn, regs: &mut pt_regs) -> bool;
    /// Points the CPU at the slot with interrupts masked; `saved` keeps the
    /// arch state to restore.
    fn setup_step(addr: usize, insn: &Self::Insn, regs: &mut pt_regs, saved: &mut usize);
    /// Whether `ip` is inside this instruction's copy.
    fn in_copy(ip: usize, insn: &Self::Insn) -> bool;
    /// Undoes `setup_step`'s masking after a fault in the copy.
    fn abort_step(insn: &Self::Insn, regs: &mut pt_regs, saved: usize);
    /// Whether the breakpoint at `trap_addr` is the one ending this copy.
    fn is_step_done(trap_addr: usize, insn: &Self::Insn) -> bool;
    /// Resumes after the original instruction and restores the saved state.
    fn finish_step(addr: usize, insn: &Self::Insn, regs: &mut pt_regs, saved: usize);
    /// Whether the copy may return by a jump (no second trap).
    fn boostable(insn: &Self::Insn) -> bool;
    /// Sends the CPU to the boosted copy.
    fn setup_boost(addr: usize, insn: &Self::Insn, regs: &mut pt_regs);
    /// Length, call, direct-branch target of one instruction.
    fn describe(addr: usize) -> Result<InsnInfo>;
    /// Targets of direct calls and (conditional) jumps in `[start, end)`.
    fn for_each_direct_branch(start: usize, end: usize, f: impl FnMut(usize));
}

/// Function entries, and probes on them through ftrace.
pub(crate) trait Entries: Insns {
    /// The ftrace site's length and the pre handler's ip past its start.
    const FTRACE_SITE_LEN: usize = 0;
    const FTRACE_PRE_IP_OFFSET: usize = 0;
    /// How far before an ftrace call site ftrace's bytes reach.
    const FTRACE_GUARD: usize = 0;
    /// Whether the handlers get every register on the ftrace path (else
    /// probes that need them, `KP_FLAG_FULL_REGS`, take a breakpoint).
    const FTRACE_FULL_REGS: bool = true;
    /// Where a probe on a function's entry really goes (past what the arch
    /// or ftrace reserves there).
    fn entry_probe_address(g: &RegGuard, start: usize, size: usize) -> usize;
    /// The function's ftrace call site, if entries may use it (default:
    /// none, every entry probe is a breakpoint).
    fn ftrace_entry_site(_g: &RegGuard, _start: usize, _size: usize) -> Option<usize> {
        None
    }
    /// An inert instruction record for a point served by ftrace.
    fn ftrace_insn(g: &RegGuard, addr: usize) -> Self::Insn;
    /// Turns a handler's return-to-caller on the ftrace path into what
    /// ftrace can honour; false when it cannot.
    fn ftrace_fixup_redirect(_regs: &mut pt_regs, _orig_sp: usize, _orig_ip: usize) -> bool {
        false
    }
    /// Whether a breakpoint instruction sits at `addr` now (an ftrace site
    /// ftrace must not be asked to patch).
    fn breakpoint_at(addr: usize) -> bool;
}

/// The return stubs and the return address at a function's entry.
pub(crate) trait Returns {
    /// Writes the per-instance stub for slot `index` at `stub`.
    fn write_kret_stub(stub: usize, index: usize) -> Result;
    /// Refills a stub before its slot is reused.
    fn clear_kret_stub(stub: usize);
    /// Makes every CPU see freshly written stubs.
    fn kret_stubs_written();
    /// The return address at a function's entry.
    fn kret_return_address(regs: &pt_regs) -> usize;
    /// Sends the function's return to `stub`.
    fn kret_hijack(regs: &mut pt_regs, stub: usize);
    /// The frame key the function graph tracer records for this return.
    fn kret_graph_retp(regs: &pt_regs) -> usize;
    /// The frame pointer at a function's entry (callee-saved: the same
    /// when it returns).
    fn kret_frame_pointer(regs: &pt_regs) -> usize;
    /// The registers a return handler sees for a return served through the
    /// function graph tracer (`src/kretprobe/graph.rs`): `regs` is all zero;
    /// the stack and frame pointers the function had at its entry, where
    /// it returns to and the value it returns.
    fn kret_graph_regs(
        regs: &mut pt_regs,
        entry_sp: usize,
        entry_fp: usize,
        ret: usize,
        retval: usize,
    );
    /// Calls a return handler so that an unwinder in it walks on to the
    /// real caller `ret`, whose frame pointer is `fp` (default: a plain
    /// call; the arch's unwinder finds the caller by itself).
    ///
    /// # Safety
    ///
    /// `h`'s contract: `inst` and `regs` are valid for the call.
    unsafe fn kret_call_handler(
        h: crate::abi::KretHandler,
        inst: &mut crate::abi::KpKretprobeInstance,
        regs: &mut pt_regs,
        _fp: usize,
    ) {
        // SAFETY: per the function's contract.
        unsafe { h(inst, regs) };
    }
}

/// A point's jump-optimization state, as the hit path and the optimizer
/// see it.
pub(crate) trait OptPoint<O> {
    /// Nothing prepared.
    fn none() -> Self;
    /// Where breakpoint hits resume while a jump is prepared or written (0:
    /// none).
    fn resume(&self) -> usize;
    /// Publishes a prepared jump, prepared in the optimizer's generation
    /// `gen` (`src/optimize.rs`). Registration lock held.
    fn prepare(&self, o: O, gen: u16);
    /// The generation the jump was last prepared in.
    fn prepared_gen(&self) -> u16;
    /// Unpublishes it. Registration lock held.
    fn clear(&self);
    /// The prepared jump. Registration lock held.
    fn insn(&self) -> O;
    /// Whether the jump is in the text, and recording it.
    fn jumped(&self) -> bool;
    fn set_jumped(&self, on: bool);
    /// Whether the optimizer refused the point in the epoch whose tag
    /// (epoch + 1) is `tag`, and recording a refusal there (an arch whose
    /// refusals never depend on other probes keeps them for good).
    fn refused_at(&self, tag: u16) -> bool;
    fn set_refused(&self, tag: u16);
}

/// Jump optimization (x86_64 and arm64). The defaults: none.
pub(crate) trait Jumps {
    type OptInsn: Copy;
    type OptState: OptPoint<Self::OptInsn>;
    const OPT_SUPPORTED: bool = false;
    /// The most bytes a jump covers.
    const OPT_MAX_SPAN: usize = 1;
    /// Checks a probe's function and builds its detour.
    fn opt_prepare(
        _g: &RegGuard,
        _addr: usize,
        _fstart: usize,
        _fsize: usize,
        _other_probe: impl Fn(usize) -> bool,
    ) -> core::result::Result<Self::OptInsn, Refusal> {
        Err(("no jump optimization on this architecture", true))
    }
    /// The bytes the jump covers.
    fn opt_span(_o: &Self::OptInsn) -> usize {
        0
    }
    /// Writes / removes the jump over the armed breakpoint.
    fn opt_jump(_addr: usize, _o: &Self::OptInsn) -> Result {
        Err(crate::errno::eopnotsupp())
    }
    fn opt_unjump(_addr: usize, _o: &Self::OptInsn) -> Result {
        Ok(())
    }
    /// Frees the detour after every task left it.
    fn opt_release(_o: &Self::OptInsn) {}
    /// Detours in use that are not out-of-line slots (an area of the
    /// backend's own, counted with the slots in `kp_get_stats()`).
    fn opt_detours_in_use() -> usize {
        0
    }
    /// Released detours of such an area: [`crate::slots::Area`]'s
    /// `begin_reclaim` (whether any is ripe) and `finish_reclaim`, around
    /// the engine's text work's wait; and whether any waits for a reclaim.
    /// Registration lock held.
    fn opt_begin_reclaim(_g: &RegGuard) -> bool {
        false
    }
    fn opt_finish_reclaim(_g: &RegGuard) {}
    fn opt_reclaimable() -> bool {
        false
    }
    /// Bounds such an area's detours (`kp_opt_detour_limit()`); the
    /// previous bound, `None` without such an area. Registration lock held.
    fn opt_set_detour_limit(_g: &RegGuard, _n: usize) -> Option<usize> {
        None
    }
}

/// What the backend refuses to probe, and where its trap path starts.
pub(crate) trait Refusals {
    /// Places the arch adds to the blacklist, with the reason.
    const BLACKLIST_FUNCS: &'static [(&'static CStr, &'static CStr)];
    /// What the kernel marks never to probe in this arch's code
    /// (`NOKPROBE_SYMBOL()`, `__kprobes`, `nokprobe_inline`, assembly
    /// `NOKPROBE()`), by name, sorted (`scripts/gen-nokprobe.py`).
    const NOKPROBE_NAMES: &'static [&'static [u8]];
    /// Sections refused whole: (first symbol, end symbol, reason).
    const BLACKLIST_SECTIONS: &'static [(&'static CStr, &'static CStr, &'static CStr)];
    /// Assembly refused from its first symbol to the end of its last.
    const BLACKLIST_SPANS: &'static [(&'static CStr, &'static CStr, &'static CStr)];
    /// Whether a function of `.sched.text` that noinstr or entry code
    /// calls directly may be probed (the blacklist refuses such callees
    /// otherwise): where the kernel's build checks that noinstr code calls
    /// out only where instrumentation is allowed, and code that may
    /// schedule runs where RCU watches.
    const SCHED_TEXT_CALLEES_PROBEABLE: bool;
    /// Where a kernel breakpoint runs on its way to the engine's re-entry
    /// guard: the roots of the derived trap-path blacklist.
    const TRAP_ROOTS: &'static [&'static CStr];
    /// The engine's trap entry (a trap-path root).
    fn trap_entry() -> usize;
}

/// The trap entry and per-CPU access.
pub(crate) trait Traps {
    /// Backend name for messages.
    const NAME: &'static str;
    /// Installs / removes the trap entry.
    fn init() -> Result;
    fn exit();
    /// This CPU's copy of a per-CPU object.
    ///
    /// # Safety
    ///
    /// `p` is a per-CPU pointer; the caller cannot migrate while it uses
    /// the result.
    unsafe fn this_cpu_ptr<T>(p: *mut T) -> *mut T;
    /// Adds one to this CPU's copy of a per-CPU counter.
    ///
    /// # Safety
    ///
    /// `c` is a live per-CPU `u64`; interrupts are off.
    unsafe fn this_cpu_inc(c: *mut u64);
    /// Whether a hit may run its handlers here (default: always). False
    /// where a probe hit in what they call could not reach the engine (arm64:
    /// this code runs one ftrace recursion level deep, and ftrace's guard
    /// would drop the next BRK): the hit counts as missed. Hit path,
    /// interrupts off.
    #[inline(always)]
    fn handlers_may_run() -> bool {
        true
    }
}

/// The other direction: everything a backend calls in the engine. The
/// backend's trap glue and trampolines reach the core through these (on
/// [`crate::entries::Engine`], which binds them) and otherwise use only the
/// modules below the registry (`abi`, `errno`, `ksym`, `lock`, `slots`,
/// `symbols`, `text`); `scripts/check-layers.py` checks it.
pub(crate) trait Core {
    /// What the engine itself wrote at `addr`: the record of the probed
    /// instruction there (its original bytes), and the jump written over
    /// it, if any. The registration lock is held (`g`): the jump's record
    /// is written under it.
    fn patch_at(g: &RegGuard, addr: usize) -> Option<(ArchInsn, Option<OptInsn>)>;
    /// A breakpoint at `addr` fired. True when it was the engine's; `regs`
    /// then say where to resume. Trap context, interrupts off.
    fn on_break(addr: usize, regs: &mut pt_regs) -> bool;
    /// A breakpoint at `addr` fired: true when it ended the out-of-line copy
    /// this CPU runs (the step is finished, post handlers ran). As above.
    fn on_step_done(addr: usize, regs: &mut pt_regs) -> bool;
    /// The copy of the instruction at `addr` ended in a call to the post
    /// trampoline rather than a breakpoint: as [`Core::on_step_done`];
    /// returns where execution goes on unless a post handler moved the ip.
    fn on_step_jump(addr: usize, regs: &mut pt_regs) -> usize;
    /// A kernel fault with `trapnr` (arch code): true when a probe's fault
    /// handler fixed it. Interrupts off.
    fn on_fault(regs: &mut pt_regs, trapnr: i32) -> bool;
    /// Whether this CPU is inside a hit (a fault may be a probe's only
    /// then). Interrupts off.
    // Only a backend that must ask before its fault glue does costly work
    // calls it (arm64: the exception-table search); `on_fault` asks too.
    #[allow(dead_code)]
    fn in_hit() -> bool;
    /// The ftrace site `ip` was reached with `regs`, through the shared
    /// `ftrace_ops` or (`direct`) the arch's direct-call trampoline; on
    /// return `regs`' ip is where to resume.
    ///
    /// # Safety
    ///
    /// Interrupts are off.
    // Only a backend with its own direct-call trampoline calls it (x86_64).
    #[allow(dead_code)]
    unsafe fn on_ftrace(ip: usize, regs: &mut pt_regs, direct: bool);
    /// The jump to `addr`'s detour was taken: run the pre handlers. True
    /// when one redirected (`regs` say where). `enter` runs once the CPU is
    /// marked busy; what it returns is dropped after the handlers.
    /// Interrupts off.
    fn on_jump<G>(addr: usize, regs: &mut pt_regs, enter: impl FnOnce() -> G) -> bool;
    /// The return through kretprobe stub `index` arrived with `regs`: runs
    /// the return handler, returns where the return goes (given first to
    /// `publish`, for the arch to put where an unwinder looks).
    /// Interrupts off.
    fn on_return(index: usize, regs: &mut pt_regs, publish: impl FnOnce(usize)) -> usize;
}

/// The whole contract.
pub(crate) trait Backend:
    Insns + Steps + Entries + Returns + Jumps + Traps + Refusals
{
}

impl<T: Insns + Steps + Entries + Returns + Jumps + Traps + Refusals> Backend for T {}

// The backend is complete (a missing part fails here, not at a use).
const _: fn() = || {
    fn backend<B: Backend>() {}
    backend::<Arch>();
};

/// The backend's types and constants under short names.
pub(crate) type ArchInsn = <Arch as Insns>::Insn;
pub(crate) type OptState = <Arch as Jumps>::OptState;
pub(crate) type OptInsn = <Arch as Jumps>::OptInsn;
pub(crate) const NAME: &str = <Arch as Traps>::NAME;
pub(crate) const SLOT_SIZE: usize = <Arch as Insns>::SLOT_SIZE;
pub(crate) const NSLOTS: usize = <Arch as Insns>::NSLOTS;
pub(crate) const POINT_MAX_SIZE: usize = <Arch as Insns>::POINT_MAX_SIZE;
pub(crate) const INSN_ALIGN: usize = <Arch as Insns>::INSN_ALIGN;

/// Whether `addr` could start an instruction (alignment only).
// Modulo 1 on x86_64, where every address could.
#[allow(clippy::modulo_one)]
pub(crate) const fn insn_aligned(addr: usize) -> bool {
    addr % INSN_ALIGN == 0
}
pub(crate) const FTRACE_SITE_LEN: usize = <Arch as Entries>::FTRACE_SITE_LEN;
pub(crate) const FTRACE_PRE_IP_OFFSET: usize = <Arch as Entries>::FTRACE_PRE_IP_OFFSET;
pub(crate) const FTRACE_GUARD: usize = <Arch as Entries>::FTRACE_GUARD;
pub(crate) const FTRACE_FULL_REGS: bool = <Arch as Entries>::FTRACE_FULL_REGS;
pub(crate) const OPT_SUPPORTED: bool = <Arch as Jumps>::OPT_SUPPORTED;
pub(crate) const OPT_MAX_SPAN: usize = <Arch as Jumps>::OPT_MAX_SPAN;
pub(crate) const BLACKLIST_FUNCS: &[(&CStr, &CStr)] = <Arch as Refusals>::BLACKLIST_FUNCS;
pub(crate) const NOKPROBE_NAMES: &[&[u8]] = <Arch as Refusals>::NOKPROBE_NAMES;
pub(crate) const BLACKLIST_SECTIONS: &[(&CStr, &CStr, &CStr)] =
    <Arch as Refusals>::BLACKLIST_SECTIONS;
pub(crate) const BLACKLIST_SPANS: &[(&CStr, &CStr, &CStr)] = <Arch as Refusals>::BLACKLIST_SPANS;
pub(crate) const SCHED_TEXT_CALLEES_PROBEABLE: bool =
    <Arch as Refusals>::SCHED_TEXT_CALLEES_PROBEABLE;
pub(crate) const TRAP_ROOTS: &[&CStr] = <Arch as Refusals>::TRAP_ROOTS;
