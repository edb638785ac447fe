//! GPINT probes and SQR clone buffers (gpint-sqr-reliable-int §III-IV,
//! issue 33): the data path's part. The probe's layout is
//! `wire::gpint`; the planner and the monitor are intcollector's.
//!
//! - `clone_buffer`: the copies a switch keeps of the probes it forwarded,
//!   until the next hop's feedback or their deadline (a timer wheel).
//! - `seen`: the probes measured lately, so a duplicate is acknowledged
//!   but not measured or forwarded twice.

pub mod clone_buffer;
pub mod seen;
