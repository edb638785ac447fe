//! The worker's pipeline: the stages every burst runs through, in order,
//! and the one loop that runs them.
//!
//! A stage declares how deep it reads packets for the current table
//! generation ([`Depth`]); the pipeline's depth is its deepest active
//! stage's. The worker asks the pipeline ([`Pipeline::shortcut`]), never a
//! list of stages, whether a burst may skip parsing or skip the stages
//! altogether, so a new stage that declares [`Depth::Full`] is never
//! bypassed by a fast path.
//!
//! Stages run to completion per packet (as in DPDK's l3fwd): a burst hook,
//! then for each packet every stage in order, then the output. Forwarding
//! comes first (it is the one stage that is always there, and it owns the
//! shortcuts); the feature stages follow, as a tuple in the order they run:
//! adding one is one element of that tuple where the worker builds it.
//! The stages are generic over the packet buffer, so the benches and tests
//! run this same loop over `VecBuf`s without an EAL.

use std::cell::Cell;
use std::net::IpAddr;
use std::sync::atomic::AtomicU32;

use crate::counters::{CounterValues, MAX_PORTS};
use crate::dpdk::MAX_BURST;
use crate::forward::stage::ForwardStage;
use crate::forward::{ControlSink, Verdict};
use crate::parse::PacketMeta;
use crate::pktbuf::PacketBuf;
use crate::tables::Tables;
use crate::DropReason;

/// How deep a stage reads a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Depth {
    /// Not at all: frames pass as on a wire (a cross-connect).
    Wire,
    /// The Ethernet header and VLAN tags (a bridge, capture).
    L2,
    /// The IP header at fixed offsets, the full parse only for what that
    /// does not decide: a router's quick path, and a feature stage that
    /// tells by such fields which packets the quick path must leave to it
    /// ([`Stage::quick_consent`]).
    L3,
    /// Every header the parser knows: the packet's `PacketMeta`.
    Full,
}

/// When a packet was received: the TSC, and the wall clock when a stage
/// read it (AM-PM: CLOCK_REALTIME, for other hosts to agree on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxTime {
    pub tsc: u64,
    /// Nanoseconds since the Unix epoch; 0 when nothing read it.
    pub wall_ns: u64,
}

/// One burst: where and when it was received, and how it is handled.
#[derive(Debug)]
pub struct Burst {
    pub in_port: u16,
    pub rx_tsc: u64,
    wall_ns: Cell<u64>,
    /// The time the stages stamp tables with (learned flows and MACs): the
    /// receive time, or for reinjected packets the time they come back.
    pub now: u64,
    /// Packets held for neighbour resolution coming back: received (and
    /// counted, and captured) before, never held again.
    pub reinjected: bool,
    /// What the packets' `Packet::meta` holds: parsed only at `Full`.
    pub depth: Depth,
}

impl Burst {
    /// A burst just received at `rx_tsc`.
    pub fn received(in_port: u16, rx: RxTime, depth: Depth) -> Burst {
        Burst { in_port, rx_tsc: rx.tsc, wall_ns: Cell::new(rx.wall_ns), now: rx.tsc, reinjected: false, depth }
    }

    /// Held packets of one receive time coming back at `now`.
    pub fn reinjected(in_port: u16, rx: RxTime, now: u64) -> Burst {
        Burst { reinjected: true, now, ..Burst::received(in_port, rx, Depth::Full) }
    }

    /// The wall clock at receive: read now if no stage has yet (once a burst).
    #[inline]
    pub fn wall_ns(&self) -> u64 {
        match self.wall_ns.get() {
            0 => {
                let w = realtime_ns();
                self.wall_ns.set(w);
                w
            }
            w => w,
        }
    }

    /// The receive time a held packet keeps for when it comes back.
    pub fn rx_time(&self) -> RxTime {
        RxTime { tsc: self.rx_tsc, wall_ns: self.wall_ns() }
    }
}

/// Nanoseconds since the Unix epoch (CLOCK_REALTIME).
#[inline]
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// What the feature stages let the router's quick path take of a burst:
/// packets to the ports `ports` names, but for those a stage acts on as
/// the quick path can tell them by fields it reads anyway (the DSCP, UDP's
/// destination port). It leaves those to the full path, parsed, where the
/// stages see them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuickConsent {
    /// Bit per port index.
    pub ports: u32,
    /// Bit d: packets with DSCP d (IPv4 or IPv6, any protocol).
    dscp: u64,
    /// UDP packets to these destination ports (`NO_PORT`: none), and every
    /// UDP fragment but the first (which holds no port).
    udp: [u32; 2],
    /// UDP packets to any port (more ports than `udp` holds; both slots
    /// are then full, so an empty first slot says no UDP is left).
    all_udp: bool,
    /// Whether it leaves any packet at all (the one test a packet costs
    /// where no stage objects).
    leaves_some: bool,
}

/// A `QuickConsent::udp` slot that holds no port.
const NO_PORT: u32 = u32::MAX;

impl QuickConsent {
    /// No port: a stage that is never bypassed.
    pub const NONE: QuickConsent =
        QuickConsent { ports: 0, dscp: 0, udp: [NO_PORT; 2], all_udp: false, leaves_some: false };

    /// Every packet to every port: no stage objects.
    pub const ALL: QuickConsent = QuickConsent::to_ports(u32::MAX);

    /// Every packet to `ports`.
    pub const fn to_ports(ports: u32) -> QuickConsent {
        QuickConsent { ports, ..QuickConsent::NONE }
    }

    /// But for packets whose DSCP & `mask` is `value`.
    pub fn leaving_dscp(mut self, value: u8, mask: u8) -> QuickConsent {
        // Per DSCP bit, the set of DSCP values (bit d: value d) that have it.
        const HAVE: [u64; 6] = [
            0xaaaa_aaaa_aaaa_aaaa,
            0xcccc_cccc_cccc_cccc,
            0xf0f0_f0f0_f0f0_f0f0,
            0xff00_ff00_ff00_ff00,
            0xffff_0000_ffff_0000,
            0xffff_ffff_0000_0000,
        ];
        let mut set = if value & !mask & 0x3f == 0 { u64::MAX } else { 0 };
        for (bit, have) in HAVE.iter().enumerate() {
            if mask >> bit & 1 != 0 {
                set &= if value >> bit & 1 != 0 { *have } else { !*have };
            }
        }
        self.dscp |= set;
        self.leaves_some |= set != 0;
        self
    }

    /// But for UDP packets to `port` (and UDP fragments but the first).
    pub fn leaving_udp(mut self, port: u16) -> QuickConsent {
        let port = port as u32;
        if !self.udp.contains(&port) {
            match self.udp.iter_mut().find(|s| **s == NO_PORT) {
                Some(slot) => *slot = port,
                None => self.all_udp = true,
            }
        }
        self.leaves_some = true;
        self
    }

    /// What both consent to: the ports both name, leaving what either leaves.
    pub fn and(self, other: QuickConsent) -> QuickConsent {
        let mut c = QuickConsent {
            ports: self.ports & other.ports,
            dscp: self.dscp | other.dscp,
            all_udp: self.all_udp || other.all_udp,
            leaves_some: self.leaves_some || other.leaves_some,
            ..self
        };
        for port in other.udp.into_iter().filter(|p| *p != NO_PORT) {
            c = c.leaving_udp(port as u16);
        }
        c
    }

    /// The same packets left, to `ports`.
    pub fn with_ports(self, ports: u32) -> QuickConsent {
        QuickConsent { ports, ..self }
    }

    /// The same, to every port when it names each of `routed` (the ports
    /// the quick path may send by): the quick path then skips the port's
    /// test. (A port that sends nothing is always due its interval label.)
    pub fn of_routes(self, routed: u32) -> QuickConsent {
        if self.ports != 0 && self.ports & routed == routed {
            self.with_ports(u32::MAX)
        } else {
            self
        }
    }

