//! `[[int.detect]]`: per-flow detection rules (int-event-detection §III-A):
//! the watchlist's ternary match, a priority, and the algorithm that
//! decides a matching flow's reports. The same shape is `int_detect_add`'s
//! argument. `[[int.expr]]`: the named CNF expressions (§III-B) that `cnf`
//! rules use; `int_expr_add`'s argument.

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use dataplane::int::analytics::cache::{HOP_LATENCY, QUEUE, TX_UTIL};
use dataplane::int::analytics::cnf::Cnf;
use dataplane::int::analytics::detect::{Algorithm, DetectRule};

use crate::fields::ConfigError;

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DetectConfig {
    pub name: String,
    #[serde(default)]
    pub priority: u32,
    pub src: Option<String>,
    pub dst: Option<String>,
    /// Name or number.
    pub proto: Option<toml::Value>,
    /// A number or "VALUE/MASK".
    pub src_port: Option<toml::Value>,
    pub dst_port: Option<toml::Value>,
    pub dscp: Option<toml::Value>,
    pub in_port: Option<String>,
    /// per_hop, per_flow, ewma, noop, none, interval or cnf.
    pub algorithm: String,
    /// What S sums over the hops: hop_latency (default; e2e_latency is the
    /// same sum), queue or tx_util.
    pub metric: Option<String>,
    /// T (per_hop, per_flow, ewma).
    pub threshold: Option<u64>,
    /// ewma, and cnf's ewma literals: k of k/256 (1..=256, default 64).
    pub weight: Option<u32>,
    /// interval: milliseconds between two reports of a flow.
    pub interval_ms: Option<u64>,
    /// cnf: the name of an `[[int.expr]]`.
    pub expr: Option<String>,
}

/// `[[int.expr]]`: a named CNF expression.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ExprConfig {
    pub name: String,
    pub expr: String,
}

/// Expression names: what a rule's `expr` may say.
const MAX_NAME: usize = 64;

impl ExprConfig {
    /// The parsed expression; errors name the key and the position.
    pub fn parse(&self) -> Result<Cnf, ConfigError> {
        if self.name.is_empty()
            || self.name.len() > MAX_NAME
            || !self.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(cerr("name", format!("'{}': 1 to {MAX_NAME} of A-Z a-z 0-9 _ -", self.name)));
        }
        Cnf::parse(&self.expr).map_err(|e| cerr("expr", e.to_string()))
    }
}

fn cerr(key: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError { key: key.to_string(), reason: reason.into() }
}

/// The largest T a metric's sum may need: 16 hops of the field's maximum.
fn metric_of(name: &str) -> Option<(usize, u64)> {
    match name {
        "hop_latency" | "e2e_latency" => Some((HOP_LATENCY, 16 * u32::MAX as u64)),
        "queue" => Some((QUEUE, 16 * 0xff_ffff)),
        "tx_util" => Some((TX_UTIL, 16 * u32::MAX as u64)),
        _ => None,
    }
}

