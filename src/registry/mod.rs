// SPDX-License-Identifier: GPL-2.0

//! The probe registry: probe points, aggregation, enable/disable, lifecycle.
//!
//! A *point* is one probed address: the prepared instruction, whether the
//! breakpoint is armed, and the list of client *probes* on it, in registration
//! order (several probes on one address share one breakpoint, like the
//! kernel's aggregate kprobes). Points live in a hash table of singly linked
//! chains.
//!
//! Concurrency: every change happens under the registration mutex (process
//! context). The trap path ([`crate::hit`]) reads without locks: chain links
//! and probe lists are published with release stores and read with acquire
//! loads; anything unpublished is freed only after `synchronize_rcu()`, which
//! waits for every trap handler (they run with interrupts off) and every CPU
//! still executing an out-of-line copy (also with interrupts off).
//! Probe lists are copy-on-write: a change builds a new list, publishes it,
//! waits a grace period, then frees the old one.
//!
//! Layout: `point.rs` (points, probe records, the table and the all-probes
//! chains), `retire.rs` (grace periods), `lifecycle.rs` (register,
//! unregister, enable, disable, module unload), `exports.rs` (the C API),
//! `list.rs` (debugfs `list`), `hooks.rs` (what the layers above hear: the
//! jump optimizer), `keep.rs` (text that cannot be taken back, slots that
//! wait for a reclaim). Requests are resolved first by `crate::resolve`. The
//! registry calls nothing above it: not kretprobes, not the optimizer.

mod exports;
pub(crate) mod hooks;
mod keep;
mod lifecycle;
mod list;
mod point;
mod retire;

pub use exports::*;
pub(crate) use keep::reclaim_slots_for;
pub(crate) use lifecycle::*;
pub(crate) use list::*;
pub(crate) use point::*;
use retire::*;
