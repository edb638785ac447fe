//! Link emulation on a port's egress — delay, jitter, random loss, rate and a
//! queue limit, configured in `tc netem` syntax. Testbeds use it where the
//! kernel has no sch_netem; the counts it keeps (loss, queue overflow) are
//! exact, like `tc -s qdisc`.
//!
//! Packets leave in FIFO order: jitter never reorders (a packet is released
//! no earlier than the one before it), and rate adds each packet's
//! serialisation time after the previous one finished.

use std::collections::VecDeque;

use crate::rand::XorShift;
use crate::DropReason;

/// Largest queue a port's emulation may hold (preallocated per worker).
pub const MAX_LIMIT: u32 = 65536;

/// Parameters of a link emulation. All zero (the default) means none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Impairment {
    pub delay_ns: u64,
    /// Uniform in [-jitter, +jitter] around `delay_ns`.
    pub jitter_ns: u64,
    /// Loss probability in parts per million.
    pub loss_ppm: u32,
    /// Bits per second; 0 means unlimited.
    pub rate_bps: u64,
    /// Packets queued at most (netem's default: 1000).
    pub limit: u32,
}

fn parse_time_ns(s: &str) -> Result<u64, String> {
    let (num, mult) = if let Some(n) = s.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e9)
    } else {
        (s, 1e3) // tc's default time unit is the microsecond
    };
    let v: f64 = num.parse().map_err(|_| format!("'{s}' is not a time (e.g. 10ms, 250us)"))?;
    if !(0.0..=60e9).contains(&(v * mult)) {
        return Err(format!("time '{s}' out of range (0 to 60s)"));
    }
    Ok((v * mult).round() as u64)
}

/// 10 Tbit/s: more than any port, and far from u64's end.
const MAX_RATE_BPS: f64 = 1e13;

fn parse_rate_bps(s: &str) -> Result<u64, String> {
    let lower = s.to_ascii_lowercase();
    let units: [(&str, f64); 8] = [
        ("gbit", 1e9),
        ("mbit", 1e6),
        ("kbit", 1e3),
        ("bit", 1.0),
        ("gbps", 8e9),
        ("mbps", 8e6),
        ("kbps", 8e3),
        ("bps", 8.0),
    ];
    for (u, m) in units {
        if let Some(n) = lower.strip_suffix(u) {
            let v: f64 = n.parse().map_err(|_| format!("'{s}' is not a rate (e.g. 100mbit)"))?;
            // NaN, infinities and rates that round to 0 bit/s (which would
            // mean "no rate limit") are refused, not taken silently.
            let bps = (v * m).round();
            if !(1.0..=MAX_RATE_BPS).contains(&bps) {
                return Err(format!("rate '{s}' must be from 1bit to 10tbit"));
            }
            return Ok(bps as u64);
        }
    }
    Err(format!("'{s}' is not a rate: give a unit (bit, kbit, mbit, gbit, bps, kbps, mbps, gbps)"))
}

fn parse_percent_ppm(s: &str) -> Result<u32, String> {
    let v: f64 = match s.strip_suffix('%') {
        Some(p) => p.parse::<f64>().map_err(|_| format!("'{s}' is not a percentage"))?,
        None => s.parse::<f64>().map_err(|_| format!("'{s}' is not a percentage"))? * 100.0,
    };
    if !(0.0..=100.0).contains(&v) {
        return Err(format!("loss '{s}' must be between 0% and 100%"));
    }
    Ok((v * 10_000.0).round() as u32)
}

