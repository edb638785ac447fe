//! Alternate-Marking performance measurement (AM-PM): the measurement
//! point's data-path stage.
//!
//! Two lookups per packet, as in the AM-PM paper §3.5: the per-flow rules
//! (a ternary classifier on the 5-tuple, DSCP and input port) name the
//! monitored flow, its role, method and carrier; then the method's global
//! time-slot table (a direct-indexed classifier on the receive-time bits,
//! the packet's mark bits and the flow's register) gives the action: which
//! mark to write, the new register value, which color counter to bump and
//! whether to timestamp. The default slot tables are the paper's tables 1-6
//! (`default_rules`); operators can replace rows at run time.
//!
//! Counters are per worker and per flow slot, single-writer atomics that the
//! control core reads once per interval, when a color is stable.

pub mod stage;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::classifier::{self, field, Classifier, Key, Probe, Rule};
use crate::counters::{CounterValues, Event};
use crate::parse::{L3Kind, PacketMeta};
use crate::pktbuf::PacketBuf;
use crate::wire::checksum;

/// IPv6 option type of the Alternate-Marking option (RFC 9343).
pub const ALTMARK_OPTION: u8 = 0x12;
const NH_HOP_BY_HOP: u8 = 0;
const NH_DEST_OPTS: u8 = 60;
/// Bytes an inserted AltMark option costs (a whole 8-byte options header,
/// or 8 bytes appended to an existing one).
pub const ALTMARK_BYTES: usize = 8;

/// Which timestamp format the time bits come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeFormat {
    /// 64-bit nanoseconds since the Unix epoch.
    Ns,
    /// 32.32 fixed-point seconds since the epoch (bit 32 = seconds LSB).
    SecFrac,
}

/// Interval and sub-interval bits, aligned to CLOCK_REALTIME.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub format: TimeFormat,
    /// The time bit whose value is the color (the interval T is 2^bit units).
    pub interval_bit: u8,
    /// Bits below it that split an interval into slots (2: quarters).
    pub sub_bits: u8,
}

impl Timing {
    pub fn word(&self) -> usize {
        match self.format {
            TimeFormat::Ns => field::TS_NS,
            TimeFormat::SecFrac => field::TS_FIX,
        }
    }

    /// The timestamp word (in this format) of `ns` since the epoch.
    pub fn word_of(&self, ns: u64) -> u64 {
        match self.format {
            TimeFormat::Ns => ns,
            TimeFormat::SecFrac => ns_to_fix(ns),
        }
    }

    /// Interval index and slot within it at `ns`.
    pub fn position(&self, ns: u64) -> (u64, u64) {
        let w = self.word_of(ns);
        (w >> self.interval_bit, (w >> (self.interval_bit - self.sub_bits)) & ((1 << self.sub_bits) - 1))
    }

    /// Start of interval `j` in ns since the epoch.
    pub fn start_ns(&self, j: u64) -> u64 {
        let t = j << self.interval_bit;
        match self.format {
            TimeFormat::Ns => t,
            TimeFormat::SecFrac => fix_to_ns(t),
        }
    }

    /// Length of an interval in ns (rounded down).
    pub fn interval_ns(&self) -> u64 {
        self.start_ns(1)
    }

    /// A ternary pattern (MSB first) over the interval bit and the slot bits.
    fn pattern(&self, bits: &str) -> (u64, u64) {
        let lsb = self.interval_bit as u32 + 1 - bits.len() as u32;
        classifier::parse_bits(bits, lsb).expect("generated pattern")
    }
}

/// 32.32 seconds -> ns.
pub fn fix_to_ns(t: u64) -> u64 {
    (t >> 32) * 1_000_000_000 + (((t & 0xffff_ffff) * 1_000_000_000) >> 32)
}

/// ns -> 32.32 seconds.
pub fn ns_to_fix(ns: u64) -> u64 {
    let (s, f) = (ns / 1_000_000_000, ns % 1_000_000_000);
    (s << 32) | ((f << 32) / 1_000_000_000)
}

/// Marking methods (AM-PM paper §2-§3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// Single-bit step: loss only (tables 1, 2).
    Step,
    /// Single-bit pulse: delay only (tables 3, 4).
    Pulse,
    /// Step on L plus a pulse on D (two bits).
    Double,
    /// Single-bit multiplexed step + pulse with time-multiplexed parsing
    /// (tables 5, 6).
    Muxed,
}

impl Method {
    pub const ALL: [Method; 4] = [Method::Step, Method::Pulse, Method::Double, Method::Muxed];
    pub fn name(self) -> &'static str {
        match self {
            Method::Step => "step",
            Method::Pulse => "pulse",
            Method::Double => "double",
            Method::Muxed => "muxed",
        }
    }
}

/// This switch's measurement point role for a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MpRole {
    /// Marks (and counts what it marked).
    Initiator,
    /// Reads and counts.
    Transit,
    /// Reads, counts, then clears the marks (removes the IPv6 option).
    Terminator,
}

impl MpRole {
    pub const ALL: [MpRole; 3] = [MpRole::Initiator, MpRole::Transit, MpRole::Terminator];
    pub fn name(self) -> &'static str {
        match self {
            MpRole::Initiator => "initiator",
            MpRole::Transit => "transit",
            MpRole::Terminator => "terminator",
        }
    }
}

/// Where the mark bits travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    /// DSCP bits (bit 0 = DSCP LSB): L, and D for double marking. IPv4 TOS
    /// or IPv6 traffic class.
    Dscp { l_bit: u8, d_bit: u8 },
    /// IPv4 flags reserved bit for L; a DSCP bit for D.
    Ipv4Flag { d_bit: u8 },
    /// RFC 9343 AltMark option in a Hop-by-Hop options header.
    Ipv6HopByHop,
    /// RFC 9343 AltMark option in a Destination options header.
    Ipv6DestOpts,
}

