// SPDX-License-Identifier: GPL-2.0

//! `kp_random`: 200 probes on random instructions of real kernel functions,
//! armed while user space and kernel threads run, then removed.
//!
//! Functions are drawn from all of the kernel's text (`_stext` ..
//! `_etext`, walked with `sprint_symbol`, symbol by symbol); instructions
//! are picked with a seeded PRNG (the seed is printed in the KTAP output).
//! The engine decides what can be probed: refusals (blacklist,
//! exception-table sites, unsupported instructions, someone else's
//! breakpoint) are counted by errno, and any other errno fails. Every probe
//! that registers must leave the system healthy; the guest log scan catches
//! any splat. The log gives how many functions and instructions a run
//! tried. (`kp_mass` draws from the same text.)

use crate::kp::KpKprobe;
use crate::kunit::Test;
use crate::util::{register, run, unregister};
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::bindings;
use kernel::ffi::c_int;
use kernel::prelude::*;

const WANT: usize = 200;

static HITS: AtomicU64 = AtomicU64::new(0);

/// Counts hits.
///
/// # Safety
///
/// Called by the engine.
unsafe extern "C" fn count(_p: *mut KpKprobe, _r: *mut bindings::pt_regs) -> c_int {
    HITS.fetch_add(1, Ordering::Relaxed);
    0
}

pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// `(start, size)` of the function containing `addr`, via `sprint_symbol`.
pub(crate) fn function_at(addr: usize) -> Option<(usize, usize)> {
    symbol_at(addr).map(|(s, size, _)| (s, size))
}

/// `(start, size, preamble)` of the symbol containing `addr`; `preamble`:
/// it is a `__cfi_` or `__pfx_` symbol, the padding and kCFI type hash the
/// compiler puts before a function (not code; the engine refuses it, as the
/// kernel's kprobes do).
fn symbol_at(addr: usize) -> Option<(usize, usize, bool)> {
    let sym = crate::util::Sym::of(addr);
    let s = crate::ksym::parse_sprint_symbol(sym.bytes())?;
    let preamble = s.name.starts_with(b"__cfi_") || s.name.starts_with(b"__pfx_");
    Some((
        addr.checked_sub(s.offset as usize)?,
        s.size as usize,
        preamble,
    ))
}

/// A random instruction boundary inside `[start, start + size)`, whose
/// bytes as they were before this test placed probes are `text` (x86_64
/// decodes from the start; the live text holds the test's breakpoints).
pub(crate) fn pick(rng: &mut Rng, start: usize, size: usize, text: &[u8]) -> Option<usize> {
    #[cfg(CONFIG_X86_64)]
    {
        // Decode from the start with this module's copy of the decoder.
        let mut off = 0;
        let mut offs = [0usize; 64];
        let mut n = 0;
        while off < size.min(text.len()) && n < offs.len() {
            let mut b = [0u8; crate::decode::MAX_INSN_LEN];
            let k = (text.len() - off).min(b.len());
            b[..k].copy_from_slice(&text[off..off + k]);
            let Ok(i) = crate::decode::decode(&b) else {
                break;
            };
            offs[n] = start + off;
            n += 1;
            off += i.len as usize;
        }
        (n > 0).then(|| offs[(rng.next() % n as u64) as usize])
    }
    #[cfg(CONFIG_ARM64)]
    {
        let _ = text;
        (size >= 4).then(|| start + (rng.next() % (size as u64 / 4)) as usize * 4)
    }
}

/// Reads `len` bytes of text at `addr`; None if not all readable.
pub(crate) fn read_text(addr: usize, len: usize) -> Option<KVVec<u8>> {
    let mut v = KVVec::with_capacity(len, GFP_KERNEL).ok()?;
    v.extend_with(len, 0u8, GFP_KERNEL).ok()?;
    // SAFETY: a nofault read into our buffer of `len` bytes.
    let r =
        unsafe { bindings::copy_from_kernel_nofault(v.as_mut_ptr().cast(), addr as *const _, len) };
    (r == 0).then_some(v)
}

/// The candidate functions of the random suites: the
/// functions of the kernel text (not the kCFI/padding preambles before
/// them), and their text as it was when walked.
pub(crate) struct Region {
    /// `(start, size)` of each function, in address order.
    pub(crate) funcs: KVec<(usize, usize)>,
    /// Where the first function starts.
    pub(crate) start: usize,
    /// The bytes of `[start, end of the last function)`.
    pub(crate) text: KVVec<u8>,
}

