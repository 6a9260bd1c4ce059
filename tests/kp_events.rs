// SPDX-License-Identifier: GPL-2.0

//! `kp_events`: probe events defined from code (`kp::event_command`) and
//! consumed by perf: a `PERF_TYPE_TRACEPOINT` counter on our event's id
//! counts exactly the calls made, removal is refused while perf holds the
//! event, and the API's errors are the control file's. (The control file,
//! tracefs and the trace buffer are checked from the guest shell, see
//! `qemu/guest-lib.sh` `run_events`.)

use crate::kp;
use crate::kunit::Test;
use crate::targets::args_expected;

extern "C" {
    /// `tests/helpers.c`: `kp_kunit_args` in C, with an ftrace site.
    fn kp_test_c_args(a: u64, b: u64, c: u64) -> u64;
    /// `tests/helpers.c`: `value / 3 + 1`, with an ftrace site.
    fn kp_test_c_target(value: i32) -> i32;
}
use core::ffi::c_void;
use core::hint::black_box;
use kernel::bindings;
use kernel::error::code::{EBUSY, EEXIST, EINVAL, ENOENT};

extern "C" {
    fn perf_event_create_kernel_counter(
        attr: *mut c_void,
        cpu: i32,
        task: *mut c_void,
        callback: *const c_void,
        context: *mut c_void,
    ) -> *mut c_void;
    fn perf_event_read_value(event: *mut c_void, enabled: *mut u64, running: *mut u64) -> u64;
    fn perf_event_release_kernel(event: *mut c_void) -> i32;
}

/// `PERF_TYPE_TRACEPOINT`.
const PERF_TYPE_TRACEPOINT: u32 = 2;
/// `struct perf_event_attr` of 6.12 (`PERF_ATTR_SIZE_VER8`), as words.
const ATTR_WORDS: usize = 17;

/// A counting perf event on trace event `id` for the current task.
struct Counter(*mut c_void);

impl Counter {
    fn new(id: u32) -> Option<Self> {
        let mut attr = [0u64; ATTR_WORDS];
        // type (u32) and size (u32), then config: counting, enabled.
        attr[0] = u64::from(PERF_TYPE_TRACEPOINT) | ((ATTR_WORDS as u64 * 8) << 32);
        attr[1] = u64::from(id);
        // SAFETY: a zeroed attr of the kernel's size with type/size/config
        // set; the current task is live; no overflow callback.
        let ev = unsafe {
            perf_event_create_kernel_counter(
                attr.as_mut_ptr().cast(),
                -1,
                bindings::get_current().cast(),
                core::ptr::null(),
                core::ptr::null_mut(),
            )
        };
        let bad = ev.is_null() || (ev as isize) < 0 && (ev as isize) > -4096;
        (!bad).then_some(Counter(ev))
    }

    fn count(&self) -> u64 {
        let (mut enabled, mut running) = (0, 0);
        // SAFETY: a live counter of ours.
        unsafe { perf_event_read_value(self.0, &mut enabled, &mut running) }
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        // SAFETY: created in `new`, released once.
        unsafe { perf_event_release_kernel(self.0) };
    }
}

fn events_perf_counts_hits(t: &mut Test) {
    let r = kp::event_command(c"p:kp_kunit/ev kp_test_c_args a=$arg1 b=$arg2 c=$comm");
    kp_expect_eq!(t, r, Ok(()));
    let r = kp::event_command(c"r:kp_kunit/rev kp_test_c_args ret=$retval");
    kp_expect_eq!(t, r, Ok(()));
    let (Ok(id), Ok(rid)) = (
        kp::event_id(Some(c"kp_kunit"), c"ev"),
        kp::event_id(Some(c"kp_kunit"), c"rev"),
    ) else {
        kp_expect!(t, false, "no event ids");
        return;
    };
    kp_expect!(t, id != rid && id > 0, "ids {} {}", id, rid);
    let (Some(c), Some(rc)) = (Counter::new(id), Counter::new(rid)) else {
        kp_expect!(t, false, "perf_event_create_kernel_counter failed");
        let _ = kp::event_command(c"-:kp_kunit/ev");
        let _ = kp::event_command(c"-:kp_kunit/rev");
        return;
    };
    kp_expect_eq!(t, c.count(), 0);
    for i in 0..7u64 {
        // SAFETY: a plain C function.
        let v = unsafe { kp_test_c_args(black_box(i), 2, 3) };
        kp_expect_eq!(t, v, args_expected(i, 2, 3));
    }
    kp_expect_eq!(t, c.count(), 7, "entry event records seen by perf");
    kp_expect_eq!(t, rc.count(), 7, "return event records seen by perf");
    // perf holds the events: they cannot go.
    kp_expect_eq!(t, kp::event_command(c"-:kp_kunit/ev"), Err(EBUSY));
    drop(c);
    drop(rc);
    kp_expect_eq!(t, kp::event_command(c"-:kp_kunit/ev"), Ok(()));
    kp_expect_eq!(t, kp::event_command(c"-:kp_kunit/rev"), Ok(()));
    kp_expect_eq!(t, kp::event_id(Some(c"kp_kunit"), c"ev"), Err(ENOENT));
}

