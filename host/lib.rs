//! Host build of the kprobes engine's pure logic.
//!
//! The kernel module compiles the same source files; this crate lets them be
//! unit- and property-tested with cargo on the host (see `host/tests/`).

/// x86-64 instruction decoder (`arch/x86_64/decode.rs`).
#[path = "../arch/x86_64/decode.rs"]
pub mod x86_decode;

/// x86-64: the emulation plan and the relocated copy
/// (`arch/x86_64/copy.rs`).
#[path = "../arch/x86_64/copy.rs"]
pub mod x86_copy;
// What `x86_copy` calls `super::decode`, as in the backend.
use x86_decode as decode;

/// arm64 instruction classifier (`arch/arm64/decode.rs`).
#[path = "../arch/arm64/decode.rs"]
pub mod arm64_decode;

/// Symbol-string parsing (`src/ksym.rs`).
#[path = "../src/ksym.rs"]
pub mod ksym;

/// The kernel's BTF, read (`src/btf.rs`).
#[path = "../src/btf.rs"]
pub mod btf;

/// The `kprobe_events` grammar (`src/event_parse.rs`).
#[path = "../src/event_parse.rs"]
pub mod event_parse;

/// x86_64 register names of the grammar (`arch/x86_64/event_regs.rs`).
#[path = "../arch/x86_64/event_regs.rs"]
pub mod x86_event_regs;

/// arm64 register names of the grammar (`arch/arm64/event_regs.rs`).
#[path = "../arch/arm64/event_regs.rs"]
pub mod arm64_event_regs;

/// The grammar's register table for x86_64.
pub const X86_64_REGS: &event_parse::RegTable = x86_event_regs::EVENT_REGS;
/// The grammar's register table for arm64.
pub const ARM64_REGS: &event_parse::RegTable = arm64_event_regs::EVENT_REGS;
