// SPDX-License-Identifier: GPL-2.0

//! Shared helpers for the KUnit suites: registration wrappers, a worker
//! kthread, user-mode helper runs, IRQ state.

use crate::kp::{self, KpKprobe};
use crate::kunit::Test;
use core::sync::atomic::{AtomicUsize, Ordering};
use kernel::bindings;
use kernel::ffi::{c_char, c_int, c_void};
use kernel::prelude::*;

pub(crate) const ENOENT: c_int = -(bindings::ENOENT as c_int);
pub(crate) const EINVAL: c_int = -(bindings::EINVAL as c_int);
pub(crate) const EILSEQ: c_int = -(bindings::EILSEQ as c_int);

/// Whether the kernel has kprobes of its own to compare against: on a
/// kernel built without them (`CONFIG_KPROBES=n`, the hardened test
/// kernels) the case is marked skipped with that reason and `false` comes
/// back.
pub(crate) fn kernel_kprobes(t: &Test) -> bool {
    if cfg!(CONFIG_KPROBES) {
        return true;
    }
    t.skip("the kernel has no kprobes of its own (CONFIG_KPROBES=n) to compare with");
    false
}

pub(crate) fn register(p: &mut KpKprobe) -> c_int {
    // SAFETY: every caller unregisters `p` before it goes out of scope.
    unsafe { kp::kp_register_kprobe(p) }
}

pub(crate) fn unregister(p: &mut KpKprobe) {
    // SAFETY: `p` was registered (or is not, which is allowed).
    unsafe { kp::kp_unregister_kprobe(p) }
}

/// Not registered, and the engine's record in it cleared (as before
/// registration: the struct can be registered again).
pub(crate) fn cleared(p: &KpKprobe) -> bool {
    !p.is_registered() && p.kp_private.iter().all(|&w| w == 0)
}

pub(crate) fn disable(p: &mut KpKprobe) -> c_int {
    // SAFETY: `p` is registered.
    unsafe { kp::kp_disable_kprobe(p) }
}

pub(crate) fn enable(p: &mut KpKprobe) -> c_int {
    // SAFETY: `p` is registered.
    unsafe { kp::kp_enable_kprobe(p) }
}

/// Argument `n` (0-based) of the probed function, at its entry.
pub(crate) fn arg(regs: &bindings::pt_regs, n: usize) -> u64 {
    kp::regs::arg(regs, n).unwrap_or(0) as u64
}

/// Makes the function whose entry `regs` are stopped at return `value` at
/// once (for pre handlers that return non-zero).
pub(crate) fn force_return(regs: &mut bindings::pt_regs, value: usize) {
    #[cfg(CONFIG_X86_64)]
    {
        // SAFETY: at the entry `sp` points at the return address.
        regs.ip = unsafe { *(regs.sp as *const usize) };
        regs.sp += 8;
        regs.ax = value;
    }
    #[cfg(CONFIG_ARM64)]
    {
        let lr = kp::regs::x(regs, 30).unwrap_or(0);
        kp::regs::set_x(regs, 0, value);
        kp::regs::set_ip(regs, lr);
    }
}

/// Where the pre handler sees the instruction pointer, relative to the
/// probed address: x86_64 reports the address after the int3 (as the
/// kernel's kprobes do), arm64 the BRK itself.
pub(crate) const PRE_IP_OFFSET: usize = if cfg!(CONFIG_X86_64) { 1 } else { 0 };

/// Length of the instruction at `addr`.
pub(crate) fn insn_len_at(addr: usize) -> usize {
    #[cfg(CONFIG_X86_64)]
    {
        // SAFETY: `addr` is this module's own text, readable.
        let bytes =
            unsafe { core::slice::from_raw_parts(addr as *const u8, crate::decode::MAX_INSN_LEN) };
        crate::decode::decode(bytes)
            .map(|i| i.len as usize)
            .unwrap_or(0)
    }
    #[cfg(CONFIG_ARM64)]
    {
        let _ = addr;
        4
    }
}

