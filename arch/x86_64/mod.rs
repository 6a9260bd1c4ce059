// SPDX-License-Identifier: GPL-2.0

//! x86_64 backend: int3 breakpoints, out-of-line execution, die-notifier entry.
//!
//! A probed instruction's first byte is replaced by `int3`. When it fires, the
//! die-notifier chain (`DIE_INT3`, reached from `do_int3()`) brings us to
//! [`trap::kp_x86_int3`]. After the pre handler, the CPU resumes at a copy of the
//! original instruction in an out-of-line slot, followed by another `int3`; that
//! second trap finishes the step (fix up `ip`, restore `IF`) and runs the post
//! handler. This is the kernel's own x86 scheme since 5.15 (no TF single-step):
//! no #DB, and interrupts stay off between the two traps.
//!
//! Branches, calls and returns cannot run out of line (they would not reach
//! the trailing int3): they are emulated at the hit ([`emulate`]), as the
//! kernel does.
//!
//! Boosting: an instruction that may run out of line followed by a jump
//! gets a second copy ending in a jump back, used when no probe there has a
//! post handler (one trap per hit, as the kernel's boosting). With a post
//! handler, the step copy of such an instruction ends in a call to a
//! register-saving trampoline instead of the second int3 ([`post`]): still
//! one trap per hit.

// Pure logic shared with the host tests: `pub` there, partly unused here.
// The trampolines' common body (a macro: first, for the modules below).
mod tramp;

#[allow(dead_code, unreachable_pub)]
pub(crate) mod decode;
// Pure too: the emulation plan and the relocated copy.
#[allow(unreachable_pub)]
mod copy;

/// The most a registry `Point` may take here (with the jump optimizer's state).
pub(crate) const POINT_MAX_SIZE: usize = 128;

mod emulate;

/// The register names of the `kprobe_events` grammar (pure, `pub` for the
/// host crate).
#[allow(unreachable_pub)]
pub(crate) mod event_regs;

mod ftrace;

mod kretprobe;

mod opt;

mod post;

#[allow(dead_code, unreachable_pub)]
pub(crate) mod regs;

mod trap;

mod blacklist;
mod foreign;
mod insn;
mod nokprobe_names;
mod step;

use foreign::*;
use insn::*;
use step::*;
use tramp::*;

use crate::arch::{Entries, Insns, Refusals, Steps, Traps};
use crate::lock::RegGuard;
use crate::{slots, text};

use core::sync::atomic::Ordering;

use decode::{decode, Class, MAX_INSN_LEN};

use kernel::bindings;

use kernel::prelude::*;

extern "C" {
    /// This CPU's per-CPU offset, itself a per-CPU variable (exported).
    static this_cpu_off: usize;
}

/// The breakpoint instruction.
const INT3: u8 = 0xcc;

/// `endbr64`.
const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// What an IBT kernel leaves of the `endbr64` of a function it sealed at
/// boot (`gen_endbr_poison()`: `osp nopl (%rax)`, a 4-byte NOP unique to
/// former ENDBR sites); the function's entry is still past it.
const ENDBR64_SEALED: [u8; 4] = [0x66, 0x0f, 0x1f, 0x00];

/// Whether `b` starts with an `endbr64`, live or sealed.
fn starts_with_endbr(b: &[u8]) -> bool {
    b.get(..4)
        .is_some_and(|w| w == ENDBR64 || w == ENDBR64_SEALED)
}

/// The 5-byte NOP that ftrace leaves at an untraced `__fentry__` site.
const FTRACE_NOP: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];

/// `call rel32`, what an ftrace site holds while traced.
const CALL_REL32: u8 = 0xe8;

/// Bytes per out-of-line slot: the step copy (instruction + int3, or + the
/// [`post`] tail) in the first 32 bytes, the boosted copy (instruction +
/// `jmp rel32`) after it.
pub(crate) const SLOT_SIZE: usize = 64;

/// Where the boosted copy starts in a slot.
const BOOST_OFF: usize = 32;

/// Number of slots (see `src/slots.rs`).
pub(crate) const NSLOTS: usize = 8192;

