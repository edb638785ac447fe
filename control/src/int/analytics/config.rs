//! `[int.analytics]`: the geometry of each worker's flow cache, its
//! timeouts and R_G's size. Absent: no analytics (the sink reports as
//! configured and keeps only the report interval per flow).

use dataplane::int::analytics::cache::{FlowCache, MAX_HOPS, MAX_ROWS, MAX_WAYS};
use serde::{Deserialize, Serialize};

use crate::fields::ConfigError;

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AnalyticsConfig {
    /// Rows of each worker's flow cache (a power of two).
    #[serde(default = "default_rows")]
    pub cache_rows: usize,
    /// Ways per row (1..=12).
    #[serde(default = "default_ways")]
    pub cache_ways: usize,
    /// Hops tracked per flow, source side first (1..=16).
    #[serde(default = "default_hops")]
    pub cache_max_hops: usize,
    /// Bytes one worker's cache may take.
    #[serde(default = "default_memory")]
    pub cache_memory_limit: u64,
    /// Seconds without a packet after which a flow is exported (aged) and
    /// freed; 0: never.
    #[serde(default = "default_idle")]
    pub idle_timeout: u64,
    /// Seconds between snapshots of a long-lived flow; 0: none.
    #[serde(default)]
    pub active_timeout: u64,
    /// Flow records each worker's R_G ring holds.
    #[serde(default = "default_ring")]
    pub flow_ring_size: usize,
}

fn default_rows() -> usize {
    65536
}
fn default_ways() -> usize {
    12
}
fn default_hops() -> usize {
    5
}
fn default_memory() -> u64 {
    1 << 30
}
fn default_idle() -> u64 {
    10
}
fn default_ring() -> usize {
    65536
}

/// The validated section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnalyticsPlan {
    pub rows: usize,
    pub ways: usize,
    pub max_hops: usize,
    pub idle_s: u64,
    pub active_s: u64,
    pub ring_size: usize,
    /// Bytes per entry and per worker cache.
    pub entry_bytes: usize,
    pub cache_bytes: usize,
}

impl AnalyticsPlan {
    /// The line the switch prints at start-up.
    pub fn describe(&self) -> String {
        format!(
            "int analytics: flow cache {} rows x {} ways, {} hops, {} bytes an entry, {:.1} MiB per worker; R_G {} records",
            self.rows,
            self.ways,
            self.max_hops,
            self.entry_bytes,
            self.cache_bytes as f64 / (1 << 20) as f64,
            self.ring_size
        )
    }
}

fn cerr(key: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError { key: format!("int.analytics.{key}"), reason: reason.into() }
}

/// Longest timeout: a day.
const MAX_TIMEOUT_S: u64 = 86_400;

impl AnalyticsConfig {
    pub fn to_plan(&self) -> Result<AnalyticsPlan, ConfigError> {
        if !self.cache_rows.is_power_of_two() || self.cache_rows > MAX_ROWS {
            return Err(cerr("cache_rows", format!("{} must be a power of two, 1..={MAX_ROWS}", self.cache_rows)));
        }
        if !(1..=MAX_WAYS).contains(&self.cache_ways) {
            return Err(cerr("cache_ways", format!("{} must be 1..={MAX_WAYS}", self.cache_ways)));
        }
        if !(1..=MAX_HOPS).contains(&self.cache_max_hops) {
            return Err(cerr("cache_max_hops", format!("{} must be 1..={MAX_HOPS}", self.cache_max_hops)));
        }
        let bytes = FlowCache::memory_bytes(self.cache_rows, self.cache_ways, self.cache_max_hops);
        if bytes as u64 > self.cache_memory_limit {
            return Err(cerr(
                "cache_rows",
                format!(
                    "cache_rows x cache_ways x (entry with cache_max_hops hops) = {} x {} x {} bytes = {bytes} bytes \
                     per worker is over cache_memory_limit = {}",
                    self.cache_rows,
                    self.cache_ways,
                    FlowCache::entry_bytes(self.cache_ways, self.cache_max_hops),
                    self.cache_memory_limit
                ),
            ));
        }
        for (k, v) in [("idle_timeout", self.idle_timeout), ("active_timeout", self.active_timeout)] {
            if v > MAX_TIMEOUT_S {
                return Err(cerr(k, format!("{v} s is over a day ({MAX_TIMEOUT_S}); 0 turns it off")));
            }
        }
        if !(2..=1 << 22).contains(&self.flow_ring_size) {
            return Err(cerr("flow_ring_size", format!("{} must be 2..=4194304", self.flow_ring_size)));
        }
        Ok(AnalyticsPlan {
            rows: self.cache_rows,
            ways: self.cache_ways,
            max_hops: self.cache_max_hops,
            idle_s: self.idle_timeout,
            active_s: self.active_timeout,
            ring_size: self.flow_ring_size,
            entry_bytes: FlowCache::entry_bytes(self.cache_ways, self.cache_max_hops),
            cache_bytes: bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(text: &str) -> Result<AnalyticsPlan, ConfigError> {
        let c: AnalyticsConfig = toml::from_str(text).map_err(|e| cerr("", e.to_string()))?;
        c.to_plan()
    }

    #[test]
    fn defaults_and_the_papers_geometry() {
        let p = plan("").unwrap();
        assert_eq!((p.rows, p.ways, p.max_hops, p.idle_s, p.active_s, p.ring_size), (65536, 12, 5, 10, 0, 65536));
        assert!(p.cache_bytes < 1 << 30);
        assert!(plan("cache_rows = 524288").is_err(), "2^19 x 12 needs the limit raised");
        let big = plan("cache_rows = 524288\ncache_memory_limit = 4294967296").unwrap();
        assert_eq!(big.cache_bytes, FlowCache::memory_bytes(1 << 19, 12, 5));
        assert!(p.describe().contains("65536 rows x 12 ways"));
    }

    #[test]
    fn bad_values_name_their_key() {
        for (text, key) in [
            ("cache_rows = 1000", "int.analytics.cache_rows"),
            ("cache_rows = 0", "int.analytics.cache_rows"),
            ("cache_rows = 8388608", "int.analytics.cache_rows"),
            ("cache_ways = 0", "int.analytics.cache_ways"),
            ("cache_ways = 13", "int.analytics.cache_ways"),
            ("cache_max_hops = 0", "int.analytics.cache_max_hops"),
            ("cache_max_hops = 17", "int.analytics.cache_max_hops"),
            ("cache_memory_limit = 1000", "int.analytics.cache_rows"),
            ("idle_timeout = 86401", "int.analytics.idle_timeout"),
            ("active_timeout = 100000", "int.analytics.active_timeout"),
            ("flow_ring_size = 1", "int.analytics.flow_ring_size"),
        ] {
            assert_eq!(plan(text).unwrap_err().key, key, "{text}");
        }
        let e = plan("cache_memory_limit = 1000").unwrap_err();
        assert!(e.reason.contains("cache_memory_limit") && e.reason.contains("cache_ways"), "{}", e.reason);
        assert!(toml::from_str::<AnalyticsConfig>("cache_colums = 3").is_err(), "unknown keys are refused");
    }
}