/// One refused range of the engine's list (`kp_blacklist_range()`).
pub(crate) struct Range {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) reason: &'static [u8],
}

/// The engine's whole list, in its order.
pub(crate) fn ranges() -> Result<KVec<Range>> {
    let mut v = KVec::new();
    for idx in 0.. {
        let (mut start, mut end) = (0usize, 0usize);
        // SAFETY: both out-pointers are valid locals.
        let why = unsafe { kp::kp_blacklist_range(idx, &mut start, &mut end) };
        if why.is_null() {
            break;
        }
        // SAFETY: the engine returns static NUL-terminated strings.
        let reason = unsafe { core::ffi::CStr::from_ptr(why) }.to_bytes();
        v.push(Range { start, end, reason }, GFP_KERNEL)?;
    }
    Ok(v)
}

/// Whether interrupts are off on this CPU (handlers must run that way) and
/// lockdep knows it (where it follows them, [`lockdep_irqs_agree`]), as
/// the kernel sees it: `irqs_disabled()`, which on arm64 with pseudo-NMIs
/// reads the interrupt priority mask, not DAIF (a handler that ran with
/// only DAIF masked would look "enabled" to lockdep and to every
/// `irqs_disabled()` check in code it calls).
pub(crate) fn irqs_disabled() -> bool {
    extern "C" {
        fn kp_test_irqs_disabled() -> bool;
    }
    // SAFETY: reads this CPU's interrupt state.
    unsafe { kp_test_irqs_disabled() }
}

/// Whether lockdep's idea of this CPU's interrupt state (what
/// `lockdep_assert_irqs_enabled()` checks) is the CPU's; true where lockdep
/// does not follow it (no `CONFIG_PROVE_LOCKING`, or lockdep off after an
/// earlier report). A detour that masks interrupts and tells lockdep on
/// the way in but not on the way out leaves them apart.
pub(crate) fn lockdep_irqs_agree() -> bool {
    extern "C" {
        fn kp_test_lockdep_irqs_state() -> core::ffi::c_int;
    }
    // SAFETY: reads this CPU's interrupt state and lockdep's.
    unsafe { kp_test_lockdep_irqs_state() != 0 }
}

/// The first byte (x86_64) or word (arm64) of text at `addr`.
pub(crate) fn text_word(addr: usize) -> u32 {
    // SAFETY: `addr` is kernel or module text, mapped and readable.
    unsafe { core::ptr::read_volatile(addr as *const u32) }
}

/// The first instruction of the function at `f` past its landing pad for
/// indirect calls, if it has one: `endbr64` (x86_64 IBT; also the NOP a
/// sealed one becomes) or `bti c` (arm64 BTI). What the engine probes for
/// a request at the function's entry when it has no ftrace site (Rust
/// functions); the tests that want an instruction before a given one start
/// here rather than at `f`.
pub(crate) fn body(f: usize) -> usize {
    let w = text_word(f);
    #[cfg(CONFIG_X86_64)]
    let pad = w == 0xfa1e_0ff3 || w == 0x001f_0f66;
    #[cfg(CONFIG_ARM64)]
    let pad = w == 0xd503_245f;
    if pad {
        f + 4
    } else {
        f
    }
}

extern "C" {
    fn call_usermodehelper(
        path: *const c_char,
        argv: *mut *mut c_char,
        envp: *mut *mut c_char,
        wait: c_int,
    ) -> c_int;
}
const UMH_WAIT_PROC: c_int = 2;