impl Region {
    /// Every function of the core kernel's text (`_stext` .. `_etext`),
    /// walked symbol by symbol, and its text as it was when walked. None
    /// if the bounds are unknown or nothing could be read.
    pub(crate) fn kernel_text() -> Option<Self> {
        let sym = |n: &core::ffi::CStr| crate::kp::lookup_symbol(n).map(|s| s.addr);
        let (stext, etext) = (sym(c"_stext")?, sym(c"_etext")?);
        let mut funcs = KVec::new();
        let mut at = stext;
        while at < etext {
            let Some((s, size, preamble)) = symbol_at(at) else {
                // No symbol here (alignment padding): the next word.
                at += 16;
                continue;
            };
            if size == 0 || s + size <= at {
                at += 16;
                continue;
            }
            // Preambles are not functions: their refusal is kp_smoke's.
            if !preamble && funcs.push((s, size), GFP_KERNEL).is_err() {
                break;
            }
            at = s + size;
        }
        let start = funcs.first()?.0;
        let end = funcs.last().map(|&(s, n)| s + n)?;
        let text = read_text(start, end - start)?;
        Some(Region { funcs, start, text })
    }

    /// The original bytes of the function `[s, s + size)` of the region.
    pub(crate) fn text_of(&self, s: usize, size: usize) -> &[u8] {
        s.checked_sub(self.start)
            .and_then(|off| self.text.get(off..off.checked_add(size)?))
            .unwrap_or(&[])
    }

    /// A random function of the region ((0, 0) if it had none).
    pub(crate) fn any(&self, rng: &mut Rng) -> (usize, usize) {
        let i = rng.next().checked_rem(self.funcs.len() as u64).unwrap_or(0);
        self.funcs.get(i as usize).copied().unwrap_or((0, 0))
    }
}

/// Which documented refusal a registration error is: 0 EINVAL (not text,
/// blacklisted, ...), 1 EILSEQ (not an instruction boundary), 2 EOPNOTSUPP
/// (an instruction the backend cannot probe), 3 EBUSY (someone else's
/// patch), 4 anything else (undocumented: a test failure).
pub(crate) fn refusal_kind(e: c_int) -> usize {
    match e {
        e if e == crate::util::EINVAL => 0,
        e if e == crate::util::EILSEQ => 1,
        e if e == -(bindings::EOPNOTSUPP as c_int) => 2,
        e if e == -(bindings::EBUSY as c_int) => 3,
        _ => 4,
    }
}

pub(crate) fn workload() {
    for _ in 0..3 {
        run(c"/bin/ls", &[c"-l", c"/proc/self/"]);
        run(c"/bin/cat", &[c"/proc/meminfo"]);
        run(
            c"/bin/sh",
            &[
                c"-c",
                c"echo x > /tmp/kp_random; cat /tmp/kp_random; sleep 0",
            ],
        );
        // SAFETY: process context.
        unsafe { bindings::msleep(20) };
    }
}

/// The seed in `/tmp/kp_random_seed` (hex), if the guest job wrote one.
fn seed_from_file() -> Option<u64> {
    let path = c"/tmp/kp_random_seed";
    // SAFETY: a NUL-terminated path; O_RDONLY.
    let f = unsafe { bindings::filp_open(path.as_ptr().cast(), 0, 0) };
    if (f as isize) < 0 && (f as isize) > -4096 {
        return None;
    }
    let mut buf = [0u8; 32];
    let mut pos: bindings::loff_t = 0;
    // SAFETY: `f` is open; the destination is our buffer.
    let n = unsafe { bindings::kernel_read(f, buf.as_mut_ptr().cast(), buf.len(), &mut pos) };
    // SAFETY: opened above.
    unsafe { bindings::filp_close(f, core::ptr::null_mut()) };
    let text = buf.get(..usize::try_from(n).ok()?)?;
    let hex = text.strip_prefix(b"0x").unwrap_or(text);
    let mut v = 0u64;
    for &c in hex.iter().take_while(|c| c.is_ascii_hexdigit()) {
        v = v.checked_mul(16)? + u64::from((c as char).to_digit(16)?);
    }
    Some(v)
}

/// The PRNG seed: `kp_random_seed` from the kernel command line (the guest
/// job writes it to a file), else random; odd.
pub(crate) fn seed() -> u64 {
    // SAFETY: plain call.
    seed_from_file().unwrap_or_else(|| u64::from(unsafe { bindings::get_random_u32() })) | 1
}