impl Carrier {
    pub fn name(&self) -> &'static str {
        match self {
            Carrier::Dscp { .. } => "dscp",
            Carrier::Ipv4Flag { .. } => "ipv4_flag",
            Carrier::Ipv6HopByHop => "ipv6_hbh",
            Carrier::Ipv6DestOpts => "ipv6_dest",
        }
    }

    fn is_option(&self) -> bool {
        matches!(self, Carrier::Ipv6HopByHop | Carrier::Ipv6DestOpts)
    }
}

/// What a slot rule does to a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotAction {
    /// Write the L (single-bit methods: the mark) bit.
    pub set_l: Option<bool>,
    /// Write the D bit.
    pub set_d: Option<bool>,
    /// New value of the flow's register.
    pub reg: Option<u8>,
    /// The block (color) the packet belongs to.
    pub color: u8,
    /// Count packets and bytes into `color`.
    pub count: bool,
    /// Record the receive timestamp as a delay reference of `color`.
    pub timestamp: bool,
}

/// Key bits of the mark: L is bit 0, D bit 1.
pub const MARK_L: u8 = 1;
pub const MARK_D: u8 = 2;

/// One slot-table row as the tables write it: a pattern over the interval
/// bit and slot bits (MSB first, `*` = any), the mark and register bits.
struct Row {
    time: String,
    mark: Option<u8>,
    mark_mask: u8,
    reg: Option<u8>,
    action: SlotAction,
}

fn row(time: String, mark: Option<u8>, mark_mask: u8, reg: Option<u8>, action: SlotAction) -> Row {
    Row { time, mark, mark_mask, reg, action }
}

fn act(l: Option<bool>, d: Option<bool>, reg: Option<u8>, color: u8, count: bool, ts: bool) -> SlotAction {
    SlotAction { set_l: l, set_d: d, reg, color, count, timestamp: ts }
}

/// Name of the slot table for a method and role.
pub fn table_name(m: Method, r: MpRole) -> String {
    format!("{}-{}", m.name(), r.name())
}

/// The paper's match-action tables for a method and role, generalised to
/// `sub_bits` slot bits: the initiator's pulse goes to the first packet of
/// the first slot of the interval's second half ("010" with 2 bits); a
/// reader takes a mark as a pulse only in the two middle quarters ("001",
/// "010"), the guard sub-intervals around each color switch read it as the
/// step.
pub fn default_rules(m: Method, r: MpRole, t: &Timing) -> Vec<Rule<SlotAction>> {
    let s = t.sub_bits as usize;
    let pulse_slot = |c: u8| format!("{c}1{}", "0".repeat(s - 1));
    let quarter = |c: u8, q: &str| format!("{c}{q}{}", "*".repeat(s - 2));
    let any = |c: u8| format!("{c}{}", "*".repeat(s));
    let reader = matches!(r, MpRole::Transit | MpRole::Terminator);
    let mut rows: Vec<Row> = Vec::new();
    let l = Some;
    match (m, reader) {
        // Table 1: TimeBit = c -> MarkBit = c, counter c.
        (Method::Step, false) => {
            for c in 0..2u8 {
                rows.push(row(any(c), None, 0, None, act(l(c == 1), None, None, c, true, false)));
            }
        }
        // Table 2: MarkBit = c -> counter c.
        (Method::Step, true) => {
            for c in 0..2u8 {
                rows.push(row("*".into(), Some(c), MARK_L, None, act(None, None, None, c, true, false)));
            }
        }
        // Table 3: the first packet after each time-bit flip is the pulse.
        (Method::Pulse, false) => {
            rows.push(row(any(1), None, 0, Some(0), act(l(true), None, Some(1), 1, false, true)));
            rows.push(row(any(1), None, 0, Some(1), act(l(false), None, Some(1), 1, false, false)));
            rows.push(row(any(0), None, 0, Some(1), act(l(true), None, Some(0), 0, false, true)));
            rows.push(row(any(0), None, 0, Some(0), act(l(false), None, Some(0), 0, false, false)));
        }
        // Table 4: MarkBit = 1 -> timestamp (of the block the time bit says).
        (Method::Pulse, true) => {
            for c in 0..2u8 {
                rows.push(row(any(c), Some(1), MARK_L, None, act(None, None, None, c, false, true)));
            }
        }
        // Step on L (table 1) + table 5's pulse on D.
        (Method::Double, false) => {
            for c in 0..2u8 {
                let lc = l(c == 1);
                rows.push(row(pulse_slot(c), None, 0, Some(0), act(lc, l(true), Some(1), c, true, true)));
                rows.push(row(pulse_slot(c), None, 0, Some(1), act(lc, l(false), Some(1), c, true, false)));
                rows.push(row(any(c), None, 0, None, act(lc, l(false), Some(0), c, true, false)));
            }
        }
        (Method::Double, true) => {
            for c in 0..2u8 {
                rows.push(row(
                    "*".into(),
                    Some(c | MARK_D),
                    MARK_L | MARK_D,
                    None,
                    act(None, None, None, c, true, true),
                ));
                rows.push(row("*".into(), Some(c), MARK_L, None, act(None, None, None, c, true, false)));
            }
        }
        // Table 5.
        (Method::Muxed, false) => {
            rows.push(row(pulse_slot(0), None, 0, Some(0), act(l(true), None, Some(1), 0, true, true)));
            rows.push(row(pulse_slot(0), None, 0, Some(1), act(l(false), None, Some(1), 0, true, false)));
            rows.push(row(any(0), None, 0, None, act(l(false), None, Some(0), 0, true, false)));
            rows.push(row(pulse_slot(1), None, 0, Some(1), act(l(false), None, Some(0), 1, true, true)));
            rows.push(row(pulse_slot(1), None, 0, Some(0), act(l(true), None, Some(0), 1, true, false)));
            rows.push(row(any(1), None, 0, None, act(l(true), None, Some(1), 1, true, false)));
        }
        // Table 6.
        (Method::Muxed, true) => {
            rows.push(row(quarter(0, "01"), Some(1), MARK_L, None, act(None, None, None, 0, true, true)));
            rows.push(row(quarter(0, "10"), Some(1), MARK_L, None, act(None, None, None, 0, true, true)));
            rows.push(row(quarter(1, "01"), Some(0), MARK_L, None, act(None, None, None, 1, true, true)));
            rows.push(row(quarter(1, "10"), Some(0), MARK_L, None, act(None, None, None, 1, true, true)));
            rows.push(row("*".into(), Some(0), MARK_L, None, act(None, None, None, 0, true, false)));
            rows.push(row("*".into(), Some(1), MARK_L, None, act(None, None, None, 1, true, false)));
        }
    }
    let n = rows.len() as u32;
    rows.iter()
        .enumerate()
        .map(|(i, row)| slot_rule(t, &format!("{}/{}", table_name(m, r), i + 1), (n - i as u32) * 10, row))
        .collect()
}

