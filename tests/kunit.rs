// SPDX-License-Identifier: GPL-2.0

//! A small KUnit front end for Rust test modules.
//!
//! [`kunit_suite!`] declares a real `struct kunit_suite` with its
//! `struct kunit_case` array and puts a pointer to it in the
//! `.kunit_test_suites` section, so the kernel's KUnit executor runs it when
//! the module loads (results as KTAP on the console). The kernel crate of 6.12
//! has no such macro.
//!
//! Cases are plain `fn(&mut Test)`; [`kp_expect!`] and [`kp_expect_eq!`] report
//! a failure in KUnit's format and mark the case failed without aborting it.

use kernel::bindings;
use kernel::ffi::c_char;

/// The running KUnit test case.
pub(crate) struct Test(*mut bindings::kunit);

impl Test {
    /// Wraps KUnit's test pointer.
    ///
    /// # Safety
    ///
    /// `t` is the `struct kunit` KUnit passed to the running case.
    pub(crate) unsafe fn new(t: *mut bindings::kunit) -> Self {
        Test(t)
    }

    /// Reports a failed expectation and marks the case failed.
    pub(crate) fn fail(&self, file: &str, line: u32, msg: core::fmt::Arguments<'_>) {
        kernel::kunit::err(format_args!(
            "    # {}:{}: EXPECTATION FAILED: {}\n",
            file, line, msg
        ));
        // SAFETY: `self.0` is the live test (see `new`); this is what the C
        // `kunit_set_failure()` inline does.
        unsafe {
            core::ptr::write_volatile(
                core::ptr::addr_of_mut!((*self.0).status),
                bindings::kunit_status_KUNIT_FAILURE,
            )
        };
    }

    /// Reports two values that should have been equal.
    pub(crate) fn fail_eq(
        &self,
        file: &str,
        line: u32,
        exprs: (&str, &str),
        a: &dyn core::fmt::Debug,
        b: &dyn core::fmt::Debug,
        ctx: Option<core::fmt::Arguments<'_>>,
    ) {
        let (ea, eb) = exprs;
        match ctx {
            Some(c) => self.fail(
                file,
                line,
                format_args!("{} == {}: {:?} != {:?} ({})", ea, eb, a, b, c),
            ),
            None => self.fail(
                file,
                line,
                format_args!("{} == {}: {:?} != {:?}", ea, eb, a, b),
            ),
        }
    }

    /// Marks the case skipped, with its reason (KTAP `# SKIP reason`): what
    /// the C `kunit_mark_skipped()` macro does.
    pub(crate) fn skip(&self, reason: &str) {
        // SAFETY: `self.0` is the live test (see `new`); the comment buffer
        // is written within its size and stays NUL-terminated.
        unsafe {
            let c = &mut (*self.0).status_comment;
            let n = reason.len().min(c.len() - 1);
            for (d, s) in c.iter_mut().zip(reason.bytes().take(n)) {
                *d = s as c_char;
            }
            c[n] = 0;
            core::ptr::write_volatile(
                core::ptr::addr_of_mut!((*self.0).status),
                bindings::kunit_status_KUNIT_SKIPPED,
            );
        }
    }

    /// Logs a diagnostic line into the KTAP stream.
    pub(crate) fn info(&self, msg: core::fmt::Arguments<'_>) {
        kernel::kunit::info(format_args!("    # {}\n", msg));
    }
}

/// Expects a condition to hold.
macro_rules! kp_expect {
    ($t:expr, $cond:expr) => {
        if !$cond {
            $t.fail(file!(), line!(), format_args!("{}", stringify!($cond)));
        }
    };
    ($t:expr, $cond:expr, $($arg:tt)+) => {
        if !$cond {
            $t.fail(file!(), line!(), format_args!($($arg)+));
        }
    };
}

/// Expects two values to be equal; prints both (and the optional context,
/// a format string with arguments) when not.
macro_rules! kp_expect_eq {
    ($t:expr, $a:expr, $b:expr $(, $($ctx:tt)+)?) => {{
        let (a, b) = (&$a, &$b);
        if *a != *b {
            $t.fail_eq(
                file!(),
                line!(),
                (stringify!($a), stringify!($b)),
                a,
                b,
                kp_context!($($($ctx)+)?),
            );
        }
    }};
}

/// The optional context of [`kp_expect_eq!`].
macro_rules! kp_context {
    () => {
        None
    };
    ($($ctx:tt)+) => {
        Some(format_args!($($ctx)+))
    };
}

/// A suite name as `struct kunit_suite` stores it.
pub(crate) const fn suite_name(s: &str) -> [c_char; 256] {
    let b = s.as_bytes();
    assert!(b.len() < 256);
    let mut out = [0 as c_char; 256];
    let mut i = 0;
    while i < b.len() {
        out[i] = b[i] as c_char;
        i += 1;
    }
    out
}

/// One `struct kunit_case`.
pub(crate) const fn case(
    name: &'static str,
    run: unsafe extern "C" fn(*mut bindings::kunit),
) -> bindings::kunit_case {
    bindings::kunit_case {
        run_case: Some(run),
        name: name.as_ptr().cast(),
        // SAFETY: all-zero is the C initialiser's value for the rest.
        ..unsafe { core::mem::zeroed() }
    }
}

/// Declares a KUnit suite: `kunit_suite!(ident, "suite_name", [case_fn, ...]);`
/// with each `case_fn: fn(&mut Test)`.
macro_rules! kunit_suite {
    ($suite:ident, $name:literal, [$($case:ident),+ $(,)?]) => {
        #[allow(non_snake_case, non_upper_case_globals)]
        mod $suite {
            use kernel::bindings;
            $(
                mod $case {
                    /// # Safety
                    ///
                    /// Called by KUnit with the running test.
                    pub(super) unsafe extern "C" fn run(t: *mut kernel::bindings::kunit) {
                        // SAFETY: KUnit passes the running test.
                        let mut t = unsafe { $crate::kunit::Test::new(t) };
                        super::super::$case(&mut t);
                    }
                }
            )+
            const N: usize = [$(stringify!($case)),+].len();
            static mut CASES: [bindings::kunit_case; N + 1] = [
                $($crate::kunit::case(concat!(stringify!($case), "\0"), $case::run),)+
                // SAFETY: the all-zero case terminates the array.
                unsafe { core::mem::zeroed() },
            ];
            static mut SUITE: bindings::kunit_suite = bindings::kunit_suite {
                name: $crate::kunit::suite_name($name),
                // Only the address is taken; KUnit owns the array from now on.
                test_cases: core::ptr::addr_of_mut!(CASES).cast(),
                // SAFETY: all-zero is the C initialiser's value for the rest.
                ..unsafe { core::mem::zeroed() }
            };
            #[used]
            #[link_section = ".kunit_test_suites"]
            static mut SUITE_PTR: *mut bindings::kunit_suite = core::ptr::addr_of_mut!(SUITE);
        }
    };
}