    /// Whether a packet the quick path would take leaves it for the full
    /// path: by its DSCP and IP protocol, and for UDP by its destination
    /// port (`dst_port`: None for a fragment but the first).
    #[inline(always)]
    pub fn leaves(&self, dscp: u8, proto: u8, dst_port: impl FnOnce() -> Option<u16>) -> bool {
        if !self.leaves_some {
            return false;
        }
        let by_dscp = self.dscp >> (dscp & 0x3f) & 1 != 0;
        if self.udp[0] == NO_PORT {
            return by_dscp;
        }
        // Without a branch on the protocol: on traffic that mixes TCP and
        // UDP a test of `proto` is a coin toss the branch predictor loses.
        let named = match dst_port() {
            Some(p) => (self.udp[0] == p as u32) | (self.udp[1] == p as u32),
            None => true,
        };
        by_dscp | (proto == crate::parse::PROTO_UDP) & (self.all_udp | named)
    }
}

/// One packet on its way through the stages.
#[derive(Debug, Clone, Copy)]
pub struct Packet {
    /// Its parse (at `Depth::Full`; below, never read).
    pub meta: Result<PacketMeta, DropReason>,
    /// What happens to it after the last stage.
    pub verdict: Verdict,
    /// A stage took it as its own protocol's before forwarding
    /// ([`Stage::claim`]): forwarding and the other feature stages never
    /// see it, only those that declare [`Stage::SEES_CLAIMED`].
    pub claimed: bool,
    /// Its place in the burst, as the prefetch pass gave it to
    /// [`Stage::prefetch`] (a stage keeps what that pass found by it).
    pub index: u8,
}

impl Packet {
    /// A slot with no packet yet.
    pub const EMPTY: Packet =
        Packet { meta: Err(DropReason::EthTruncated), verdict: Verdict::Consumed, claimed: false, index: 0 };
}

/// What a stage tells the pipeline after a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Next,
    /// Hand the packet to the control core until this next hop's MAC is
    /// known: no later stage sees it now (it comes back reinjected). Only
    /// asked for when `Output::can_hold`.
    Hold(IpAddr),
}

/// The control core's measurements that INT metadata reports.
#[derive(Debug)]
pub struct PortLoad {
    /// Per port: TX utilisation in 1/100 % (u32::MAX: unknown).
    pub tx_util: [AtomicU32; MAX_PORTS],
    /// Mbufs in use in the packet pool.
    pub pool_in_use: AtomicU32,
}

impl Default for PortLoad {
    fn default() -> Self {
        PortLoad { tx_util: std::array::from_fn(|_| AtomicU32::new(u32::MAX)), pool_in_use: AtomicU32::new(0) }
    }
}

/// Where packets go after the stages: the worker's TX buffers, link
/// emulation, hold and capture queues (`VecOut` in tests and benches).
pub trait Output<B> {
    /// Sends, floods or drops (counted) one packet by its verdict.
    fn deliver(&mut self, m: B, v: Verdict, in_port: u16, t: &Tables, c: &mut CounterValues, now: u64);
    /// Hands a packet to the control core; gives it back when full.
    fn hold(&mut self, in_port: u16, hop: IpAddr, rx: RxTime, m: B) -> Result<(), B>;
    /// Whether `hold` has room now (only this worker fills it).
    fn can_hold(&self) -> bool;
    /// Packets waiting on `port` (TX buffer and link emulation).
    fn occupancy(&self, port: usize) -> usize;
    /// Bit per port: (received, transmitted) packets are mirrored.
    fn capture(&self) -> (u32, u32);
    /// Copies a packet to the capture queue (a full queue is counted).
    fn mirror(&self, m: &B, port: u16, tx: bool, c: &mut CounterValues);
    /// This worker's TX queue on every port.
    fn queue_id(&self) -> u8;
    /// A deep copy of a packet in a buffer of its own (None: no buffer
    /// free), for a stage that sends a packet besides the one it got.
    fn duplicate(&self, m: &B) -> Option<B>;
}

/// What a stage sees besides the packet and its own state.
pub struct Cx<'a, O> {
    pub tables: &'a Tables,
    pub c: &'a mut CounterValues,
    pub burst: &'a Burst,
    /// Where packets go: a stage may send one of its own (`deliver`).
    pub out: &'a mut O,
    pub load: &'a PortLoad,
}

/// A step of the pipeline. Implemented for tuples of stages, which run in
/// their order.
pub trait Stage<B: PacketBuf> {
    /// How deep it reads this generation's packets; None: it has nothing to
    /// do (not configured), and `packet` is not called.
    fn depth<O: Output<B>>(&self, t: &Tables, out: &O) -> Option<Depth>;

    /// Bit i set: stage i of a tuple has something to do for this burst
    /// (one stage: bit 0). Asked once a burst, so that a stage nobody
    /// configured costs no call and no checks a packet.
    #[inline(always)]
    fn active<O: Output<B>>(&self, t: &Tables, out: &O) -> u32 {
        self.depth(t, out).is_some() as u32
    }

    /// `packet` of the stages `active` named.
    #[inline(always)]
    fn packet_active<O: Output<B>>(&mut self, active: u32, cx: &mut Cx<'_, O>, m: &mut B, p: &mut Packet) -> Step {
        if active & 1 != 0 {
            self.packet(cx, m, p)
        } else {
            Step::Next
        }
    }

    /// Bit i set: stage i of a tuple may claim packets of this generation
    /// (one stage: bit 0). Asked once a burst.
    #[inline(always)]
    fn claiming(&self, _t: &Tables) -> u32 {
        0
    }

    /// Before forwarding: takes a packet of the stage's own protocol (a
    /// GPINT probe) whole, setting its verdict; true when it did.
    #[inline(always)]
    fn claim<O: Output<B>>(&mut self, _cx: &mut Cx<'_, O>, _m: &mut B, _p: &mut Packet) -> bool {
        false
    }

    /// `claim` of the stages `mask` names, in order, until one takes it.
    #[inline(always)]
    fn claim_active<O: Output<B>>(&mut self, mask: u32, cx: &mut Cx<'_, O>, m: &mut B, p: &mut Packet) -> bool {
        mask & 1 != 0 && self.claim(cx, m, p)
    }

    /// `packet` still runs for packets another stage claimed (TX capture).
    const SEES_CLAIMED: bool = false;

    /// Bit i set: stage i of a tuple sees claimed packets.
    #[inline(always)]
    fn sees_claimed(&self) -> u32 {
        Self::SEES_CLAIMED as u32
    }

    /// Whether a burst should be parsed and `prefetch`ed before it runs
    /// (its tables are larger than the caches).
    #[inline(always)]
    fn prefetch_pass(&self, _t: &Tables) -> bool {
        false
    }

    /// Starts loading what `packet` will read for this parsed packet, the
    /// burst's `index`th ([`Packet::index`]).
    #[inline(always)]
    fn prefetch(&mut self, _t: &Tables, _frame: &[u8], _meta: &PacketMeta, _index: usize) {}

    /// After the burst's `prefetch` pass: starts loading what the lines
    /// that pass loaded point to (a flow cache's row says where the flow's
    /// entry lies), while the burst's first packets run.
    #[inline(always)]
    fn prefetch_deeper(&mut self, _t: &Tables) {}

    /// Once per burst, before its packets.
    #[inline(always)]
    fn begin(&mut self, _t: &Tables, _burst: &Burst) {}

    /// What this stage lets the router's quick path take of this burst.
    /// Asked once a burst, after `begin`. `QuickConsent::NONE` (the
    /// default): the stage is never bypassed, and while it is active every
    /// packet takes the full path.
    #[inline(always)]
    fn quick_consent(&self, _t: &Tables) -> QuickConsent {
        QuickConsent::NONE
    }

    /// What every stage `mask` names consents to.
    #[inline(always)]
    fn quick_consent_active(&self, mask: u32, t: &Tables) -> QuickConsent {
        if mask & 1 != 0 {
            self.quick_consent(t)
        } else {
            QuickConsent::ALL
        }
    }

    /// Whether, in this burst, the stage takes a cross-connect's packets on
    /// a quick path of its own. Asked once a burst, before `begin`. Where
    /// it is the only active stage, no stage claims packets and the
    /// cross-connect has no flow entries (every packet that parses goes to
    /// the peer), the pipeline asks it, after `begin`, which of the
    /// burst's first packets it takes ([`Stage::quick_takes`]); those run
    /// its [`Stage::quick_packet`] and go straight to the peer, and the
    /// rest of the burst takes the full path.
    #[inline(always)]
    fn quick_packets(&self, _t: &Tables) -> bool {
        false
    }