fn slot_rule(t: &Timing, name: &str, priority: u32, row: &Row) -> Rule<SlotAction> {
    let mut value = Key::default();
    let mut mask = Key::default();
    if row.time.chars().any(|c| c != '*') {
        let (v, m) = t.pattern(&row.time);
        value.0[t.word()] = v;
        mask.0[t.word()] = m;
    }
    if let Some(mk) = row.mark {
        value.set_meta(field::MARK_SHIFT, 2, mk as u64);
        mask.set_meta(field::MARK_SHIFT, 2, row.mark_mask as u64);
    }
    if let Some(r) = row.reg {
        value.set_meta(field::REG_SHIFT, 1, r as u64);
        mask.set_meta(field::REG_SHIFT, 1, 1);
    }
    Rule { name: name.into(), priority, value, mask, action: row.action }
}

/// Builds a slot rule from operator input: a time pattern over the interval
/// and slot bits, optional mark (0-3) with mask and register bit.
pub fn user_slot_rule(
    t: &Timing,
    name: &str,
    priority: u32,
    time: &str,
    mark: Option<(u8, u8)>,
    reg: Option<u8>,
    action: SlotAction,
) -> Result<Rule<SlotAction>, String> {
    if !time.chars().all(|c| matches!(c, '0' | '1' | '*')) || time.is_empty() {
        return Err(format!("time `{time}`: a pattern of 0, 1 and * (interval bit first)"));
    }
    if time.len() > t.sub_bits as usize + 1 {
        return Err(format!(
            "time `{time}`: at most {} bits (interval bit + {} slot bits)",
            t.sub_bits + 1,
            t.sub_bits
        ));
    }
    let (mark, mark_mask) = match mark {
        Some((v, m)) if v > 3 || m > 3 => return Err("mark: 0-3 (bit 0 = L, bit 1 = D)".into()),
        Some((v, m)) => (Some(v), m),
        None => (None, 0),
    };
    if reg.is_some_and(|r| r > 1) || action.reg.is_some_and(|r| r > 1) {
        return Err("register: 0 or 1".into());
    }
    if action.color > 1 {
        return Err("color: 0 or 1".into());
    }
    Ok(slot_rule(t, name, priority, &row(time.to_string(), mark, mark_mask, reg, action)))
}

/// A monitored flow: its per-flow rule and what the rule hands the stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmpmFlow {
    pub name: String,
    /// This switch's measurement point for the flow (the rule's action).
    pub mp: FlowRef,
    /// The per-flow rule: higher priority wins, then the older flow.
    pub priority: u32,
    pub value: Key,
    pub mask: Key,
}

/// The data path's part of a flow, carried as the per-flow rule's action:
/// the lookup hands it over from the rule's table slot, with no second
/// random read of `AmpmSpec::flows` per packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowRef {
    /// Counter slot (stable while the flow exists).
    pub slot: u32,
    /// RFC 9343 FlowMonID (20 bits).
    pub flow_mon_id: u32,
    pub role: MpRole,
    pub method: Method,
    pub carrier: Carrier,
    /// Terminator: clear the marks / remove the option (false when the
    /// next hop is the destination and wants them).
    pub clear: bool,
}

/// The AM-PM state the control core keeps canonical (and compiles into an
/// `AmpmSpec` for each table generation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmpmSetup {
    pub node_id: u32,
    pub timing: Timing,
    pub capacity: usize,
    pub flows: Vec<AmpmFlow>,
    /// Slot tables indexed by `table_index`.
    pub slot_rules: Vec<Vec<Rule<SlotAction>>>,
}

impl AmpmSetup {
    /// A setup with the paper's tables and no flows.
    pub fn new(node_id: u32, timing: Timing, capacity: usize) -> AmpmSetup {
        let mut slot_rules = vec![Vec::new(); Method::ALL.len() * MpRole::ALL.len()];
        for m in Method::ALL {
            for r in MpRole::ALL {
                slot_rules[table_index(m, r)] = default_rules(m, r, &timing);
            }
        }
        AmpmSetup { node_id, timing, capacity, flows: Vec::new(), slot_rules }
    }

