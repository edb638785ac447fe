//! INT-label's commands: `show_label` (the domain, each port's label state
//! and rate, the label_* counters) and `label_set_shift` (a port's S, the
//! Pro controller's knob).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::api::{command, no_args};
use crate::int::api::{PresenceView, RingView};

no_args!(ShowLabel);

/// One port's label state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelPortView {
    pub port: String,
    pub index: u16,
    pub edge: bool,
    /// Since the port's last label (None: never labeled).
    pub lt_age_ms: Option<f64>,
    /// S: the interval is T >> S; 255 labels every packet.
    pub shift: u8,
    pub labels: u64,
    /// Over the last second.
    pub labels_per_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelView {
    pub label_domain_id: u16,
    pub node_id: u32,
    pub presence: PresenceView,
    pub instructions: Vec<String>,
    pub max_labels: u8,
    pub interval_ms: f64,
    pub rest_ms: f64,
    /// f1, f2, f3 or table.
    pub probability: String,
    /// f(n) for n = 0..MAX_hop-1.
    pub f: Vec<f64>,
    pub max_shift: u8,
    pub ports: Vec<LabelPortView>,
    /// The label_* events.
    pub counters: BTreeMap<String, u64>,
    /// Each worker's label report ring.
    pub rings: Vec<RingView>,
}

command!(ShowLabel, "show_label", LabelView);

/// Sets a port's S (0..=max_shift, or 255: every packet).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelSetShift {
    pub port: String,
    pub shift: u8,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShiftSet {
    pub port: String,
    pub shift: u8,
    pub previous: u8,
}

command!(LabelSetShift, "label_set_shift", ShiftSet);