impl DetectConfig {
    /// The rule, with counter slot `slot`, a cnf rule's expression from
    /// `exprs` (name -> text) (interval's ticks are worked out by
    /// `DetectSpec::set_clock`). Errors name the key (without the section's
    /// prefix).
    pub fn to_rule(
        &self,
        ports: &[String],
        slot: usize,
        exprs: &BTreeMap<String, String>,
    ) -> Result<DetectRule, ConfigError> {
        let w = crate::int::config::match_rule!(self, "none");
        let matcher = w.to_rule(ports)?;
        let metric_name = self.metric.as_deref().unwrap_or("hop_latency");
        let (metric, max) = metric_of(metric_name).ok_or_else(|| {
            cerr("metric", format!("'{metric_name}' is not hop_latency, e2e_latency, queue or tx_util"))
        })?;
        let threshold = self.threshold.unwrap_or(0);
        if threshold > max {
            return Err(cerr("threshold", format!("{threshold} is beyond what {metric_name} can sum to ({max})")));
        }
        let algorithm = match self.algorithm.as_str() {
            "per_hop" => Algorithm::PerHop,
            "per_flow" => Algorithm::PerFlow,
            "ewma" => {
                let weight = self.weight.unwrap_or(64);
                if !(1..=256).contains(&weight) {
                    return Err(cerr("weight", format!("{weight} must be 1..=256 (k of k/256)")));
                }
                Algorithm::Ewma { weight }
            }
            "noop" => Algorithm::Noop,
            "none" => Algorithm::None,
            "interval" => {
                let ms = self.interval_ms.ok_or_else(|| cerr("interval_ms", "interval needs interval_ms"))?;
                if !(1..=86_400_000).contains(&ms) {
                    return Err(cerr("interval_ms", format!("{ms} must be 1..=86400000")));
                }
                Algorithm::Interval { ms, tsc: 0 }
            }
            "cnf" => {
                let weight = self.weight.unwrap_or(64);
                if !(1..=256).contains(&weight) {
                    return Err(cerr("weight", format!("{weight} must be 1..=256 (k of k/256)")));
                }
                for (key, given) in [("metric", self.metric.is_some()), ("threshold", self.threshold.is_some())] {
                    if given {
                        return Err(cerr(key, "cnf takes its metrics and values from the expression"));
                    }
                }
                Algorithm::Cnf { weight }
            }
            a => {
                return Err(cerr(
                    "algorithm",
                    format!("'{a}' is not per_hop, per_flow, ewma, noop, none, interval or cnf"),
                ))
            }
        };
        // noop, none and interval decide without a sum: a metric or a
        // threshold given them would be taken and never read.
        if matches!(algorithm, Algorithm::Noop | Algorithm::None | Algorithm::Interval { .. }) {
            crate::fields::refuse_given(
                &[("metric", self.metric.is_some()), ("threshold", self.threshold.is_some())],
                format!("applies to per_hop, per_flow and ewma only ({} reads none)", self.algorithm),
            )?;
        }
        if self.weight.is_some() && !matches!(algorithm, Algorithm::Ewma { .. } | Algorithm::Cnf { .. }) {
            return Err(cerr("weight", "applies to ewma and cnf only"));
        }
        let cnf = match (&algorithm, &self.expr) {
            (Algorithm::Cnf { .. }, None) => return Err(cerr("expr", "cnf needs expr, the name of an [[int.expr]]")),
            (Algorithm::Cnf { .. }, Some(name)) => {
                let text = exprs.get(name).ok_or_else(|| cerr("expr", format!("no expression named '{name}'")))?;
                let c = Cnf::parse(text).map_err(|e| cerr("expr", format!("'{name}': {e}")))?;
                Some(Box::new((name.clone(), c)))
            }
            (_, Some(_)) => return Err(cerr("expr", "applies to cnf only")),
            (_, None) => None,
        };
        if self.interval_ms.is_some() && !matches!(algorithm, Algorithm::Interval { .. }) {
            return Err(cerr("interval_ms", "applies to interval only"));
        }
        Ok(DetectRule { matcher, algorithm, metric, threshold, slot, cnf })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> Result<DetectRule, ConfigError> {
        let c: DetectConfig = toml::from_str(text).map_err(|e| cerr("", e.to_string()))?;
        let exprs = BTreeMap::from([("deep".to_string(), "queue.max > 100 AND hop_latency.hop0.ewma > 5".to_string())]);
        c.to_rule(&["p0".into()], 3, &exprs)
    }

    #[test]
    fn a_rule_and_its_algorithm() {
        let r = rule("name = \"h1\"\npriority = 5\nsrc = \"10.0.1.0/24\"\nproto = \"udp\"\nalgorithm = \"ewma\"\nmetric = \"queue\"\nthreshold = 40").unwrap();
        assert_eq!((r.algorithm, r.metric, r.threshold, r.slot), (Algorithm::Ewma { weight: 64 }, QUEUE, 40, 3));
        assert_eq!((r.matcher.name.as_str(), r.matcher.priority, r.matcher.proto.value), ("h1", 5, 17));
        let i = rule("name = \"all\"\nalgorithm = \"interval\"\ninterval_ms = 250").unwrap();
        assert_eq!((i.algorithm, i.metric), (Algorithm::Interval { ms: 250, tsc: 0 }, HOP_LATENCY));
        let c = rule("name = \"c\"\nalgorithm = \"cnf\"\nexpr = \"deep\"\nweight = 32").unwrap();
        assert_eq!(c.algorithm, Algorithm::Cnf { weight: 32 });
        let (name, cnf) = &**c.cnf.as_ref().unwrap();
        assert_eq!((name.as_str(), cnf.clauses.len()), ("deep", 2));
    }

    #[test]
    fn an_expression_names_its_key_and_position() {
        let e = ExprConfig { name: "x".into(), expr: "queue.max > 1 AND".into() };
        let err = e.parse().unwrap_err();
        assert_eq!((err.key.as_str(), err.reason.as_str()), ("expr", "at 18: a literal was expected"));
        let bad = ExprConfig { name: "a b".into(), expr: "queue.max > 1".into() };
        assert_eq!(bad.parse().unwrap_err().key, "name");
    }

    #[test]
    fn bad_rules_name_their_key() {
        for (text, key) in [
            ("name = \"a\"\nalgorithm = \"magic\"", "algorithm"),
            ("name = \"a\"\nalgorithm = \"cnf\"", "expr"),
            ("name = \"a\"\nalgorithm = \"cnf\"\nexpr = \"shallow\"", "expr"),
            ("name = \"a\"\nalgorithm = \"cnf\"\nexpr = \"deep\"\nthreshold = 4", "threshold"),
            ("name = \"a\"\nalgorithm = \"cnf\"\nexpr = \"deep\"\nmetric = \"queue\"", "metric"),
            ("name = \"a\"\nalgorithm = \"noop\"\nexpr = \"deep\"", "expr"),
            ("name = \"a\"\nalgorithm = \"per_flow\"\nmetric = \"jitter\"", "metric"),
            ("name = \"a\"\nalgorithm = \"ewma\"\nweight = 0", "weight"),
            ("name = \"a\"\nalgorithm = \"ewma\"\nweight = 257", "weight"),
            ("name = \"a\"\nalgorithm = \"per_flow\"\nweight = 4", "weight"),
            ("name = \"a\"\nalgorithm = \"interval\"", "interval_ms"),
            ("name = \"a\"\nalgorithm = \"noop\"\ninterval_ms = 5", "interval_ms"),
            ("name = \"a\"\nalgorithm = \"noop\"\nmetric = \"queue\"", "metric"),
            ("name = \"a\"\nalgorithm = \"none\"\nthreshold = 5", "threshold"),
            ("name = \"a\"\nalgorithm = \"interval\"\ninterval_ms = 5\nmetric = \"queue\"", "metric"),
            ("name = \"a\"\nalgorithm = \"per_hop\"\nmetric = \"queue\"\nthreshold = 300000000", "threshold"),
            ("name = \"a\"\nalgorithm = \"noop\"\nsrc = \"10.0.0.0/33\"", "src"),
            ("name = \"a\"\nalgorithm = \"noop\"\nin_port = \"p9\"", "in_port"),
        ] {
            assert_eq!(rule(text).unwrap_err().key, key, "{text}");
        }
    }
}
