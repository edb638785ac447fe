//! Per-worker counters. Each worker owns one cache-padded block: it counts
//! into plain integers during a burst and publishes them with relaxed stores
//! once per burst, so readers never contend with the data path.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::DropReason;

/// Ports a switch can have (counter arrays are sized by it).
pub const MAX_PORTS: usize = 16;

/// Things a worker does that are not drops but are worth counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Event {
    FlowLearned,
    FlowLearnFailedFull,
    FlowAged,
    MacLearned,
    MacMoved,
    MacTableFull,
    MacAged,
    MacSynced,
    Flooded,
    ArpReplied,
    IcmpEchoReplied,
    NdReplied,
    NeighbourSeen,
    ResolveRequested,
    ControlQueueFull,
    Injected,
    TablesSwapped,
    CaptureDropped,
    Held,
    IntSourced,
    IntSourceSkippedMtu,
    IntNoRoom,
    IntTransited,
    IntHopsExhausted,
    IntMtuExceeded,
    IntStripped,
    IntSunk,
    IntReportQueued,
    IntReportRingFull,
    IntReportStackCut,
    IntFlooded,
    IntDropReported,
    IntPassedTruncated,
    IntPassedBadVersion,
    IntPassedBadHopMl,
    IntPassedBadStack,
    IntFlowHit,
    IntFlowInserted,
    IntFlowLru,
    IntFlowAged,
    IntFlowActive,
    IntFlowFlushed,
    IntFlowStopped,
    IntFlowExported,
    IntFlowRingFull,
    IntFlowEmpty,
    IntAnalyticsBadHopMl,
    IntHopsUntracked,
    IntValueAbsent,
    IntEventHopLatencyT,
    IntEventHopLatencyC,
    IntEventQueueT,
    IntEventQueueC,
    IntEventTxUtilT,
    IntEventTxUtilC,
    IntEventE2eT,
    IntEventE2eC,
    IntEventPathChange,
    IntEventLinkLatencyT,
    IntEventLinkLatencyC,
    IntEventExported,
    IntEventRingFull,
    IntHistNodeUntracked,
    IntHistNoNodeId,
    IntDetectNodeUntracked,
    LabelInterval,
    LabelProbabilistic,
    LabelPro,
    LabelSpecific,
    LabelSkippedMtu,
    LabelSkippedRhc,
    LabelNoHeadroom,
    LabelSunk,
    LabelExported,
    LabelReportRingFull,
    LabelReportStackCut,
    LabelPassedMalformed,
    LabelBlockBytes,
    AmpmMarked,
    AmpmCounted,
    AmpmTimestamped,
    AmpmCleared,
    AmpmOptionInserted,
    AmpmOptionRemoved,
    AmpmBadOption,
    AmpmNoCarrier,
    AmpmNoHeadroom,
    GpintRx,
    GpintFeedbackTx,
    GpintFeedbackRx,
    GpintFeedbackUnmatched,
    GpintDup,
    GpintDelivered,
    GpintExportFull,
    GpintNoBuffer,
    SqrStored,
    SqrAcked,
    SqrTimeouts,
    SqrBufferFull,
    SqrDroppedAtStop,
    ImpairLostGpintProbe,
    ImpairLostGpintFeedback,
}

