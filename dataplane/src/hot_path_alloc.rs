//! The per-packet path never calls the allocator: parsing, forwarding in
//! every mode (learning flows and MAC addresses, answering ARP and echo,
//! flooding, TTL expiry, a full flow table), the AM-PM stage in every
//! role, and the INT stage as source, transit and sink with reports into
//! the worker's real report ring, on valid frames and on mutants of them.
//! Frames and tables are built before; only the per-packet calls run in
//! the checked zone. This test binary's allocator counts every
//! (de)allocation made in the zone, on the thread that makes it.

use assert_no_alloc::{assert_no_alloc, violation_count, AllocDisabler};
use crossbeam_queue::ArrayQueue;

use crate::ampm::{tests::Mp, Carrier, Method, MpRole, Outcome};
use crate::counters::{CounterValues, Event};
use crate::flow_table::FlowTable;
use crate::forward::{self, ControlEvent, ControlSink, Ctx, Verdict};
use crate::int::Presence;
use crate::int_stage::{self, tests::spec as int_spec, Hop, IntCtx, WallClock};
use crate::mac_table::MacTable;
use crate::parse::parse;
use crate::parse::tests::{udp4, udp6};
use crate::pipeline_fuzz::{mutate, seeds};
use crate::pktbuf::{PacketBuf, VecBuf};
use crate::rand::XorShift;
use crate::report_filter::ReportFilter;
use crate::report_ring::report_ring;
use crate::tables::{tests::two_port_router, Mode, Tables};
use crate::wire::checksum;
use crate::DropReason;

#[global_allocator]
static ALLOCATOR: AllocDisabler = AllocDisabler;

/// Allocator calls `f` makes on this thread.
fn allocations_in(f: impl FnOnce()) -> u32 {
    let before = violation_count();
    assert_no_alloc(f);
    violation_count() - before
}

/// The worker's control queue: bounded, allocated up front; full refuses.
struct Queue(ArrayQueue<ControlEvent>);

impl ControlSink for Queue {
    fn send(&mut self, ev: ControlEvent) -> bool {
        self.0.push(ev).is_ok()
    }
}

const SEC: u64 = 1_000_000_000;

