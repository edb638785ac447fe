//! intswitch data path.
//!
//! `dpdk` is the only module with `unsafe` (it wraps DPDK); everything else
//! is safe Rust over byte slices and owned mbufs, testable without an EAL.
#![deny(unsafe_op_in_unsafe_fn)]
// With `fuzzing`, the test helpers are compiled without their tests.
#![cfg_attr(all(feature = "fuzzing", not(test)), allow(dead_code, unused_imports))]

pub mod ampm;
pub mod classifier;
pub mod counters;
pub mod dpdk;
pub mod drop_reason;
pub mod fixed_map;
pub mod flow_table;
pub mod forward;
pub mod gpint;
pub mod impair;
pub mod int;
pub mod label;
pub mod lpm;
pub mod mac_table;
pub mod parse;
pub mod pcap;
pub mod pipeline;
pub mod pktbuf;
pub mod rand;
pub mod tables;
pub mod wire;
pub mod worker;

// The per-role pipeline fuzz harness (tests/fuzz's `pipeline` target
// builds it with the `fuzzing` feature); it stands on the test helpers.
#[cfg(any(test, feature = "fuzzing"))]
pub mod pipeline_fuzz;

#[cfg(test)]
mod hot_path_alloc;

pub use drop_reason::DropReason;