/// Runs a user-space program with up to three arguments and waits for it;
/// returns its wait status (or a negative errno).
pub(crate) fn run(path: &core::ffi::CStr, args: &[&core::ffi::CStr]) -> c_int {
    let mut argv: [*mut c_char; 5] = [core::ptr::null_mut(); 5];
    argv[0] = path.as_ptr() as *mut c_char;
    for (i, a) in args.iter().take(3).enumerate() {
        argv[i + 1] = a.as_ptr() as *mut c_char;
    }
    let mut envp: [*mut c_char; 2] = [
        c"PATH=/bin:/sbin".as_ptr() as *mut c_char,
        core::ptr::null_mut(),
    ];
    // SAFETY: NULL-terminated argv/envp of static strings; we wait for exit.
    unsafe { call_usermodehelper(argv[0], argv.as_mut_ptr(), envp.as_mut_ptr(), UMH_WAIT_PROC) }
}

/// A kernel thread running `f(arg)` until `f` returns, then idling until
/// stopped. Dropping it stops it and waits.
pub(crate) struct Worker(*mut bindings::task_struct);

struct Job {
    f: fn(usize),
    arg: usize,
}

/// The kthread's body.
///
/// # Safety
///
/// `data` is a `Job` boxed by [`Worker::start`].
unsafe extern "C" fn worker_main(data: *mut c_void) -> c_int {
    // SAFETY: `data` is the `Job` boxed by `Worker::start`, ours now.
    let job = unsafe { KBox::from_raw(data.cast::<Job>()) };
    (job.f)(job.arg);
    // SAFETY: plain kthread API calls from the thread itself.
    while !unsafe { bindings::kthread_should_stop() } {
        // SAFETY: as above.
        unsafe { bindings::msleep(1) };
    }
    0
}

impl Worker {
    /// Starts `f(arg)` on a new kthread, on `cpu` if given.
    pub(crate) fn start(f: fn(usize), arg: usize, cpu: Option<u32>) -> Result<Self> {
        let job = KBox::into_raw(KBox::new(Job { f, arg }, GFP_KERNEL)?);
        // SAFETY: `worker_main` takes ownership of `job`; the name is a
        // NUL-terminated format without conversions.
        let t = unsafe {
            bindings::kthread_create_on_node(
                Some(worker_main),
                job.cast(),
                -1,
                c"kp_worker".as_ptr().cast(),
            )
        };
        if t.is_null() || (t as isize) < 0 && (t as isize) > -4096 {
            // SAFETY: the thread was not created; the job is still ours.
            drop(unsafe { KBox::from_raw(job) });
            return Err(ENOMEM);
        }
        if let Some(cpu) = cpu {
            // SAFETY: `t` is a new, not yet woken kthread.
            unsafe { bindings::kthread_bind(t, cpu) };
        }
        // SAFETY: `t` is a valid task.
        unsafe { bindings::wake_up_process(t) };
        Ok(Worker(t))
    }
}

impl Worker {
    /// The worker's task.
    pub(crate) fn task(&self) -> *mut bindings::task_struct {
        self.0
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // SAFETY: `self.0` is our kthread, not yet stopped.
        unsafe { bindings::kthread_stop(self.0) };
    }
}

/// `sprint_symbol()` output: `name+0xoff/0xsize [module]`.
pub(crate) struct Sym {
    /// Room for `KSYM_SYMBOL_LEN` (about 700 bytes with 511-byte names, which
    /// Rust's mangled generics reach): `sprint_symbol()` writes without a
    /// bound.
    buf: [u8; 1024],
}

impl Sym {
    /// Looks up `addr`.
    pub(crate) fn of(addr: usize) -> Self {
        let mut s = Sym { buf: [0; 1024] };
        // SAFETY: the buffer past the headroom is larger than
        // KSYM_SYMBOL_LEN; the headroom takes what the kernel writes before
        // it for names too long (`ksym::SPRINT_HEADROOM`).
        unsafe {
            bindings::sprint_symbol(
                s.buf.as_mut_ptr().add(crate::ksym::SPRINT_HEADROOM).cast(),
                addr,
            )
        };
        crate::ksym::settle_sprint_symbol(&mut s.buf);
        s
    }

    /// The text, without the NUL.
    pub(crate) fn bytes(&self) -> &[u8] {
        self.buf.split(|&c| c == 0).next().unwrap_or(&[])
    }

