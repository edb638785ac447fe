//! `rate_budget`: the control core keeps each metric's T events near a
//! budget (smartnic-int-sink §III-C's feedback): once a second it doubles
//! the T threshold while the T events raised exceed the budget, and halves
//! it again, never below the configured threshold, while they stay under
//! half of it (the gap keeps it from swinging). Every change is logged and
//! shown by `int event show`; it reaches the workers as a table generation,
//! so the period after a change still holds events raised under the old
//! threshold: it is measured but not acted on.

use std::time::{Duration, Instant};

/// How often the rates are taken.
pub const PERIOD: Duration = Duration::from_secs(1);

/// The metrics by `EVENT_RULES` index.
pub const METRICS: usize = 5;

/// The next T threshold, if it changes: `current` with `rate` T events a
/// second against `budget`; never below `base` (the configured one) nor
/// above `max` (the field's).
pub fn adjust(current: u64, rate: u64, budget: u64, base: u64, max: u64) -> Option<u64> {
    let next = if rate > budget {
        current.saturating_mul(2).max(1).min(max)
    } else if rate < budget / 2 {
        (current / 2).max(base)
    } else {
        current
    };
    (next != current).then_some(next)
}

/// Each metric's budget (0: none) and what the controller did.
#[derive(Debug, Clone, Default)]
pub struct RateBudget {
    pub budget: [u64; METRICS],
    /// The threshold configured (or last set by `int event set`).
    pub base: [u64; METRICS],
    /// T events a second in the last period.
    pub rate: [u64; METRICS],
    pub changes: [u64; METRICS],
    last: Option<(Instant, [u64; METRICS])>,
    /// Changed in the last step: this period's rate mixes both thresholds.
    settling: [bool; METRICS],
}

impl RateBudget {
    pub fn new(budget: [u64; METRICS], base: [u64; METRICS]) -> RateBudget {
        RateBudget { budget, base, ..RateBudget::default() }
    }

    /// Whether any metric has a budget.
    pub fn any(&self) -> bool {
        self.budget.iter().any(|&b| b > 0)
    }

    /// Whether a period has passed since the last step (or none was taken).
    pub fn due(&self, now: Instant) -> bool {
        self.last.is_none_or(|(at, _)| now.duration_since(at) >= PERIOD)
    }

    /// One period: `counts` are the T events raised so far per metric,
    /// `current` and `max` the thresholds in force and the fields' limits.
    /// Returns the changes as (metric, from, to).
    pub fn step(
        &mut self,
        now: Instant,
        counts: [u64; METRICS],
        current: [u64; METRICS],
        max: [u64; METRICS],
    ) -> Vec<(usize, u64, u64)> {
        let Some((at, before)) = self.last.replace((now, counts)) else { return Vec::new() };
        let secs = now.duration_since(at).as_secs_f64().max(1e-3);
        let mut out = Vec::new();
        for m in 0..METRICS {
            self.rate[m] = (counts[m].saturating_sub(before[m]) as f64 / secs) as u64;
            if self.budget[m] == 0 || current[m] == 0 || std::mem::take(&mut self.settling[m]) {
                continue;
            }
            if let Some(next) = adjust(current[m], self.rate[m], self.budget[m], self.base[m], max[m]) {
                self.changes[m] += 1;
                self.settling[m] = true;
                out.push((m, current[m], next));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_the_budget_doubles_under_half_halves_down_to_the_base() {
        assert_eq!(adjust(100, 5000, 1000, 100, 1 << 24), Some(200));
        assert_eq!(adjust(100, 1000, 1000, 100, 1 << 24), None, "at the budget: hold");
        assert_eq!(adjust(400, 600, 1000, 100, 1 << 24), None, "between half and the budget: hold");
        assert_eq!(adjust(400, 400, 1000, 100, 1 << 24), Some(200));
        assert_eq!(adjust(150, 0, 1000, 100, 1 << 24), Some(100), "not below the base");
        assert_eq!(adjust(100, 0, 1000, 100, 1 << 24), None);
        assert_eq!(adjust(0xc0_0000, 9999, 1000, 100, 0xff_ffff), Some(0xff_ffff), "not past the field");
        assert_eq!(adjust(0xff_ffff, 9999, 1000, 100, 0xff_ffff), None);
    }

    #[test]
    fn steps_take_rates_over_the_period() {
        let mut b = RateBudget::new([0, 1000, 0, 0, 0], [0, 100, 0, 0, 0]);
        let t0 = Instant::now();
        let max = [u64::MAX; METRICS];
        assert!(b.step(t0, [0; 5], [0, 100, 0, 0, 0], max).is_empty(), "the first step only takes counts");
        // 3000 queue T events in 1 s: over; 500 hop latency T: no budget.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(b.step(t1, [500, 3000, 0, 0, 0], [10, 100, 0, 0, 0], max), [(1, 100, 200)]);
        assert_eq!(b.rate, [500, 3000, 0, 0, 0]);
        // The next period mixes both thresholds (the workers take the
        // new one with a table generation): measured, not acted on.
        let t15 = t1 + PERIOD;
        assert!(b.step(t15, [500, 5000, 0, 0, 0], [10, 200, 0, 0, 0], max).is_empty(), "settling");
        assert_eq!(b.rate[1], 2000);
        // 200 in the next 2 s: 100/s, under half: back to the base.
        let t2 = t15 + Duration::from_secs(2);
        assert_eq!(b.step(t2, [500, 5200, 0, 0, 0], [10, 200, 0, 0, 0], max), [(1, 200, 100)]);
        assert_eq!(b.changes, [0, 2, 0, 0, 0]);
        assert!(!b.due(t2 + Duration::from_millis(500)) && b.due(t2 + PERIOD));
        // T off (threshold 0): left alone.
        assert!(b.step(t2 + PERIOD, [500, 9999, 0, 0, 0], [10, 0, 0, 0, 0], max).is_empty());
    }
}