impl Event {
    pub const COUNT: usize = Event::ImpairLostGpintFeedback as usize + 1;
    pub const ALL: [Event; Event::COUNT] = [
        Event::FlowLearned,
        Event::FlowLearnFailedFull,
        Event::FlowAged,
        Event::MacLearned,
        Event::MacMoved,
        Event::MacTableFull,
        Event::MacAged,
        Event::MacSynced,
        Event::Flooded,
        Event::ArpReplied,
        Event::IcmpEchoReplied,
        Event::NdReplied,
        Event::NeighbourSeen,
        Event::ResolveRequested,
        Event::ControlQueueFull,
        Event::Injected,
        Event::TablesSwapped,
        Event::CaptureDropped,
        Event::Held,
        Event::IntSourced,
        Event::IntSourceSkippedMtu,
        Event::IntNoRoom,
        Event::IntTransited,
        Event::IntHopsExhausted,
        Event::IntMtuExceeded,
        Event::IntStripped,
        Event::IntSunk,
        Event::IntReportQueued,
        Event::IntReportRingFull,
        Event::IntReportStackCut,
        Event::IntFlooded,
        Event::IntDropReported,
        Event::IntPassedTruncated,
        Event::IntPassedBadVersion,
        Event::IntPassedBadHopMl,
        Event::IntPassedBadStack,
        Event::IntFlowHit,
        Event::IntFlowInserted,
        Event::IntFlowLru,
        Event::IntFlowAged,
        Event::IntFlowActive,
        Event::IntFlowFlushed,
        Event::IntFlowStopped,
        Event::IntFlowExported,
        Event::IntFlowRingFull,
        Event::IntFlowEmpty,
        Event::IntAnalyticsBadHopMl,
        Event::IntHopsUntracked,
        Event::IntValueAbsent,
        Event::IntEventHopLatencyT,
        Event::IntEventHopLatencyC,
        Event::IntEventQueueT,
        Event::IntEventQueueC,
        Event::IntEventTxUtilT,
        Event::IntEventTxUtilC,
        Event::IntEventE2eT,
        Event::IntEventE2eC,
        Event::IntEventPathChange,
        Event::IntEventLinkLatencyT,
        Event::IntEventLinkLatencyC,
        Event::IntEventExported,
        Event::IntEventRingFull,
        Event::IntHistNodeUntracked,
        Event::IntHistNoNodeId,
        Event::IntDetectNodeUntracked,
        Event::LabelInterval,
        Event::LabelProbabilistic,
        Event::LabelPro,
        Event::LabelSpecific,
        Event::LabelSkippedMtu,
        Event::LabelSkippedRhc,
        Event::LabelNoHeadroom,
        Event::LabelSunk,
        Event::LabelExported,
        Event::LabelReportRingFull,
        Event::LabelReportStackCut,
        Event::LabelPassedMalformed,
        Event::LabelBlockBytes,
        Event::AmpmMarked,
        Event::AmpmCounted,
        Event::AmpmTimestamped,
        Event::AmpmCleared,
        Event::AmpmOptionInserted,
        Event::AmpmOptionRemoved,
        Event::AmpmBadOption,
        Event::AmpmNoCarrier,
        Event::AmpmNoHeadroom,
        Event::GpintRx,
        Event::GpintFeedbackTx,
        Event::GpintFeedbackRx,
        Event::GpintFeedbackUnmatched,
        Event::GpintDup,
        Event::GpintDelivered,
        Event::GpintExportFull,
        Event::GpintNoBuffer,
        Event::SqrStored,
        Event::SqrAcked,
        Event::SqrTimeouts,
        Event::SqrBufferFull,
        Event::SqrDroppedAtStop,
        Event::ImpairLostGpintProbe,
        Event::ImpairLostGpintFeedback,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Event::FlowLearned => "flow_learned",
            Event::FlowLearnFailedFull => "flow_learn_failed_full",
            Event::FlowAged => "flow_aged",
            Event::MacLearned => "mac_learned",
            Event::MacMoved => "mac_moved",
            Event::MacTableFull => "mac_table_full",
            Event::MacAged => "mac_aged",
            Event::MacSynced => "mac_synced",
            Event::Flooded => "flooded",
            Event::ArpReplied => "arp_replied",
            Event::IcmpEchoReplied => "icmp_echo_replied",
            Event::NdReplied => "nd_replied",
            Event::NeighbourSeen => "neighbour_seen",
            Event::ResolveRequested => "resolve_requested",
            Event::ControlQueueFull => "control_queue_full",
            Event::Injected => "injected",
            Event::TablesSwapped => "tables_swapped",
            Event::CaptureDropped => "capture_dropped",
            Event::Held => "held_for_resolution",
            Event::IntSourced => "int_sourced",
            Event::IntSourceSkippedMtu => "int_source_skipped_mtu",
            Event::IntNoRoom => "int_no_headroom",
            Event::IntTransited => "int_transited",
            Event::IntHopsExhausted => "int_hops_exhausted",
            Event::IntMtuExceeded => "int_mtu_exceeded",
            Event::IntStripped => "int_stripped_intermediate",
            Event::IntSunk => "int_sunk",
            Event::IntReportQueued => "int_report_queued",
            Event::IntReportRingFull => "int_report_ring_full",
            Event::IntReportStackCut => "int_report_stack_cut",
            Event::IntFlooded => "int_flooded",
            Event::IntDropReported => "int_drop_reported",
            Event::IntPassedTruncated => "int_passed_truncated",
            Event::IntPassedBadVersion => "int_passed_bad_version",
            Event::IntPassedBadHopMl => "int_passed_bad_hop_ml",
            Event::IntPassedBadStack => "int_passed_bad_stack",
            Event::IntFlowHit => "int_flow_hit",
            Event::IntFlowInserted => "int_flow_inserted",
            Event::IntFlowLru => "int_flow_lru",
            Event::IntFlowAged => "int_flow_aged",
            Event::IntFlowActive => "int_flow_active",
            Event::IntFlowFlushed => "int_flow_flushed",
            Event::IntFlowStopped => "int_flow_stopped",
            Event::IntFlowExported => "int_flow_exported",
            Event::IntFlowRingFull => "int_flow_ring_full",
            Event::IntFlowEmpty => "int_flow_empty",
            Event::IntAnalyticsBadHopMl => "int_analytics_bad_hop_ml",
            Event::IntHopsUntracked => "int_hops_untracked",
            Event::IntValueAbsent => "int_value_absent",
            Event::IntEventHopLatencyT => "int_event_hop_latency_t",
            Event::IntEventHopLatencyC => "int_event_hop_latency_c",
            Event::IntEventQueueT => "int_event_queue_t",
            Event::IntEventQueueC => "int_event_queue_c",
            Event::IntEventTxUtilT => "int_event_tx_util_t",
            Event::IntEventTxUtilC => "int_event_tx_util_c",
            Event::IntEventE2eT => "int_event_e2e_latency_t",
            Event::IntEventE2eC => "int_event_e2e_latency_c",
            Event::IntEventPathChange => "int_event_path_change",
            Event::IntEventLinkLatencyT => "int_event_link_latency_t",
            Event::IntEventLinkLatencyC => "int_event_link_latency_c",
            Event::IntEventExported => "int_event_exported",
            Event::IntEventRingFull => "int_event_ring_full",
            Event::IntHistNodeUntracked => "int_hist_node_untracked",
            Event::IntHistNoNodeId => "int_hist_no_node_id",
            Event::IntDetectNodeUntracked => "int_detect_node_untracked",
            Event::LabelInterval => "label_interval",
            Event::LabelProbabilistic => "label_probabilistic",
            Event::LabelPro => "label_pro",
            Event::LabelSpecific => "label_specific",
            Event::LabelSkippedMtu => "label_skipped_mtu",
            Event::LabelSkippedRhc => "label_skipped_rhc",
            Event::LabelNoHeadroom => "label_no_headroom",
            Event::LabelSunk => "label_sunk",
            Event::LabelExported => "label_exported",
            Event::LabelReportRingFull => "label_report_ring_full",
            Event::LabelReportStackCut => "label_report_stack_cut",
            Event::LabelPassedMalformed => "label_passed_malformed",
            Event::LabelBlockBytes => "label_block_bytes",
            Event::AmpmMarked => "ampm_marked",
            Event::AmpmCounted => "ampm_counted",
            Event::AmpmTimestamped => "ampm_timestamped",
            Event::AmpmCleared => "ampm_cleared",
            Event::AmpmOptionInserted => "ampm_option_inserted",
            Event::AmpmOptionRemoved => "ampm_option_removed",
            Event::AmpmBadOption => "ampm_bad_option",
            Event::AmpmNoCarrier => "ampm_no_carrier",
            Event::AmpmNoHeadroom => "ampm_no_headroom",
            Event::GpintRx => "gpint_rx",
            Event::GpintFeedbackTx => "gpint_fb_tx",
            Event::GpintFeedbackRx => "gpint_fb_rx",
            Event::GpintFeedbackUnmatched => "gpint_fb_unmatched",
            Event::GpintDup => "gpint_dup",
            Event::GpintDelivered => "gpint_delivered",
            Event::GpintExportFull => "gpint_export_full",
            Event::GpintNoBuffer => "gpint_no_buffer",
            Event::SqrStored => "sqr_stored",
            Event::SqrAcked => "sqr_acked",
            Event::SqrTimeouts => "sqr_timeouts",
            Event::SqrBufferFull => "sqr_buffer_full",
            Event::SqrDroppedAtStop => "sqr_dropped_at_stop",
            Event::ImpairLostGpintProbe => "impair_lost_gpint_probe",
            Event::ImpairLostGpintFeedback => "impair_lost_gpint_feedback",
        }
    }
}

