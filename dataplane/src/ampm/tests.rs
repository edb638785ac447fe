//! AM-PM stage tests: the slot tables against the paper's tables 1-6 on a
//! simulated clock, and each carrier's bytes.

use super::*;
use crate::parse::tests::{udp4, udp6};
use crate::parse::{parse, PacketMeta};
use crate::pktbuf::VecBuf;

const SEC: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;
/// An even second: interval color 0 starts here.
const T0: u64 = 1_800_000_000 * SEC;

fn timing() -> Timing {
    Timing { format: TimeFormat::SecFrac, interval_bit: 32, sub_bits: 2 }
}

fn flow(role: MpRole, method: Method, carrier: Carrier) -> AmpmFlow {
    AmpmFlow {
        name: "f".into(),
        mp: FlowRef { slot: 0, flow_mon_id: 0x12345, role, method, carrier, clear: true },
        priority: 1,
        value: Key::default(),
        mask: Key::default(),
    }
}

/// One measurement point.
pub(crate) struct Mp {
    spec: AmpmSpec,
    regs: Vec<u8>,
    counters: Vec<FlowCounters>,
    c: CounterValues,
}

impl Mp {
    pub(crate) fn new(role: MpRole, method: Method, carrier: Carrier) -> Mp {
        let mut s = AmpmSetup::new(1, timing(), 4);
        s.flows.push(flow(role, method, carrier));
        Mp {
            spec: s.compile(),
            regs: vec![0; 4],
            counters: (0..4).map(|_| FlowCounters::default()).collect(),
            c: CounterValues::default(),
        }
    }

    pub(crate) fn run(&mut self, pkt: &mut VecBuf, at_ns: u64) -> (Outcome, PacketMeta) {
        let now = BurstTime::new(&self.spec.timing, at_ns);
        let mut meta = parse(pkt.bytes(), 0).unwrap();
        let mut memo = SlotMemo::default();
        let mut ctx = AmpmCtx {
            spec: &self.spec,
            regs: &mut self.regs,
            counters: &self.counters,
            c: &mut self.c,
            now: &now,
            memo: &mut memo,
            flow: FlowLookup::ByKey,
        };
        let o = apply(&mut ctx, pkt, &mut meta);
        (o, meta)
    }

    fn get(&self, color: usize) -> (u64, u64, u64, u64) {
        let c = &self.counters[0].color[color];
        (c.packets.load(Relaxed), c.bytes.load(Relaxed), c.delay_count.load(Relaxed), c.delay_ts.load(Relaxed))
    }

    pub(crate) fn event(&self, e: Event) -> u64 {
        self.c.events[e as usize]
    }
}

fn v4() -> VecBuf {
    VecBuf::new(&udp4([10, 0, 0, 1], [10, 0, 0, 2], 1000, 2000, b"payload!"), 64)
}

fn v6() -> VecBuf {
    let mut a = [0u8; 16];
    a[0] = 0x20;
    a[15] = 1;
    let mut b = a;
    b[15] = 2;
    VecBuf::new(&udp6(a, b, 1000, 2000, b"payload!"), 64)
}

fn dscp() -> Carrier {
    Carrier::Dscp { l_bit: 0, d_bit: 1 }
}

/// Sends packets every `step` ns from T0 for `secs` through an initiator
/// and, `delay` later, a terminator; returns (send time, L, D) per packet.
fn simulate(method: Method, step: u64, secs: u64, delay: u64) -> (Mp, Mp, Vec<(u64, bool, bool)>) {
    let mut init = Mp::new(MpRole::Initiator, method, dscp());
    let mut term = Mp::new(MpRole::Terminator, method, dscp());
    let mut marks = Vec::new();
    let mut t = T0;
    while t < T0 + secs * SEC {
        let mut p = v4();
        assert_eq!(init.run(&mut p, t).0, Outcome::Measured);
        let tos = p.bytes()[15];
        marks.push((t, tos & 0x04 != 0, tos & 0x08 != 0));
        assert_eq!(term.run(&mut p, t + delay).0, Outcome::Measured);
        assert_eq!(p.bytes(), v4().bytes(), "terminator clears the marks");
        t += step;
    }
    (init, term, marks)
}

/// (interval color, quarter) of a time.
fn slot_of(t: u64) -> (u64, u64) {
    let ms = (t - T0) / MS;
    ((ms / 1000) % 2, (ms % 1000) / 250)
}