    pub fn compile(&self) -> AmpmSpec {
        let flow_rules = self
            .flows
            .iter()
            .map(|f| Rule { name: f.name.clone(), priority: f.priority, value: f.value, mask: f.mask, action: f.mp })
            .collect();
        AmpmSpec {
            node_id: self.node_id,
            timing: self.timing,
            capacity: self.capacity,
            flows: self.flows.clone(),
            flow_rules: Classifier::new(flow_rules),
            slots: self.slot_rules.iter().map(|r| Classifier::new(r.clone())).collect(),
        }
    }

    /// Index of the table called `name` (`muxed-initiator`, ...).
    pub fn table_by_name(name: &str) -> Option<usize> {
        for m in Method::ALL {
            for r in MpRole::ALL {
                if table_name(m, r) == name {
                    return Some(table_index(m, r));
                }
            }
        }
        None
    }

    pub fn table_names() -> Vec<String> {
        let mut v = vec![String::new(); Method::ALL.len() * MpRole::ALL.len()];
        for m in Method::ALL {
            for r in MpRole::ALL {
                v[table_index(m, r)] = table_name(m, r);
            }
        }
        v
    }
}

/// The AM-PM configuration one table generation carries.
pub struct AmpmSpec {
    pub node_id: u32,
    pub timing: Timing,
    /// Counter slots per worker.
    pub capacity: usize,
    pub flows: Vec<AmpmFlow>,
    /// Per-flow rules: action = what the data path needs of the flow.
    pub flow_rules: Classifier<FlowRef>,
    /// Slot tables, indexed by `table_index`.
    pub slots: Vec<Classifier<SlotAction>>,
}

pub fn table_index(m: Method, r: MpRole) -> usize {
    let mi = Method::ALL.iter().position(|x| *x == m).unwrap_or(0);
    let ri = MpRole::ALL.iter().position(|x| *x == r).unwrap_or(0);
    mi * MpRole::ALL.len() + ri
}

/// One color's counters of one flow on one worker.
#[derive(Debug, Default)]
#[repr(C)]
pub struct ColorCounters {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    /// Wrapping sum of each packet's receive time minus its block's start
    /// (ns, as i64): mean timestamp = start + sum / packets.
    pub ts_offset_sum: AtomicU64,
    pub delay_count: AtomicU64,
    /// Receive time (ns) of the last delay-marked packet.
    pub delay_ts: AtomicU64,
}

/// Both colors of one flow slot on one worker. Aligned to a cache line:
/// what every packet updates (packets, bytes, timestamp sum of either
/// color) then lies in the slot's first line, and a packet touches one
/// line, not one or two.
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub struct FlowCounters {
    pub color: [ColorCounters; 2],
}

/// Single writer: a load and a store, no locked instruction.
#[inline(always)]
fn bump(a: &AtomicU64, by: u64) {
    a.store(a.load(Relaxed).wrapping_add(by), Relaxed);
}

/// Receive time of a burst, computed once for all its packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BurstTime {
    pub ns: u64,
    pub fix: u64,
    /// Interval index at this time and whether it is in its first half.
    pub interval: u64,
    first_half: bool,
    /// Offset of `ns` from the start of this / the previous / the next
    /// interval (two's complement).
    off_same: u64,
    off_prev: u64,
    off_next: u64,
}

impl BurstTime {
    pub fn new(t: &Timing, ns: u64) -> BurstTime {
        let fix = ns_to_fix(ns);
        let word = if t.format == TimeFormat::Ns { ns } else { fix };
        let interval = word >> t.interval_bit;
        let start = t.start_ns(interval);
        let len = t.start_ns(interval + 1) - start;
        let off_same = ns.wrapping_sub(start);
        BurstTime {
            ns,
            fix,
            interval,
            first_half: (word >> (t.interval_bit - 1)) & 1 == 0,
            off_same,
            off_prev: off_same.wrapping_add(t.start_ns(interval) - t.start_ns(interval.saturating_sub(1))),
            off_next: off_same.wrapping_sub(len),
        }
    }

    /// Offset from the start of the block of color `c`: this interval's, the
    /// previous one (a late packet) or the next one (an early packet, from
    /// a clock ahead of ours).
    #[inline]
    fn offset(&self, c: u8) -> u64 {
        if c as u64 == self.interval & 1 {
            self.off_same
        } else if self.first_half {
            self.off_prev
        } else {
            self.off_next
        }
    }
}

/// Where the marks are in one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// IPv4 or DSCP bits: always there.
    Bits,
    /// The option's type byte at `opt`, in the options header at `hdr`
    /// (`len` bytes) whose type is recorded at `nh_at`.
    Option { opt: usize, hdr: usize, len: usize, nh_at: usize, only: bool },
    /// No option; the header it would go into (if there is one) and where
    /// its type is recorded; without one, where a new header would go.
    Absent { hdr: Option<(usize, usize)>, nh_at: usize, at: usize },
}

/// What a carrier read says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CarrierError {
    /// Wrong family for the carrier, or no option at a reader.
    None,
    /// AltMark with a wrong length, options running off their header.
    Malformed,
}

/// Outcome of the stage for one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// No monitored flow.
    Unmonitored,
    Measured,
    /// The carrier was missing or malformed: counted, packet untouched.
    Skipped,
}

/// What the stage works with on a worker.
pub struct AmpmCtx<'a> {
    pub spec: &'a AmpmSpec,
    /// This worker's per-slot registers.
    pub regs: &'a mut [u8],
    /// This worker's per-slot counters.
    pub counters: &'a [FlowCounters],
    pub c: &'a mut CounterValues,
    pub now: &'a BurstTime,
    /// Slot-table answers already found in this burst (one per `now`).
    pub memo: &'a mut SlotMemo,
    /// How far the burst's prefetch passes took the packet's flow lookup.
    pub flow: FlowLookup<'a>,
}