/// A worker's counters as plain numbers (its private copy, and snapshots).
///
/// Drops and events change rarely: count them through `drop`, `drop_n`,
/// `event` and `event_n`, which mark them for the next burst's
/// `publish_burst` (a full `publish` stores them regardless).
#[derive(Debug, Clone)]
pub struct CounterValues {
    pub rx_packets: [u64; MAX_PORTS],
    pub rx_bytes: [u64; MAX_PORTS],
    pub tx_packets: [u64; MAX_PORTS],
    pub tx_bytes: [u64; MAX_PORTS],
    pub drops: [u64; DropReason::COUNT],
    pub events: [u64; Event::COUNT],
    /// INT-label: labels written per egress port (published with the
    /// events: a label always counts one).
    pub labels: [u64; MAX_PORTS],
    /// Polls that found work / all polls (for busy %).
    pub busy_polls: u64,
    pub polls: u64,
    /// Drops or events changed since the last publish.
    sparse_dirty: bool,
}

/// Equal counts (whether they are published yet does not matter).
impl PartialEq for CounterValues {
    fn eq(&self, o: &Self) -> bool {
        self.rx_packets == o.rx_packets
            && self.rx_bytes == o.rx_bytes
            && self.tx_packets == o.tx_packets
            && self.tx_bytes == o.tx_bytes
            && self.drops == o.drops
            && self.events == o.events
            && self.labels == o.labels
            && self.busy_polls == o.busy_polls
            && self.polls == o.polls
    }
}

