//! GPINT's command: `show_gpint` (the section, the SQR counters, each
//! worker's clone buffer with the copies waiting, and the export of
//! deliveries and notices).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::api::{command, no_args};
use crate::int::api::RingView;

no_args!(ShowGpint);

/// A copy waiting for its feedback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitingView {
    pub request_id: u16,
    pub attempt: u8,
    /// The hop whose feedback it waits for.
    pub hop_index: u8,
    pub age_ms: f64,
}

/// One worker's clone buffer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SqrWorkerView {
    pub worker: usize,
    pub capacity: usize,
    pub in_use: usize,
    /// The most copies held at once (`sqr_high_water`).
    pub high_water: usize,
    /// Oldest first.
    pub waiting: Vec<WaitingView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpintView {
    pub int_port: u16,
    pub udp_port: u16,
    pub domain_id: u16,
    pub node_id: u32,
    pub recovery: bool,
    pub hold_ms: u64,
    pub clone_slots: usize,
    /// The gpint_* and sqr_* events and the gpint_* drops.
    pub counters: BTreeMap<String, u64>,
    pub workers: Vec<SqrWorkerView>,
    /// Probes delivered at the path's end, and notices, sent to the
    /// `[[int.collector]]`s.
    pub delivered: u64,
    pub notices: u64,
    /// Each worker's ring of deliveries and notices to the control core
    /// (`ring_full`: the worker's gpint_export_full).
    pub rings: Vec<RingView>,
}

command!(ShowGpint, "show_gpint", GpintView);
