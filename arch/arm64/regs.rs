// SPDX-License-Identifier: GPL-2.0

//! arm64 register view over `struct pt_regs` (shared by the engine and
//! client modules through `src/api.rs`).

use kernel::bindings::{pt_regs, user_pt_regs};

fn user(r: &pt_regs) -> &user_pt_regs {
    // SAFETY: both union variants are the same plain integers (regs[31], sp,
    // pc, pstate); any bit pattern is valid.
    unsafe { &r.__bindgen_anon_1.user_regs }
}

fn user_mut(r: &mut pt_regs) -> &mut user_pt_regs {
    // SAFETY: as in `user`.
    unsafe { &mut r.__bindgen_anon_1.user_regs }
}

/// General-purpose register `xN` (0..=30).
pub fn x(r: &pt_regs, n: usize) -> Option<usize> {
    user(r).regs.get(n).map(|&v| v as usize)
}

/// Writes `xN` (0..=30); other numbers (XZR) are ignored.
pub fn set_x(r: &mut pt_regs, n: usize, v: usize) {
    if let Some(x) = user_mut(r).regs.get_mut(n) {
        *x = v as u64;
    }
}

/// Where `xN` (0..=30) is kept in `r` (for a write while `r` is lent out).
pub(crate) fn x_ptr(r: &mut pt_regs, n: usize) -> *mut u64 {
    let regs = &mut user_mut(r).regs;
    let n = n.min(regs.len() - 1);
    core::ptr::addr_of_mut!(regs[n])
}

/// The program counter.
pub fn ip(r: &pt_regs) -> usize {
    user(r).pc as usize
}

/// Sets the program counter.
pub fn set_ip(r: &mut pt_regs, v: usize) {
    user_mut(r).pc = v as u64;
}

/// The stack pointer.
pub fn sp(r: &pt_regs) -> usize {
    user(r).sp as usize
}

/// Sets the stack pointer.
pub fn set_sp(r: &mut pt_regs, v: usize) {
    user_mut(r).sp = v as u64;
}

/// PSTATE.
pub fn flags(r: &pt_regs) -> usize {
    user(r).pstate as usize
}

/// Sets PSTATE.
pub fn set_flags(r: &mut pt_regs, v: usize) {
    user_mut(r).pstate = v as u64;
}

/// Integer argument `n` (0-based) at a function's entry, AAPCS64: x0..x7.
pub fn arg(r: &pt_regs, n: usize) -> Option<usize> {
    if n < 8 {
        x(r, n)
    } else {
        None
    }
}

/// The return value register (x0).
pub fn return_value(r: &pt_regs) -> usize {
    user(r).regs[0] as usize
}

/// Whether the trap came from user mode (EL0).
pub fn user_mode(r: &pt_regs) -> bool {
    user(r).pstate & 0xf == 0
}

/// Where a value is: integer argument `n` (0-based) of a function at its
/// entry, AAPCS64: x0..x7, then the stack from `sp` up, each in an 8-byte slot.
pub enum Location {
    /// In a register; the value.
    Register(usize),
    /// On the stack at this address.
    Stack(usize),
}

/// The registers of a probed context: `struct pt_regs` with named accessors.
///
/// Handlers get `&mut Regs`; a setter changes what the probed code sees when
/// it resumes (for the program counter only when the handler also says it
/// redirected execution, see the API). Setters are `unsafe`: a wrong
/// register value (the stack pointer, the program counter, a pointer the
/// code dereferences, PSTATE) breaks the kernel's memory safety, so the
/// caller must know what the probed code expects.
#[repr(transparent)]
pub struct Regs(pt_regs);

impl Regs {
    /// Views a `pt_regs` as `Regs`.
    ///
    /// # Safety
    ///
    /// `p` is valid and not otherwise accessed for `'a`.
    pub unsafe fn from_raw<'a>(p: *mut pt_regs) -> &'a mut Regs {
        // SAFETY: `Regs` is a transparent `pt_regs`; the caller guarantees
        // validity and exclusivity.
        unsafe { &mut *p.cast::<Regs>() }
    }

    /// The underlying `struct pt_regs`.
    pub fn as_raw(&self) -> &pt_regs {
        &self.0
    }

