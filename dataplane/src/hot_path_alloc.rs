//! The per-packet path never calls the allocator: the worker's own pipeline
//! (`worker::pipeline`) over test buffers, parsing and forwarding in every
//! mode (learning flows and MAC addresses, answering ARP and echo,
//! flooding, TTL expiry, a full flow table, holding packets for neighbour
//! resolution and reinjecting them, with GPINT's claim check on every
//! packet), INT as source, transit and sink with
//! drop reports into the worker's real report ring; and the AM-PM stage's
//! work in every role; on valid frames and on mutants of them. Frames and
//! tables are built before; only the bursts run in the checked zone. This test binary's allocator counts every
//! (de)allocation made in the zone, on the thread that makes it.

use std::sync::Arc;

use assert_no_alloc::{assert_no_alloc, violation_count, AllocDisabler};

use crate::ampm::{tests::Mp, Carrier, Method, MpRole, Outcome};
use crate::counters::{CounterValues, Event};
use crate::flow_table::FlowAction;
use crate::forward::Verdict;
use crate::int::analytics::detect::{Algorithm, DetectRule};
use crate::int::analytics::events::{event_ring, EventRule};
use crate::int::analytics::flow_ring::flow_ring;
use crate::int::analytics::histogram::{HistSpec, HistWriter, WorkerHist};
use crate::int::analytics::AnalyticsSetup;
use crate::int::report_ring::{report_ring, ReportConsumer};
use crate::int::stage::{tests::spec as int_spec, ReportRecord, WallClock};
use crate::int::Presence;
use crate::parse::parse;
use crate::parse::tests::{udp4, udp6};
use crate::pipeline::{Burst, PortLoad, RxTime, Stage, VecOut};
use crate::pipeline_fuzz::{mutate, seeds};
use crate::pktbuf::{PacketBuf, VecBuf};
use crate::rand::XorShift;
use crate::tables::{tests::two_port_router, Mode, Tables};
use crate::wire::checksum;
use crate::worker::{self, FlowSetup, MacSetup, StageSetup, WorkerPipeline, WorkerShared};
use crate::DropReason;

#[global_allocator]
static ALLOCATOR: AllocDisabler = AllocDisabler;

