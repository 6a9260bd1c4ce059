// SPDX-License-Identifier: GPL-2.0

//! `kp_mass`: 2,000 kprobes on distinct random instructions of real kernel
//! functions and 200 kretprobes on leaf functions, armed while a workload
//! (fork/exec, pipes, file I/O, sleeps and timers) runs on every CPU for 60
//! seconds; then everything is removed.
//!
//! Candidates are every function of the core kernel's text (`_stext` ..
//! `_etext`, as `kp_random` draws them), picked with a seeded PRNG (the seed
//! is in the KTAP output; `kp_random_seed` replays both suites). Kretprobes go on leaf functions only (no call, no
//! jump out of the function): a task cannot sleep in one, so every return
//! comes back while the test waits for it (a kretprobe on a function where
//! a kthread sleeps for good would keep the engine loaded, by design).
//!
//! Checks, per probe where it can be: a refused registration gives one of
//! the documented errors (EINVAL, EILSEQ, EOPNOTSUPP, EBUSY, each logged
//! with its reason); the engine accepts enough of them; handlers run (hits);
//! after the kretprobes are disabled and their returns drained, each saw
//! exactly as many returns as entries; once unregistration returns, no
//! handler runs again (the workload goes on); the bytes each probe could
//! have written (its instruction, or every instruction its jump covered) are as before
//! its registration. (Not the whole text: static keys and alternatives
//! change other bytes of it while the workload runs.) The log says how many
//! functions and instructions a run covered. The guest log scan catches
//! any splat; on the debug kernel lockdep, KASAN and kmemleak watch too.

use crate::kp::{self, KpKprobe, KpKretprobe, KpKretprobeInstance};
use crate::kp_random::{pick, read_text, seed, Region, Rng};
use crate::kunit::Test;
use crate::util::{disable, register, run, Worker};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use kernel::bindings;
use kernel::ffi::c_int;
use kernel::prelude::*;

/// How many probes: as many on the debug kernel (KASAN, lockdep), where
/// a breakpoint hit costs tens of microseconds under TCG. (A first run with
/// 2,000 there stopped the guest: a probe in the KASAN runtime, which every
/// instrumented access calls, now refused by the blacklist.)
// On the arm64 kernel with lockdep (arm64-hardened) every registration and
// unregistration is slow under TCG (a kretprobe's entry, served by ftrace,
// costs an ftrace filter update of about 0.6 s each way; a kprobe about
// 25 ms in and 45 ms out): 2,000 + 200 and 60 s of workload took the case
// past KUnit's 300 s limit. There: 1,000 + 100 and 30 s (the counts are
// in the log) took 135-210 s, until a seed (0x11814c0d, CI of 2026-12-05)
// put a probe on a function the whole machine calls all the time (5.1
// million hits in the 30 s, four times the usual): every phase ran two to
// six times slower and the case took 349 s. Now 500 + 25 and 20 s (that
// seed: 170 s alone with 500 + 50, most of it the kretprobes' ftrace
// filter updates, about a second each way).
#[cfg(all(CONFIG_ARM64, CONFIG_PROVE_LOCKING))]
const KPROBES: usize = 500;
#[cfg(not(all(CONFIG_ARM64, CONFIG_PROVE_LOCKING)))]
const KPROBES: usize = 2000;
#[cfg(all(CONFIG_ARM64, CONFIG_PROVE_LOCKING))]
const KRETPROBES: usize = 25;
#[cfg(not(all(CONFIG_ARM64, CONFIG_PROVE_LOCKING)))]
const KRETPROBES: usize = 200;
#[cfg(all(CONFIG_ARM64, CONFIG_PROVE_LOCKING))]
const WORKLOAD_NS: u64 = 20 * 1_000_000_000;
#[cfg(not(all(CONFIG_ARM64, CONFIG_PROVE_LOCKING)))]
const WORKLOAD_NS: u64 = 60 * 1_000_000_000;