    /// The underlying `struct pt_regs`, writable.
    ///
    /// # Safety
    ///
    /// As for every setter (see [`Regs`]).
    pub unsafe fn as_raw_mut(&mut self) -> &mut pt_regs {
        &mut self.0
    }

    /// `xN`, 0..=30 (`None` for other numbers).
    pub fn x(&self, n: usize) -> Option<usize> {
        x(&self.0, n)
    }

    /// Sets `xN`, 0..=30; returns false for other numbers.
    ///
    /// # Safety
    ///
    /// As for every setter (see [`Regs`]).
    pub unsafe fn set_x(&mut self, n: usize, v: usize) -> bool {
        if n <= 30 {
            set_x(&mut self.0, n, v);
        }
        n <= 30
    }

    /// The link register x30.
    pub fn lr(&self) -> usize {
        user(&self.0).regs[30] as usize
    }

    /// The program counter.
    pub fn pc(&self) -> usize {
        ip(&self.0)
    }

    /// Sets the program counter.
    ///
    /// # Safety
    ///
    /// As for every setter (see [`Regs`]).
    pub unsafe fn set_pc(&mut self, v: usize) {
        set_ip(&mut self.0, v)
    }

    /// The program counter (the arch-neutral name).
    pub fn ip(&self) -> usize {
        ip(&self.0)
    }

    /// Sets the program counter (the arch-neutral name).
    ///
    /// # Safety
    ///
    /// As for every setter (see [`Regs`]).
    pub unsafe fn set_ip(&mut self, v: usize) {
        set_ip(&mut self.0, v)
    }

    /// The stack pointer.
    pub fn sp(&self) -> usize {
        sp(&self.0)
    }

    /// Sets the stack pointer.
    ///
    /// # Safety
    ///
    /// As for every setter (see [`Regs`]).
    pub unsafe fn set_sp(&mut self, v: usize) {
        user_mut(&mut self.0).sp = v as u64;
    }

    /// PSTATE.
    pub fn pstate(&self) -> usize {
        flags(&self.0)
    }

    /// Sets PSTATE.
    ///
    /// # Safety
    ///
    /// As for every setter (see [`Regs`]).
    pub unsafe fn set_pstate(&mut self, v: usize) {
        set_flags(&mut self.0, v)
    }

    /// PSTATE (the arch-neutral name).
    pub fn flags(&self) -> usize {
        flags(&self.0)
    }

    /// Where integer argument `n` is, at the function's entry.
    pub fn arg_location(&self, n: usize) -> Location {
        match arg(&self.0, n) {
            Some(v) => Location::Register(v),
            // For an `n` so large that its slot's address does not exist:
            // 0, where no read succeeds.
            None => Location::Stack(
                n.checked_sub(8)
                    .and_then(|k| k.checked_mul(8))
                    .and_then(|off| self.sp().checked_add(off))
                    .unwrap_or(0),
            ),
        }
    }

    /// Sets register argument `n` (0..=7); returns false for stack arguments.
    ///
    /// # Safety
    ///
    /// As for every setter (see [`Regs`]).
    pub unsafe fn set_arg(&mut self, n: usize, v: usize) -> bool {
        // SAFETY: the caller's contract.
        n < 8 && unsafe { self.set_x(n, v) }
    }

    /// The return value (x0), in a return handler.
    pub fn return_value(&self) -> usize {
        return_value(&self.0)
    }

    /// Sets the value the caller will see returned (x0).
    ///
    /// # Safety
    ///
    /// As for every setter (see [`Regs`]).
    pub unsafe fn set_return_value(&mut self, v: usize) {
        set_x(&mut self.0, 0, v)
    }

    /// Whether the probed context is user mode (EL0).
    pub fn user_mode(&self) -> bool {
        user_mode(&self.0)
    }

    /// Where the return address is at a function's entry: the link register.
    pub fn return_address_location(&self) -> Location {
        Location::Register(self.lr())
    }

    /// Makes the function whose entry these registers are stopped at return
    /// `value` to its caller at once, given its return address (see
    /// [`Self::return_address_location`]).
    ///
    /// # Safety
    ///
    /// As for every setter (see [`Regs`]).
    pub unsafe fn return_to(&mut self, ret_addr: usize, value: usize) {
        // SAFETY: the caller's contract.
        unsafe {
            self.set_ip(ret_addr);
            self.set_return_value(value);
        }
    }
}