#[test]
fn table5_and_6_muxed_marking() {
    let (init, term, marks) = simulate(Method::Muxed, 50 * MS, 4, 10 * MS);
    let mut pulses = Vec::new();
    for (i, &(t, l, _)) in marks.iter().enumerate() {
        let (c, q) = slot_of(t);
        let first_in_q2 = q == 2 && (i == 0 || slot_of(marks[i - 1].0).1 != 2);
        // Table 5: the mark is the color, inverted on the first packet of
        // the third quarter (the pulse).
        assert_eq!(l, (c == 1) ^ first_in_q2, "t={}ms", (t - T0) / MS);
        if first_in_q2 {
            pulses.push(t);
        }
    }
    assert_eq!(pulses.len(), 4);
    // 10 packets per half second... 20 per interval, 2 intervals per color.
    let (p0, b0, d0, ts0) = init.get(0);
    let (p1, _, d1, ts1) = init.get(1);
    assert_eq!((p0, p1, d0, d1), (40, 40, 2, 2));
    assert_eq!(b0, 40 * (20 + 8 + 8));
    assert_eq!(ts0, pulses[2]);
    assert_eq!(ts1, pulses[3]);
    // Table 6 at the terminator: same counts per color, pulses seen 10 ms later.
    assert_eq!(term.get(0), (40, b0, 2, pulses[2] + 10 * MS));
    assert_eq!(term.get(1).0, 40);
    assert_eq!(term.get(1).3, pulses[3] + 10 * MS);
    assert_eq!(term.event(Event::AmpmCleared), 80);
}

#[test]
fn table6_guard_sub_intervals() {
    let t = timing();
    let rules = default_rules(Method::Muxed, MpRole::Terminator, &t);
    let c = Classifier::new(rules);
    assert_eq!(c.kind(), "direct");
    // Every (time bits, mark) against table 6.
    for bits in 0..8u64 {
        for mark in 0..2u8 {
            let mut k = Key::default();
            // TimeBits = Seconds[0] and the two fraction MSBs.
            k.0[field::TS_FIX] = bits << 30;
            k.0[field::META] = mark as u64;
            let a = c.lookup(&k).unwrap();
            let (color_bit, q) = (bits >> 2, bits & 3);
            let pulse_window = q == 1 || q == 2;
            let is_pulse = pulse_window && (mark as u64) != color_bit;
            let (want_color, want_ts) = if is_pulse { (color_bit as u8, true) } else { (mark, false) };
            assert_eq!((a.color, a.count, a.timestamp), (want_color, true, want_ts), "bits={bits:03b} mark={mark}");
        }
    }
    // A color-0 packet sent late in its interval and received in the first
    // quarter of the next still counts as color 0 (guard quarter), and a
    // pulse delayed past the middle quarters reads as a step.
    let mut term = Mp::new(MpRole::Terminator, Method::Muxed, dscp());
    let mut p = v4();
    term.run(&mut p, T0 + 1100 * MS);
    assert_eq!(term.get(0).0, 1);
    let mut pulse = v4();
    pulse.bytes_mut()[15] |= 0x04; // mark 1 in a color-0 interval
    term.run(&mut pulse, T0 + 800 * MS);
    assert_eq!((term.get(1).0, term.get(1).2), (1, 0), "fourth quarter: a step to color 1, no timestamp");
}

#[test]
fn table5_initiator_rows() {
    let c = Classifier::new(default_rules(Method::Muxed, MpRole::Initiator, &timing()));
    // (time bits, reg) -> (mark, reg', color, timestamp), table 5.
    let table5 = |bits: u64, reg: u8| -> (bool, u8, u8, bool) {
        match (bits, reg) {
            (0b010, 0) => (true, 1, 0, true),
            (0b010, 1) => (false, 1, 0, false),
            (b, _) if b >> 2 == 0 => (false, 0, 0, false),
            (0b110, 1) => (false, 0, 1, true),
            (0b110, 0) => (true, 0, 1, false),
            _ => (true, 1, 1, false),
        }
    };
    for bits in 0..8u64 {
        for reg in 0..2u8 {
            let mut k = Key::default();
            k.0[field::TS_FIX] = bits << 30;
            k.0[field::META] = (reg as u64) << field::REG_SHIFT;
            let a = c.lookup(&k).unwrap();
            assert_eq!(
                (a.set_l.unwrap(), a.reg.unwrap(), a.color, a.timestamp),
                table5(bits, reg),
                "bits={bits:03b} reg={reg}"
            );
            assert!(a.count);
        }
    }
}