/// Allocator calls `f` makes on this thread.
fn allocations_in(f: impl FnOnce()) -> u32 {
    let before = violation_count();
    assert_no_alloc(f);
    violation_count() - before
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

/// A worker's real pipeline (forwarding, AM-PM, INT, capture) over test
/// buffers, its report ring's far end, and its shared state.
fn worker_pipeline(flows: usize, macs: usize, learn: bool) -> (WorkerPipeline, ReportConsumer, Arc<WorkerShared>) {
    let me = Arc::new(WorkerShared::new(0));
    let (reports, consumer) = report_ring(256);
    // Analytics on, exporting (the ring's far end is dropped: a full ring
    // is counted, which the data path also does without allocating).
    let (ring, _) = flow_ring(64, 5);
    let (events, _) = event_ring(64);
    let analytics = AnalyticsSetup {
        rows: 64,
        ways: 4,
        max_hops: 5,
        idle_tsc: 1_000,
        active_tsc: 500,
        ring: Some(ring),
        events: Some(events),
        hist: Some(HistWriter::new(Arc::new(WorkerHist::new(HistSpec { bins: HistSpec::default_bins(), nodes: 2 })))),
        rule_counters: crate::int::analytics::rule_counters(),
        per_hop_flow: false,
    };
    let clock = WallClock::new(0, 1_700_000_000 * SEC, SEC);
    let stages = StageSetup {
        analytics,
        reports,
        clock,
        gpint: crate::gpint::stage::GpintSetup::off(),
        label: worker::LabelSetup::off(),
    };
    let flows = FlowSetup { capacity: flows, idle_timeout_s: 1, learn, hash_seed: 1 };
    let macs = MacSetup { capacity: macs, aging_s: 1, share: false };
    // A "TSC" of 1000 ticks a second: the tables age as in the old test.
    (worker::pipeline(me.clone(), flows, macs, stages, 1_000), consumer, me)
}

/// Runs one burst of `pkts` from `in_port` received at `tsc`, at the depth
/// the pipeline says, and moves what it delivered to `done`.
#[allow(clippy::too_many_arguments)]
fn run_burst(
    pipe: &mut WorkerPipeline,
    t: &Tables,
    c: &mut CounterValues,
    out: &mut VecOut<VecBuf>,
    pkts: &mut [Option<VecBuf>],
    in_port: u16,
    tsc: u64,
    done: &mut Vec<(VecBuf, Verdict)>,
) {
    let load = PortLoad::default();
    let (_, depth) = pipe.shortcut::<VecBuf, _>(t, out, in_port as usize);
    let burst = Burst::received(in_port, RxTime { tsc, wall_ns: 1_700_000_000 * SEC + tsc }, depth);
    pipe.run(t, c, out, &load, &burst, pkts);
    // The worker's per-loop timer work (the INT sink's flow-cache aging).
    Stage::<VecBuf>::poll(&mut pipe.stages, t, tsc, c);
    done.append(&mut out.out);
}

#[test]
fn forwarding_allocates_nothing_per_packet() {
    let frames = frames(20_000);
    for mode in [Mode::CrossConnect, Mode::Bridge, Mode::Router] {
        let mut s = two_port_router();
        s.mode = mode;
        // GPINT on: every packet passes the SQR stage's claim check (the
        // INT frames among them are another domain's, not claimed).
        s.gpint = Some(crate::gpint::GpintSpec {
            int_port: 17768,
            udp_port: 17900,
            domain_id: 0x6701,
            node_id: 1,
            recovery: true,
            hold_tsc: 1_000,
            mtu: [1500; crate::counters::MAX_PORTS],
            dscp: None,
        });
        let tables = Tables::build(&s, 1).unwrap();
        // Smaller than the flows and hosts sent: the full tables' paths run too.
        let (mut pipe, _reports, me) = worker_pipeline(512, 256, true);
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
            VecBuf::new(&b, 64)
        };
        let in_port = |i: usize| if mode == Mode::Router { 0 } else { (i % 2) as u16 };
        let mut bufs: Vec<Option<VecBuf>> = frames.iter().enumerate().map(|(i, f)| Some(bufs_for(i, f))).collect();
        let mut done: Vec<(VecBuf, Verdict)> = Vec::with_capacity(bufs.len());
        let mut out = VecOut::new(32, 64);
        let mut burst: Vec<Option<VecBuf>> = (0..32).map(|_| None).collect();
        let n = allocations_in(|| {
            // Bursts of one input port each, from 32-frame windows.
            for (w, window) in bufs.chunks_mut(32).enumerate() {
                for port in 0..2u16 {
                    let mut k = 0;
                    for (j, slot) in window.iter_mut().enumerate() {
                        if in_port(w * 32 + j) == port && slot.is_some() {
                            burst[k] = slot.take();
                            k += 1;
                        }
                    }
                    if k > 0 {
                        let tsc = (w * 32) as u64 * 1_000;
                        run_burst(&mut pipe, &tables, &mut c, &mut out, &mut burst[..k], port, tsc, &mut done);
                    }
                }
                if w % 3 == 0 {
                    // The control core drains its queue now and then, and
                    // sends held packets back.
                    while me.events.pop().is_some() {}
                }
                if w % 16 == 0 && !out.held.is_empty() {
                    let (port, _, rx, _) = out.held[0];
                    let k = out.held.len().min(32);
                    for (slot, (_, _, _, m)) in burst.iter_mut().zip(out.held.drain(..k)) {
                        *slot = Some(m);
                    }
                    let load = PortLoad::default();
                    let b = Burst::reinjected(port, rx, rx.tsc + 1);
                    pipe.run(&tables, &mut c, &mut out, &load, &b, &mut burst[..k]);
                    done.append(&mut out.out);
                }
            }
        });
        assert_eq!(n, 0, "{mode:?}: allocator calls while forwarding {} frames", bufs.len());
        let verdicts: Vec<Verdict> = done.iter().map(|(_, v)| *v).collect();
        let (flows, macs) = (&pipe.forward.flows, &pipe.forward.macs);
        // The frames went through the paths named above, not only the parser's checks.
        let sent = verdicts.iter().filter(|v| matches!(v, Verdict::Tx(_) | Verdict::TxLen(..))).count();
        assert!(sent > 1_000, "{mode:?}: {sent} frames sent");
        match mode {
            Mode::Router => {
                assert!(flows.len() == flows.capacity(), "router: {} flows learned", flows.len());
                assert!(verdicts.contains(&Verdict::Drop(DropReason::TtlExceeded)), "router: no TTL expiry");
                // ARP and echo replies are built in the frame's own buffer.
                assert!(verdicts.iter().any(|v| matches!(v, Verdict::TxLen(0, _))), "router: no reply");
                assert!(c.events[Event::Held as usize] > 0, "router: nothing held for resolution");
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
        // Source on edge port 0, transit, sink towards edge port 1: three
        // switches' pipelines, each with its own report ring of 256 (they
        // fill: refused reports are counted, not queued elsewhere).
        let nodes: Vec<Tables> = [int_spec(1, 0b01), int_spec(2, 0), int_spec(3, 0b10)]
            .into_iter()
            .map(|mut spec| {
                spec.presence = presence;
                // The sink raises events of every kind (R_I fills too).
                spec.events.hop = [EventRule { threshold: 1, change: 1, edge: false, reset: 0 }; 3];
                spec.events.e2e = EventRule { threshold: 1, change: 1, edge: true, reset: 1 };
                spec.events.path_change = true;
                // And decides reports by rules: per_hop and ewma for a
                // sixteenth of the source ports each, every packet (noop)
                // for the rest.
                let rule = |name: &str, port: Option<u16>| {
                    let mut r = crate::int::watch::WatchRule::any(name, crate::int::watch::Role::None);
                    if let Some(p) = port {
                        r.src_port = crate::int::watch::Ternary { value: p, mask: 0xf };
                        r.priority = 1;
                    }
                    r
                };
                let rules = [
                    (rule("per-hop", Some(0)), Algorithm::PerHop),
                    (rule("ewma", Some(1)), Algorithm::Ewma { weight: 64 }),
                    (rule("cnf", Some(2)), Algorithm::Cnf { weight: 64 }),
                    (rule("rest", None), Algorithm::Noop),
                ];
                let expr =
                    "hop_latency.max > 1 AND (queue.any.delta > 0 OR e2e_latency.ewma > 2 OR queue.hop1.delta < 0)";
                for (slot, (matcher, algorithm)) in rules.into_iter().enumerate() {
                    let cnf = matches!(algorithm, Algorithm::Cnf { .. })
                        .then(|| Box::new(("e".to_string(), crate::int::analytics::cnf::Cnf::parse(expr).unwrap())));
                    spec.detect.upsert(DetectRule { matcher, algorithm, metric: 0, threshold: 0, slot, cnf });
                }
                let mut s = two_port_router();
                s.mode = Mode::CrossConnect;
                s.int = Some(spec);
                Tables::build(&s, 1).unwrap()
            })
            .collect();
        let mut pipes: Vec<_> = nodes.iter().map(|_| worker_pipeline(64, 64, false)).collect();
        // The source drops some flows (flow entries): drop reports.
        for f in frames.iter().step_by(10) {
            if let Ok(meta) = parse(f, 0) {
                let _ = pipes[0].0.forward.flows.install(meta.key, FlowAction::Drop, 0);
            }
        }
        let mut c = CounterValues::default();
        let mut drained = ReportRecord::empty();
        let mut bufs: Vec<Option<VecBuf>> = frames.iter().map(|f| Some(VecBuf::new(f, 256))).collect();
        let mut done: Vec<(VecBuf, Verdict)> = Vec::with_capacity(bufs.len());
        let mut hop_bufs: Vec<(VecBuf, Verdict)> = Vec::with_capacity(32);
        let mut out = VecOut::new(32, 0);
        let mut burst: Vec<Option<VecBuf>> = (0..32).map(|_| None).collect();
        let n = allocations_in(|| {
            for (w, chunk) in bufs.chunks_mut(32).enumerate() {
                let mut k = chunk.len();
                for (slot, b) in burst.iter_mut().zip(chunk.iter_mut()) {
                    *slot = b.take();
                }
                for (i, (t, (pipe, _, _))) in nodes.iter().zip(pipes.iter_mut()).enumerate() {
                    let tsc = (w * 32) as u64 * 100 + i as u64 * 40;
                    run_burst(pipe, t, &mut c, &mut out, &mut burst[..k], 0, tsc, &mut hop_bufs);
                    // What left by port 1 goes on to the next switch.
                    k = 0;
                    for (m, v) in hop_bufs.drain(..) {
                        if v == Verdict::Tx(1) && i < 2 {
                            burst[k] = Some(m);
                            k += 1;
                        } else {
                            done.push((m, v));
                        }
                    }
                }
                if w % 30 == 0 {
                    for (_, consumer, _) in pipes.iter_mut() {
                        while consumer.pop_into(&mut drained) {}
                    }
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
        assert!(e(Event::IntDropReported) > 0, "{presence:?}: no drop reported");
        // The sink's analytics ran: flows filled the cache, LRU entries and
        // aged ones went to R_G until it filled.
        for ev in [
            Event::IntFlowHit,
            Event::IntFlowLru,
            Event::IntFlowAged,
            Event::IntFlowRingFull,
            Event::IntEventExported,
            Event::IntEventRingFull,
            Event::IntHistNodeUntracked,
        ] {
            assert!(e(ev) > 0, "{presence:?}: no {}", ev.name());
        }
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