/// Tells objtool (IBT) that `$sym` is no indirect-branch target although
/// the engine takes its address: the kernel's `ANNOTATE_NOENDBR`
/// (include/linux/objtool.h) for a symbol defined in Rust's `global_asm!`,
/// which cannot include the kernel's headers. Only direct jumps and calls,
/// written at run time, go to the engine's slot areas.
macro_rules! noendbr {
    ($sym:literal) => {
        concat!(
            ".pushsection .discard.noendbr\n",
            ".long ",
            $sym,
            "\n",
            ".popsection\n"
        )
    };
}
// The call gates (insn.rs) exist on IBT kernels only.
#[cfg_attr(not(CONFIG_X86_KERNEL_IBT), allow(unused_imports))]
pub(super) use noendbr;

core::arch::global_asm!(
    ".pushsection .text.kp_insn_slots, \"ax\", @progbits",
    ".balign 4096",
    ".globl kp_insn_slots",
    "kp_insn_slots:",
    ".fill {size}, 1, 0xcc",
    ".popsection",
    noendbr!("kp_insn_slots"),
    size = const SLOT_SIZE * NSLOTS,
);

/// A prepared probed instruction.
#[derive(Clone, Copy)]
pub(crate) struct ArchInsn {
    /// Address of the out-of-line slot.
    pub(super) slot: usize,
    /// Length of the instruction (at most `MAX_INSN_LEN`: a byte keeps
    /// `Point`, which holds this, in a smaller slab).
    pub(super) len: u8,
    /// The original bytes.
    pub(super) orig: [u8; MAX_INSN_LEN],
    /// How to emulate it, when it cannot run out of line.
    pub(super) emulate: Option<copy::Op>,
    /// Whether the copy at `slot + BOOST_OFF` (ending in a jump back) may be
    /// used when no post handler needs the second trap.
    pub(super) boostable: bool,
    /// Whether the step copy ends in the [`post`] tail rather than an int3.
    pub(super) post_tail: bool,
}

/// The x86_64 backend (the traits of `src/arch.rs` are implemented in the
/// file of each part).
pub(crate) struct Arch;

impl Traps for Arch {
    /// Backend name, for messages.
    const NAME: &'static str = "x86_64";

    /// Arch set-up at engine load.
    fn init() -> Result {
        init_optprobe_head();
        opt::init()?;
        trap::init()
    }

    /// Arch tear-down at engine unload (after every probe is gone).
    fn exit() {
        trap::exit();
    }

    /// This CPU's copy of the per-CPU object `p` (`this_cpu_ptr()`), inline:
    /// the hit paths use it on every hit, where a call into C costs more under
    /// QEMU's TCG than the access.
    ///
    /// # Safety
    ///
    /// `p` is a per-CPU pointer; the caller cannot migrate (interrupts or
    /// preemption off) while it uses the result.
    #[inline(always)]
    unsafe fn this_cpu_ptr<T>(p: *mut T) -> *mut T {
        let off: usize;
        // SAFETY: `%gs` is this CPU's per-CPU base; `this_cpu_off` is a per-CPU
        // variable (what `this_cpu_read(this_cpu_off)` reads).
        unsafe {
            core::arch::asm!(
                "mov {off}, qword ptr gs:[{var}]",
                off = out(reg) off,
                var = in(reg) core::ptr::addr_of!(this_cpu_off),
                options(nostack, readonly, preserves_flags),
            )
        };
        p.wrapping_byte_add(off)
    }

    /// Adds one to this CPU's copy of the per-CPU counter `c`
    /// (`__this_cpu_inc()`: one `inc` relative to `%gs`, no lock prefix).
    ///
    /// # Safety
    ///
    /// `c` is a live per-CPU `u64`; interrupts are off (no other writer on this
    /// CPU).
    #[inline(always)]
    unsafe fn this_cpu_inc(c: *mut u64) {
        // SAFETY: per the function's contract.
        unsafe {
            core::arch::asm!(
                "inc qword ptr gs:[{c}]",
                c = in(reg) c,
                options(nostack),
            )
        };
    }
}