impl Eq for CounterValues {}

impl Default for CounterValues {
    fn default() -> Self {
        CounterValues {
            rx_packets: [0; MAX_PORTS],
            rx_bytes: [0; MAX_PORTS],
            tx_packets: [0; MAX_PORTS],
            tx_bytes: [0; MAX_PORTS],
            drops: [0; DropReason::COUNT],
            events: [0; Event::COUNT],
            labels: [0; MAX_PORTS],
            busy_polls: 0,
            polls: 0,
            sparse_dirty: false,
        }
    }
}

impl CounterValues {
    #[inline(always)]
    pub fn drop(&mut self, r: DropReason) {
        self.drop_n(r, 1);
    }

    #[inline(always)]
    pub fn drop_n(&mut self, r: DropReason, n: u64) {
        self.drops[r as usize] += n;
        self.sparse_dirty = true;
    }

    #[inline(always)]
    pub fn event(&mut self, e: Event) {
        self.event_n(e, 1);
    }

    #[inline(always)]
    pub fn event_n(&mut self, e: Event, n: u64) {
        self.events[e as usize] += n;
        self.sparse_dirty = true;
    }

    /// Drops or events were counted since the last publish.
    #[inline(always)]
    pub fn sparse_dirty(&self) -> bool {
        self.sparse_dirty
    }

    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Adds `o` into `self` (summing workers).
    pub fn add(&mut self, o: &CounterValues) {
        fn add_arr<const N: usize>(a: &mut [u64; N], b: &[u64; N]) {
            for (x, y) in a.iter_mut().zip(b) {
                *x += *y;
            }
        }
        add_arr(&mut self.rx_packets, &o.rx_packets);
        add_arr(&mut self.rx_bytes, &o.rx_bytes);
        add_arr(&mut self.tx_packets, &o.tx_packets);
        add_arr(&mut self.tx_bytes, &o.tx_bytes);
        add_arr(&mut self.drops, &o.drops);
        add_arr(&mut self.events, &o.events);
        add_arr(&mut self.labels, &o.labels);
        self.busy_polls += o.busy_polls;
        self.polls += o.polls;
    }

