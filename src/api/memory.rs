// SPDX-License-Identifier: GPL-2.0

//! What handlers read: registers by name ([`Regs`]), memory that never
//! faults ([`read_kernel`], [`read_kernel_str`], [`read_user_str`]), the
//! current task's name and pid.

use super::*;

impl Regs {
    /// Integer argument `n` (0-based) of the function whose entry these
    /// registers are stopped at, per the calling convention; stack arguments
    /// are read without faulting (`None` if unreadable).
    pub fn arg(&self, n: usize) -> Option<usize> {
        match self.arg_location(n) {
            Location::Register(v) => Some(v),
            Location::Stack(a) => read_kernel::<usize>(a),
        }
    }

    /// The return address, at a function's entry.
    pub fn entry_return_address(&self) -> Option<usize> {
        match self.return_address_location() {
            Location::Register(v) => Some(v),
            Location::Stack(a) => read_kernel::<usize>(a),
        }
    }

    /// At a function's entry: makes the function return `value` at once
    /// without running it; the pre-handler then returns
    /// `Next::Redirected(token)`. `None` if the return address was
    /// unreadable (nothing changed).
    ///
    /// # Safety
    ///
    /// The registers are stopped at the entry of a function that may be
    /// skipped (its callers need no side effect of it), `value` is what its
    /// callers may receive, and the pre-handler then returns
    /// [`Next::Redirected`] (with [`Next::Continue`] the function would run
    /// with a stack pointer already moved past its return address).
    pub unsafe fn return_now(&mut self, value: usize) -> Option<Redirect> {
        let ret = self.entry_return_address()?;
        // SAFETY: the caller's contract.
        unsafe { self.return_to(ret, value) };
        Some(Redirect(PhantomData))
    }

    /// Resumes the probed code at `ip` instead of the probed instruction;
    /// the pre-handler then returns `Next::Redirected(token)` (or a fault
    /// handler `Some(token.into())`).
    ///
    /// # Safety
    ///
    /// As [`Regs::set_ip`]: the code at `ip` runs with these registers and
    /// keeps its invariants (see [`Regs`]).
    pub unsafe fn redirect(&mut self, ip: usize) -> Redirect {
        // SAFETY: the caller's contract.
        unsafe { self.set_ip(ip) };
        Redirect(PhantomData)
    }
}

/// Types any bit pattern of which is a valid value.
///
/// # Safety
///
/// Implementors must have no invalid bit patterns and no padding.
pub unsafe trait Pod: Copy {}

macro_rules! pod {
    ($($t:ty),*) => {
        // SAFETY: integers: every bit pattern is valid.
        $(unsafe impl Pod for $t {})*
    };
}
pod!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);

// SAFETY: any address is a valid raw pointer value.
unsafe impl<T> Pod for *const T {}

// SAFETY: as above.
unsafe impl<T> Pod for *mut T {}

/// Reads a `T` from kernel memory at `addr` without faulting (`None` if the
/// address is not mapped or is a user address).
pub fn read_kernel<T: Pod>(addr: usize) -> Option<T> {
    let mut v = core::mem::MaybeUninit::<T>::uninit();
    // SAFETY: the nofault copy checks the source; the destination is ours.
    let r = unsafe {
        bindings::copy_from_kernel_nofault(
            v.as_mut_ptr().cast(),
            addr as *const _,
            core::mem::size_of::<T>(),
        )
    };
    // SAFETY: fully written on success; any bit pattern is a `T`.
    (r == 0).then(|| unsafe { v.assume_init() })
}

pub(super) const PAGE: usize = 4096;

/// Reads a NUL-terminated string into `buf` page by page with `copy`
/// (0 on success), stopping at the first NUL or when `buf` is full. Returns
/// the bytes before the NUL, or `None` if the first byte is unreadable.
pub(super) fn read_str(
    addr: usize,
    buf: &mut [u8],
    copy: impl Fn(*mut u8, usize, usize) -> bool,
) -> Option<&[u8]> {
    let mut done = 0;
    while done < buf.len() {
        let at = addr.wrapping_add(done);
        let chunk = (PAGE - at % PAGE).min(buf.len() - done);
        if !copy(buf[done..].as_mut_ptr(), at, chunk) {
            break;
        }
        if let Some(nul) = buf[done..done + chunk].iter().position(|&c| c == 0) {
            return Some(&buf[..done + nul]);
        }
        done += chunk;
    }
    (done > 0).then(|| &buf[..done])
}

/// Reads a NUL-terminated kernel string at `addr` into `buf` without
/// faulting: the bytes before the NUL (truncated to `buf`), or `None` if
/// unreadable.
pub fn read_kernel_str(addr: usize, buf: &mut [u8]) -> Option<&[u8]> {
    read_str(addr, buf, |dst, src, n| {
        // SAFETY: nofault copy into `n` bytes of `buf`.
        unsafe { bindings::copy_from_kernel_nofault(dst.cast(), src as *const _, n) == 0 }
    })
}

/// As [`read_kernel_str`] for a user-space string (a system call's
/// argument): never faults, never sleeps.
pub fn read_user_str(addr: usize, buf: &mut [u8]) -> Option<&[u8]> {
    read_str(addr, buf, |dst, src, n| {
        // SAFETY: nofault copy into `n` bytes of `buf`.
        unsafe { bindings::copy_from_user_nofault(dst.cast(), src as *const _, n) == 0 }
    })
}

/// The current task's name (`comm`).
pub struct Comm([kernel::ffi::c_char; 16]);

impl Comm {
    /// The name of the task running now.
    pub fn current() -> Self {
        // SAFETY: `current` is always valid; `comm` is a fixed array.
        let comm = unsafe { (*bindings::get_current()).comm };
        Comm(comm)
    }

    /// As text (`"?"` if not UTF-8).
    pub fn as_str(&self) -> &str {
        let n = self.0.iter().position(|&c| c == 0).unwrap_or(self.0.len());
        core::str::from_utf8(&self.0[..n]).unwrap_or("?")
    }
}

/// The current task's pid (thread id) and whether it is a kernel thread.
pub fn current_pid() -> (i32, bool) {
    let t = bindings::get_current;
    // SAFETY: `current` is always valid; `pid` is fixed for a task's life and
    // `flags` is a word read without forming a reference.
    unsafe {
        let t = t();
        (
            core::ptr::addr_of!((*t).pid).read(),
            core::ptr::addr_of!((*t).flags).read_volatile() & bindings::PF_KTHREAD != 0,
        )
    }
}