/// Set once everything is unregistered: a handler running then is an error.
static AFTER: AtomicBool = AtomicBool::new(false);
static LATE_CALLS: AtomicU64 = AtomicU64::new(0);
static ROUNDS: AtomicU64 = AtomicU64::new(0);

#[repr(C)]
struct Mass {
    kp: KpKprobe,
    hits: AtomicU64,
}

#[repr(C)]
struct MassRet {
    rp: KpKretprobe,
    entries: AtomicU64,
    returns: AtomicU64,
}

/// # Safety
///
/// Called by the engine for a `Mass` probe.
unsafe extern "C" fn mass_pre(p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
    // SAFETY: `kp` is the first field of a live `Mass`.
    unsafe { &*p.cast::<Mass>() }
        .hits
        .fetch_add(1, Ordering::Relaxed);
    if AFTER.load(Ordering::Relaxed) {
        LATE_CALLS.fetch_add(1, Ordering::Relaxed);
    }
    0
}

/// The `MassRet` of an instance.
///
/// # Safety
///
/// `ri` is an instance of a `MassRet` kretprobe.
unsafe fn mass_ret_of(ri: *mut KpKretprobeInstance) -> &'static MassRet {
    // SAFETY: `rp` is the first field of a live `MassRet`.
    unsafe { &*(*ri).rp.cast::<MassRet>() }
}

/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn mass_entry(ri: *mut KpKretprobeInstance, _r: *mut bindings::pt_regs) -> c_int {
    // SAFETY: our kretprobes only.
    unsafe { mass_ret_of(ri) }
        .entries
        .fetch_add(1, Ordering::Relaxed);
    if AFTER.load(Ordering::Relaxed) {
        LATE_CALLS.fetch_add(1, Ordering::Relaxed);
    }
    0
}

/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn mass_return(
    ri: *mut KpKretprobeInstance,
    _r: *mut bindings::pt_regs,
) -> c_int {
    // SAFETY: our kretprobes only.
    unsafe { mass_ret_of(ri) }
        .returns
        .fetch_add(1, Ordering::Relaxed);
    if AFTER.load(Ordering::Relaxed) {
        LATE_CALLS.fetch_add(1, Ordering::Relaxed);
    }
    0
}

fn now_ns() -> u64 {
    // SAFETY: plain call.
    unsafe { bindings::ktime_get() as u64 }
}

/// One CPU's share of the workload until `deadline` (ktime ns): a shell
/// that forks, pipes, writes and reads files, then a sleep.
fn work(deadline: usize) {
    loop {
        run(
            c"/bin/sh",
            &[
                c"-c",
                c"i=0; while [ $i -lt 10 ]; do echo $i | cat >/tmp/kp_mass.$$; \
                  cat /tmp/kp_mass.$$ /proc/uptime >/dev/null; i=$((i + 1)); done; \
                  rm -f /tmp/kp_mass.$$; sleep 0.01",
            ],
        );
        // SAFETY: process context.
        unsafe { bindings::msleep(2) };
        ROUNDS.fetch_add(1, Ordering::Relaxed);
        if now_ns() >= deadline as u64 {
            break;
        }
    }
}

/// Whether `addr` is a return thunk (`__x86_return_thunk`,
/// `srso_return_thunk`, `retbleed_return_thunk`, `its_return_thunk`, ...).
#[cfg(CONFIG_X86_64)]
fn is_return_thunk(addr: usize) -> bool {
    let sym = crate::util::Sym::of(addr);
    crate::ksym::parse_sprint_symbol(sym.bytes())
        .is_some_and(|s| s.offset == 0 && s.name.ends_with(b"return_thunk"))
}

