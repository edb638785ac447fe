//! Zero-copy, bounds-checked views of the headers the switch parses, and
//! `Repr` builders for the packets it originates (replies, tests).
pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod gpint;
pub mod icmp;
pub mod int_md;
pub mod ipv4;
pub mod ipv6;
pub mod tcp;
pub mod telemetry_report;
pub mod udp;
