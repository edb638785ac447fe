//! GPINT probes and SQR clone buffers (gpint-sqr-reliable-int §III-IV,
//! issue 33): the data path's part. The probe's layout is
//! `wire::gpint`; the planner and the monitor are intcollector's.
//!
//! - `stage`: the SQR stage, which claims probes and feedbacks before
//!   forwarding: it measures, forwards by the source route, acknowledges,
//!   keeps copies and sends notices.
//! - `clone_buffer`: the copies a switch keeps of the probes it forwarded,
//!   until the next hop's feedback or their deadline (a timer wheel).
//! - `seen`: the probes measured lately, so a duplicate is acknowledged
//!   but not measured or forwarded twice.
//! - `frame`: whole probe frames, for the monitor and the tests.

pub mod clone_buffer;
pub mod frame;
pub mod seen;
pub mod stage;

use crate::counters::MAX_PORTS;
use crate::int::Presence;

/// `[gpint]` as the workers read it (one per table generation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpintSpec {
    /// The INT domain's UDP port: a probe's destination port.
    pub int_port: u16,
    /// `gpint.udp_port`: a probe's original destination port (saved in its
    /// INT shim) and a feedback's destination port.
    pub udp_port: u16,
    /// `gpint.domain_id`: the INT-MD Domain Specific ID of probes.
    pub domain_id: u16,
    /// This switch's INT node ID (its INT hop and MEA records).
    pub node_id: u32,
    /// Feedback, copies, notices and the duplicate filter.
    pub recovery: bool,
    /// How long a copy waits for its feedback, in TSC ticks.
    pub hold_tsc: u64,
    /// Per port: the largest IP packet a forwarded probe may be.
    pub mtu: [u16; MAX_PORTS],
    /// The paper's mode: probes and feedbacks are known by DSCP codepoints
    /// instead of UDP ports (None: by UDP port).
    pub dscp: Option<GpintDscp>,
}

/// `gpint.classify = "dscp"`: the paper's codepoints (6-bit DSCP values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpintDscp {
    pub probe: u8,
    pub feedback: u8,
    /// Set on the copy a recovery notice carries.
    pub notice: u8,
}

impl GpintSpec {
    /// How a probe's INT block is found: after the UDP header of a packet
    /// to the INT port (NPT 1), or of one marked with the probe codepoint
    /// (NPT 0).
    pub fn presence(&self) -> Presence {
        match self.dscp {
            None => Presence::UdpPort(self.int_port),
            Some(d) => Presence::Dscp { value: d.probe, mask: 0x3f },
        }
    }
}