    /// `quick_packets` of the one stage `mask` names (false if it names
    /// none or several).
    #[inline(always)]
    fn quick_packets_active(&self, mask: u32, t: &Tables) -> bool {
        mask == 1 && self.quick_packets(t)
    }

    /// Whether the quick path takes packet `p` (the burst's `p.index`th):
    /// a first pass over the burst, which reads the frame and may keep its
    /// parse in `p.meta` and start its lookups (`prefetch`: where
    /// `prefetch_pass` asks for them).
    #[inline(always)]
    fn quick_takes(&mut self, _t: &Tables, _m: &B, _in_port: u16, _p: &mut Packet, _prefetch: bool) -> bool {
        false
    }

    /// `quick_takes` of the first stage `mask` names.
    #[inline(always)]
    fn quick_takes_active(
        &mut self,
        mask: u32,
        t: &Tables,
        m: &B,
        in_port: u16,
        p: &mut Packet,
        prefetch: bool,
    ) -> bool {
        mask & 1 != 0 && self.quick_takes(t, m, in_port, p, prefetch)
    }

    /// A packet `quick_takes` took: leaves it as the full path would on
    /// its way to the peer, counters too.
    #[inline(always)]
    fn quick_packet<O: Output<B>>(&mut self, _cx: &mut Cx<'_, O>, _m: &mut B, _p: &mut Packet) {}

    /// `quick_packet` of the first stage `mask` names.
    #[inline(always)]
    fn quick_packet_active<O: Output<B>>(&mut self, mask: u32, cx: &mut Cx<'_, O>, m: &mut B, p: &mut Packet) {
        if mask & 1 != 0 {
            self.quick_packet(cx, m, p);
        }
    }

    /// One packet.
    fn packet<O: Output<B>>(&mut self, cx: &mut Cx<'_, O>, m: &mut B, p: &mut Packet) -> Step;

    /// Once per worker loop, busy or idle: bounded timer work (aging).
    #[inline(always)]
    fn poll(&mut self, _t: &Tables, _now: u64, _c: &mut CounterValues) {}

    /// The worker is stopping: hand on what the stage holds.
    fn stop(&mut self, _c: &mut CounterValues) {}
}

macro_rules! tuple_stages {
    ($($s:ident $i:tt),*) => {
        #[allow(unused_variables)]
        impl<B: PacketBuf, $($s: Stage<B>),*> Stage<B> for ($($s,)*) {
            #[inline(always)]
            fn depth<O: Output<B>>(&self, t: &Tables, out: &O) -> Option<Depth> {
                None $(.max(self.$i.depth(t, out)))*
            }
            #[inline(always)]
            fn prefetch_pass(&self, t: &Tables) -> bool {
                false $(|| self.$i.prefetch_pass(t))*
            }
            #[inline(always)]
            fn prefetch(&mut self, t: &Tables, frame: &[u8], meta: &PacketMeta, index: usize) {
                $(self.$i.prefetch(t, frame, meta, index);)*
            }
            #[inline(always)]
            fn prefetch_deeper(&mut self, t: &Tables) {
                $(self.$i.prefetch_deeper(t);)*
            }
            #[inline(always)]
            fn begin(&mut self, t: &Tables, burst: &Burst) {
                $(self.$i.begin(t, burst);)*
            }
            #[inline(always)]
            fn poll(&mut self, t: &Tables, now: u64, c: &mut CounterValues) {
                $(self.$i.poll(t, now, c);)*
            }
            fn stop(&mut self, c: &mut CounterValues) {
                $(self.$i.stop(c);)*
            }
            #[inline(always)]
            fn active<O: Output<B>>(&self, t: &Tables, out: &O) -> u32 {
                0 $(| ((self.$i.depth(t, out).is_some() as u32) << $i))*
            }
            #[inline(always)]
            fn claiming(&self, t: &Tables) -> u32 {
                0 $(| ((self.$i.claiming(t) & 1) << $i))*
            }
            #[inline(always)]
            fn claim_active<O: Output<B>>(&mut self, mask: u32, cx: &mut Cx<'_, O>, m: &mut B, p: &mut Packet) -> bool {
                $(if mask & (1 << $i) != 0 && self.$i.claim(cx, m, p) {
                    return true;
                })*
                false
            }
            #[inline(always)]
            fn quick_consent(&self, t: &Tables) -> QuickConsent {
                Stage::<B>::quick_consent_active(self, u32::MAX, t)
            }
            #[inline(always)]
            fn quick_consent_active(&self, mask: u32, t: &Tables) -> QuickConsent {
                QuickConsent::ALL $(.and(if mask & (1 << $i) != 0 { self.$i.quick_consent(t) } else { QuickConsent::ALL }))*
            }
            #[inline(always)]
            fn quick_packets_active(&self, mask: u32, t: &Tables) -> bool {
                false $(|| (mask == 1 << $i && self.$i.quick_packets(t)))*
            }
            #[inline(always)]
            fn quick_takes_active(&mut self, mask: u32, t: &Tables, m: &B, in_port: u16, p: &mut Packet, prefetch: bool) -> bool {
                $(if mask & (1 << $i) != 0 {
                    return self.$i.quick_takes(t, m, in_port, p, prefetch);
                })*
                false
            }
            #[inline(always)]
            fn quick_packet_active<O: Output<B>>(&mut self, mask: u32, cx: &mut Cx<'_, O>, m: &mut B, p: &mut Packet) {
                $(if mask & (1 << $i) != 0 {
                    return self.$i.quick_packet(cx, m, p);
                })*
            }
            #[inline(always)]
            fn sees_claimed(&self) -> u32 {
                0 $(| ((self.$i.sees_claimed() & 1) << $i))*
            }
            #[inline(always)]
            fn packet<O: Output<B>>(&mut self, cx: &mut Cx<'_, O>, m: &mut B, p: &mut Packet) -> Step {
                self.packet_active(u32::MAX, cx, m, p)
            }
            #[inline(always)]
            fn packet_active<O: Output<B>>(&mut self, active: u32, cx: &mut Cx<'_, O>, m: &mut B, p: &mut Packet) -> Step {
                $(if active & (1 << $i) != 0 {
                    if let Step::Hold(hop) = self.$i.packet(cx, m, p) {
                        return Step::Hold(hop);
                    }
                })*
                Step::Next
            }
        }
    };
}

tuple_stages!();
tuple_stages!(A 0);
tuple_stages!(A 0, B1 1);
tuple_stages!(A 0, B1 1, C 2);
tuple_stages!(A 0, B1 1, C 2, D 3);
tuple_stages!(A 0, B1 1, C 2, D 3, E 4);
tuple_stages!(A 0, B1 1, C 2, D 3, E 4, F 5);
tuple_stages!(A 0, B1 1, C 2, D 3, E 4, F 5, G 6);
tuple_stages!(A 0, B1 1, C 2, D 3, E 4, F 5, G 6, H 7);

/// The last stage: mirrors packets leaving a port whose TX side is
/// captured, as they leave (after every other stage changed them).
#[derive(Debug, Default, Clone, Copy)]
pub struct CaptureTx;

impl<B: PacketBuf> Stage<B> for CaptureTx {
    const SEES_CLAIMED: bool = true;

    #[inline(always)]
    fn depth<O: Output<B>>(&self, _t: &Tables, out: &O) -> Option<Depth> {
        let (rx, tx) = out.capture();
        // Mirroring needs no parse; below L2 the frames would not be seen.
        (rx | tx != 0).then_some(Depth::L2)
    }

    #[inline(always)]
    fn packet<O: Output<B>>(&mut self, cx: &mut Cx<'_, O>, m: &mut B, p: &mut Packet) -> Step {
        if let Verdict::Tx(port) | Verdict::TxLen(port, _) = p.verdict {
            if cx.out.capture().1 & (1 << port) != 0 {
                cx.out.mirror(m, port, true, cx.c);
            }
        }
        Step::Next
    }
}

/// How a burst from one port may be handled, as the pipeline decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shortcut {
    /// Nothing reads the frames: received straight into the peer's TX
    /// buffer (a cross-connect).
    Wire(usize),
    /// Forwarding alone, on the Ethernet header: a bridge's frames are
    /// bridged by MAC and VLAN only, and may move as a whole.
    L2,
    /// The stages run: `Pipeline::run`.
    None,
}

/// The stages of a worker for the current generation: forwarding, then
/// the feature stages `F` in their order.
pub struct Pipeline<C: ControlSink, F> {
    pub forward: ForwardStage<C>,
    pub stages: F,
    /// Each packet of the burst in hand: its parse (the prefetch pass
    /// writes it here) and its verdict, read and written in place.
    packets: [Packet; MAX_BURST],
}

impl<C: ControlSink, F> Pipeline<C, F> {
    pub fn new(forward: ForwardStage<C>, stages: F) -> Pipeline<C, F> {
        let packets = std::array::from_fn(|i| Packet { index: i as u8, ..Packet::EMPTY });
        Pipeline { forward, stages, packets }
    }