/// An event past the entry's ftrace site, served by a breakpoint (the
/// entry events above take the ftrace path): perf counts each hit.
fn events_mid_function_breakpoint(t: &mut Test) {
    // The first instruction after the ftrace call site (x86_64: the 5-byte
    // NOP; arm64: the two patchable-entry instructions), both past the
    // landing pad for indirect calls if the kernel has one (ENDBR, BTI).
    let f = crate::targets::addr_of(kp_test_c_args as *const ());
    let off = crate::util::body(f) - f + if cfg!(CONFIG_X86_64) { 5 } else { 8 };
    let Ok(line) =
        kernel::str::CString::try_from_fmt(kernel::fmt!("p:kp_kunit/mid kp_test_c_args+{}", off))
    else {
        kp_expect!(t, false, "no memory");
        return;
    };
    // SAFETY: `line` is NUL-terminated and outlives the borrow.
    let line = unsafe { core::ffi::CStr::from_ptr(line.as_char_ptr().cast()) };
    kp_expect_eq!(t, kp::event_command(line), Ok(()));
    let Ok(id) = kp::event_id(Some(c"kp_kunit"), c"mid") else {
        kp_expect!(t, false, "no event id");
        return;
    };
    let Some(c) = Counter::new(id) else {
        kp_expect!(t, false, "perf_event_create_kernel_counter failed");
        let _ = kp::event_command(c"-:kp_kunit/mid");
        return;
    };
    for i in 0..5u64 {
        // SAFETY: a plain C function.
        let v = unsafe { kp_test_c_args(black_box(i), 7, 8) };
        kp_expect_eq!(t, v, args_expected(i, 7, 8));
    }
    kp_expect_eq!(t, c.count(), 5, "mid-function event records seen by perf");
    drop(c);
    kp_expect_eq!(t, kp::event_command(c"-:kp_kunit/mid"), Ok(()));
}

fn events_api_errors(t: &mut Test) {
    kp_expect_eq!(
        t,
        kp::event_command(c"p:kp_kunit/e2 kp_test_c_args a=%nosuchreg"),
        Err(EINVAL)
    );
    kp_expect_eq!(
        t,
        kp::event_command(c"p:kp_kunit/e2 kp_no_such_function_xyz"),
        Err(EINVAL)
    );
    kp_expect_eq!(
        t,
        kp::event_command(c"-:kp_kunit/never_defined"),
        Err(ENOENT)
    );
    kp_expect_eq!(t, kp::event_command(c"# only a comment"), Ok(()));
    // A function without an ftrace call site (every Rust function) is
    // refused, as the kernel's kprobe events refuse notrace functions.
    kp_expect_eq!(
        t,
        kp::event_command(c"p:kp_kunit/e4 kp_kunit_args"),
        Err(EINVAL)
    );
    kp_expect_eq!(t, kp::event_id(Some(c"kp_kunit"), c"e4"), Err(ENOENT));
    kp_expect_eq!(
        t,
        kp::event_command(c"p:kp_kunit/e3 kp_test_c_args"),
        Ok(())
    );
    kp_expect_eq!(
        t,
        kp::event_command(c"p:kp_kunit/e3 kp_test_c_args"),
        Err(EEXIST)
    );
    // Nothing was lost by the failures: e3 is there and works once.
    kp_expect!(t, kp::event_id(Some(c"kp_kunit"), c"e3").is_ok());
    kp_expect_eq!(t, kp::event_command(c"-:kp_kunit/e3"), Ok(()));
    kp_expect_eq!(t, kp::event_id(None, c"e3"), Err(ENOENT));
}