/// A packet's flow lookup, as far as the burst's prefetch passes took it.
#[derive(Debug, Clone, Copy)]
pub enum FlowLookup<'a> {
    /// Not begun: `apply` looks the flow up by key.
    ByKey,
    /// Begun by [`prefetch`]: the probe spares the lookup the key.
    Probed(&'a Probe),
    /// Done (the second pass, which prefetched the flow's counters).
    Found(Option<&'a FlowRef>),
}

/// The slot-table answer of the last packet, kept for the rest of one
/// burst: the time bits are the burst's, so the answer depends only on the
/// table and the mark and register bits, which most flows share (a single
/// compare instead of gathering key bits and reading the table). A new
/// burst, or a new table generation, starts with a new memo.
#[derive(Debug, Clone, Copy, Default)]
pub struct SlotMemo {
    last: Option<(usize, u64, Option<SlotAction>)>,
}

impl SlotMemo {
    #[inline(always)]
    fn lookup(&mut self, spec: &AmpmSpec, table: usize, k: &Key) -> Option<SlotAction> {
        let meta = k.0[field::META];
        match self.last {
            Some((t, m, a)) if t == table && m == meta => a,
            _ => {
                let a = spec.slots[table].lookup(k).copied();
                self.last = Some((table, meta, a));
                a
            }
        }
    }
}

/// Builds the per-flow lookup key of a parsed packet.
#[inline]
pub fn flow_key(b: &[u8], meta: &PacketMeta) -> Key {
    let mut k = Key::default();
    let dscp = dscp_of(b, meta);
    let fk = &meta.key;
    k.0[field::META] = (dscp as u64) << field::DSCP_SHIFT
        | (fk.proto() as u64) << field::PROTO_SHIFT
        | (fk.in_port() as u64) << field::IN_PORT_SHIFT
        | (fk.ip_version() as u64) << field::IP_VERSION_SHIFT;
    k.0[field::PORTS] = fk.src_port() as u64 | (fk.dst_port() as u64) << 16;
    k.set_addr(field::SRC, fk.src);
    k.set_addr(field::DST, fk.dst);
    k
}

fn dscp_of(b: &[u8], meta: &PacketMeta) -> u8 {
    let o = meta.l3_offset;
    match meta.l3 {
        L3Kind::Ipv4 => b[o + 1] >> 2,
        L3Kind::Ipv6 => ((b[o] & 0x0f) << 4 | b[o + 1] >> 4) >> 2,
        _ => 0,
    }
}

/// Starts loading the packet's per-flow rule (a burst's first pass calls
/// this so `apply` finds it in the cache). The probe it returns, handed to
/// `apply` as `FlowLookup::Probed`, spares that lookup the key: valid while
/// the packet's addresses, protocol, ports and DSCP stay as they were,
/// which the stages before AM-PM (forwarding, SQR) never change.
#[inline]
pub fn prefetch(spec: &AmpmSpec, b: &[u8], meta: &PacketMeta) -> Option<Probe> {
    if !matches!(meta.l3, L3Kind::Ipv4 | L3Kind::Ipv6) {
        return None;
    }
    spec.flow_rules.probe(&flow_key(b, meta))
}

/// Runs AM-PM on one packet. `meta` is kept valid when an option header is
/// inserted or removed.
pub fn apply<B: PacketBuf>(ctx: &mut AmpmCtx, pkt: &mut B, meta: &mut PacketMeta) -> Outcome {
    apply_inline(ctx, pkt, meta)
}

/// `apply`, always inlined: into the quick path's own loop. (`apply` is
/// left to the compiler: the full path's loop, shared by every mode, is
/// large already.)
#[inline(always)]
pub fn apply_inline<B: PacketBuf>(ctx: &mut AmpmCtx, pkt: &mut B, meta: &mut PacketMeta) -> Outcome {
    if !matches!(meta.l3, L3Kind::Ipv4 | L3Kind::Ipv6) {
        return Outcome::Unmonitored;
    }
    let spec = ctx.spec;
    let flow = match ctx.flow {
        FlowLookup::Found(f) => f,
        FlowLookup::Probed(p) => spec.flow_rules.lookup_probe(p),
        FlowLookup::ByKey => spec.flow_rules.lookup(&flow_key(pkt.bytes(), meta)),
    };
    let Some(flow) = flow else {
        return Outcome::Unmonitored;
    };
    let slot = flow.slot as usize;
    if slot >= ctx.regs.len() || slot >= ctx.counters.len() {
        return Outcome::Unmonitored;
    }
    let mut found = match locate(pkt.bytes(), meta, &flow.carrier) {
        Ok(f) => f,
        Err(CarrierError::Malformed) => {
            ctx.c.event(Event::AmpmBadOption);
            return Outcome::Skipped;
        }
        Err(CarrierError::None) => {
            ctx.c.event(Event::AmpmNoCarrier);
            return Outcome::Skipped;
        }
    };
    if flow.role != MpRole::Initiator && matches!(found, Found::Absent { .. }) {
        // A reader with no option on the packet: not marked upstream.
        ctx.c.event(Event::AmpmNoCarrier);
        return Outcome::Skipped;
    }
    let mark = read_mark(pkt.bytes(), meta, &flow.carrier, &found);
    let mut k = Key::default();
    k.0[field::TS_NS] = ctx.now.ns;
    k.0[field::TS_FIX] = ctx.now.fix;
    k.0[field::META] = (mark as u64) << field::MARK_SHIFT | (ctx.regs[slot] as u64) << field::REG_SHIFT;
    let Some(a) = ctx.memo.lookup(spec, table_index(flow.method, flow.role), &k) else {
        return Outcome::Measured;
    };
    if let Some(r) = a.reg {
        ctx.regs[slot] = r;
    }
    if flow.role == MpRole::Initiator && (a.set_l.is_some() || a.set_d.is_some()) {
        let l = a.set_l.unwrap_or(mark & MARK_L != 0);
        let d = a.set_d.unwrap_or(mark & MARK_D != 0);
        match write_mark(pkt, meta, flow, &mut found, l, d) {
            Written::InPlace => ctx.c.event(Event::AmpmMarked),
            Written::Inserted => {
                ctx.c.event(Event::AmpmOptionInserted);
                ctx.c.event(Event::AmpmMarked);
            }
            Written::NoRoom => {
                ctx.c.event(Event::AmpmNoHeadroom);
                return Outcome::Skipped;
            }
        }
    }
    let fc = &ctx.counters[slot].color[(a.color & 1) as usize];
    if a.count {
        let len = meta.l3_end - meta.l3_offset - if flow.carrier.is_option() { ALTMARK_BYTES } else { 0 };
        bump(&fc.packets, 1);
        bump(&fc.bytes, len as u64);
        bump(&fc.ts_offset_sum, ctx.now.offset(a.color));
        if flow.role != MpRole::Initiator {
            ctx.c.event(Event::AmpmCounted);
        }
    }
    if a.timestamp {
        bump(&fc.delay_count, 1);
        fc.delay_ts.store(ctx.now.ns, Relaxed);
        ctx.c.event(Event::AmpmTimestamped);
    }
    if flow.role == MpRole::Terminator && flow.clear {
        clear_marks(pkt, meta, &flow.carrier, &found, ctx.c);
    }
    Outcome::Measured
}

#[inline]
fn rd16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Finds the carrier in the packet.
fn locate(b: &[u8], meta: &PacketMeta, carrier: &Carrier) -> Result<Found, CarrierError> {
    match (carrier, meta.l3) {
        (Carrier::Dscp { .. }, _) | (Carrier::Ipv4Flag { .. }, L3Kind::Ipv4) => Ok(Found::Bits),
        (Carrier::Ipv4Flag { .. }, _) => Err(CarrierError::None),
        (Carrier::Ipv6HopByHop | Carrier::Ipv6DestOpts, L3Kind::Ipv6) => {
            let want = if *carrier == Carrier::Ipv6HopByHop { NH_HOP_BY_HOP } else { NH_DEST_OPTS };
            locate_option(b, meta, want)
        }
        _ => Err(CarrierError::None),
    }
}

/// Walks the IPv6 extension headers for the options header `want`: Hop-by-Hop
/// must come first; Destination options are taken before a Routing header
/// or, without one, just before the upper layer.
fn locate_option(b: &[u8], meta: &PacketMeta, want: u8) -> Result<Found, CarrierError> {
    let o = meta.l3_offset;
    let end = meta.l3_end.min(b.len());
    let mut nh_at = o + 6;
    let mut at = o + 40;
    for _ in 0..8 {
        let nh = b[nh_at];
        let is_ext = crate::wire::ipv6::is_extension(nh);
        if nh == want {
            if at + 2 > end {
                return Err(CarrierError::Malformed);
            }
            let len = (b[at + 1] as usize + 1) * 8;
            if at + len > end {
                return Err(CarrierError::Malformed);
            }
            return scan_options(b, at, len, nh_at);
        }
        let stop_here = match want {
            NH_HOP_BY_HOP => true,
            // Before a Routing header, and before a Fragment header: one
            // added after it would be in the fragmentable part and break
            // reassembly.
            _ => !is_ext || nh == 43 || nh == 44,
        };
        if stop_here || at + 2 > end {
            if at > end {
                return Err(CarrierError::Malformed);
            }
            // Not there: a new header would go before the one at `at`.
            return Ok(if want == NH_HOP_BY_HOP {
                Found::Absent { hdr: None, nh_at: o + 6, at: o + 40 }
            } else {
                Found::Absent { hdr: None, nh_at, at }
            });
        }
        let len = if nh == 44 { 8 } else { (b[at + 1] as usize + 1) * 8 };
        nh_at = at;
        at += len;
    }
    Err(CarrierError::Malformed)
}

/// The IPv6 extension headers before the upper layer (a chain the parser
/// accepted: at most MAX_EXT_HEADERS, each within the packet).
fn ext_headers(b: &[u8], meta: &PacketMeta) -> usize {
    let end = meta.l3_end.min(b.len());
    let (mut nh, mut at, mut n) = (b[meta.l3_offset + 6], meta.l3_offset + 40, 0);
    while crate::wire::ipv6::is_extension(nh) && at + 2 <= end && n <= crate::wire::ipv6::MAX_EXT_HEADERS {
        n += 1;
        let len = if nh == 44 { 8 } else { (b[at + 1] as usize + 1) * 8 };
        nh = b[at];
        at += len;
    }
    n
}

fn scan_options(b: &[u8], hdr: usize, len: usize, nh_at: usize) -> Result<Found, CarrierError> {
    let end = hdr + len;
    let mut i = hdr + 2;
    let mut opt = None;
    let mut only = true;
    while i < end {
        let t = b[i];
        if t == 0 {
            i += 1;
            continue;
        }
        if i + 2 > end {
            return Err(CarrierError::Malformed);
        }
        let l = b[i + 1] as usize;
        if i + 2 + l > end {
            return Err(CarrierError::Malformed);
        }
        if t == ALTMARK_OPTION {
            if l != 4 || opt.is_some() {
                return Err(CarrierError::Malformed);
            }
            opt = Some(i);
        } else if t != 1 {
            only = false;
        }
        i += 2 + l;
    }
    Ok(match opt {
        Some(opt) => Found::Option { opt, hdr, len, nh_at, only },
        None => Found::Absent { hdr: Some((hdr, len)), nh_at, at: end },
    })
}

/// The smallest run of whole options around the AltMark option at `opt`
/// that holds only it and padding (Pad1, PadN) and starts and ends on an
/// 8-byte boundary of the options header at `hdr` (`len` bytes, already
/// checked by `scan_options`): what can be cut out leaving a valid header.
fn padded_block(b: &[u8], hdr: usize, len: usize, opt: usize) -> Option<(usize, usize)> {
    let end = hdr + len;
    let (mut start, mut i) = (None, hdr + 2);
    // Walk up to the option: the last 8-aligned option start with only
    // padding between it and the option.
    while i < opt {
        let t = b[i];
        start = if t > 1 {
            None
        } else if (i - hdr) % 8 == 0 {
            Some(i)
        } else {
            start
        };
        i += if t == 0 { 1 } else { 2 + b[i + 1] as usize };
    }
    if i != opt {
        return None;
    }
    let s = if (opt - hdr) % 8 == 0 { opt } else { start? };
    // And past it, over padding only, to the first 8-aligned option end.
    let mut i = opt + 6;
    loop {
        if (i - hdr) % 8 == 0 {
            return Some((s, i));
        }
        if i >= end || b[i] > 1 {
            return None;
        }
        i += if b[i] == 0 { 1 } else { 2 + b[i + 1] as usize };
    }
}

fn dscp_mask(bit: u8) -> u8 {
    1 << (bit + 2)
}

/// Reads one DSCP bit (IPv4 TOS or IPv6 traffic class).
#[inline(always)]
fn tos_bit(b: &[u8], meta: &PacketMeta, bit: u8) -> bool {
    let o = meta.l3_offset;
    match meta.l3 {
        L3Kind::Ipv4 => b[o + 1] & dscp_mask(bit) != 0,
        _ => (((b[o] & 0x0f) << 4 | b[o + 1] >> 4) & dscp_mask(bit)) != 0,
    }
}

#[inline(always)]
fn read_mark(b: &[u8], meta: &PacketMeta, carrier: &Carrier, found: &Found) -> u8 {
    let (l, d) = match (carrier, found) {
        (Carrier::Dscp { l_bit, d_bit }, _) => (tos_bit(b, meta, *l_bit), tos_bit(b, meta, *d_bit)),
        (Carrier::Ipv4Flag { d_bit }, _) => (b[meta.l3_offset + 6] & 0x80 != 0, tos_bit(b, meta, *d_bit)),
        (_, Found::Option { opt, .. }) => {
            let v = u32::from_be_bytes([b[opt + 2], b[opt + 3], b[opt + 4], b[opt + 5]]);
            (v >> 11 & 1 != 0, v >> 10 & 1 != 0)
        }
        _ => (false, false),
    };
    ((l as u8) * MARK_L) | ((d as u8) * MARK_D)
}

/// Sets or clears `mask` in byte `at` of the IPv4 header (1: TOS, 6:
/// flags), fixing the header checksum incrementally.
///
/// The new 16-bit word is computed from the old one in registers (writing
/// the byte and reading the word back stalls on store forwarding). The
/// header's first 12 bytes as one array: the parse checked it is whole,
/// and constant offsets into it need no bounds checks.
#[inline(always)]
fn set_ipv4_bits(b: &mut [u8], meta: &PacketMeta, at: usize, mask: u8, on: bool) {
    let Some(h) = b.get_mut(meta.l3_offset..).and_then(|h| h.first_chunk_mut::<12>()) else { return };
    let w = at & !1;
    let old = u16::from_be_bytes([h[w], h[w + 1]]);
    let m = if at == w { (mask as u16) << 8 } else { mask as u16 };
    let new = if on { old | m } else { old & !m };
    if old != new {
        h[w..w + 2].copy_from_slice(&new.to_be_bytes());
        let c = checksum::update16(u16::from_be_bytes([h[10], h[11]]), old, new);
        h[10..12].copy_from_slice(&c.to_be_bytes());
    }
}

#[inline(always)]
fn set_tos_bit(b: &mut [u8], meta: &PacketMeta, bit: u8, on: bool) {
    let o = meta.l3_offset;
    match meta.l3 {
        L3Kind::Ipv4 => set_ipv4_bits(b, meta, 1, dscp_mask(bit), on),
        _ => {
            // Traffic class spans bytes 0-1: TC bit k is byte 1 bit (k+4) for
            // k < 4, byte 0 bit (k-4) otherwise.
            let k = bit + 2;
            let (at, m) = if k < 4 { (o + 1, 1u8 << (k + 4)) } else { (o, 1u8 << (k - 4)) };
            if on {
                b[at] |= m;
            } else {
                b[at] &= !m;
            }
        }
    }
}

fn altmark_data(flow_mon_id: u32, l: bool, d: bool) -> [u8; 4] {
    ((flow_mon_id & 0xf_ffff) << 12 | (l as u32) << 11 | (d as u32) << 10).to_be_bytes()
}

fn add_payload_len(b: &mut [u8], meta: &PacketMeta, delta: isize) {
    let at = meta.l3_offset + 4;
    let v = (rd16(b, at) as isize + delta) as u16;
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// What writing the marks did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    /// Marks written where `found` said.
    InPlace,
    /// The IPv6 option was inserted; `found` now points at it.
    Inserted,
    /// No headroom for the option.
    NoRoom,
}

/// Writes L and D; inserts the IPv6 option when the packet has none and
/// updates `found` in place (returning a new `Found` by value made the
/// caller re-read it with wide loads right after narrow stores: a store
/// forwarding stall on every marked packet).
#[inline(always)]
fn write_mark<B: PacketBuf>(
    pkt: &mut B,
    meta: &mut PacketMeta,
    flow: &FlowRef,
    found: &mut Found,
    l: bool,
    d: bool,
) -> Written {
    match (&flow.carrier, *found) {
        (Carrier::Dscp { l_bit, d_bit }, _) => {
            let b = pkt.bytes_mut();
            set_tos_bit(b, meta, *l_bit, l);
            if flow.method == Method::Double {
                set_tos_bit(b, meta, *d_bit, d);
            }
            Written::InPlace
        }
        (Carrier::Ipv4Flag { d_bit }, _) => {
            let b = pkt.bytes_mut();
            set_ipv4_bits(b, meta, 6, 0x80, l);
            if flow.method == Method::Double {
                set_tos_bit(b, meta, *d_bit, d);
            }
            Written::InPlace
        }
        (_, Found::Option { opt, .. }) => {
            pkt.bytes_mut()[opt + 2..opt + 6].copy_from_slice(&altmark_data(flow.flow_mon_id, l, d));
            Written::InPlace
        }
        (carrier, Found::Absent { hdr, nh_at, at }) => {
            let data = altmark_data(flow.flow_mon_id, l, d);
            let want = if *carrier == Carrier::Ipv6HopByHop { NH_HOP_BY_HOP } else { NH_DEST_OPTS };
            // A new header must leave the chain within what parsers walk
            // (ours stops at MAX_EXT_HEADERS: one more, and the packet
            // would leave unparsable).
            if hdr.is_none() && ext_headers(pkt.bytes(), meta) >= crate::wire::ipv6::MAX_EXT_HEADERS {
                return Written::NoRoom;
            }
            // Eight bytes at `at`: the end of the existing options header,
            // or where a new one goes.
            if !pkt.insert_at(at, ALTMARK_BYTES) {
                return Written::NoRoom;
            }
            let b = pkt.bytes_mut();
            b[at + 4..at + 8].copy_from_slice(&data);
            let f = match hdr {
                // Grow the existing options header: PadN(0) then the option,
                // so the option data stays 4-byte aligned.
                Some((h, len)) => {
                    b[at..at + 4].copy_from_slice(&[1, 0, ALTMARK_OPTION, 4]);
                    b[h + 1] += 1;
                    Found::Option { opt: at + 2, hdr: h, len: len + ALTMARK_BYTES, nh_at, only: false }
                }
                None => {
                    let next = b[nh_at];
                    b[at..at + 4].copy_from_slice(&[next, 0, ALTMARK_OPTION, 4]);
                    b[nh_at] = want;
                    Found::Option { opt: at + 2, hdr: at, len: ALTMARK_BYTES, nh_at, only: true }
                }
            };
            grow_meta(meta, ALTMARK_BYTES as isize);
            add_payload_len(pkt.bytes_mut(), meta, ALTMARK_BYTES as isize);
            *found = f;
            Written::Inserted
        }
        // An option carrier with `Found::Bits`: `locate` never pairs them.
        _ => Written::NoRoom,
    }
}

/// After bytes were opened (or closed) between the IP header and the upper
/// layer (`insert_at` / `remove_at` keep the bytes before in place).
fn grow_meta(meta: &mut PacketMeta, delta: isize) {
    let mv = |v: usize| (v as isize + delta) as usize;
    if meta.l4_offset != 0 {
        meta.l4_offset = mv(meta.l4_offset);
    }
    meta.l3_end = mv(meta.l3_end);
}

/// Terminator: zero the marks, or take the option out.
fn clear_marks<B: PacketBuf>(
    pkt: &mut B,
    meta: &mut PacketMeta,
    carrier: &Carrier,
    found: &Found,
    c: &mut CounterValues,
) {
    match (carrier, *found) {
        (Carrier::Dscp { l_bit, d_bit }, _) => {
            let b = pkt.bytes_mut();
            set_tos_bit(b, meta, *l_bit, false);
            set_tos_bit(b, meta, *d_bit, false);
        }
        (Carrier::Ipv4Flag { d_bit }, _) => {
            let b = pkt.bytes_mut();
            set_ipv4_bits(b, meta, 6, 0x80, false);
            set_tos_bit(b, meta, *d_bit, false);
        }
        (_, Found::Option { opt, hdr, len, nh_at, only }) => {
            // Cut out the option with the padding around it, by whole
            // 8-byte units so the options after keep their alignment (what
            // the initiator added to a header already there); or the whole
            // header when it held nothing else; or, when neither keeps the
            // header valid, leave a PadN in its place.
            let cut = match padded_block(pkt.bytes(), hdr, len, opt) {
                Some((s, e)) => Some((s, e - s)),
                None if only => Some((hdr, len)),
                None => None,
            };
            match cut {
                Some((at, n)) => {
                    // The header's next-header byte, read before it goes.
                    let next = pkt.bytes()[hdr];
                    if !pkt.remove_at(at, n) {
                        return;
                    }
                    // (remove_at keeps the bytes before `at` in place.)
                    let b = pkt.bytes_mut();
                    if at == hdr {
                        b[nh_at] = next;
                    } else {
                        b[hdr + 1] -= (n / 8) as u8;
                    }
                    grow_meta(meta, -(n as isize));
                    add_payload_len(pkt.bytes_mut(), meta, -(n as isize));
                    c.event(Event::AmpmOptionRemoved);
                }
                None => pkt.bytes_mut()[opt..opt + 6].copy_from_slice(&[1, 4, 0, 0, 0, 0]),
            }
        }
        _ => return,
    }
    c.event(Event::AmpmCleared);
}

#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod tests;