/// Valid frames of every kind, many flows of each, then mutants of them.
fn frames(mutants: usize) -> Vec<Vec<u8>> {
    let mut v = seeds();
    for port in 0..600u16 {
        v.push(udp4([10, 0, 1, 2], [172, 16, (port >> 8) as u8, port as u8], 1024 + port, 5001, b"payload"));
        let mut dst = [0x20, 1, 0xd, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9];
        dst[14..].copy_from_slice(&port.to_be_bytes());
        let src = [0x20, 1, 0xd, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        v.push(udp6(src, dst, 1024 + port, 5001, b"payload"));
    }
    // TTL 1: expires here.
    let mut expiring = udp4([10, 0, 1, 2], [172, 16, 0, 9], 4000, 5001, b"payload");
    let csum = u16::from_be_bytes([expiring[24], expiring[25]]);
    let csum = checksum::update16(csum, u16::from_be_bytes([expiring[22], expiring[23]]), 0x0111);
    expiring[22] = 1;
    expiring[24..26].copy_from_slice(&csum.to_be_bytes());
    v.push(expiring);
    let mut rng = XorShift::new(0xa110_c8ed);
    let base = v.len();
    for _ in 0..mutants {
        let k = rng.below(base);
        let f = mutate(&mut rng, &v[k]);
        v.push(f);
    }
    v
}

#[test]
fn forwarding_allocates_nothing_per_packet() {
    let frames = frames(20_000);
    for mode in [Mode::CrossConnect, Mode::Bridge, Mode::Router] {
        let mut s = two_port_router();
        s.mode = mode;
        let tables = Tables::build(&s, 1).unwrap();
        // Smaller than the flows and hosts sent: the full tables' paths run too.
        let (mut flows, mut macs) = (FlowTable::new(512, 1_000), MacTable::new(256, 1_000));
        let mut control = Queue(ArrayQueue::new(64));
        let mut c = CounterValues::default();
        let bufs_for = |i: usize, f: &Vec<u8>| {
            let mut b = f.clone();
            if b.len() >= 12 {
                if mode == Mode::Router {
                    b[..6].copy_from_slice(&s.ports[0].mac);
                } else {
                    // 700 hosts, each frame to the one before (learned on the
                    // other port); every 50th to all.
                    let host = |i: usize| [2, 0, 0, 1, ((i % 700) >> 8) as u8, (i % 700) as u8];
                    b[6..12].copy_from_slice(&host(i));
                    b[..6].copy_from_slice(&if i % 50 == 0 { [0xff; 6] } else { host(i + 699) });
                }
            }
            b
        };
        let in_port = |i: usize| if mode == Mode::Router { 0 } else { (i % 2) as u16 };
        let mut bufs: Vec<Vec<u8>> = frames.iter().enumerate().map(|(i, f)| bufs_for(i, f)).collect();
        let mut verdicts = vec![Verdict::Consumed; bufs.len()];
        let n = allocations_in(|| {
            for (i, (b, v)) in bufs.iter_mut().zip(verdicts.iter_mut()).enumerate() {
                let in_port = in_port(i);
                let meta = parse(b, in_port);
                let mut ctx = Ctx::new(&tables, &mut flows, &mut macs, &mut c, &mut control, i as u64 * 1_000, true);
                *v = forward::process_parsed(&mut ctx, b, in_port, &meta);
                if i % 100 == 0 {
                    // The control core drains its queue now and then.
                    while control.0.pop().is_some() {}
                }
            }
        });
        assert_eq!(n, 0, "{mode:?}: allocator calls while forwarding {} frames", bufs.len());
        // The frames went through the paths named above, not only the parser's checks.
        let sent = verdicts.iter().filter(|v| matches!(v, Verdict::Tx(_) | Verdict::TxLen(..))).count();
        assert!(sent > 1_000, "{mode:?}: {sent} frames sent");
        match mode {
            Mode::Router => {
                assert!(flows.len() == flows.capacity(), "router: {} flows learned", flows.len());
                assert!(verdicts.contains(&Verdict::Drop(DropReason::TtlExceeded)), "router: no TTL expiry");
                // ARP and echo replies are built in the frame's own buffer.
                assert!(verdicts.iter().any(|v| matches!(v, Verdict::TxLen(0, _))), "router: no reply");
            }
            Mode::Bridge => {
                assert!(verdicts.contains(&Verdict::Flood), "bridge: nothing flooded");
                assert!(macs.len() == 256, "bridge: {} addresses learned, room for 256", macs.len());
            }
            Mode::CrossConnect => {}
        }
    }
}

#[test]
fn int_source_transit_and_sink_allocate_nothing_per_packet() {
    let frames = frames(20_000);
    for presence in [Presence::UdpPort(17768), Presence::Dscp { value: 0x17, mask: 0x3f }] {
        // Source on edge port 0, transit, sink towards edge port 1.
        let specs = [int_spec(1, 0b01), int_spec(2, 0), int_spec(3, 0b10)].map(|mut s| {
            s.presence = presence;
            s
        });
        let clock = WallClock::new(0, 1_700_000_000 * SEC, SEC);
        let mut filter = ReportFilter::new(256);
        let mut c = CounterValues::default();
        // A ring that fills: refused reports are counted, not queued elsewhere.
        let (mut reports, mut consumer) = report_ring(256);
        let mut drained = int_stage::ReportRecord::empty();
        let mut bufs: Vec<VecBuf> = frames.iter().map(|f| VecBuf::new(f, 256)).collect();
        let n = allocations_in(|| {
            for (i, b) in bufs.iter_mut().enumerate() {
                let hop = Hop {
                    in_port: 0,
                    out_port: 1,
                    rx_tsc: i as u64 * 100,
                    tx_tsc: i as u64 * 100 + 40,
                    queue_occupancy: 3,
                    ..Default::default()
                };
                for spec in &specs {
                    let Ok(meta) = parse(b.bytes(), 0) else { break };
                    let mut ctx =
                        IntCtx { spec, clock: &clock, filter: &mut filter, counters: &mut c, reports: &mut reports };
                    if i % 10 == 0 {
                        int_stage::dropped(&mut ctx, b.bytes(), &meta, &hop, DropReason::TtlExceeded);
                    }
                    if int_stage::apply(&mut ctx, b, &meta, &hop).is_err() {
                        break;
                    }
                }
                if i % 1_000 == 0 {
                    while consumer.pop_into(&mut drained) {}
                }
            }
        });
        assert_eq!(n, 0, "{presence:?}: allocator calls in INT on {} frames", bufs.len());
        let e = |ev: Event| c.events[ev as usize];
        assert!(
            e(Event::IntSourced) > 1_000 && e(Event::IntTransited) > 1_000 && e(Event::IntSunk) > 1_000,
            "{presence:?}: sourced {}, transited {}, sunk {}",
            e(Event::IntSourced),
            e(Event::IntTransited),
            e(Event::IntSunk)
        );
        assert!(e(Event::IntReportRingFull) > 0, "{presence:?}: the ring never filled");
    }
}

#[test]
fn ampm_allocates_nothing_per_packet() {
    let frames = frames(5_000);
    let carriers = [
        Carrier::Dscp { l_bit: 0, d_bit: 1 },
        Carrier::Ipv4Flag { d_bit: 0 },
        Carrier::Ipv6HopByHop,
        Carrier::Ipv6DestOpts,
    ];
    for role in MpRole::ALL {
        for method in Method::ALL {
            for carrier in carriers {
                let mut mp = Mp::new(role, method, carrier);
                let mut bufs: Vec<VecBuf> = frames.iter().map(|f| VecBuf::new(f, 128)).collect();
                let mut measured = 0;
                let n = allocations_in(|| {
                    for (i, b) in bufs.iter_mut().enumerate() {
                        // Through several intervals and all their slots.
                        let at = 1_700_000_000 * SEC + i as u64 * (SEC / 1_000);
                        if parse(b.bytes(), 0).is_ok() {
                            measured += (mp.run(b, at).0 == Outcome::Measured) as u32;
                        }
                    }
                });
                assert_eq!(n, 0, "{role:?} {method:?} {carrier:?}: allocator calls on {} frames", bufs.len());
                assert!(measured > 0, "{role:?} {method:?} {carrier:?}: no frame measured");
            }
        }
    }
}

/// The check itself: a per-packet allocation is seen.
#[test]
fn an_allocation_in_the_zone_is_counted() {
    let n = allocations_in(|| {
        let v: Vec<u8> = Vec::with_capacity(std::hint::black_box(64));
        std::hint::black_box(&v);
    });
    assert_eq!(n, 2, "one allocation and one deallocation");
}