/// Whether the function `[start, start + size)`, whose original bytes are
/// `text`, calls nothing and jumps nowhere outside itself (no task can sleep
/// in it).
fn is_leaf(start: usize, size: usize, text: &[u8]) -> bool {
    if text.len() != size {
        return false;
    }
    let inside = |t: u64| t >= start as u64 && t < (start + size) as u64;
    #[cfg(CONFIG_X86_64)]
    {
        use crate::decode::{decode, Class, MAX_INSN_LEN};
        let mut off = 0;
        while off < size {
            let mut b = [0u8; MAX_INSN_LEN];
            let n = (size - off).min(MAX_INSN_LEN);
            b[..n].copy_from_slice(&text[off..off + n]);
            let Ok(i) = decode(&b) else {
                return false;
            };
            let at = (start + off) as u64;
            match i.class {
                // int3: padding after a ret or jmp (MITIGATION_SLS).
                Class::Plain | Class::Ret | Class::Int3 => {}
                Class::JmpRel | Class::Jcc | Class::LoopOrJrcxz => {
                    let Some(to) = i.rel_target(at, &b) else {
                        return false;
                    };
                    // A jump to a return thunk is the function's return
                    // (MITIGATION_RETHUNK: `jmp __x86_return_thunk`, or
                    // the thunk alternatives chose).
                    if !(inside(to) || i.class == Class::JmpRel && is_return_thunk(to as usize)) {
                        return false;
                    }
                }
                _ => return false,
            }
            off += i.len as usize;
        }
        true
    }
    #[cfg(CONFIG_ARM64)]
    {
        text.chunks_exact(4).enumerate().all(|(k, w)| {
            let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            let at = (start + 4 * k) as u64;
            let bl = w & 0xfc00_0000 == 0x9400_0000;
            let blr_br = w & 0xffdf_fc1f == 0xd61f_0000;
            let exception = w & 0xff00_0000 == 0xd400_0000;
            let b_out = w & 0xfc00_0000 == 0x1400_0000 && {
                let imm = ((w << 6) as i32 >> 6) as i64 * 4;
                !inside(at.wrapping_add(imm as u64))
            };
            !(bl || blr_br || exception || b_out)
        })
    }
}

/// The bytes a probe at `addr` may write: its instruction, or, once it
/// was jump-optimized, on x86_64 every instruction its 5-byte jump covers
/// (the rest of them become int3 filler while it is jumped; arm64's `B`
/// replaces the one instruction); never past the function's end `fend`.
struct Span {
    addr: usize,
    len: usize,
    /// The covered instructions' length (x86_64; 0 where none).
    jump_len: usize,
}

impl Span {
    fn new(region: &Region, addr: usize, fend: usize) -> Self {
        let text = region.text_of(addr, fend.saturating_sub(addr));
        #[cfg(CONFIG_X86_64)]
        let (len, jump_len) = {
            let at = |off: usize| {
                let mut b = [0u8; crate::decode::MAX_INSN_LEN];
                let rest = text.get(off..).unwrap_or(&[]);
                let k = rest.len().min(b.len());
                b[..k].copy_from_slice(&rest[..k]);
                crate::decode::decode(&b).map_or(1, |i| i.len as usize)
            };
            // An entry served by ftrace writes its 5-byte site.
            let first = at(0);
            let mut covered = first;
            while covered < 5 {
                covered += at(covered);
            }
            (first, covered)
        };
        #[cfg(CONFIG_ARM64)]
        let (len, jump_len) = (4, 0);
        Span {
            addr,
            len: len.min(text.len()),
            jump_len: jump_len.min(text.len()),
        }
    }

    /// The probe was seen jump-optimized.
    fn jumped(&mut self) {
        self.len = self.len.max(self.jump_len);
    }
}