#[test]
fn tables1_and_2_step() {
    let (init, term, marks) = simulate(Method::Step, 100 * MS, 4, 5 * MS);
    for &(t, l, _) in &marks {
        assert_eq!(l, slot_of(t).0 == 1);
    }
    assert_eq!((init.get(0).0, init.get(1).0, init.get(0).2), (20, 20, 0));
    assert_eq!((term.get(0).0, term.get(1).0), (20, 20));
}

#[test]
fn tables3_and_4_pulse() {
    let (init, term, marks) = simulate(Method::Pulse, 100 * MS, 4, 5 * MS);
    // One pulse per interval, on its first packet; no counting.
    let pulses: Vec<u64> = marks.iter().filter(|m| m.1).map(|m| (m.0 - T0) / MS).collect();
    assert_eq!(pulses, vec![1000, 2000, 3000]);
    assert_eq!(init.get(0).0, 0);
    // The very first packet (reg 0, time bit 0) is not a pulse (table 3 row 4).
    assert_eq!((init.get(1).2, init.get(0).2), (2, 1));
    assert_eq!((term.get(1).2, term.get(0).2), (2, 1));
    assert_eq!(term.get(1).3, init.get(1).3 + 5 * MS);
}

#[test]
fn double_marking_step_and_pulse_bits() {
    let (init, term, marks) = simulate(Method::Double, 50 * MS, 4, 7 * MS);
    for (i, &(t, l, d)) in marks.iter().enumerate() {
        let (c, q) = slot_of(t);
        assert_eq!(l, c == 1);
        assert_eq!(d, q == 2 && slot_of(marks[i - 1].0).1 != 2);
    }
    assert_eq!((init.get(0).0, init.get(0).2, term.get(0).0, term.get(0).2), (40, 2, 40, 2));
    assert_eq!(term.get(1).3 - init.get(1).3, 7 * MS);
}

#[test]
fn ipv4_carriers_fix_the_header_checksum() {
    for carrier in [Carrier::Dscp { l_bit: 3, d_bit: 4 }, Carrier::Ipv4Flag { d_bit: 0 }] {
        let mut init = Mp::new(MpRole::Initiator, Method::Double, carrier);
        let mut p = v4();
        init.run(&mut p, T0 + SEC + 600 * MS); // color 1, pulse slot: L=1, D=1
        let b = p.bytes();
        assert_ne!(b, v4().bytes());
        assert_eq!(checksum::checksum(&b[14..34]), 0, "{carrier:?}");
        let mut term = Mp::new(MpRole::Terminator, Method::Double, carrier);
        term.run(&mut p, T0 + SEC + 601 * MS);
        assert_eq!(term.get(1).2, 1);
        assert_eq!(p.bytes(), v4().bytes());
    }
}

#[test]
fn ipv6_hop_by_hop_option_inserted_and_removed() {
    let mut init = Mp::new(MpRole::Initiator, Method::Step, Carrier::Ipv6HopByHop);
    let mut p = v6();
    let (_, meta) = init.run(&mut p, T0 + SEC);
    let b = p.bytes();
    assert_eq!(b.len(), v6().bytes().len() + 8);
    assert_eq!(b[20], 0, "next header: Hop-by-Hop");
    assert_eq!(rd16(b, 18), 8 + 8 + 8);
    // RFC 9343 example layout: NH, 0, 0x12, 4, FlowMonID 0x12345 L=1.
    assert_eq!(&b[54..62], &[17, 0, 0x12, 4, 0x12, 0x34, 0x58, 0x00]);
    assert_eq!(meta.l4_offset, 62);
    assert_eq!(init.event(Event::AmpmOptionInserted), 1);
    // The UDP checksum does not cover the options: still valid.
    let reparsed = parse(b, 0).unwrap();
    assert_eq!(reparsed.l4_offset, 62);
    let mut term = Mp::new(MpRole::Terminator, Method::Step, Carrier::Ipv6HopByHop);
    term.run(&mut p, T0 + SEC + MS);
    assert_eq!(term.get(1).0, 1);
    assert_eq!(term.get(1).1, 40 + 8 + 8, "bytes exclude the option");
    assert_eq!(p.bytes(), v6().bytes());
    assert_eq!(term.event(Event::AmpmOptionRemoved), 1);
}

/// The v6 frame with one 8-byte extension header of type `nh` before UDP.
fn v6_with_ext(nh: u8, ext: [u8; 8]) -> Vec<u8> {
    let base = v6();
    let b = base.bytes();
    let mut f = b[..54].to_vec();
    f[20] = nh;
    let pl = rd16(b, 18) + 8;
    f[18..20].copy_from_slice(&pl.to_be_bytes());
    f.extend_from_slice(&ext);
    f.extend_from_slice(&b[54..]);
    f
}