/// Calls both targets: `args` times `kp_test_c_args`, `target` times
/// `kp_test_c_target`.
fn call_targets(t: &mut Test, args: u64, target: i32) {
    for i in 0..args {
        // SAFETY: a plain C function.
        let v = unsafe { kp_test_c_args(black_box(i), 1, 2) };
        kp_expect_eq!(t, v, args_expected(i, 1, 2));
    }
    for i in 0..target {
        // SAFETY: a plain C function.
        let v = unsafe { kp_test_c_target(black_box(i)) };
        kp_expect_eq!(t, v, i / 3 + 1);
    }
}

/// One event on several places (a second `p:GRP/EVENT` line appends a
/// site, as `perf probe` does for each inlined copy of a function): the
/// kernel's refusals of a different kind, different arguments and the
/// same site again; perf counts the hits of every site; a site appended
/// while perf has the event is armed at once; a site goes alone (even
/// while enabled), the whole event only when nothing holds it, and stays
/// whole when refused; `-:GRP/` removes every event of a group.
fn events_multi_site(t: &mut Test) {
    let base = kp::stats().probes;
    kp_expect_eq!(
        t,
        kp::event_command(c"p:kp_kunit/ms kp_test_c_args a=$arg1:u32"),
        Ok(())
    );
    kp_expect_eq!(
        t,
        kp::event_command(c"p:kp_kunit/ms kp_test_c_target a=$arg1:u32"),
        Ok(())
    );
    for refused in [
        c"r:kp_kunit/ms kp_test_c_target",
        c"p:kp_kunit/ms kp_test_c_target a=$arg1:u64",
        c"p:kp_kunit/ms kp_test_c_target b=$arg1:u32",
        c"p:kp_kunit/ms kp_test_c_target",
        c"p:kp_kunit/ms kp_test_c_target a=$arg1:u32 b=$arg2",
        c"p:kp_kunit/ms kp_test_c_target a=$arg1:u32",
    ] {
        kp_expect_eq!(t, kp::event_command(refused), Err(EEXIST), "{:?}", refused);
    }
    kp_expect_eq!(t, kp::stats().probes, base + 2, "one probe per site");
    let Ok(id) = kp::event_id(Some(c"kp_kunit"), c"ms") else {
        kp_expect!(t, false, "no event id");
        return;
    };
    let Some(c) = Counter::new(id) else {
        kp_expect!(t, false, "perf_event_create_kernel_counter failed");
        let _ = kp::event_command(c"-:kp_kunit/ms");
        return;
    };
    call_targets(t, 3, 4);
    kp_expect_eq!(t, c.count(), 7, "hits of both sites");
    // Appended while enabled: armed at once (a second site on one
    // function, with another program for the same field).
    kp_expect_eq!(
        t,
        kp::event_command(c"p:kp_kunit/ms kp_test_c_target a=$arg2:u32"),
        Ok(())
    );
    call_targets(t, 1, 2);
    kp_expect_eq!(
        t,
        c.count(),
        7 + 1 + 2 * 2,
        "the appended site counts at once"
    );
    // One site goes while perf holds the event; the others stay armed.
    kp_expect_eq!(
        t,
        kp::event_command(c"-:kp_kunit/ms kp_test_c_target a=$arg2:u32"),
        Ok(())
    );
    kp_expect_eq!(t, kp::stats().probes, base + 2);
    call_targets(t, 1, 1);
    kp_expect_eq!(t, c.count(), 12 + 2, "one hit per call again");
    // The whole event cannot go while perf holds it, and stays whole.
    kp_expect_eq!(t, kp::event_command(c"-:kp_kunit/ms"), Err(EBUSY));
    kp_expect_eq!(t, kp::stats().probes, base + 2);
    call_targets(t, 1, 1);
    kp_expect_eq!(t, c.count(), 14 + 2, "both sites after the refused removal");
    drop(c);
    // A site by its location; the event stays with the other one.
    kp_expect_eq!(
        t,
        kp::event_command(c"-:kp_kunit/ms kp_test_c_args"),
        Ok(())
    );
    kp_expect_eq!(
        t,
        kp::event_command(c"-:kp_kunit/ms kp_test_c_args"),
        Err(ENOENT)
    );
    kp_expect_eq!(
        t,
        kp::event_command(c"-:kp_kunit/ms kp_test_c_target a=$arg2:u32"),
        Err(ENOENT),
        "a site that is gone"
    );
    kp_expect!(t, kp::event_id(Some(c"kp_kunit"), c"ms").is_ok());
    kp_expect_eq!(t, kp::stats().probes, base + 1);
    // The last site takes the event with it.
    kp_expect_eq!(
        t,
        kp::event_command(c"-:kp_kunit/ms kp_test_c_target a=$arg1:u32"),
        Ok(())
    );
    kp_expect_eq!(t, kp::event_id(Some(c"kp_kunit"), c"ms"), Err(ENOENT));
    // `-:GRP/`: every event of the group, and nothing else.
    for l in [
        c"p:kp_kunit_g/a kp_test_c_args",
        c"r:kp_kunit_g/b kp_test_c_target",
        c"p:kp_kunit/keep kp_test_c_target",
    ] {
        kp_expect_eq!(t, kp::event_command(l), Ok(()), "{:?}", l);
    }
    kp_expect_eq!(t, kp::event_command(c"-:kp_kunit_g/"), Ok(()));
    kp_expect_eq!(t, kp::event_id(Some(c"kp_kunit_g"), c"a"), Err(ENOENT));
    kp_expect_eq!(t, kp::event_id(Some(c"kp_kunit_g"), c"b"), Err(ENOENT));
    kp_expect_eq!(t, kp::event_command(c"-:kp_kunit_g/"), Err(ENOENT));
    kp_expect_eq!(t, kp::event_command(c"-:"), Err(EINVAL));
    kp_expect_eq!(t, kp::event_command(c"-:kp_kunit/keep"), Ok(()));
    kp_expect_eq!(t, kp::stats().probes, base);
}

