//! The label decisions with an injected clock and seeded draws.

use super::*;
use crate::rand::XorShift;

const T: u64 = 50_000;

fn times(interval: u64, rest: u64) -> Times {
    Times { interval, rest }
}

/// Label times of `port` for packets carrying `n(i)` labels at `i * dt`.
fn run(
    ports: &LabelPorts,
    packets: u64,
    dt: u64,
    t: Times,
    f: &Thresholds,
    seed: u64,
    n: impl Fn(u64) -> usize,
) -> Vec<u64> {
    let mut rng = XorShift::new(seed);
    (1..=packets).filter_map(|i| ports.decide(0, i * dt, n(i), t, f, || rng.next_u64() as u32).map(|c| c.ct)).collect()
}

#[test]
fn base_a_labels_every_floor_t_over_dt_plus_one_packets() {
    let f = Thresholds::new(&LabelFn::Table(vec![0.0]), 5);
    for dt in [1_000, 3_000, 7_000, 50_000, 60_000] {
        let ports = LabelPorts::default();
        let got = run(&ports, 2_000, dt, times(T, 0), &f, 1, |_| 0);
        let every = (T / dt + 1) * dt;
        assert!(got.windows(2).all(|w| w[1] - w[0] == every), "dt {dt}: spacing {every}");
        assert!(got.windows(2).all(|w| w[1] - w[0] > T), "more than T apart");
    }
}

#[test]
fn base_b_with_f_zero_or_rest_equal_to_t_is_base_a() {
    let none = Thresholds::new(&LabelFn::Table(vec![0.0]), 5);
    let base_a = run(&LabelPorts::default(), 5_000, 700, times(T, 0), &none, 1, |i| (i % 5) as usize);
    for (f, rest) in [(LabelFn::Table(vec![0.0; 8]), 0), (LabelFn::F1, T), (LabelFn::F2, T), (LabelFn::F3, T)] {
        let th = Thresholds::new(&f, 5);
        let got = run(&LabelPorts::default(), 5_000, 700, times(T, rest), &th, 9, |i| (i % 5) as usize);
        assert_eq!(got, base_a, "{f:?} T1={rest}");
    }
}

#[test]
fn f1_labels_every_packet_already_labeled_after_the_rest_time() {
    let f = Thresholds::new(&LabelFn::F1, 5);
    let ports = LabelPorts::default();
    // A packet with labels, 1 us after the port's last label: labeled (rest 0).
    assert_eq!(ports.decide(0, 10 * T, 0, times(T, 0), &f, || 0).map(|c| c.kind), Some(Kind::Interval));
    for i in 1..100 {
        let c = ports.decide(0, 10 * T + i * 10, 1 + (i % 7) as usize, times(T, 0), &f, || u32::MAX);
        assert_eq!(c.map(|c| c.kind), Some(Kind::Probabilistic), "packet {i}");
    }
    // Also at the same CT as the port's last label (a packet of the same
    // burst): T1 = 0 is no rest at all.
    let ct = 10 * T + 1_500;
    assert!(ports.decide(0, ct, 1, times(T, 0), &f, || 0).is_some());
    assert!(ports.decide(0, ct, 1, times(T, 0), &f, || 0).is_some());
    // An unlabeled one is not (f(0) = 0).
    assert_eq!(ports.decide(0, 10 * T + 2_000, 0, times(T, 0), &f, || 0), None);
    // Within the rest time nothing is.
    assert_eq!(ports.decide(0, 10 * T + 2_010, 3, times(T, 5_000), &f, || 0), None);
}

#[test]
fn a_certain_outcome_takes_no_draw() {
    // f(n) of 1 labels and f(n) of 0 does not, without asking for a
    // number (the worker's draws go only to uncertain decisions).
    let no_draw = || -> u32 { panic!("a draw for a certain outcome") };
    let cases = [
        (LabelFn::F1, 1, true),
        (LabelFn::F1, 7, true),
        (LabelFn::F1, 0, false),
        (LabelFn::F2, 4, true),
        (LabelFn::F2, 9, true),
        (LabelFn::Table(vec![0.0, 1.0, 0.5]), 1, true),
    ];
    for (f, n, labels) in cases {
        let th = Thresholds::new(&f, 5);
        let ports = LabelPorts::default();
        ports.decide(0, 10 * T, 0, times(T, 0), &th, || 0).expect("the interval label");
        let c = ports.decide(0, 10 * T + 100, n, times(T, 0), &th, no_draw);
        assert_eq!(c.map(|c| c.kind), labels.then_some(Kind::Probabilistic), "{f:?} n={n}");
    }
    // f(n) of 0.5 does draw: a low number labels, a high one does not.
    let th = Thresholds::new(&LabelFn::Table(vec![0.0, 1.0, 0.5]), 5);
    let ports = LabelPorts::default();
    ports.decide(0, 10 * T, 0, times(T, 0), &th, || 0).expect("the interval label");
    assert!(ports.decide(0, 10 * T + 100, 2, times(T, 0), &th, || u32::MAX).is_none());
    assert!(ports.decide(0, 10 * T + 100, 2, times(T, 0), &th, || 0).is_some());
}

#[test]
fn certain_is_f_of_one_for_every_count_from_it_on() {
    let fs = [
        LabelFn::F1,
        LabelFn::F2,
        LabelFn::F3,
        LabelFn::Table(vec![0.0, 1.0, 0.5]),
        LabelFn::Table(vec![0.2, 1.0, 1.0]),
        LabelFn::Table(vec![1.0]),
        LabelFn::Table(vec![0.0]),
    ];
    for f in fs {
        let th = Thresholds::new(&f, 5);
        for n in 0..20 {
            // F3 scales by the time since the label: never certain by n.
            let one_from_here = !matches!(f, LabelFn::F3) && (n..20).all(|m| th.probability(m) == 1.0);
            assert_eq!(th.certain(n), one_from_here, "{f:?} n={n}");
        }
    }
    assert!(Thresholds::new(&LabelFn::F1, 5).certain(1));
    assert!(!Thresholds::new(&LabelFn::F2, 5).certain(3) && Thresholds::new(&LabelFn::F2, 5).certain(4));
}