    /// How a burst from `in_port` may be handled, and the pipeline's depth
    /// (the deepest of its stages' for this generation): a shortcut only
    /// where no stage would read what it skips.
    #[inline]
    pub fn shortcut<B: PacketBuf, O: Output<B>>(&self, t: &Tables, out: &O, in_port: usize) -> (Shortcut, Depth)
    where
        F: Stage<B>,
    {
        let features = self.stages.depth(t, out);
        let depth = Stage::<B>::depth(&self.forward, t, out).max(features).unwrap_or(Depth::Full);
        let s = match depth {
            Depth::Wire => self.forward.wire_peer(t, in_port).map_or(Shortcut::None, Shortcut::Wire),
            Depth::L2 if features.is_none() => Shortcut::L2,
            _ => Shortcut::None,
        };
        (s, depth)
    }

    /// A burst on `Shortcut::L2` (a bridge that no stage reads): each frame
    /// decided by its Ethernet header alone, handed to `out`, and the burst
    /// counted in. `now`: the time learned MACs are stamped with.
    #[inline]
    pub fn run_l2<B: PacketBuf, O: Output<B>>(
        &mut self,
        t: &Tables,
        c: &mut CounterValues,
        out: &mut O,
        in_port: u16,
        now: u64,
        pkts: &mut [Option<B>],
    ) {
        let mut bytes = 0u64;
        for slot in pkts.iter_mut() {
            let m = slot.take().expect("received");
            bytes += m.frame_len() as u64;
            let v = self.forward.l2_verdict(t, c, m.bytes(), in_port, now);
            out.deliver(m, v, in_port, t, c, now);
        }
        c.rx_packets[in_port as usize] += pkts.len() as u64;
        c.rx_bytes[in_port as usize] += bytes;
    }

    /// Runs the stages on the `n` packets of `pkts` (taking them) and hands
    /// each to `out`. The one place a received burst's packets are counted
    /// in (by `run_full` and `run_stage_quick`), but for the shortcuts' (a
    /// wire's relay, a bridge's `run_l2`).
    pub fn run<B: PacketBuf, O: Output<B>>(
        &mut self,
        t: &Tables,
        c: &mut CounterValues,
        out: &mut O,
        load: &PortLoad,
        burst: &Burst,
        pkts: &mut [Option<B>],
    ) where
        F: Stage<B>,
    {
        if let Some(peer) = self.stage_quick_peer(t, out, burst) {
            let k = self.stage_quick_prefix(t, out, burst, pkts);
            if k > 0 {
                let (quick, rest) = pkts.split_at_mut(k);
                self.run_stage_quick(t, c, out, load, burst, quick, peer);
                if !rest.is_empty() {
                    self.run_full(t, c, out, load, burst, rest);
                }
                return;
            }
        }
        self.run_full(t, c, out, load, burst, pkts);
    }

    /// Where a burst goes on a stage's quick path: a cross-connect's (every
    /// packet that parses goes to the peer) whose one active stage has a
    /// quick path of its own (AM-PM), and no stage claims packets.
    #[inline(always)]
    fn stage_quick_peer<B: PacketBuf, O: Output<B>>(&self, t: &Tables, out: &O, burst: &Burst) -> Option<u16>
    where
        F: Stage<B>,
    {
        if burst.depth < Depth::L3 || (burst.depth == Depth::Full && self.stages.claiming(t) != 0) {
            return None;
        }
        if !self.stages.quick_packets_active(self.stages.active(t, out), t) {
            return None;
        }
        self.forward.quick_peer(t, burst.in_port)
    }

    /// The quick path's first pass (`Stage::quick_takes`), after the
    /// stages' `begin`: how many of the burst's first packets the stage
    /// takes.
    #[inline(never)]
    fn stage_quick_prefix<B: PacketBuf, O: Output<B>>(
        &mut self,
        t: &Tables,
        out: &O,
        burst: &Burst,
        pkts: &[Option<B>],
    ) -> usize
    where
        F: Stage<B>,
    {
        Stage::<B>::begin(&mut self.forward, t, burst);
        self.stages.begin(t, burst);
        let active = self.stages.active(t, out);
        let prefetch = self.stages.prefetch_pass(t);
        let mut k = 0;
        for (m, p) in pkts.iter().zip(self.packets.iter_mut()) {
            match m {
                Some(m) if self.stages.quick_takes_active(active, t, m, burst.in_port, p, prefetch) => k += 1,
                _ => break,
            }
        }
        if prefetch {
            self.stages.prefetch_deeper(t);
        }
        k
    }

    /// Counts a received burst in; false when its port is down (the burst
    /// then dropped and counted).
    #[inline(always)]
    fn receive<B: PacketBuf, O: Output<B>>(
        c: &mut CounterValues,
        t: &Tables,
        out: &O,
        burst: &Burst,
        pkts: &mut [Option<B>],
    ) -> bool {
        let in_port = burst.in_port;
        let ip = in_port as usize;
        if !burst.reinjected {
            c.rx_packets[ip] += pkts.len() as u64;
            if !t.ports.get(ip).is_some_and(|p| p.up) {
                // Administratively down: the whole burst is dropped.
                for m in pkts.iter_mut().filter_map(Option::take) {
                    c.rx_bytes[ip] += m.frame_len() as u64;
                }
                c.drop_n(DropReason::PortDown, pkts.len() as u64);
                return false;
            }
            if out.capture().0 & (1 << ip) != 0 {
                for m in pkts.iter().flatten() {
                    out.mirror(m, in_port, false, c);
                }
            }
        }
        true
    }

    /// The packets `stage_quick_prefix` counted, on the stage's quick path,
    /// to `peer`. Out of line (as the first pass): inlined into `run`, it
    /// made the full path call functions it had inlined.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn run_stage_quick<B: PacketBuf, O: Output<B>>(
        &mut self,
        t: &Tables,
        c: &mut CounterValues,
        out: &mut O,
        load: &PortLoad,
        burst: &Burst,
        pkts: &mut [Option<B>],
        peer: u16,
    ) where
        F: Stage<B>,
    {
        if !Self::receive(c, t, out, burst, pkts) {
            return;
        }
        let active = self.stages.active(t, out);
        let in_port = burst.in_port;
        let cx = &mut Cx { tables: t, c: &mut *c, burst, out: &mut *out, load };
        let mut rx_bytes = 0u64;
        for (slot, p) in pkts.iter_mut().zip(self.packets.iter_mut()) {
            let mut m = slot.take().expect("received");
            rx_bytes += m.frame_len() as u64;
            self.stages.quick_packet_active(active, cx, &mut m, p);
            cx.out.deliver(m, Verdict::Tx(peer), in_port, t, cx.c, burst.now);
        }
        if !burst.reinjected {
            c.rx_bytes[in_port as usize] += rx_bytes;
        }
    }