    /// `self - base`, saturating (for "clear counters" baselines and rates).
    pub fn since(&self, base: &CounterValues) -> CounterValues {
        fn sub<const N: usize>(a: &[u64; N], b: &[u64; N]) -> [u64; N] {
            std::array::from_fn(|i| a[i].saturating_sub(b[i]))
        }
        CounterValues {
            rx_packets: sub(&self.rx_packets, &base.rx_packets),
            rx_bytes: sub(&self.rx_bytes, &base.rx_bytes),
            tx_packets: sub(&self.tx_packets, &base.tx_packets),
            tx_bytes: sub(&self.tx_bytes, &base.tx_bytes),
            drops: sub(&self.drops, &base.drops),
            events: sub(&self.events, &base.events),
            labels: sub(&self.labels, &base.labels),
            busy_polls: self.busy_polls.saturating_sub(base.busy_polls),
            polls: self.polls.saturating_sub(base.polls),
            sparse_dirty: false,
        }
    }
}

/// The shared, cache-line-aligned block a worker publishes into.
#[repr(align(128))]
pub struct SharedCounters {
    rx_packets: [AtomicU64; MAX_PORTS],
    rx_bytes: [AtomicU64; MAX_PORTS],
    tx_packets: [AtomicU64; MAX_PORTS],
    tx_bytes: [AtomicU64; MAX_PORTS],
    drops: [AtomicU64; DropReason::COUNT],
    events: [AtomicU64; Event::COUNT],
    labels: [AtomicU64; MAX_PORTS],
    busy_polls: AtomicU64,
    polls: AtomicU64,
}

impl Default for SharedCounters {
    fn default() -> Self {
        SharedCounters {
            rx_packets: Default::default(),
            rx_bytes: Default::default(),
            tx_packets: Default::default(),
            tx_bytes: Default::default(),
            drops: std::array::from_fn(|_| AtomicU64::new(0)),
            events: std::array::from_fn(|_| AtomicU64::new(0)),
            labels: Default::default(),
            busy_polls: AtomicU64::new(0),
            polls: AtomicU64::new(0),
        }
    }
}

#[inline]
fn st(a: &[AtomicU64], b: &[u64]) {
    for (x, y) in a.iter().zip(b) {
        x.store(*y, Relaxed);
    }
}

impl SharedCounters {
    /// Publishes all of the owner's values (single writer: plain relaxed
    /// stores).
    pub fn publish(&self, v: &mut CounterValues) {
        self.publish_ports(v, MAX_PORTS);
        st(&self.drops, &v.drops);
        st(&self.events, &v.events);
        st(&self.labels, &v.labels);
        v.sparse_dirty = false;
    }