fn random_kernel_instructions(t: &mut Test) {
    let seed = seed();
    t.info(format_args!(
        "seed {:#x} (replay: KP_CMDLINE=kp_random_seed={:#x})",
        seed, seed
    ));
    let mut rng = Rng(seed);
    // Every function of the kernel's text, walked symbol by symbol.
    let Some(region) = Region::kernel_text() else {
        kp_expect!(t, false, "cannot walk or read the kernel's text");
        return;
    };
    let funcs = &region.funcs;
    t.info(format_args!(
        "{} candidate functions, {} bytes of text",
        funcs.len(),
        region.text.len()
    ));
    kp_expect!(t, funcs.len() > 5000);
    let mut probes: KVec<KBox<KpKprobe>> = KVec::new();
    // EINVAL, EILSEQ, EOPNOTSUPP, EBUSY, other
    let mut refused = [0usize; 5];
    let mut tried: KVec<usize> = KVec::new();
    let mut attempts = 0;
    HITS.store(0, Ordering::SeqCst);
    while probes.len() < WANT && attempts < 20 * WANT && !funcs.is_empty() {
        attempts += 1;
        let (s, size) = region.any(&mut rng);
        let Some(addr) = pick(&mut rng, s, size, region.text_of(s, size)) else {
            continue;
        };
        let Ok(mut p) = KBox::new(KpKprobe::new(), GFP_KERNEL) else {
            break;
        };
        if !tried.contains(&s) {
            let _ = tried.push(s, GFP_KERNEL);
        }
        // Logged before registering, so that a hang names its culprit.
        kernel::pr_info!("kp_random: trying {:#x}\n", addr);
        p.addr = addr as *mut _;
        p.pre_handler = Some(count);
        match register(&mut p) {
            0 => {
                let sym = crate::util::Sym::of(addr);
                t.info(format_args!("probe {}: {}", probes.len(), sym.as_str()));
                if probes.push(p, GFP_KERNEL).is_err() {
                    break;
                }
            }
            e => {
                let k = refusal_kind(e);
                refused[k] += 1;
                if k == 4 {
                    t.info(format_args!("{:#x}: unexpected error {}", addr, e));
                }
            }
        }
    }
    t.info(format_args!(
        "{} probes after {} attempts in {} functions; refused: {} EINVAL, {} EILSEQ, \
         {} EOPNOTSUPP, {} EBUSY, {} other",
        probes.len(),
        attempts,
        tried.len(),
        refused[0],
        refused[1],
        refused[2],
        refused[3],
        refused[4]
    ));
    kp_expect_eq!(t, probes.len(), WANT);
    // Every refusal is one of the documented ones (each logged its reason).
    kp_expect_eq!(t, refused[4], 0);
    workload();
    // Let the settled probes be jump-optimized where that is safe, then
    // run the workload again through the jumps.
    // SAFETY: process context.
    unsafe { bindings::msleep(500) };
    let optimized = probes
        .iter()
        .filter(|p| p.flags & crate::kp::KP_FLAG_OPTIMIZED != 0)
        .count();
    t.info(format_args!(
        "{} of {} probes jump-optimized",
        optimized,
        probes.len()
    ));
    // arm64: a `B` reaches +-128 MiB; where modules are placed anywhere in
    // a 2 GiB region (RANDOMIZE_MODULE_REGION_FULL, as on arm64-hardened)
    // the engine's slots can be out of reach of the probed kernel text,
    // whose probes keep their BRK. Every optimized probe is in reach of the
    // slot area (its 256 KiB, either end).
    let slots = crate::kp::lookup_symbol(c"kp_insn_slots").map_or(0, |s| s.addr);
    let in_reach = |a: usize| {
        cfg!(CONFIG_X86_64)
            || (a.abs_diff(slots) < (1 << 27) - (1 << 19)
                && a.abs_diff(slots + (1 << 18)) < (1 << 27) - (1 << 19))
    };
    let reachable = probes.iter().filter(|p| in_reach(p.addr as usize)).count();
    let stray = probes
        .iter()
        .filter(|p| p.flags & crate::kp::KP_FLAG_OPTIMIZED != 0 && !in_reach(p.addr as usize))
        .count();
    t.info(format_args!(
        "{} of them within a jump's reach of the engine's slots",
        reachable
    ));
    kp_expect!(
        t,
        slots != 0 || cfg!(CONFIG_X86_64),
        "kp_insn_slots not found"
    );
    kp_expect_eq!(t, stray, 0, "optimized out of reach");
    if reachable >= 20 {
        kp_expect!(t, optimized > 0, "no probe jump-optimized");
    } else {
        kp_expect_eq!(t, optimized, 0);
    }
    workload();
    let mut missed = 0;
    for p in probes.iter_mut() {
        missed += p.nmissed;
        unregister(p);
        kp_expect!(t, crate::util::cleared(p));
    }
    t.info(format_args!(
        "{} hits, {} missed while armed",
        HITS.load(Ordering::SeqCst),
        missed
    ));
    kp_expect!(t, HITS.load(Ordering::SeqCst) > 0);
    // Still healthy afterwards.
    workload();
}

kunit_suite!(kp_random, "kp_random", [random_kernel_instructions]);