    /// The full path: each packet parsed (or the router's quick path),
    /// forwarded, then through the active stages.
    fn run_full<B: PacketBuf, O: Output<B>>(
        &mut self,
        t: &Tables,
        c: &mut CounterValues,
        out: &mut O,
        load: &PortLoad,
        burst: &Burst,
        pkts: &mut [Option<B>],
    ) where
        F: Stage<B>,
    {
        let in_port = burst.in_port;
        let ip = in_port as usize;
        if !Self::receive(c, t, out, burst, pkts) {
            return;
        }
        Stage::<B>::begin(&mut self.forward, t, burst);
        self.stages.begin(t, burst);
        let active = self.stages.active(t, out);
        let full = burst.depth == Depth::Full;
        // Stages that take their own protocol's packets before forwarding,
        // and those that still see such packets.
        let claiming = if full { self.stages.claiming(t) } else { 0 };
        let after_claim = active & self.stages.sees_claimed();
        // The router's quick path, where every active stage lets it take
        // packets (none, or INT and label on packets they leave alone), to
        // the ports they all name: what it routes is handed straight to the
        // output. (With another stage there, a capture, every packet takes
        // the full path, which ends the same.)
        let consent = if burst.depth != Depth::L3 || !self.forward.routes_quickly(t) {
            QuickConsent::NONE
        } else if active == 0 {
            // What merging the inactive stages' consents would give, unmerged.
            QuickConsent::ALL
        } else {
            self.stages.quick_consent_active(active, t).of_routes(t.routed_ports)
        };
        let quick = consent.ports != 0;
        let parses = burst.depth >= Depth::L3;
        // With tables larger than the caches, a first pass parses the burst
        // and starts each packet's lookups so the second pass's overlap their
        // misses; otherwise one pass is cheaper (a burst of parses kept in
        // an array costs ~7 ns a packet). The quick path's first pass reads
        // flow keys at fixed offsets, no parse.
        let two_pass =
            parses && !quick && (Stage::<B>::prefetch_pass(&self.forward, t) || self.stages.prefetch_pass(t));
        let quick_flows = quick && self.forward.flows_in_use();
        if quick && self.forward.quick_prefetch_pass() {
            for m in pkts.iter().flatten() {
                self.forward.quick_prefetch(m, in_port);
            }
        }
        if two_pass {
            // The burst index counted here, not read from `p.index` (the
            // same number, one load a packet more).
            for (i, (p, m)) in self.packets.iter_mut().zip(pkts.iter()).enumerate() {
                debug_assert_eq!(p.index as usize, i);
                let m = m.as_ref().expect("received");
                p.meta = parse_frame(m, in_port);
                if let Ok(meta) = &p.meta {
                    Stage::<B>::prefetch(&mut self.forward, t, m.bytes(), meta, i);
                    self.stages.prefetch(t, m.bytes(), meta, i);
                }
            }
            self.stages.prefetch_deeper(t);
        }
        // One context for the whole burst: rebuilt for every packet, its
        // five references cost as much as a stage with nothing to do.
        let cx = &mut Cx { tables: t, c: &mut *c, burst, out: &mut *out, load };
        // Received bytes add up in a register, counted after the burst.
        let mut rx_bytes = 0u64;
        for (slot, p) in pkts.iter_mut().zip(self.packets.iter_mut()) {
            let mut m = slot.take().expect("received");
            rx_bytes += m.frame_len() as u64;
            if quick {
                let (c, now) = (&mut *cx.c, burst.now);
                if let Some(port) = self.forward.quick_route(t, c, now, &mut m, in_port, quick_flows, &consent) {
                    cx.out.deliver(m, Verdict::Tx(port), in_port, t, cx.c, burst.now);
                    continue;
                }
            }
            if !two_pass {
                // Below L3 no stage reads it. An assignment in each arm: a
                // select between the parse and the error copied the whole
                // result for every frame.
                if parses {
                    p.meta = parse_frame(&m, in_port);
                } else {
                    p.meta = Err(DropReason::EthTruncated);
                }
            }
            p.verdict = Verdict::Consumed;
            p.claimed = claiming != 0 && p.meta.is_ok() && self.stages.claim_active(claiming, cx, &mut m, p);
            let step = if p.claimed {
                self.stages.packet_active(after_claim, cx, &mut m, p)
            } else {
                match self.forward.packet(cx, &mut m, p) {
                    Step::Next => self.stages.packet_active(active, cx, &mut m, p),
                    hold => hold,
                }
            };
            match step {
                Step::Next => cx.out.deliver(m, p.verdict, in_port, t, cx.c, burst.now),
                Step::Hold(hop) => match cx.out.hold(in_port, hop, burst.rx_time(), m) {
                    Ok(()) => cx.c.event(crate::counters::Event::Held),
                    // `can_hold` said there was room; should it be gone, the
                    // packet is dropped as it would have been without room.
                    Err(_) => cx.c.drop(DropReason::NeighbourUnresolved),
                },
            }
        }
        if !burst.reinjected {
            c.rx_bytes[ip] += rx_bytes;
        }
    }
}

/// The frame's parse; a chained buffer is not parsed (its headers may span
/// segments).
#[inline(always)]
pub(crate) fn parse_frame<B: PacketBuf>(m: &B, in_port: u16) -> Result<PacketMeta, DropReason> {
    if !m.single_segment() {
        Err(DropReason::MultiSegment)
    } else {
        crate::parse::parse(m.bytes(), in_port)
    }
}

/// An output that keeps what it is given, for tests and benches: the
/// packets with their verdicts and the held ones, in vectors the caller
/// drains (pushes within their capacity allocate nothing).
pub struct VecOut<B> {
    pub out: Vec<(B, Verdict)>,
    pub held: Vec<(u16, IpAddr, RxTime, B)>,
    /// Packets `hold` takes at most (then `can_hold` says no).
    pub hold_room: usize,
    /// Mirrored copies: (port, transmitted, bytes).
    pub mirrored: std::cell::RefCell<Vec<(u16, bool, Vec<u8>)>>,
    pub capture: (u32, u32),
    /// What `occupancy` reports for every port.
    pub occupancy: usize,
}

impl<B> VecOut<B> {
    /// Room for `burst` packets a burst and `hold_room` held ones.
    pub fn new(burst: usize, hold_room: usize) -> VecOut<B> {
        VecOut {
            out: Vec::with_capacity(burst),
            held: Vec::with_capacity(hold_room),
            hold_room,
            mirrored: Default::default(),
            capture: (0, 0),
            occupancy: 0,
        }
    }
}

impl<B: PacketBuf + Clone> Output<B> for VecOut<B> {
    fn deliver(&mut self, m: B, v: Verdict, _in_port: u16, _t: &Tables, c: &mut CounterValues, _now: u64) {
        match v {
            Verdict::Tx(p) | Verdict::TxLen(p, _) if (p as usize) < MAX_PORTS => {
                c.tx_packets[p as usize] += 1;
                c.tx_bytes[p as usize] += m.frame_len() as u64;
            }
            Verdict::Flood => c.event(crate::counters::Event::Flooded),
            Verdict::Drop(r) => c.drop(r),
            _ => {}
        }
        self.out.push((m, v));
    }

    fn hold(&mut self, in_port: u16, hop: IpAddr, rx: RxTime, m: B) -> Result<(), B> {
        if self.held.len() >= self.hold_room {
            return Err(m);
        }
        self.held.push((in_port, hop, rx, m));
        Ok(())
    }

    fn can_hold(&self) -> bool {
        self.held.len() < self.hold_room
    }

    fn occupancy(&self, _port: usize) -> usize {
        self.occupancy
    }

    fn capture(&self) -> (u32, u32) {
        self.capture
    }

    fn mirror(&self, m: &B, port: u16, tx: bool, _c: &mut CounterValues) {
        self.mirrored.borrow_mut().push((port, tx, m.bytes().to_vec()));
    }

    fn queue_id(&self) -> u8 {
        0
    }