    /// Once per burst: the per-port counters of the first `ports` ports
    /// (the others never change) and the polls, and drops and events only
    /// if one was counted since the last publish. Storing every counter
    /// each burst was a third of a wire's own per-packet time.
    #[inline]
    pub fn publish_burst(&self, v: &mut CounterValues, ports: usize) {
        self.publish_ports(v, ports.min(MAX_PORTS));
        if v.sparse_dirty {
            st(&self.drops, &v.drops);
            st(&self.events, &v.events);
            st(&self.labels, &v.labels);
            v.sparse_dirty = false;
        }
    }

    #[inline]
    fn publish_ports(&self, v: &CounterValues, ports: usize) {
        st(&self.rx_packets[..ports], &v.rx_packets[..ports]);
        st(&self.rx_bytes[..ports], &v.rx_bytes[..ports]);
        st(&self.tx_packets[..ports], &v.tx_packets[..ports]);
        st(&self.tx_bytes[..ports], &v.tx_bytes[..ports]);
        self.busy_polls.store(v.busy_polls, Relaxed);
        self.polls.store(v.polls, Relaxed);
    }

    /// One port's packets received (`rx`) or sent, as last published.
    pub fn port_packets(&self, port: usize, rx: bool) -> u64 {
        let a = if rx { &self.rx_packets } else { &self.tx_packets };
        a.get(port).map_or(0, |v| v.load(Relaxed))
    }

    pub fn snapshot(&self) -> CounterValues {
        fn ld<const N: usize>(a: &[AtomicU64; N]) -> [u64; N] {
            std::array::from_fn(|i| a[i].load(Relaxed))
        }
        CounterValues {
            rx_packets: ld(&self.rx_packets),
            rx_bytes: ld(&self.rx_bytes),
            tx_packets: ld(&self.tx_packets),
            tx_bytes: ld(&self.tx_bytes),
            drops: ld(&self.drops),
            events: ld(&self.events),
            labels: ld(&self.labels),
            busy_polls: self.busy_polls.load(Relaxed),
            polls: self.polls.load(Relaxed),
            sparse_dirty: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_snapshot_sum_since() {
        let s = SharedCounters::default();
        let mut v = CounterValues::default();
        v.rx_packets[1] = 10;
        v.drop(DropReason::NoRoute);
        v.event(Event::FlowLearned);
        s.publish(&mut v);
        let snap = s.snapshot();
        assert_eq!(snap, v);
        let mut sum = snap.clone();
        sum.add(&v);
        assert_eq!(sum.rx_packets[1], 20);
        assert_eq!(sum.since(&v), v);
        assert_eq!(sum.total_drops(), 2);
        assert!(std::mem::align_of::<SharedCounters>() >= 64);
        for (i, e) in Event::ALL.iter().enumerate() {
            assert_eq!(*e as usize, i);
        }
    }

    #[test]
    fn burst_publish_stores_ports_in_use_and_counted_drops() {
        let s = SharedCounters::default();
        let mut v = CounterValues::default();
        v.rx_packets[0] = 3;
        v.tx_bytes[1] = 180;
        v.rx_packets[2] = 9; // not a port in use: left for the full publish
        s.publish_burst(&mut v, 2);
        let snap = s.snapshot();
        assert_eq!((snap.rx_packets[0], snap.tx_bytes[1], snap.rx_packets[2]), (3, 180, 0));
        v.drop_n(DropReason::TxFull, 4);
        v.event(Event::Flooded);
        s.publish_burst(&mut v, 2);
        let snap = s.snapshot();
        assert_eq!((snap.drops[DropReason::TxFull as usize], snap.events[Event::Flooded as usize]), (4, 1));
        // Nothing counted since: the next burst publish leaves them alone.
        v.drops[DropReason::NoRoute as usize] = 7;
        s.publish_burst(&mut v, 2);
        assert_eq!(s.snapshot().drops[DropReason::NoRoute as usize], 0);
        s.publish(&mut v);
        assert_eq!(s.snapshot(), v);
    }
}
