//! intswitch data path.
//!
//! `dpdk` is the only module with `unsafe` (it wraps DPDK); everything else
//! is safe Rust over byte slices and owned mbufs, testable without an EAL.
#![deny(unsafe_op_in_unsafe_fn)]

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

#[cfg(test)]
mod pipeline_fuzz;

#[cfg(test)]
mod hot_path_alloc;

pub use drop_reason::DropReason;