/// A v6 frame with a Hop-by-Hop header holding a Router Alert option.
fn v6_with_hbh() -> VecBuf {
    VecBuf::new(&v6_with_ext(0, [17, 0, 5, 2, 0, 0, 1, 0]), 64)
}

#[test]
fn ipv6_options_share_a_header_and_destination_options_go_after_it() {
    // Hop-by-Hop with another option: grown by 8, and shrunk back.
    let mut init = Mp::new(MpRole::Initiator, Method::Step, Carrier::Ipv6HopByHop);
    let mut p = v6_with_hbh();
    init.run(&mut p, T0);
    let b = p.bytes().to_vec();
    assert_eq!(b[55], 1, "header length 16 bytes");
    assert_eq!(&b[62..70], &[1, 0, 0x12, 4, 0x12, 0x34, 0x50, 0]);
    assert_eq!(rd16(&b, 18), 8 + 16 + 8);
    let mut term = Mp::new(MpRole::Terminator, Method::Step, Carrier::Ipv6HopByHop);
    let (_, meta) = term.run(&mut p, T0 + MS);
    assert_eq!(term.get(0).0, 1);
    assert_eq!(p.bytes(), v6_with_hbh().bytes(), "the Router Alert stays, the option goes");
    assert_eq!(meta.l4_offset, 62);
    assert_eq!(term.event(Event::AmpmOptionRemoved), 1);
    // Between two other options it cannot go without moving the second off
    // its alignment: a PadN takes its place.
    let mut f = v6_with_hbh().bytes().to_vec();
    f[55] = 1;
    f.splice(56..62, [5, 2, 0, 0, 0x12, 4, 0x12, 0x34, 0x50, 0, 5, 2, 0, 0]);
    let pl = rd16(&f, 18) + 8;
    f[18..20].copy_from_slice(&pl.to_be_bytes());
    let mut p = VecBuf::new(&f, 64);
    let (_, meta) = term.run(&mut p, T0 + MS);
    assert_eq!(term.get(0).0, 2);
    assert_eq!(&p.bytes()[54..70], &[17, 1, 5, 2, 0, 0, 1, 4, 0, 0, 0, 0, 5, 2, 0, 0]);
    assert_eq!(meta.l4_offset, 70);
    // Destination options: inserted after the Hop-by-Hop header.
    let mut init = Mp::new(MpRole::Initiator, Method::Muxed, Carrier::Ipv6DestOpts);
    let mut p = v6_with_hbh();
    init.run(&mut p, T0);
    let b = p.bytes();
    assert_eq!((b[20], b[54], b[62]), (0, 60, 17));
    assert_eq!(&b[64..66], &[0x12, 4]);
    let mut term = Mp::new(MpRole::Terminator, Method::Muxed, Carrier::Ipv6DestOpts);
    term.run(&mut p, T0 + MS);
    assert_eq!(p.bytes(), v6_with_hbh().bytes());
}

#[test]
fn destination_options_go_before_a_fragment_header() {
    // After it, the new header would be in the fragmentable part and break
    // reassembly. (This fragment's reserved byte is not zero: ignored on
    // reception, RFC 8200, it is no length.)
    let f = v6_with_ext(44, [17, 3, 0, 0, 0, 0, 0, 1]);
    let mut p = VecBuf::new(&f, 64);
    let mut init = Mp::new(MpRole::Initiator, Method::Muxed, Carrier::Ipv6DestOpts);
    init.run(&mut p, T0);
    let g = p.bytes();
    assert_eq!((g[20], g[54], g[55], g[56], g[62], g[63]), (60, 44, 0, 0x12, 17, 3));
    assert_eq!(parse(g, 0).unwrap().l4_offset, 70);
    let mut term = Mp::new(MpRole::Terminator, Method::Muxed, Carrier::Ipv6DestOpts);
    term.run(&mut p, T0 + MS);
    assert_eq!(p.bytes(), &f[..]);
}

