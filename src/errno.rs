// SPDX-License-Identifier: GPL-2.0

//! Error codes the kernel crate of 6.12 does not name.

use kernel::bindings;
use kernel::error::Error;

/// `-EILSEQ`: not on an instruction boundary, or undecodable.
pub(crate) fn eilseq() -> Error {
    Error::from_errno(-(bindings::EILSEQ as i32))
}

/// `-EOPNOTSUPP`: an instruction the backend cannot probe (yet).
pub(crate) fn eopnotsupp() -> Error {
    Error::from_errno(-(bindings::EOPNOTSUPP as i32))
}