extern "C" {
    /// `tests/helpers.c`: calls the kernel's `on_entry` and `injectable`
    /// override checks on event `sys/ev`: bit 0 and bit 1 their answers,
    /// or -ENOENT.
    fn kp_test_override_checks(
        sys: *const core::ffi::c_char,
        ev: *const core::ffi::c_char,
        on_entry: usize,
        injectable: usize,
    ) -> i32;
}

/// A `bpf_override_return()` program is refused on our events, quietly:
/// before attaching one to a kprobe event, the kernel asks
/// `trace_kprobe_on_func_entry()` and `trace_kprobe_error_injectable()`
/// about the event's first probe, which on ours is a zeroed stand-in (an
/// event without one made them warn). Both are asked here as
/// `perf_event_attach_bpf_prog()` asks them (no test kernel has
/// `CONFIG_BPF_KPROBE_OVERRIDE`, without which no such program loads);
/// the splat scan fails the run on a warning.
fn events_override_refused(t: &mut Test) {
    if !cfg!(CONFIG_KPROBE_EVENTS) {
        t.skip("the kernel has no kprobe events: its override checks are stubs that say no");
        return;
    }
    let look = |n: &core::ffi::CStr| {
        // SAFETY: a NUL-terminated name.
        unsafe { kp::kp_lookup_symbol(n.as_ptr().cast(), core::ptr::null_mut()) }
    };
    let (on_entry, injectable) = (
        look(c"trace_kprobe_on_func_entry"),
        look(c"trace_kprobe_error_injectable"),
    );
    if on_entry == 0 || injectable == 0 {
        t.skip("trace_kprobe_on_func_entry or trace_kprobe_error_injectable not found");
        return;
    }
    kp_expect_eq!(
        t,
        kp::event_command(c"p:kp_kunit/ov kp_test_c_args"),
        Ok(())
    );
    // SAFETY: NUL-terminated names; the kernel's functions of the type
    // the helper calls them with.
    let r = unsafe {
        kp_test_override_checks(c"kp_kunit".as_ptr(), c"ov".as_ptr(), on_entry, injectable)
    };
    kp_expect_eq!(
        t,
        r,
        0,
        "override checks (bit 0: on entry, bit 1: injectable)"
    );
    kp_expect_eq!(t, kp::event_command(c"-:kp_kunit/ov"), Ok(()));
}

kunit_suite!(
    kp_events,
    "kp_events",
    [
        events_perf_counts_hits,
        events_mid_function_breakpoint,
        events_api_errors,
        events_multi_site,
        events_override_refused
    ]
);