/// Probabilistic labels only: every packet comes after the rest time but
/// within T of a label that was (so the interval never fires).
fn empirical_rate(f: &Thresholds, n: usize, elapsed: u64, trials: u32) -> f64 {
    let ports = LabelPorts::default();
    let mut rng = XorShift::new(0x5eed);
    let mut labeled = 0;
    let mut ct = 10 * T;
    ports.decide(0, ct, 0, times(T, 0), f, || 0).expect("the interval label");
    for _ in 0..trials {
        let c = ports.decide(0, ct + elapsed, n, times(T, 0), f, || rng.next_u64() as u32);
        if let Some(c) = c {
            assert_eq!(c.kind, Kind::Probabilistic);
            labeled += 1;
            ct = c.ct;
        } else {
            // Keep the elapsed time fixed: as if this packet had been labeled.
            ports.force(0, ct + elapsed);
            ct += elapsed;
        }
    }
    labeled as f64 / trials as f64
}

#[test]
fn f2_f3_and_table_rates_are_within_0_003_of_f() {
    let trials = 1_000_000;
    let f2 = Thresholds::new(&LabelFn::F2, 5);
    for n in 1..=4 {
        let want = n as f64 / 4.0;
        let got = empirical_rate(&f2, n, 100, trials);
        assert!((got - want).abs() < 0.003, "F2 n={n}: {got} vs {want}");
    }
    let f3 = Thresholds::new(&LabelFn::F3, 5);
    for (n, elapsed) in [(1, T / 2), (2, T / 4), (3, T / 3), (4, T / 10)] {
        let want = (n as f64 / 4.0 * elapsed as f64 / T as f64).min(1.0);
        let got = empirical_rate(&f3, n, elapsed, trials);
        assert!((got - want).abs() < 0.003, "F3 n={n} elapsed={elapsed}: {got} vs {want}");
    }
    let table = Thresholds::new(&LabelFn::Table(vec![0.0, 0.1, 0.35, 0.8]), 8);
    for (n, want) in [(1, 0.1), (2, 0.35), (3, 0.8), (6, 0.8)] {
        let got = empirical_rate(&table, n, 100, trials);
        assert!((got - want).abs() < 0.003, "table n={n}: {got} vs {want}");
    }
    assert!((table.probability(7) - 0.8).abs() < 1e-9, "past the table: its last entry");
}

#[test]
fn pro_shift_divides_the_interval() {
    let f = Thresholds::new(&LabelFn::F1, 5);
    for s in [0u8, 1, 3, 6] {
        let ports = LabelPorts::default();
        ports.set_shift(0, s).unwrap();
        let got = run(&ports, 4_000, 500, times(T, 0), &f, 1, |_| 0);
        let t = T >> s;
        assert!(got.windows(2).all(|w| w[1] - w[0] == (t / 500 + 1) * 500), "S={s}");
    }
    // The kinds: beyond T it is the interval's label, within T Pro's.
    let ports = LabelPorts::default();
    ports.set_shift(0, 2).unwrap();
    assert_eq!(ports.decide(0, 10 * T, 0, times(T, 0), &f, || 0).unwrap().kind, Kind::Interval);
    assert_eq!(ports.decide(0, 10 * T + T / 4 + 1, 0, times(T, 0), &f, || 0).unwrap().kind, Kind::Pro);
    // 255 labels every packet.
    ports.set_shift(0, SHIFT_EVERY_PACKET).unwrap();
    assert!((1..100).all(|i| ports.decide(0, 11 * T + i, 0, times(T, 0), &f, || 0).is_some()));
    assert!(ports.set_shift(0, 17).is_err() && ports.set_shift(MAX_PORTS, 1).is_err());
}

#[test]
fn two_workers_on_one_port_label_at_most_d_over_t_plus_one_times() {
    let ports = std::sync::Arc::new(LabelPorts::default());
    let clock = std::sync::Arc::new(AtomicU64::new(1));
    let f = Thresholds::new(&LabelFn::Table(vec![0.0]), 5);
    let t = 1_000;
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (ports, clock) = (ports.clone(), clock.clone());
            std::thread::spawn(move || {
                let mut c = crate::counters::CounterValues::default();
                for _ in 0..200_000 {
                    let ct = clock.fetch_add(1, Relaxed);
                    if let Some(claim) = ports.decide(3, ct, 0, times(t, 0), &f, || 0) {
                        ports.commit(&claim, &mut c);
                    }
                }
                assert_eq!(c.labels[3], c.events[Event::LabelInterval as usize]);
                c.labels[3]
            })
        })
        .collect();
    let labels: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let d = clock.load(Relaxed);
    assert!(labels <= d / t + 1, "{labels} labels in {d} ticks");
    assert!(labels >= d / (2 * t), "and the port kept labeling: {labels}");
}

#[test]
fn an_undone_label_gives_the_interval_back() {
    let f = Thresholds::new(&LabelFn::F1, 5);
    let ports = LabelPorts::default();
    let c = ports.decide(0, 10 * T, 0, times(T, 0), &f, || 0).unwrap();
    ports.undo(&c);
    assert!(ports.decide(0, 10 * T + 1, 0, times(T, 0), &f, || 0).is_some(), "the next packet labels instead");
}