    /// The text as a `str` (`"?"` if not UTF-8).
    pub(crate) fn as_str(&self) -> &str {
        core::str::from_utf8(self.bytes()).unwrap_or("?")
    }
}

/// The CPU this task last ran on (may change right after).
pub(crate) fn this_cpu() -> u32 {
    // SAFETY: `current` is valid; with THREAD_INFO_IN_TASK (x86_64 and
    // arm64) the task's `thread_info.cpu` is its CPU.
    unsafe { (*bindings::get_current()).thread_info.cpu }
}

/// A gas macro for the suites' x86_64 assembly targets, `KP_SAFE insn`:
/// the instruction, marked for objtool as the kernel's
/// `ANNOTATE_RETPOLINE_SAFE` / `ANNOTATE_UNRET_SAFE` mark it
/// (arch/x86/include/asm/nospec-branch.h, which Rust cannot include). The
/// targets keep their bare `ret`s and indirect branches on purpose, they
/// are what the emulator is tested on, and production kernels
/// (MITIGATION_RETHUNK, MITIGATION_RETPOLINE) refuse them unmarked. Each
/// `global_asm!` block that defines it ends with `.purgem KP_SAFE` (the
/// crate's blocks share one assembler).
#[cfg(CONFIG_X86_64)]
macro_rules! x86_safe_macro {
    () => {
        concat!(
            ".macro KP_SAFE insn:vararg\n",
            "999:\n",
            ".pushsection .discard.retpoline_safe\n",
            ".long 999b\n",
            ".popsection\n",
            "\\insn\n",
            ".endm\n",
        )
    };
}
#[cfg(CONFIG_X86_64)]
pub(crate) use x86_safe_macro;

extern "C" {
    fn stack_trace_save(
        store: *mut usize,
        size: kernel::ffi::c_uint,
        skipnr: kernel::ffi::c_uint,
    ) -> kernel::ffi::c_uint;
}

/// Most entries a [`Trace`] keeps.
pub(crate) const TRACE_LEN: usize = 24;

/// A stack trace taken inside a handler, read by the test afterwards.
/// Not a stack buffer: x86_64's "guess" unwinder scans the stack for text
/// addresses and would find the entries it is writing.
pub(crate) struct Trace {
    words: [AtomicUsize; TRACE_LEN],
    n: AtomicUsize,
}

impl Trace {
    pub(crate) const fn new() -> Self {
        Self {
            words: [const { AtomicUsize::new(0) }; TRACE_LEN],
            n: AtomicUsize::new(0),
        }
    }

    /// Forgets the last trace.
    pub(crate) fn clear(&self) {
        self.n.store(0, Ordering::SeqCst);
    }

    /// Takes a trace of the current stack (`stack_trace_save()`): call
    /// from one handler at a time.
    pub(crate) fn take(&self) {
        // SAFETY: `words` holds TRACE_LEN words; `AtomicUsize` has the
        // layout of `usize`; one writer at a time (the caller's contract).
        let n = unsafe { stack_trace_save(self.words.as_ptr() as *mut usize, TRACE_LEN as _, 0) };
        self.n.store(n as usize, Ordering::SeqCst);
    }

    /// The last trace: its words and how many are valid.
    pub(crate) fn get(&self) -> ([usize; TRACE_LEN], usize) {
        let n = self.n.load(Ordering::SeqCst).min(TRACE_LEN);
        (
            core::array::from_fn(|i| self.words[i].load(Ordering::SeqCst)),
            n,
        )
    }
}

/// Prints a stack trace into the KTAP stream; returns whether any entry's
/// symbol contains `needle`.
pub(crate) fn show_trace(t: &Test, what: &str, trace: &[usize], needle: &str) -> bool {
    t.info(format_args!(
        "stack trace {}: {} entries",
        what,
        trace.len()
    ));
    for &a in trace {
        t.info(format_args!("  {}", Sym::of(a).as_str()));
    }
    trace_has(trace, needle)
}