fn mass_probes_under_workload(t: &mut Test) {
    let seed = seed() ^ 0x6d61_7373; // "mass"
    t.info(format_args!(
        "seed {:#x} (replay: KP_CMDLINE=kp_random_seed={:#x})",
        seed,
        seed ^ 0x6d61_7373
    ));
    let mut rng = Rng(seed);
    let base = kp::stats();
    // Candidate functions: the whole kernel text, read before any probe.
    let Some(region) = Region::kernel_text() else {
        kp_expect!(t, false, "cannot walk or read the kernel's text");
        return;
    };
    let funcs = &region.funcs;
    kp_expect!(t, funcs.len() > 5000);
    let region_len = region.text.len();
    t.info(format_args!(
        "{} candidate functions, {} bytes of text",
        funcs.len(),
        region_len
    ));

    // Kprobes on distinct random instructions. (Room is reserved first: a
    // registered probe is never dropped for want of memory.)
    let (Ok(mut probes), Ok(mut ptrs), Ok(mut used), Ok(mut krets)) = (
        KVec::<KBox<Mass>>::with_capacity(KPROBES, GFP_KERNEL),
        KVec::<*mut KpKprobe>::with_capacity(KPROBES, GFP_KERNEL),
        KVec::<usize>::with_capacity(KPROBES, GFP_KERNEL),
        KVec::<KBox<MassRet>>::with_capacity(KRETPROBES, GFP_KERNEL),
    ) else {
        kp_expect!(t, false, "out of memory");
        return;
    };
    // EINVAL, EILSEQ, EOPNOTSUPP, EBUSY, other
    let mut refused = [0usize; 5];
    let (Ok(mut funcs_hit), Ok(mut spans)) = (
        KVec::<usize>::with_capacity(KPROBES + KRETPROBES, GFP_KERNEL),
        KVec::<Span>::with_capacity(KPROBES + KRETPROBES, GFP_KERNEL),
    ) else {
        kp_expect!(t, false, "out of memory");
        return;
    };
    let mut attempts = 0;
    while probes.len() < KPROBES && attempts < 20 * KPROBES {
        attempts += 1;
        let (s, size) = region.any(&mut rng);
        let Some(addr) = pick(&mut rng, s, size, region.text_of(s, size)) else {
            continue;
        };
        if used.contains(&addr) {
            continue;
        }
        let Ok(mut m) = KBox::new(
            Mass {
                kp: KpKprobe::new(),
                hits: AtomicU64::new(0),
            },
            GFP_KERNEL,
        ) else {
            break;
        };
        m.kp.addr = addr as *mut _;
        m.kp.pre_handler = Some(mass_pre);
        // Logged before registering, so that a hang names its culprit.
        kernel::pr_info!("kp_mass: trying {:#x}\n", addr);
        match register(&mut m.kp) {
            0 => {}
            e => {
                refused[crate::kp_random::refusal_kind(e)] += 1;
                if crate::kp_random::refusal_kind(e) == 4 {
                    t.info(format_args!("{:#x}: unexpected error {}", addr, e));
                }
                continue;
            }
        }
        // Within the reserved capacity: cannot fail.
        if !funcs_hit.contains(&s) {
            let _ = funcs_hit.push(s, GFP_KERNEL);
        }
        let _ = used.push(addr, GFP_KERNEL);
        let _ = spans.push(Span::new(&region, addr, s + size), GFP_KERNEL);
        let _ = ptrs.push(&mut m.kp as *mut KpKprobe, GFP_KERNEL);
        let _ = probes.push(m, GFP_KERNEL);
    }
    t.info(format_args!(
        "{} kprobes in {} functions after {} attempts; refused: {} EINVAL, {} EILSEQ, \
         {} EOPNOTSUPP, {} EBUSY, {} other",
        probes.len(),
        funcs_hit.len(),
        attempts,
        refused[0],
        refused[1],
        refused[2],
        refused[3],
        refused[4]
    ));
    kp_expect_eq!(t, probes.len(), KPROBES);
    // Every refusal is one of the documented ones (each logged its reason).
    kp_expect_eq!(t, refused[4], 0);

    // Kretprobes on leaf functions, in random order.
    let mut leaves = KVec::new();
    for &(s, size) in funcs.iter() {
        if is_leaf(s, size, region.text_of(s, size)) && leaves.push((s, size), GFP_KERNEL).is_err()
        {
            break;
        }
    }
    let (mut kattempts, mut krefused) = (0, 0);
    while krets.len() < KRETPROBES && !leaves.is_empty() {
        kattempts += 1;
        // Take a random leaf out (swap with the last).
        let i = (rng.next() % leaves.len() as u64) as usize;
        let last = leaves.len() - 1;
        leaves.swap(i, last);
        let (s, size) = leaves[last];
        // SAFETY: shrinking keeps the elements below the new length.
        unsafe { leaves.set_len(last) };
        let Ok(mut k) = KBox::new(
            MassRet {
                rp: KpKretprobe::new(),
                entries: AtomicU64::new(0),
                returns: AtomicU64::new(0),
            },
            GFP_KERNEL,
        ) else {
            break;
        };
        k.rp.kp.addr = s as *mut _;
        k.rp.entry_handler = Some(mass_entry);
        k.rp.handler = Some(mass_return);
        k.rp.maxactive = 8;
        // SAFETY: unregistered below before the box goes.
        if unsafe { kp::kp_register_kretprobe(&mut k.rp) } != 0 {
            krefused += 1;
            continue;
        }
        // Within the reserved capacity: cannot fail.
        if !funcs_hit.contains(&s) {
            let _ = funcs_hit.push(s, GFP_KERNEL);
        }
        let _ = spans.push(
            Span::new(&region, k.rp.kp.addr as usize, s + size),
            GFP_KERNEL,
        );
        let _ = krets.push(k, GFP_KERNEL);
    }
    t.info(format_args!(
        "{} kretprobes on leaf functions after {} tries ({} refused); {} entry sites called directly",
        krets.len(),
        kattempts,
        krefused,
        kp::stats().ftrace_direct
    ));
    kp_expect_eq!(t, krets.len(), KRETPROBES);

    // The workload, on every CPU.
    ROUNDS.store(0, Ordering::SeqCst);
    let deadline = now_ns() + WORKLOAD_NS;
    let mut workers = KVec::new();
    // SAFETY: a plain read of the kernel's online CPU count.
    let cpus = unsafe {
        core::ptr::read_volatile(core::ptr::addr_of!(bindings::__num_online_cpus.counter))
    } as u32;
    for cpu in 0..cpus {
        match Worker::start(work, deadline as usize, Some(cpu)) {
            Ok(w) => {
                let _ = workers.push(w, GFP_KERNEL);
            }
            Err(_) => kp_expect!(t, false, "cannot start a workload thread"),
        }
    }
    // Which probes were ever jump-optimized (the optimizer may also take a
    // jump down again before the end).
    let seen_jumped =
        |spans: &mut KVec<Span>, probes: &KVec<KBox<Mass>>, krets: &KVec<KBox<MassRet>>| {
            for (sp, m) in spans.iter_mut().zip(probes.iter()) {
                if m.kp.flags & kp::KP_FLAG_OPTIMIZED != 0 {
                    sp.jumped();
                }
            }
            for (sp, k) in spans.iter_mut().skip(probes.len()).zip(krets.iter()) {
                if k.rp.kp.flags & kp::KP_FLAG_OPTIMIZED != 0 {
                    sp.jumped();
                }
            }
        };
    while now_ns() < deadline {
        // SAFETY: process context.
        unsafe { bindings::msleep(200) };
        seen_jumped(&mut spans, &probes, &krets);
    }
    drop(workers);
    let hits: u64 = probes.iter().map(|m| m.hits.load(Ordering::SeqCst)).sum();
    let hit_probes = probes
        .iter()
        .filter(|m| m.hits.load(Ordering::SeqCst) > 0)
        .count();
    let missed: usize = probes.iter().map(|m| m.kp.nmissed).sum();
    let optimized = probes
        .iter()
        .filter(|m| m.kp.flags & kp::KP_FLAG_OPTIMIZED != 0)
        .count();
    t.info(format_args!(
        "{} workload rounds on {} CPUs; kprobes: {} hits on {} of them, {} missed, {} jump-optimized",
        ROUNDS.load(Ordering::SeqCst),
        cpus,
        hits,
        hit_probes,
        missed,
        optimized
    ));
    kp_expect!(t, ROUNDS.load(Ordering::SeqCst) > 0);
    kp_expect!(t, hits > 0);

    // Kretprobes: no new entries, then every tracked call's return.
    for k in krets.iter_mut() {
        kp_expect_eq!(t, disable(&mut k.rp.kp), 0);
    }
    let drained = |krets: &KVec<KBox<MassRet>>| {
        krets
            .iter()
            .all(|k| k.entries.load(Ordering::SeqCst) == k.returns.load(Ordering::SeqCst))
    };
    let mut waited = 0;
    while !drained(&krets) && waited < 10_000 {
        // SAFETY: process context.
        unsafe { bindings::msleep(10) };
        waited += 10;
    }
    let (entries, returns): (u64, u64) = krets.iter().fold((0, 0), |(e, r), k| {
        (
            e + k.entries.load(Ordering::SeqCst),
            r + k.returns.load(Ordering::SeqCst),
        )
    });
    let kmissed: i64 = krets.iter().map(|k| i64::from(k.rp.nmissed)).sum();
    t.info(format_args!(
        "kretprobes: {} entries, {} returns, {} missed (pool empty), drained after {} ms",
        entries, returns, kmissed, waited
    ));
    kp_expect!(t, drained(&krets));
    kp_expect!(t, entries > 0);

    // What each probe could have written: a jump covers 5 bytes.
    seen_jumped(&mut spans, &probes, &krets);
    t.info(format_args!(
        "covered: {} functions, {} instructions ({} kprobes, {} kretprobe entries)",
        funcs_hit.len(),
        spans.len(),
        probes.len(),
        krets.len()
    ));

    // Everything off; from now on no handler may run.
    // SAFETY: every pointer is a registered probe of `probes`.
    unsafe { kp::kp_unregister_kprobes(ptrs.as_mut_ptr(), ptrs.len() as c_int) };
    for k in krets.iter_mut() {
        // SAFETY: registered above.
        unsafe { kp::kp_unregister_kretprobe(&mut k.rp) };
    }
    AFTER.store(true, Ordering::SeqCst);
    LATE_CALLS.store(0, Ordering::SeqCst);
    work(0);
    work(0);
    crate::kp_random::workload();
    AFTER.store(false, Ordering::SeqCst);
    kp_expect_eq!(t, LATE_CALLS.load(Ordering::SeqCst), 0);
    kp_expect!(t, probes.iter().all(|m| crate::util::cleared(&m.kp)));

    // Every byte a probe could have written as it was (entry sites parked
    // after their last probe went are released first).
    let parked = kp::stats().ftrace_parked;
    t.info(format_args!(
        "{} parked ftrace sites, {} released",
        parked,
        kp::ftrace_release()
    ));
    let (mut compared, mut differing) = (0, 0);
    for sp in spans.iter() {
        let before = region.text_of(sp.addr, sp.len);
        let Some(after) = read_text(sp.addr, sp.len) else {
            kp_expect!(t, false, "cannot read the text at {:#x} again", sp.addr);
            continue;
        };
        compared += before.len();
        if before != &after[..] {
            differing += 1;
            t.info(format_args!(
                "{:#x}: {} bytes differ from before the probe",
                sp.addr, sp.len
            ));
        }
    }
    t.info(format_args!(
        "{} bytes of text under {} probes compared ({} bytes of text drawn from), {} probes' differ",
        compared,
        spans.len(),
        region_len,
        differing
    ));
    kp_expect_eq!(t, differing, 0);

    // The engine holds what it held before (slots waiting for every task
    // to leave them aside).
    let now = kp::stats();
    t.info(format_args!(
        "engine after unregistration: {} probes, {} points, {} slots, {} kretprobe \
         instances (before: {}, {}, {}, {})",
        now.probes,
        now.points,
        now.slots,
        now.kretprobe_instances,
        base.probes,
        base.points,
        base.slots,
        base.kretprobe_instances
    ));
    kp_expect_eq!(t, now.probes, base.probes);
    kp_expect_eq!(t, now.points, base.points);
    kp_expect_eq!(t, now.slots, base.slots);
    kp_expect_eq!(t, now.kretprobe_instances, base.kretprobe_instances);
}

kunit_suite!(kp_mass, "kp_mass", [mass_probes_under_workload]);
