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

kunit_suite!(
    kp_events,
    "kp_events",
    [
        events_perf_counts_hits,
        events_mid_function_breakpoint,
        events_api_errors
    ]
);
