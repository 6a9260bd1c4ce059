//! Host build of the kprobes engine's pure logic.
//!
//! The kernel module compiles the same source files; this crate lets them be
//! unit- and property-tested with cargo on the host (see `host/tests/`).

/// x86-64 instruction decoder (`arch/x86_64/decode.rs`).
#[path = "../arch/x86_64/decode.rs"]
pub mod x86_decode;

/// arm64 instruction classifier (`arch/arm64/decode.rs`).
#[path = "../arch/arm64/decode.rs"]
pub mod arm64_decode;

/// Symbol-string parsing (`src/ksym.rs`).
#[path = "../src/ksym.rs"]
pub mod ksym;

/// The `kprobe_events` grammar (`src/event_parse.rs`).
#[path = "../src/event_parse.rs"]
pub mod event_parse;