impl Impairment {
    /// Parses the netem subset `delay TIME [JITTER]`, `loss PCT`, `rate RATE`,
    /// `limit PACKETS`; "" or "none" is no impairment.
    pub fn parse(s: &str) -> Result<Impairment, String> {
        let mut imp = Impairment { limit: 1000, ..Default::default() };
        let t: Vec<&str> = s.split_whitespace().collect();
        if t.is_empty() || t == ["none"] {
            return Ok(Impairment::default());
        }
        let mut i = 0;
        let arg = |i: usize, what: &str| t.get(i).copied().ok_or_else(|| format!("'{what}' needs a value"));
        // One value an option: a second would silently replace the first.
        let mut seen: Vec<&str> = Vec::new();
        while i < t.len() {
            if seen.contains(&t[i]) {
                return Err(format!("'{}' is given twice", t[i]));
            }
            seen.push(t[i]);
            match t[i] {
                "none" => return Err("'none' stands alone (it removes the impairment)".into()),
                "delay" => {
                    imp.delay_ns = parse_time_ns(arg(i + 1, "delay")?)?;
                    i += 2;
                    if let Some(j) = t.get(i).filter(|x| x.starts_with(|c: char| c.is_ascii_digit())) {
                        imp.jitter_ns = parse_time_ns(j)?;
                        i += 1;
                    }
                }
                "loss" => {
                    let mut v = arg(i + 1, "loss")?;
                    i += 2;
                    if v == "random" {
                        v = arg(i, "loss random")?;
                        i += 1;
                    }
                    imp.loss_ppm = parse_percent_ppm(v)?;
                }
                "rate" => {
                    imp.rate_bps = parse_rate_bps(arg(i + 1, "rate")?)?;
                    i += 2;
                }
                "limit" => {
                    let v = arg(i + 1, "limit")?;
                    imp.limit = v
                        .parse()
                        .ok()
                        .filter(|l| (1..=MAX_LIMIT).contains(l))
                        .ok_or_else(|| format!("limit '{v}' must be a packet count from 1 to {MAX_LIMIT}"))?;
                    i += 2;
                }
                other => {
                    return Err(format!("unsupported netem option '{other}' (supported: delay, loss, rate, limit)"))
                }
            }
        }
        if imp.jitter_ns > imp.delay_ns {
            return Err("jitter larger than the delay".into());
        }
        Ok(imp)
    }

    pub fn is_none(&self) -> bool {
        self.delay_ns == 0 && self.loss_ppm == 0 && self.rate_bps == 0
    }

    /// True when packets must wait in a queue (not just be dropped at random).
    fn queues(&self) -> bool {
        self.delay_ns != 0 || self.rate_bps != 0
    }

    /// The same settings in netem syntax.
    pub fn to_netem(&self) -> String {
        if self.is_none() {
            return "none".into();
        }
        let mut v = Vec::new();
        if self.delay_ns != 0 {
            v.push(format!("delay {}us", self.delay_ns as f64 / 1e3));
            if self.jitter_ns != 0 {
                v.push(format!("{}us", self.jitter_ns as f64 / 1e3));
            }
        }
        if self.loss_ppm != 0 {
            v.push(format!("loss {}%", self.loss_ppm as f64 / 1e4));
        }
        if self.rate_bps != 0 {
            v.push(format!("rate {}bit", self.rate_bps));
        }
        v.push(format!("limit {}", self.limit));
        v.join(" ")
    }
}

/// What `admit` did with a packet.
pub enum Admit<T> {
    /// Not delayed: send it now.
    Now(T),
    /// Queued; `release` hands it out when due.
    Queued,
    /// Dropped by the emulation: count it under this reason.
    Dropped(DropReason, T),
}

/// One port's emulation state in one worker. The queue is preallocated, so
/// admitting and releasing never allocate.
pub struct Impairer<T> {
    queue: VecDeque<(u64, T)>,
    last_release: u64,
    rng: XorShift,
}

