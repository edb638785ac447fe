//! What a config's per-worker tables take from the heap, and the route
//! tables all workers share, checked against what the machine has before
//! any worker starts. Workers build their tables on their own lcores; a
//! table larger than the machine would end the process there with an
//! allocation failure. Checked here, it is a config error that names the
//! keys and the memory they need.

use crate::config::Plan;
use crate::fields::{cerr, ConfigError};

use dataplane::flow_table::FlowTable;
use dataplane::lpm::{Lpm, Prefix};
use dataplane::mac_table::MacTable;
use dataplane::tables::RouteSpec;
use std::net::IpAddr;

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
            value: plan.mac_capacity().to_string(),
            bytes: MacTable::bytes_for(plan.mac_capacity()),
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

/// What the route tables of `routes` take: both LPMs, as a generation
/// builds them (counted, not built: a tenth of a second for a full table).
pub fn route_bytes(routes: &[RouteSpec]) -> u64 {
    let (mut v4, mut v6) = (Vec::new(), Vec::new());
    for r in routes {
        match r.prefix {
            IpAddr::V4(a) => v4.push(Prefix { addr: a.octets(), len: r.len, value: 0 }),
            IpAddr::V6(a) => v6.push(Prefix { addr: a.octets(), len: r.len, value: 0 }),
        }
    }
    (Lpm::bytes_for(&v4) + Lpm::bytes_for(&v6)) as u64
}

/// The shared route tables, twice: while a new generation is built, the
/// one in use stays. A full Internet table takes about 250 MiB.
pub fn route_need(plan: &Plan) -> Need {
    Need {
        key: if plan.raw.routes_file.is_some() { "routes_file" } else { "route" },
        value: format!("{} routes, two generations", plan.routes.len()),
        bytes: Some(2 * route_bytes(&plan.routes)),
    }
}

/// Refuses, before any is built, routes whose tables need more than the
/// `available` bytes (MemAvailable, which leaves out the tables in use
/// beside which they are built; None: unknown, nothing refused).
pub fn check_routes(routes: &[RouteSpec], available: Option<u64>) -> Result<(), String> {
    let need = route_bytes(routes);
    match available {
        Some(avail) if need > avail => Err(format!(
            "{} routes need {:.1} MiB of route tables, more than the {:.1} MiB this machine has available \
             (MemAvailable)",
            routes.len(),
            need as f64 / MIB,
            avail as f64 / MIB
        )),
        _ => Ok(()),
    }
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
    let routes = route_need(plan);
    let shared = routes.bytes.unwrap_or(0);
    total = total.saturating_add(shared);
    let Some(avail) = available else { return Ok(total) };
    if total <= avail {
        return Ok(total);
    }
    let per_worker = |n: &Need| n.bytes.unwrap_or(0).saturating_mul(workers.max(1) as u64);
    let biggest = needs.iter().max_by_key(|n| per_worker(n)).expect("two needs at least");
    let key = if shared > per_worker(biggest) { routes.key } else { biggest.key };
    let listed: Vec<String> = needs
        .iter()
        .map(|n| format!("{} = {} ({:.1} MiB)", n.key, n.value, n.bytes.unwrap_or(0) as f64 / MIB))
        .collect();
    Err(cerr(
        key,
        format!(
            "the tables need {:.1} MiB ({} per worker, x {} worker{}; shared: {} = {} ({:.1} MiB)), more than the \
             {:.1} MiB this machine has available (MemAvailable)",
            total as f64 / MIB,
            listed.join(" + "),
            workers.max(1),
            if workers == 1 { "" } else { "s" },
            routes.key,
            routes.value,
            shared as f64 / MIB,
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
    fn a_full_route_table_counts_once_for_two_generations() {
        let dir = std::env::temp_dir().join(format!("intswitch-budget-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // 70k /24s: the IPv4 table gets its 64 MiB root.
        let lines: String =
            (0..70_000u32).map(|i| format!("{}.{}.{}.0/24 p1\n", 20 + i / 65536, (i >> 8) & 255, i & 255)).collect();
        std::fs::write(dir.join("r.txt"), lines).unwrap();
        let text = format!(
            "name = \"m\"\nmode = \"router\"\nroutes_file = \"{}\"\n[[port]]\nname = \"p0\"\ndevice = \"net_null0\"\n\
             ipv4 = [\"10.0.1.1/24\"]\n[[port]]\nname = \"p1\"\ndevice = \"net_null1\"\nipv4 = [\"10.0.2.1/24\"]\n",
            dir.join("r.txt").display()
        );
        let p = Config::from_toml(&text).unwrap().validate().unwrap();
        let r = route_need(&p);
        assert_eq!(r.key, "routes_file");
        assert!(r.bytes.unwrap() >= 2 * (64 << 20), "{r:?}");
        // Shared: more workers add only their own tables.
        let (one, two) = (check(&p, 1, None).unwrap(), check(&p, 2, None).unwrap());
        assert!(two - one < r.bytes.unwrap(), "{one} {two}");
        let e = check(&p, 1, Some(100 << 20)).unwrap_err();
        assert_eq!(e.key, "routes_file", "{e:?}");
        assert!(e.reason.contains("shared: routes_file = 70000 routes, two generations"), "{e:?}");
        // At run time (route load): the new tables beside those in use.
        assert_eq!(route_bytes(&p.routes), r.bytes.unwrap() / 2);
        assert!(check_routes(&p.routes, Some(r.bytes.unwrap())).is_ok());
        let e = check_routes(&p.routes, Some(50 << 20)).unwrap_err();
        assert!(e.contains("70000 routes need 64.0 MiB") && e.contains("than the 50.0 MiB"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn workers_multiply_the_tables() {
        let p = plan("[flow_table]\ncapacity = 1000000");
        let shared = route_need(&p).bytes.unwrap();
        let one = check(&p, 1, None).unwrap() - shared;
        assert_eq!(check(&p, 4, None).unwrap(), 4 * one + shared);
        let e = check(&p, 4, Some(one * 3)).unwrap_err();
        assert_eq!(e.key, "flow_table.capacity", "{e:?}");
    }
}