#[test]
fn malformed_carriers_are_counted_and_passed_untouched() {
    // AltMark with data length 6.
    let mut bad_len = v6_with_hbh().bytes().to_vec();
    bad_len[56..62].copy_from_slice(&[0x12, 6, 0, 0, 0, 0]);
    bad_len[55] = 0;
    // Options running past the end of their header.
    let mut truncated = v6_with_hbh().bytes().to_vec();
    truncated[56..62].copy_from_slice(&[1, 0, 0x12, 4, 0, 0]);
    truncated[60] = 0x12;
    truncated[61] = 9;
    for (name, frame) in [("bad length", bad_len), ("truncated", truncated)] {
        for role in [MpRole::Initiator, MpRole::Terminator] {
            let mut mp = Mp::new(role, Method::Step, Carrier::Ipv6HopByHop);
            let mut p = VecBuf::new(&frame, 64);
            assert_eq!(mp.run(&mut p, T0).0, Outcome::Skipped, "{name}");
            assert_eq!(p.bytes(), &frame[..], "{name}");
            assert_eq!(mp.event(Event::AmpmBadOption), 1);
            assert_eq!(mp.get(0).0, 0);
        }
    }
    // No option at a reader, or an IPv4 carrier on IPv6: counted, untouched.
    let mut term = Mp::new(MpRole::Terminator, Method::Step, Carrier::Ipv6HopByHop);
    let mut p = v6();
    assert_eq!(term.run(&mut p, T0).0, Outcome::Skipped);
    let mut flag = Mp::new(MpRole::Initiator, Method::Step, Carrier::Ipv4Flag { d_bit: 1 });
    assert_eq!(flag.run(&mut p, T0).0, Outcome::Skipped);
    assert_eq!(p.bytes(), v6().bytes());
    assert_eq!(term.event(Event::AmpmNoCarrier) + flag.event(Event::AmpmNoCarrier), 2);
}

#[test]
fn burst_time_offsets_and_interval_starts() {
    let t = timing();
    let now = BurstTime::new(&t, T0 + SEC + 200 * MS);
    assert_eq!(now.interval & 1, 1);
    assert_eq!(now.offset(1), 200 * MS, "same interval");
    assert_eq!(now.offset(0), SEC + 200 * MS, "late packet of the previous block");
    let late = BurstTime::new(&t, T0 + SEC + 900 * MS);
    assert_eq!(late.offset(0) as i64, -(100 * MS as i64), "early packet of the next block");
    assert_eq!(t.interval_ns(), SEC);
    assert_eq!(t.position(T0 + SEC + 600 * MS), (T0 / SEC + 1, 2), "third quarter of the next interval");
    assert_eq!(t.start_ns(T0 / SEC), T0);
    let ns = Timing { format: TimeFormat::Ns, interval_bit: 30, sub_bits: 2 };
    assert_eq!(ns.interval_ns(), 1 << 30);
    assert!((T0 + 123_456_789).abs_diff(fix_to_ns(ns_to_fix(T0 + 123_456_789))) <= 1);
}

#[test]
fn a_burst_memo_answers_as_the_slot_tables_do() {
    let spec = AmpmSetup::new(1, timing(), 4).compile();
    // Packets of one burst alternate between tables, marks and registers:
    // each answer must be the table's own, never the previous packet's.
    for t in [T0, T0 + 260 * MS, T0 + 510 * MS, T0 + 1760 * MS] {
        let now = BurstTime::new(&spec.timing, t);
        let mut memo = SlotMemo::default();
        let mut seen = 0;
        for i in 0..400u64 {
            let table = (i * 7 % spec.slots.len() as u64) as usize;
            let (mark, reg) = (i / 3 % 4, i / 5 % 3);
            let mut k = Key::default();
            k.0[field::TS_NS] = now.ns;
            k.0[field::TS_FIX] = now.fix;
            k.0[field::META] = mark << field::MARK_SHIFT | reg << field::REG_SHIFT;
            let want = spec.slots[table].lookup(&k).copied();
            seen += want.is_some() as u32;
            assert_eq!(memo.lookup(&spec, table, &k), want, "t={t} table={table} mark={mark} reg={reg}");
            assert_eq!(memo.lookup(&spec, table, &k), want, "repeated");
        }
        assert!(seen > 0, "some rows match at t={t}");
    }
}

#[test]
fn a_packet_updates_one_counter_line() {
    use std::mem::{align_of, offset_of, size_of};
    assert_eq!(align_of::<FlowCounters>(), 64);
    for c in 0..2 {
        let base = c * size_of::<ColorCounters>();
        for end in [offset_of!(ColorCounters, bytes), offset_of!(ColorCounters, ts_offset_sum)] {
            assert!(base + end + 8 <= 64, "color {c}'s per-packet counters in the first line");
        }
    }
}
