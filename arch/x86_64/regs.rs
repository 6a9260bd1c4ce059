// SPDX-License-Identifier: GPL-2.0

//! x86_64 register view over `struct pt_regs` (shared by the engine and
//! client modules through `src/api.rs`).

use kernel::bindings::pt_regs;

/// The instruction pointer.
pub fn ip(r: &pt_regs) -> usize {
    r.ip
}

/// Sets the instruction pointer.
pub fn set_ip(r: &mut pt_regs, v: usize) {
    r.ip = v;
}

/// The stack pointer.
pub fn sp(r: &pt_regs) -> usize {
    r.sp
}

/// RFLAGS.
pub fn flags(r: &pt_regs) -> usize {
    r.flags
}

/// Integer argument `n` (0-based) at a function's entry, System V ABI:
/// rdi, rsi, rdx, rcx, r8, r9, then the stack. Returns `None` past the sixth
/// (stack arguments need a memory read; see the API issue).
pub fn arg(r: &pt_regs, n: usize) -> Option<usize> {
    [r.di, r.si, r.dx, r.cx, r.r8, r.r9].get(n).copied()
}

/// The return value register (rax).
pub fn return_value(r: &pt_regs) -> usize {
    r.ax
}

/// Whether the trap came from user mode.
pub fn user_mode(r: &pt_regs) -> bool {
    // SAFETY: every variant of the union is a plain integer.
    unsafe { r.__bindgen_anon_1.cs & 3 != 0 }
}

/// Where a value is: integer argument `n` (0-based) of a function at its
/// entry, System V AMD64 ABI: rdi, rsi, rdx, rcx, r8, r9, then the stack above
/// the return address (`sp + 8`, `sp + 16`, ...), each in an 8-byte slot.
pub enum Location {
    /// In a register; the value.
    Register(usize),
    /// On the stack at this address.
    Stack(usize),
}

/// The registers of a probed context: `struct pt_regs` with named accessors.
///
/// Handlers get `&mut Regs`; a setter changes what the probed code sees when
/// it resumes (for the instruction pointer only when the handler also says it
/// redirected execution, see the API). Setters are `unsafe`: a wrong
/// register value (a stack pointer, an instruction pointer, a pointer the
/// code dereferences, RFLAGS.AC) breaks the kernel's memory safety, so the
/// caller must know what the probed code expects.
#[repr(transparent)]
pub struct Regs(pt_regs);

/// Getter and setter pairs for plain `pt_regs` fields.
macro_rules! named_regs {
    ($($name:ident $set:ident: $doc:literal),* $(,)?) => {
        impl Regs {
            $(
                #[doc = concat!("`", $doc, "`.")]
                pub fn $name(&self) -> usize {
                    self.0.$name
                }
                #[doc = concat!("Sets `", $doc, "`.")]
                ///
                /// # Safety
                ///
                /// The probed code resumes with this value: the caller keeps
                /// that code's invariants (see [`Regs`]).
                pub unsafe fn $set(&mut self, v: usize) {
                    self.0.$name = v;
                }
            )*
        }
    };
}

named_regs!(
    ip set_ip: "rip",
    sp set_sp: "rsp",
    flags set_flags: "rflags",
    ax set_ax: "rax",
    bx set_bx: "rbx",
    cx set_cx: "rcx",
    dx set_dx: "rdx",
    si set_si: "rsi",
    di set_di: "rdi",
    bp set_bp: "rbp",
    r8 set_r8: "r8",
    r9 set_r9: "r9",
    r10 set_r10: "r10",
    r11 set_r11: "r11",
    r12 set_r12: "r12",
    r13 set_r13: "r13",
    r14 set_r14: "r14",
    r15 set_r15: "r15",
    orig_ax set_orig_ax: "orig_rax",
);

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

    /// Where integer argument `n` is, at the function's entry. For an `n`
    /// so large that its slot's address does not exist, the stack address
    /// is 0, where no read succeeds.
    pub fn arg_location(&self, n: usize) -> Location {
        match arg(&self.0, n) {
            Some(v) => Location::Register(v),
            // Past the return address: arguments 7, 8, ... (n = 6, 7, ...).
            None => Location::Stack(
                n.checked_sub(5)
                    .and_then(|k| k.checked_mul(8))
                    .and_then(|off| self.0.sp.checked_add(off))
                    .unwrap_or(0),
            ),
        }
    }

    /// Sets register argument `n` (0..=5); returns false for stack arguments.
    ///
    /// # Safety
    ///
    /// As for every setter (see [`Regs`]).
    pub unsafe fn set_arg(&mut self, n: usize, v: usize) -> bool {
        let r = &mut self.0;
        let slot = match n {
            0 => &mut r.di,
            1 => &mut r.si,
            2 => &mut r.dx,
            3 => &mut r.cx,
            4 => &mut r.r8,
            5 => &mut r.r9,
            _ => return false,
        };
        *slot = v;
        true
    }

    /// The return value (rax), in a return handler.
    pub fn return_value(&self) -> usize {
        self.0.ax
    }

    /// Sets the value the caller will see returned (rax).
    ///
    /// # Safety
    ///
    /// As for every setter (see [`Regs`]).
    pub unsafe fn set_return_value(&mut self, v: usize) {
        self.0.ax = v;
    }

    /// Whether the probed context is user mode.
    pub fn user_mode(&self) -> bool {
        user_mode(&self.0)
    }

    /// Where the return address is at a function's entry: the word at `sp`.
    pub fn return_address_location(&self) -> Location {
        Location::Stack(self.0.sp)
    }

    /// Makes the function whose entry these registers are stopped at return
    /// `value` to its caller at once, given its return address (see
    /// [`Self::return_address_location`]): pops it like `ret` would.
    ///
    /// # Safety
    ///
    /// As for every setter (see [`Regs`]).
    pub unsafe fn return_to(&mut self, ret_addr: usize, value: usize) {
        self.0.ip = ret_addr;
        self.0.sp = self.0.sp.wrapping_add(8);
        self.0.ax = value;
    }
}