/// Whether any entry's symbol of `trace` contains `needle`.
pub(crate) fn trace_has(trace: &[usize], needle: &str) -> bool {
    trace.iter().any(|&a| {
        // Byte search: `str::contains` pulls in a panic path objtool does
        // not know to be noreturn.
        Sym::of(a)
            .bytes()
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
    })
}

/// Waits (up to 10 s) until `p` is optimized; returns whether it is.
pub(crate) fn wait_optimized(p: &kp::Probe) -> bool {
    for _ in 0..1000 {
        if p.is_optimized() {
            return true;
        }
        // SAFETY: process context.
        unsafe { bindings::msleep(10) };
    }
    false
}

/// Counts its hits.
pub(crate) struct Counter(pub(crate) AtomicUsize);

impl kp::KprobeHandler for Counter {
    fn pre(&self, _p: &kp::Probe, _regs: &mut kp::Regs) -> kp::Next {
        self.0.fetch_add(1, Ordering::SeqCst);
        kp::Next::Continue
    }
}

/// A jump prepared while the optimizer waits for every task to leave the
/// bytes of the jumps it prepared before (a probe armed during that wait)
/// is written only after a wait that began once it was prepared: a task
/// may have been inside its bytes when the running wait began (it entered
/// them before the probe was armed), and would return into the middle of
/// the jump. `first` and `second`: optimizable addresses in two functions;
/// `call` runs the code at `second` once and says whether its result was
/// right.
pub(crate) fn opt_armed_during_wait(t: &mut Test, first: usize, second: usize, call: fn() -> bool) {
    let counter = || Counter(AtomicUsize::new(0));
    for attempt in 1..=50 {
        let Ok(a) = kp::Kprobe::register(kp::Target::Address(first), counter()) else {
            kp_expect!(t, false, "cannot register the first probe");
            return;
        };
        // The optimizer's run for it, caught in its wait.
        let mut begun = None;
        for _ in 0..2000 {
            let s = kp::stats();
            if s.opt_waits > s.opt_waits_done {
                begun = Some(s.opt_waits);
                break;
            }
            if a.probe().is_optimized() {
                break;
            }
            // SAFETY: process context.
            unsafe { bindings::usleep_range_state(200, 400, bindings::TASK_UNINTERRUPTIBLE) };
        }
        let Some(begun) = begun else {
            continue;
        };
        let Ok(b) = kp::Kprobe::register(kp::Target::Address(second), counter()) else {
            kp_expect!(t, false, "cannot register the second probe");
            return;
        };
        if kp::stats().opt_waits_done >= begun {
            // The wait may have ended before the second was armed.
            continue;
        }
        // The second's jump was prepared during wait number `begun`.
        kp_expect!(
            t,
            wait_optimized(b.probe()),
            "the second probe not optimized"
        );
        let done = kp::stats().opt_waits_done;
        // (The first is not what this is about: whether it was jumped
        // then or later is said, not checked; that it is, is.)
        let first_then = a.probe().is_optimized();
        kp_expect!(
            t,
            first_then || wait_optimized(a.probe()),
            "the first probe not optimized ({} waits begun, {} ended; enabled {})",
            kp::stats().opt_waits,
            kp::stats().opt_waits_done,
            a.probe().is_enabled()
        );
        kp_expect!(
            t,
            done > begun,
            "the second probe's jump was written after wait {} only, which began \
             before it was prepared ({} waits ended)",
            begun,
            done
        );
        kp_expect!(t, call(), "wrong result through the second probe");
        kp_expect_eq!(t, b.handler().0.load(Ordering::SeqCst), 1);
        kp_expect_eq!(t, b.nmissed(), 0);
        t.info(format_args!(
            "attempt {}: prepared during wait {}, jumped after wait {}; the first \
             jumped by then: {}",
            attempt, begun, done, first_then
        ));
        return;
    }
    kp_expect!(
        t,
        false,
        "the optimizer's wait was never caught (50 attempts)"
    );
}
