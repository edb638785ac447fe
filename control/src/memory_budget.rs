//! What a config's per-worker tables take from the heap, checked against
//! what the machine has before any worker starts. Workers build their
//! tables on their own lcores; a table larger than the machine would end
//! the process there with an allocation failure. Checked here, it is a
//! config error that names the keys and the memory they need.

use crate::config::Plan;
use crate::fields::{cerr, ConfigError};

use dataplane::flow_table::FlowTable;
use dataplane::mac_table::MacTable;

const MIB: f64 = (1u64 << 20) as f64;

/// One key's table: what a worker allocates for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    /// The config key that sizes it ("flow_table.capacity").
    pub key: &'static str,
    /// Its value as configured.
    pub value: String,
    /// Bytes per worker (None: more than the address space).
    pub bytes: Option<u64>,
}

/// The per-worker heap tables of `plan`.
pub fn heap_needs(plan: &Plan) -> Vec<Need> {
    let c = &plan.raw;
    let mut out = vec![
        Need {
            key: "flow_table.capacity",
            value: c.flow_table.capacity.to_string(),
            bytes: FlowTable::bytes_for(c.flow_table.capacity),
        },
        Need {
            key: "bridge.mac_capacity",
            value: c.bridge.mac_capacity.to_string(),
            bytes: MacTable::bytes_for(c.bridge.mac_capacity),
        },
    ];
    if let Some(a) = plan.int.as_ref().and_then(|i| i.analytics.as_ref()) {
        out.push(Need {
            key: "int.analytics.cache_rows",
            value: format!("{} (x cache_ways = {})", a.rows, a.ways),
            bytes: Some((a.cache_bytes + a.hist_bytes) as u64),
        });
    }
    out
}

/// Refuses a plan whose tables, for `workers` workers, need more than
/// `available` bytes (the machine's MemAvailable; None: unknown, only
/// sizes beyond the address space are refused). Returns the bytes needed.
pub fn check(plan: &Plan, workers: usize, available: Option<u64>) -> Result<u64, ConfigError> {
    let needs = heap_needs(plan);
    let mut total: u64 = 0;
    for n in &needs {
        let all = n.bytes.and_then(|b| b.checked_mul(workers.max(1) as u64));
        total = match all.and_then(|a| total.checked_add(a)) {
            Some(t) => t,
            None => return Err(cerr(n.key, format!("{} = {} needs more memory than any machine has", n.key, n.value))),
        };
    }
    let Some(avail) = available else { return Ok(total) };
    if total <= avail {
        return Ok(total);
    }
    let biggest = needs.iter().max_by_key(|n| n.bytes.unwrap_or(u64::MAX)).expect("two needs at least");
    let listed: Vec<String> = needs
        .iter()
        .map(|n| format!("{} = {} ({:.1} MiB)", n.key, n.value, n.bytes.unwrap_or(0) as f64 / MIB))
        .collect();
    Err(cerr(
        biggest.key,
        format!(
            "the tables need {:.1} MiB ({} per worker, x {} worker{}), more than the {:.1} MiB this machine has \
             available (MemAvailable)",
            total as f64 / MIB,
            listed.join(" + "),
            workers.max(1),
            if workers == 1 { "" } else { "s" },
            avail as f64 / MIB
        ),
    ))
}

/// The machine's MemAvailable (/proc/meminfo), in bytes.
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// What the packet buffer pool takes from the EAL's memory, in MiB:
/// `mbufs` of `data_room` bytes each, with the mbuf header and the
/// mempool's own (a lower bound: rings and caches come on top).
pub fn pool_mib(mbufs: u32, data_room: u16) -> f64 {
    (mbufs as u64 * (data_room as u64 + 128 + 64)) as f64 / MIB
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn plan(extra: &str) -> Plan {
        let text = format!(
            "name = \"m\"\nmode = \"xconnect\"\n{extra}\n[[port]]\nname = \"p0\"\ndevice = \"net_null0\"\npeer = \"p1\"\n\
             [[port]]\nname = \"p1\"\ndevice = \"net_null1\"\npeer = \"p0\"\n"
        );
        Config::from_toml(&text).unwrap().validate().unwrap()
    }

    #[test]
    fn the_defaults_fit_a_small_machine() {
        let p = plan("");
        let need = check(&p, 1, Some(256 << 20)).unwrap();
        assert!(need > 1 << 20 && need < 64 << 20, "{need}");
    }

    #[test]
    fn a_flow_table_larger_than_the_machine_is_refused_with_its_key_and_size() {
        let p = plan("[flow_table]\ncapacity = 400000000");
        let e = check(&p, 2, Some(24 << 30)).unwrap_err();
        assert_eq!(e.key, "flow_table.capacity", "{e:?}");
        assert!(e.reason.contains("flow_table.capacity = 400000000") && e.reason.contains("x 2 workers"), "{e:?}");
        assert!(e.reason.contains("MiB this machine has"), "{e:?}");
        // Unknown memory: only what no address space holds is refused.
        assert!(check(&p, 2, None).is_ok());
        let huge = plan(&format!("[flow_table]\ncapacity = {}", u64::MAX >> 2));
        assert!(check(&huge, 1, None).unwrap_err().reason.contains("more memory than any machine"));
    }

    #[test]
    fn workers_multiply_the_tables() {
        let p = plan("[bridge]\nmac_capacity = 1000000");
        let one = check(&p, 1, None).unwrap();
        assert_eq!(check(&p, 4, None).unwrap(), 4 * one);
        let e = check(&p, 4, Some(one * 3)).unwrap_err();
        assert_eq!(e.key, "bridge.mac_capacity", "{e:?}");
    }
}