impl<T> Impairer<T> {
    pub fn new(seed: u64) -> Impairer<T> {
        Impairer { queue: VecDeque::with_capacity(MAX_LIMIT as usize), last_release: 0, rng: XorShift::new(seed) }
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Applies `imp` to a packet of `len` bytes at TSC `now` (`hz` ticks/s).
    pub fn admit(&mut self, imp: &Impairment, hz: u64, now: u64, len: usize, pkt: T) -> Admit<T> {
        if imp.loss_ppm != 0 && (self.rng.next_u64() % 1_000_000) < imp.loss_ppm as u64 {
            return Admit::Dropped(DropReason::ImpairLoss, pkt);
        }
        if !imp.queues() {
            return Admit::Now(pkt);
        }
        if self.queue.len() >= imp.limit.min(MAX_LIMIT) as usize {
            return Admit::Dropped(DropReason::ImpairQueueFull, pkt);
        }
        let to_tsc = |ns: u64| (ns as u128 * hz as u128 / 1_000_000_000) as u64;
        let mut delay = imp.delay_ns as i128;
        if imp.jitter_ns != 0 {
            let span = 2 * imp.jitter_ns + 1;
            delay += (self.rng.next_u64() % span) as i128 - imp.jitter_ns as i128;
        }
        let mut release = now + to_tsc(delay.max(0) as u64);
        release = release.max(self.last_release); // FIFO: never overtake
        if imp.rate_bps != 0 {
            let ser = (len as u128 * 8 * hz as u128 / imp.rate_bps as u128) as u64;
            release = release.max(self.last_release) + ser;
        }
        self.last_release = release;
        self.queue.push_back((release, pkt));
        Admit::Queued
    }

    /// Hands every packet due at `now` to `send`, in order.
    #[inline]
    pub fn release(&mut self, now: u64, mut send: impl FnMut(T)) {
        while let Some((t, _)) = self.queue.front() {
            if *t > now {
                break;
            }
            let (_, p) = self.queue.pop_front().expect("non-empty");
            send(p);
        }
    }

    /// TSC at which the next queued packet is due.
    pub fn next_due(&self) -> Option<u64> {
        self.queue.front().map(|(t, _)| *t)
    }

    /// Drops every queued packet (the emulation was removed); returns how many.
    pub fn flush(&mut self, mut drop_one: impl FnMut(T)) -> usize {
        let n = self.queue.len();
        while let Some((_, p)) = self.queue.pop_front() {
            drop_one(p);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HZ: u64 = 1_000_000_000; // 1 tick = 1 ns keeps the arithmetic readable

    #[test]
    fn parses_netem_syntax() {
        let i = Impairment::parse("delay 10ms 2ms loss 1.5% rate 100mbit limit 500").unwrap();
        assert_eq!(
            i,
            Impairment {
                delay_ns: 10_000_000,
                jitter_ns: 2_000_000,
                loss_ppm: 15_000,
                rate_bps: 100_000_000,
                limit: 500
            }
        );
        assert_eq!(Impairment::parse("delay 250").unwrap().delay_ns, 250_000, "default unit is us");
        assert_eq!(Impairment::parse("loss random 0.1%").unwrap().loss_ppm, 1000);
        assert_eq!(Impairment::parse("rate 1mbps").unwrap().rate_bps, 8_000_000);
        assert!(Impairment::parse("none").unwrap().is_none());
        assert!(Impairment::parse("").unwrap().is_none());
        for (bad, want) in [
            ("duplicate 1%", "unsupported netem option 'duplicate'"),
            ("delay 10ms loss 5% delay 20ms", "'delay' is given twice"),
            ("none delay 1ms", "'none' stands alone"),
            ("loss 1% none", "'none' stands alone"),
            ("delay", "'delay' needs a value"),
            ("delay 1ms 2ms", "jitter larger"),
            ("loss 120%", "between 0% and 100%"),
            ("rate 100", "give a unit"),
            ("rate -5mbit", "from 1bit to 10tbit"),
            // Would round to 0 bit/s, i.e. no limit at all.
            ("rate 0.4bit", "from 1bit to 10tbit"),
            ("rate nanmbit", "from 1bit to 10tbit"),
            ("rate infgbit", "from 1bit to 10tbit"),
            ("rate 1e300gbit", "from 1bit to 10tbit"),
            ("limit 0", "limit '0'"),
        ] {
            let e = Impairment::parse(bad).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
        let i = Impairment::parse("delay 2ms 100us loss 1%").unwrap();
        assert_eq!(Impairment::parse(&i.to_netem()).unwrap(), i);
    }

    #[test]
    fn delay_holds_packets_until_due_in_order() {
        let imp = Impairment::parse("delay 100us").unwrap();
        let mut q = Impairer::new(1);
        for (t, id) in [(0u64, 1u32), (10_000, 2), (20_000, 3)] {
            assert!(matches!(q.admit(&imp, HZ, t, 100, id), Admit::Queued));
        }
        let mut out = Vec::new();
        q.release(99_999, |p| out.push(p));
        assert!(out.is_empty());
        q.release(110_000, |p| out.push(p));
        assert_eq!(out, vec![1, 2]);
        q.release(120_000, |p| out.push(p));
        assert_eq!(out, vec![1, 2, 3]);
        assert!(q.is_empty());
    }

    #[test]
    fn jitter_stays_in_bounds_and_never_reorders() {
        let imp = Impairment::parse("delay 1ms 200us").unwrap();
        // Dense traffic (1 us apart): FIFO order holds.
        let mut q = Impairer::new(7);
        for i in 0..1000u64 {
            assert!(matches!(q.admit(&imp, HZ, i * 1000, 64, i), Admit::Queued));
        }
        let releases: Vec<u64> = q.queue.iter().map(|(t, _)| *t).collect();
        assert!(releases.windows(2).all(|w| w[0] <= w[1]), "FIFO");
        // Sparse traffic (1 ms apart): each delay lies within delay +- jitter
        // and spreads over the range.
        let mut q = Impairer::new(9);
        for i in 0..1000u64 {
            q.admit(&imp, HZ, i * 1_000_000, 64, i);
        }
        let delays: Vec<u64> = q.queue.iter().enumerate().map(|(i, (t, _))| t - i as u64 * 1_000_000).collect();
        assert!(delays.iter().all(|d| (800_000..=1_200_000).contains(d)));
        assert!(delays.iter().any(|d| *d < 850_000) && delays.iter().any(|d| *d > 1_150_000));
    }

    #[test]
    fn loss_rate_is_close_to_the_setting() {
        let imp = Impairment::parse("loss 10%").unwrap();
        let mut q = Impairer::new(42);
        let mut lost = 0;
        for i in 0..100_000u32 {
            match q.admit(&imp, HZ, 0, 64, i) {
                Admit::Dropped(DropReason::ImpairLoss, _) => lost += 1,
                Admit::Now(_) => {}
                _ => panic!("loss-only emulation never queues"),
            }
        }
        assert!((9_000..11_000).contains(&lost), "{lost}");
    }

    #[test]
    fn rate_spaces_packets_by_serialisation_time() {
        // 8 Mbit/s: a 1000-byte packet takes 1 ms on the wire.
        let imp = Impairment::parse("rate 8mbit").unwrap();
        let mut q = Impairer::new(3);
        for i in 0..3u32 {
            q.admit(&imp, HZ, 0, 1000, i);
        }
        let releases: Vec<u64> = q.queue.iter().map(|(t, _)| *t).collect();
        assert_eq!(releases, vec![1_000_000, 2_000_000, 3_000_000]);
    }

    #[test]
    fn limit_overflows_are_named() {
        let imp = Impairment::parse("delay 1ms limit 2").unwrap();
        let mut q = Impairer::new(3);
        assert!(matches!(q.admit(&imp, HZ, 0, 64, 1), Admit::Queued));
        assert!(matches!(q.admit(&imp, HZ, 0, 64, 2), Admit::Queued));
        assert!(matches!(q.admit(&imp, HZ, 0, 64, 3), Admit::Dropped(DropReason::ImpairQueueFull, 3)));
        let mut dropped = 0;
        assert_eq!(q.flush(|_| dropped += 1), 2);
        assert_eq!(dropped, 2);
    }
}