    fn duplicate(&self, m: &B) -> Option<B> {
        Some(m.clone())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::int::report_ring::report_ring;
    use crate::int::stage::WallClock;
    use crate::pktbuf::VecBuf;
    use crate::tables::tests::two_port_router;
    use crate::tables::{Mode, TableSpec};
    use crate::worker::{self, FlowSetup, MacSetup, StageSetup, WorkerPipeline, WorkerShared};

    fn pipeline(learn: bool) -> WorkerPipeline {
        pipeline_sharing(learn, Arc::new(WorkerShared::new(0)))
    }

    /// A worker's pipeline whose shared state (AM-PM's counters) the
    /// caller keeps.
    pub(crate) fn pipeline_sharing(learn: bool, shared: Arc<WorkerShared>) -> WorkerPipeline {
        let (reports, _) = report_ring(4);
        let stages = StageSetup {
            analytics: crate::int::analytics::AnalyticsSetup::interval_only(16),
            reports,
            clock: WallClock::new(0, 0, 1_000),
            gpint: crate::gpint::stage::GpintSetup::off(),
            label: crate::worker::LabelSetup::off(),
        };
        let flows = FlowSetup { capacity: 64, idle_timeout_s: 0, learn, hash_seed: 1 };
        let macs = MacSetup { capacity: 64, aging_s: 0, share: false };
        worker::pipeline(shared, flows, macs, stages, 1_000)
    }

    /// The shortcuts of ports 0 and 1.
    fn shortcuts(s: &TableSpec, learn: bool, capture: (u32, u32)) -> (Shortcut, Shortcut) {
        let t = Tables::build(s, 1).unwrap();
        let p = pipeline(learn);
        let mut out = VecOut::<VecBuf>::new(1, 0);
        out.capture = capture;
        (p.shortcut(&t, &out, 0).0, p.shortcut(&t, &out, 1).0)
    }

    #[test]
    fn only_an_unread_cross_connect_is_a_wire() {
        use Shortcut::{Wire, L2};
        let none = Shortcut::None;
        let mut s = two_port_router();
        s.mode = Mode::CrossConnect;
        let off = (0, 0);
        assert_eq!(shortcuts(&s, false, off), (Wire(1), Wire(0)));
        assert_eq!(shortcuts(&s, true, off), (none, none), "flow learning reads every packet");
        assert_eq!(shortcuts(&s, false, (1, 0)), (none, none), "capture reads the frames");
        s.ports[1].up = false;
        assert_eq!(shortcuts(&s, false, off), (none, Wire(0)), "a down peer drops instead");
        s.ports[1].up = true;
        s.ports[0].impair.delay_ns = 1000;
        assert_eq!(shortcuts(&s, false, off), (Wire(1), none), "a peer with link emulation queues");
        s.ports[0].impair.delay_ns = 0;
        s.xconnect[1] = None;
        assert_eq!(shortcuts(&s, false, off), (Wire(1), none), "no peer: dropped as no_peer");
        s.int = Some(crate::int::stage::tests::spec(1, 0));
        assert_eq!(shortcuts(&s, false, off), (none, none), "INT reads every packet");
        s.mode = Mode::Bridge;
        assert_eq!(shortcuts(&s, false, off), (none, none));
        s.int = None;
        assert_eq!(shortcuts(&s, false, off), (L2, L2));
        assert_eq!(shortcuts(&s, false, (0, 2)), (none, none), "capture is a stage: no whole-burst moves");
        s.mode = Mode::Router;
        assert_eq!(shortcuts(&s, false, off), (none, none));
    }

    /// A bridge floods a frame for an unknown MAC: INT has no one egress
    /// port to decide by, so the frame leaves as it came, counted.
    #[test]
    fn a_flooded_int_frame_is_left_alone_and_counted() {
        use crate::counters::Event;
        use crate::int::stage::tests::{spec, Node};
        let mut s = two_port_router();
        s.mode = Mode::Bridge;
        s.int = Some(spec(3, 0b10));
        let mut b = VecBuf::new(&crate::parse::tests::udp4([10, 0, 1, 2], [10, 0, 2, 2], 4000, 5001, b"x"), 256);
        let h = crate::int::stage::Hop { in_port: 0, out_port: 1, ..Default::default() };
        Node::new(spec(1, 0b01)).run(&mut b, h).unwrap();
        let carried = b.bytes().to_vec();
        let t = Tables::build(&s, 1).unwrap();
        let mut p = pipeline(false);
        let mut out = VecOut::<VecBuf>::new(4, 0);
        let mut c = CounterValues::default();
        let rx = RxTime { tsc: 1, wall_ns: 1 };
        let mut pkts = [Some(VecBuf::new(&carried, 64))];
        p.run(&t, &mut c, &mut out, &PortLoad::default(), &Burst::received(0, rx, Depth::Full), &mut pkts);
        assert_eq!(out.out.len(), 1);
        assert!(matches!(out.out[0].1, Verdict::Flood));
        assert_eq!(out.out[0].0.bytes(), &carried[..], "not sunk, not transited");
        assert_eq!((c.events[Event::IntFlooded as usize], c.events[Event::IntSunk as usize]), (1, 0));
    }

    /// A router with nothing but forwarding reading its packets runs at
    /// `Depth::L3` (the quick path), learning flows or not; every packet
    /// ends as it would at full depth: the same verdicts, bytes, held
    /// packets, counters and flow entries, also with a flow table large
    /// enough for the prefetch passes. Also with TX capture on (a stage
    /// active at L3: every packet takes the full path), each packet
    /// mirrored as it leaves.
    #[test]
    fn a_router_burst_at_l3_ends_as_at_full_depth() {
        use crate::flow_table::{FlowAction, FlowTable};
        use crate::forward::quick::tests::corpus;
        use crate::forward::stage::PREFETCH_MIN_FLOWS;
        use crate::parse::FlowKey;
        use crate::tables::tests::two_port_router_v6_routed;
        let t = Tables::build(&two_port_router_v6_routed(), 1).unwrap();
        let mut frames = corpus();
        let mut arp = vec![0u8; 60];
        crate::forward::build_arp_request(&mut arp, [2, 0, 0, 0, 0, 1], [10, 0, 1, 2], [10, 0, 1, 1]);
        frames.push(arp);
        let mut bad = frames[0].clone();
        bad[24] ^= 0xff;
        frames.push(bad);
        let out = VecOut::<VecBuf>::new(frames.len(), frames.len());
        for learn in [false, true] {
            assert_eq!(pipeline(learn).shortcut::<VecBuf, _>(&t, &out, 0).1, Depth::L3);
        }
        let rx = RxTime { tsc: 1, wall_ns: 1 };
        // Twice the burst: the second finds the flows the first learned.
        let run = |depth, capture_tx: u32, learn: bool, many_flows: bool| {
            let (mut p, mut out) = (pipeline(learn), VecOut::<VecBuf>::new(2 * frames.len(), 2 * frames.len()));
            if many_flows {
                p.forward.flows = FlowTable::new(2 * PREFETCH_MIN_FLOWS, 0);
                for i in 0..PREFETCH_MIN_FLOWS as u32 {
                    let key = FlowKey::v4((0xc000_0000 | i).to_be_bytes(), [10, 0, 0, 1], 17, 1, 2);
                    p.forward.flows.install(key, FlowAction::Normal, 0).unwrap();
                }
            }
            out.capture = (0, capture_tx);
            let mut c = CounterValues::default();
            for _ in 0..2 {
                let mut pkts: Vec<_> = frames.iter().map(|f| Some(VecBuf::new(f, 64))).collect();
                p.run(&t, &mut c, &mut out, &PortLoad::default(), &Burst::received(0, rx, depth), &mut pkts);
            }
            let sent: Vec<_> = out.out.iter().map(|(m, v)| (m.bytes().to_vec(), *v)).collect();
            let held: Vec<_> = out.held.iter().map(|(port, hop, _, m)| (*port, *hop, m.bytes().to_vec())).collect();
            let mirrored = out.mirrored.borrow().len();
            let flows: Vec<_> = p.forward.flows.iter().map(|(k, e)| (*k, e)).collect();
            (sent, held, c.drops, c.events, c.tx_packets, mirrored, flows)
        };
        for (learn, many_flows) in [(false, false), (true, false), (true, true)] {
            let (l3, full) = (run(Depth::L3, 0, learn, many_flows), run(Depth::Full, 0, learn, many_flows));
            assert_eq!(l3, full);
            let tx = l3.0.iter().filter(|(_, v)| matches!(v, Verdict::Tx(_))).count();
            assert!(tx >= 10 && !l3.1.is_empty() && l3.2.iter().sum::<u64>() > 0, "routed, held and dropped packets");
            let installed = if many_flows { PREFETCH_MIN_FLOWS } else { 0 };
            assert_eq!(l3.6.len() > installed, learn, "flows learned");
            let captured = run(Depth::L3, 0b11, learn, many_flows);
            assert_eq!(captured, run(Depth::Full, 0b11, learn, many_flows));
            let left = l3.0.iter().filter(|(_, v)| matches!(v, Verdict::Tx(_) | Verdict::TxLen(..))).count();
            assert_eq!(captured.5, left, "every packet captured as it left (routed, and the ARP reply)");
            assert_eq!((captured.0, captured.1), (l3.0, l3.1), "capture changes no packet");
        }
    }

    /// The bridge's shortcut (`run_l2`, the worker's path for a bridge no
    /// stage reads) ends a burst as the pipeline does at the bridge's depth
    /// (`L2`, where a capture keeps it): the same verdicts, drops, events,
    /// counters and learned MACs.
    #[test]
    fn a_bridge_burst_on_its_shortcut_ends_as_through_the_stages() {
        use crate::tables::StaticMac;
        let mut s = two_port_router();
        s.mode = Mode::Bridge;
        s.static_macs.push(StaticMac { vlan: 0, mac: [2, 0, 0, 0, 0, 0x22], port: 1 });
        let t = Tables::build(&s, 1).unwrap();
        let out = VecOut::<VecBuf>::new(1, 0);
        assert_eq!(pipeline(false).shortcut::<VecBuf, _>(&t, &out, 0).0, Shortcut::L2);
        let frame = |dst: [u8; 6], src: [u8; 6], tail: &[u8]| {
            let mut f = [dst, src].concat();
            f.extend(tail);
            f
        };
        let ip = [0x08, 0x00, 0x45, 0, 0, 20];
        let vlan = |tail: &[u8]| [&[0x81, 0x00, 0x00, 0x07][..], tail].concat();
        let (a, b, c) = ([2, 0, 0, 0, 0, 0x11], [2, 0, 0, 0, 0, 0x22], [2, 0, 0, 0, 0, 0x33]);
        let frames = vec![
            frame(b, a, &ip),                      // to a static MAC
            frame(c, a, &ip),                      // unknown: flooded
            frame([0xff; 6], c, &ip),              // broadcast, c learned
            frame(c, a, &ip),                      // c now known, on port 0: same segment
            frame(a, b, &ip),                      // from a static MAC: not learned
            frame(b, a, &vlan(&ip)),               // VLAN 7: b is static on VLAN 0 only
            frame(b, a, &vlan(&vlan(&vlan(&ip)))), // a third tag
            frame(b, a, &[]),                      // no EtherType
            [0u8; 6].to_vec(),                     // truncated
        ];
        let rx = RxTime { tsc: 1, wall_ns: 1 };
        let run = |shortcut: bool| {
            let (mut p, mut out) = (pipeline(false), VecOut::<VecBuf>::new(64, 0));
            let mut c = CounterValues::default();
            for _ in 0..2 {
                let mut pkts: Vec<_> = frames.iter().map(|f| Some(VecBuf::new(f, 64))).collect();
                if shortcut {
                    p.run_l2(&t, &mut c, &mut out, 0, 5, &mut pkts);
                } else {
                    p.run(&t, &mut c, &mut out, &PortLoad::default(), &Burst::received(0, rx, Depth::L2), &mut pkts);
                }
                assert!(pkts.iter().all(Option::is_none), "every frame taken");
            }
            let sent: Vec<_> = out.out.iter().map(|(m, v)| (m.bytes().to_vec(), *v)).collect();
            (sent, c.drops, c.events, c.rx_packets, c.rx_bytes, c.tx_packets, p.forward.macs.len())
        };
        let (l2, staged) = (run(true), run(false));
        assert_eq!(l2, staged);
        let verdicts: Vec<_> = l2.0.iter().take(frames.len()).map(|(_, v)| *v).collect();
        assert_eq!(verdicts[..3], [Verdict::Tx(1), Verdict::Flood, Verdict::Flood]);
        assert_eq!(verdicts[3], Verdict::Drop(DropReason::L2SameSegment));
        assert_eq!(verdicts[6], Verdict::Drop(DropReason::VlanTooDeep));
        assert_eq!(l2.3[0], 2 * frames.len() as u64, "every frame counted in");
        assert_eq!(verdicts[5], Verdict::Flood, "b is static on VLAN 0 only");
        assert_eq!(l2.6, 3, "a on VLANs 0 and 7 and c learned, not the static b");
    }

    /// A consent's DSCP set holds exactly the values whose masked bits are
    /// the value's, for every mask and value.
    #[test]
    fn a_consent_leaves_exactly_the_dscps_of_its_mask_and_value() {
        for mask in 0..64u8 {
            for value in 0..64u8 {
                let c = QuickConsent::ALL.leaving_dscp(value, mask);
                for d in 0..64u8 {
                    assert_eq!(c.leaves(d, 6, || None), d & mask == value, "{d:#x} by {value:#x}/{mask:#x}");
                }
            }
        }
        // UDP's port is read only where a UDP port is named.
        assert!(!QuickConsent::ALL.leaves(0, 17, || unreachable!()));
        assert!(QuickConsent::ALL.leaving_udp(9).leaves(0, 17, || None), "a later fragment: unsure");
        assert!(!QuickConsent::ALL.leaving_udp(9).leaves(0, 6, || Some(9)), "TCP to that port");
        assert!(!QuickConsent::ALL.leaving_udp(9).leaves(0, 6, || None), "a later TCP fragment");
        // Both slots, and every UDP port once more are named than they hold.
        let two = QuickConsent::ALL.leaving_udp(9).leaving_udp(7);
        assert!(two.leaves(0, 17, || Some(7)) && two.leaves(0, 17, || Some(9)) && !two.leaves(0, 17, || Some(8)));
        assert!(two.leaving_udp(5).leaves(0, 17, || Some(8)) && !two.leaving_udp(5).leaves(0, 6, || Some(8)));
    }

    /// A consent that names every port a route leads to is one to every
    /// port (the quick path then tests no port); one missing such a port,
    /// or naming none, is left as it is, and what it leaves stays left.
    #[test]
    fn a_consent_to_every_routed_port_is_one_to_all() {
        assert_eq!(QuickConsent::to_ports(0b0110).of_routes(0b0110).ports, u32::MAX);
        assert_eq!(QuickConsent::to_ports(0b1110).of_routes(0b0110).ports, u32::MAX, "and an unrouted one");
        assert_eq!(QuickConsent::to_ports(0b1100).of_routes(0b0110).ports, 0b1100);
        assert_eq!(QuickConsent::NONE.of_routes(0).ports, 0, "no quick path");
        let to = QuickConsent::to_ports(0b10).leaving_dscp(0x17, 0x3f).leaving_udp(9).of_routes(0b10);
        assert!(to.leaves(0x17, 6, || None) && to.leaves(0, 17, || Some(9)) && !to.leaves(0, 17, || Some(8)));
    }

    /// A router with INT (a transit) and INT-label runs at `Depth::L3`: a
    /// burst's quick path routes to the ports not due for their interval
    /// label (none while every port is), only packets without INT by
    /// either domain's presence, and nothing where a watch rule may source
    /// the burst's packets; bursts end as at full depth.
    #[test]
    fn int_and_label_let_the_quick_path_take_what_they_leave_alone() {
        use crate::counters::Event;
        use crate::forward::quick::tests::corpus;
        use crate::int::Presence;
        use crate::label::{LabelFn, LabelSpec, Thresholds, Times};
        use crate::tables::tests::two_port_router_v6_routed;
        const T: u64 = 50_000;
        let dscp = Presence::Dscp { value: 0x17, mask: 0x3f };
        let mut s = two_port_router_v6_routed();
        s.int = Some(crate::int::stage::tests::spec(1, 0));
        s.label = Some(LabelSpec {
            node_id: 1,
            ds_id: 0x4c42,
            presence: dscp,
            bitmap: 0xfc00,
            max_labels: 8,
            times: Times { interval: T, rest: T },
            f: Thresholds::new(&LabelFn::F1, 5),
            edge_ports: 0,
            mtu: [1500; crate::counters::MAX_PORTS],
            truncate: 64,
            watch: Vec::new(),
            flows: Vec::new(),
        });
        let t = Tables::build(&s, 1).unwrap();
        let frames = corpus();
        let (plain4, plain6) = (&frames[2], &frames[16]);
        let mut int_port = plain4.clone();
        int_port[36..38].copy_from_slice(&17768u16.to_be_bytes());
        let mut dscp_marked = plain6.clone();
        dscp_marked[14..16].copy_from_slice(&[0x65, 0xc0]);
        let out = VecOut::<VecBuf>::new(64, 64);
        let mut p = pipeline(false);
        assert_eq!(p.shortcut::<VecBuf, _>(&t, &out, 0).1, Depth::L3);
        let active = Stage::<VecBuf>::active(&p.stages, &t, &out);
        assert_eq!(active.count_ones(), 2, "INT and label");
        // What the stages consent to in a burst at `now`; the ports.
        let consent = |p: &mut WorkerPipeline, now: u64| {
            let burst = Burst::received(0, RxTime { tsc: now, wall_ns: 1 }, Depth::L3);
            Stage::<VecBuf>::begin(&mut p.stages, &t, &burst);
            Stage::<VecBuf>::quick_consent_active(&p.stages, active, &t)
        };
        let quick_ports = |p: &mut WorkerPipeline, now: u64| consent(p, now).ports & 0b11;
        // Whether the quick path takes `f` (to port 1) with `to`.
        let passes = |p: &mut WorkerPipeline, f: &[u8], to: &QuickConsent| {
            let mut m = VecBuf::new(f, 256);
            p.forward.quick_route(&t, &mut CounterValues::default(), 1, &mut m, 0, false, to).is_some()
        };
        assert_eq!(quick_ports(&mut p, T + 1), 0, "every port due for its interval label");
        // A burst at full depth labels port 1 (the plain IPv4 frame's).
        let mut c = CounterValues::default();
        let mut o = VecOut::<VecBuf>::new(4, 0);
        let (rx, load) = (RxTime { tsc: T + 1, wall_ns: 1 }, PortLoad::default());
        let one = &mut [Some(VecBuf::new(plain4, 256))];
        p.run(&t, &mut c, &mut o, &load, &Burst::received(0, rx, Depth::Full), one);
        assert_eq!(c.events[Event::LabelInterval as usize], 1);
        assert_eq!(quick_ports(&mut p, T + 2), 0b10, "port 1 quiet now, port 0 still due");
        let to = consent(&mut p, T + 2).of_routes(t.routed_ports);
        assert_eq!(to.ports, u32::MAX, "no route leads to port 0: the burst's quick path tests no port");
        assert!(!passes(&mut p, &dscp_marked, &to), "a label packet by its DSCP");
        let ports = &p.stages.3.ports;
        ports.commit(&ports.force(0, T + 2).expect("claimed"), &mut CounterValues::default());
        let to = consent(&mut p, T + 3);
        assert_eq!(to.ports & 0b11, 0b11);
        assert!(passes(&mut p, plain4, &to) && passes(&mut p, plain6, &to));
        assert!(!passes(&mut p, &int_port, &to), "INT by its UDP port");
        assert!(!passes(&mut p, &dscp_marked, &to), "a label packet by its DSCP");
        assert_eq!(quick_ports(&mut p, 2 * T + 3), 0, "due again");
        // A watch rule that may source at the burst's edge port: INT lets
        // the quick path take nothing.
        let mut edge = s.clone();
        edge.int = Some(crate::int::stage::tests::spec(1, 0b01));
        let t_edge = Tables::build(&edge, 2).unwrap();
        let burst = Burst::received(0, RxTime { tsc: T + 3, wall_ns: 1 }, Depth::L3);
        Stage::<VecBuf>::begin(&mut p.stages, &t_edge, &burst);
        assert_eq!(Stage::<VecBuf>::quick_consent_active(&p.stages, active, &t_edge).ports, 0);
        // A node that is no classic INT transit (no edge port, no rule):
        // INT leaves nothing to the full path, the label stage its own.
        let mut quiet = s.clone();
        let int = quiet.int.as_mut().unwrap();
        (int.transit, int.watch) = (false, Vec::new());
        let t_quiet = Tables::build(&quiet, 3).unwrap();
        Stage::<VecBuf>::begin(&mut p.stages, &t_quiet, &burst);
        let to = Stage::<VecBuf>::quick_consent_active(&p.stages, active, &t_quiet);
        assert!(passes(&mut p, &int_port, &to), "INT by its UDP port, not transited here");
        assert!(!passes(&mut p, &dscp_marked, &to), "a label packet by its DSCP");

        // Bursts at L3 and at full depth, labels due and not, end the same.
        let mut burst = frames.clone();
        burst.extend([int_port, dscp_marked]);
        let run = |depth| {
            let (mut p, mut out) = (pipeline(false), VecOut::<VecBuf>::new(64, 64));
            let mut c = CounterValues::default();
            for now in [T + 1, T + 2, 2 * T, 2 * T + 10] {
                let mut pkts: Vec<_> = burst.iter().map(|f| Some(VecBuf::new(f, 256))).collect();
                let rx = RxTime { tsc: now, wall_ns: 1 };
                p.run(&t, &mut c, &mut out, &PortLoad::default(), &Burst::received(0, rx, depth), &mut pkts);
            }
            let sent: Vec<_> = out.out.iter().map(|(m, v)| (m.bytes().len(), *v)).collect();
            (sent, c.drops, c.events, c.tx_packets)
        };
        let l3 = run(Depth::L3);
        assert_eq!(l3, run(Depth::Full));
        assert_eq!(l3.2[Event::LabelInterval as usize], 2, "port 1 labeled once an interval");
    }

    #[test]
    fn held_packets_come_back_with_their_receive_time_through_every_stage() {
        use crate::parse::tests::udp6;
        use crate::tables::NeighbourSpec;
        let mut s = two_port_router();
        let src = [0x20, 1, 0xd, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let dst = [0x20, 1, 0xd, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];
        let mut f = udp6(src, dst, 1000, 2000, b"held");
        f[..6].copy_from_slice(&s.ports[0].mac);
        let t = Tables::build(&s, 1).unwrap();
        let mut p = pipeline(false);
        let mut out = VecOut::<VecBuf>::new(4, 4);
        out.capture = (0, 0b10);
        let load = PortLoad::default();
        let mut c = CounterValues::default();
        let rx = RxTime { tsc: 77, wall_ns: 1_700_000_000_000_000_000 };
        let mut pkts = [Some(VecBuf::new(&f, 64))];
        p.run(&t, &mut c, &mut out, &load, &Burst::received(0, rx, Depth::Full), &mut pkts);
        assert!(out.out.is_empty(), "held, not delivered");
        assert_eq!(out.held.len(), 1);
        assert_eq!((out.held[0].1, out.held[0].2), (std::net::IpAddr::from(dst), rx), "kept its receive time");
        assert_eq!((c.rx_packets[0], c.events[crate::counters::Event::Held as usize]), (1, 1));

        // The neighbour is learned: the packet runs every stage again, TX
        // capture included, as a burst of its receive time, counted once.
        s.upsert_neighbour(NeighbourSpec { ip: dst.into(), mac: [2, 0, 0, 0, 0, 9], port: 1, permanent: false });
        let t = Tables::build(&s, 2).unwrap();
        let (port, _, rx, m) = out.held.pop().unwrap();
        let burst = Burst::reinjected(port, rx, 10_000);
        assert_eq!((burst.rx_tsc, burst.wall_ns()), (77, rx.wall_ns));
        p.run(&t, &mut c, &mut out, &load, &burst, &mut [Some(m)]);
        assert_eq!(out.out.len(), 1);
        assert_eq!(out.out[0].1, Verdict::Tx(1));
        assert_eq!(&out.out[0].0.bytes()[..6], &[2, 0, 0, 0, 0, 9]);
        assert_eq!(out.mirrored.borrow().len(), 1, "captured as it left");
        assert_eq!(c.rx_packets[0], 1, "not received twice");

        // A second miss is not held again: dropped.
        let t = Tables::build(&two_port_router(), 3).unwrap();
        let (m, _) = out.out.pop().unwrap();
        let mut f2 = m.bytes().to_vec();
        f2[..6].copy_from_slice(&s.ports[0].mac);
        p.run(&t, &mut c, &mut out, &load, &Burst::reinjected(0, rx, 20_000), &mut [Some(VecBuf::new(&f2, 64))]);
        assert_eq!(out.out[0].1, Verdict::Drop(DropReason::NeighbourUnresolved));
        assert!(out.held.is_empty());
    }
}
