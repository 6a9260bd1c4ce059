// SPDX-License-Identifier: GPL-2.0

//! [`EntryProbe`]: the safe jprobe, a function's arguments typed ([`Args`]).

use super::*;

/// A value an integer argument register (or stack slot) can be read as.
pub trait FromArg: Sized {
    /// Converts a full register; narrower types take the low bits, as the
    /// calling conventions leave the upper ones unspecified.
    fn from_arg(v: usize) -> Self;
}

macro_rules! from_arg_int {
    ($($t:ty),*) => {
        $(impl FromArg for $t {
            #[allow(clippy::unnecessary_cast)]
            fn from_arg(v: usize) -> Self {
                v as $t
            }
        })*
    };
}
from_arg_int!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);

impl FromArg for bool {
    fn from_arg(v: usize) -> Self {
        v as u8 != 0
    }
}

impl<T> FromArg for *const T {
    fn from_arg(v: usize) -> Self {
        v as *const T
    }
}

impl<T> FromArg for *mut T {
    fn from_arg(v: usize) -> Self {
        v as *mut T
    }
}

/// A function's argument list as a tuple of [`FromArg`] types (up to 10).
pub trait Args: Sized {
    /// Reads the arguments at the function's entry (`None` if a stack
    /// argument could not be read).
    fn fetch(regs: &Regs) -> Option<Self>;
}

macro_rules! args_tuple {
    ($($t:ident $i:tt),*) => {
        impl<$($t: FromArg),*> Args for ($($t,)*) {
            #[allow(unused_variables)]
            fn fetch(regs: &Regs) -> Option<Self> {
                Some(($($t::from_arg(regs.arg($i)?),)*))
            }
        }
    };
}
args_tuple!();
args_tuple!(A 0);
args_tuple!(A 0, B 1);
args_tuple!(A 0, B 1, C 2);
args_tuple!(A 0, B 1, C 2, D 3);
args_tuple!(A 0, B 1, C 2, D 3, E 4);
args_tuple!(A 0, B 1, C 2, D 3, E 4, F 5);
args_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
args_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
args_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
args_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);

/// The handler of an [`EntryProbe`]: receives the probed function's
/// arguments typed (what jprobes gave, without mirroring the stack).
pub trait EntryHandler: Send + Sync + Sized + 'static {
    /// The function's parameter types, as a tuple: for
    /// `int do_filp_open(int dfd, struct filename *name, const struct
    /// open_flags *op)` that is `(i32, *const filename, *const open_flags)`.
    type Args: Args;

    /// Runs at each call, before the function's first instruction.
    fn entry(&self, args: Self::Args, regs: &Regs);
}

/// The [`KprobeHandler`] behind an [`EntryProbe`].
pub struct Entry<H> {
    handler: H,
    unreadable: AtomicUsize,
}

impl<H: EntryHandler> KprobeHandler for Entry<H> {
    fn pre(&self, _probe: &Probe, regs: &mut Regs) -> Next {
        match H::Args::fetch(regs) {
            Some(args) => self.handler.entry(args, &*regs),
            None => {
                self.unreadable.fetch_add(1, Ordering::Relaxed);
            }
        }
        Next::Continue
    }
}

/// A typed function-entry probe (see [`EntryHandler`]).
pub type EntryProbe<H> = Kprobe<Entry<H>>;

impl<H: EntryHandler> Kprobe<Entry<H>> {
    /// Probes the entry of `function` (`"symbol"` or `"module:symbol"`).
    /// Only the entry: that is where the arguments are where the calling
    /// convention puts them.
    pub fn register_entry(function: &CStr, handler: H) -> Result<Pin<KBox<Self>>> {
        Self::register(
            Target::Symbol(function),
            Entry {
                handler,
                unreadable: AtomicUsize::new(0),
            },
        )
    }

    /// The client's handler.
    pub fn entry_handler(&self) -> &H {
        &self.handler.handler
    }

    /// Calls whose stack arguments could not be read (the handler did not
    /// run for them).
    pub fn unreadable(&self) -> usize {
        self.handler.unreadable.load(Ordering::Relaxed)
    }
}
