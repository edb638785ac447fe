//! `intcollector gpint plan` and `gpint topo` on the shipped fixtures
//! (`tests/fixtures/gpint/`: Watts-Strogatz WS(n, 4, p) for n = 20..100,
//! ring, grid, fat-tree k = 4, NSFNET; and the testbeds chain3 and
//! leafspine). The plans are checked against the topology files as read
//! here, not through the planner's own graph: every switch covered,
//! consecutive hops linked by the named link and left by that link's port,
//! the last hop to the monitor (255), GPINT's longest path at most
//! ceil(|V| / k) + 1 with a spread of at most one switch, Euler's trails
//! covering every link exactly once with max(1, #odd / 2) trails, every
//! probe within its byte budget.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use intswitch_tests::{repo_root, workspace_bin, Scratch};
use serde_json::Value;

/// A topology file as the tests read it: switch -> its ports' links, and
/// link -> its two ends.
struct Topo {
    ports: HashMap<String, Vec<String>>,
    links: HashMap<String, (String, String)>,
}

fn read_topo(path: &Path) -> Topo {
    let t: toml::Table = std::fs::read_to_string(path).unwrap().parse().unwrap();
    let mut ports = HashMap::new();
    for s in t["switch"].as_array().unwrap() {
        let links = s
            .get("port")
            .and_then(|p| p.as_array())
            .map_or(vec![], |p| p.iter().map(|q| q["link"].as_str().unwrap().to_string()).collect());
        ports.insert(s["name"].as_str().unwrap().to_string(), links);
    }
    let mut links = HashMap::new();
    for l in t["link"].as_array().unwrap() {
        let (a, b) = (l["a"].as_str().unwrap(), l["b"].as_str().unwrap());
        if ports.contains_key(a) && ports.contains_key(b) {
            links.insert(l["name"].as_str().unwrap().to_string(), (a.to_string(), b.to_string()));
        }
    }
    Topo { ports, links }
}

fn plan(topo: &Path, args: &[&str]) -> Value {
    let out = Command::new(workspace_bin("intcollector"))
        .args(["gpint", "plan", "--topology"])
        .arg(topo)
        .args(args)
        .output()
        .expect("run intcollector");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Checks the hops of every path against the file; returns how often each
/// link was taken.
fn check_hops(t: &Topo, p: &Value) -> HashMap<String, usize> {
    let mut taken = HashMap::new();
    let mut covered = HashSet::new();
    let budget = p["budget_bytes"].as_u64().unwrap();
    for path in p["paths"].as_array().unwrap() {
        let hops = path["hops"].as_array().unwrap();
        assert!(!hops.is_empty());
        assert!(path["probe_bytes"].as_u64().unwrap() <= budget, "{path}");
        for (i, h) in hops.iter().enumerate() {
            let sw = h["switch"].as_str().unwrap();
            covered.insert(sw.to_string());
            let port = h["next_port"].as_u64().unwrap() as usize;
            if i + 1 == hops.len() {
                assert_eq!(port, 255, "the last hop returns to the monitor: {path}");
                continue;
            }
            let link = h["link"].as_str().unwrap();
            let (a, b) = &t.links[link];
            let next = hops[i + 1]["switch"].as_str().unwrap();
            assert!((a == sw && b == next) || (b == sw && a == next), "{sw} -> {next} over {link}");
            assert_eq!(t.ports[sw][port], link, "{sw} leaves by port {port} for {link}");
            *taken.entry(link.to_string()).or_insert(0) += 1;
        }
    }
    assert_eq!(covered.len(), t.ports.len(), "every switch covered");
    taken
}

fn fixtures() -> Vec<PathBuf> {
    let root = repo_root();
    let mut v: Vec<PathBuf> = std::fs::read_dir(root.join("tests/fixtures/gpint"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    v.sort();
    v.push(root.join("configs/testbed/chain3.toml"));
    v.push(root.join("configs/testbed/leafspine.toml"));
    assert!(v.len() >= 12, "{v:?}");
    v
}

#[test]
fn gpint_paths_cover_every_switch_balanced() {
    for f in fixtures() {
        let t = read_topo(&f);
        let n = t.ports.len();
        for k in [(2 * n / 10).max(1), (3 * n / 10).max(1), (5 * n / 10).max(1)] {
            let p = plan(&f, &["--algo", "gpint", "--k", &k.to_string()]);
            check_hops(&t, &p);
            let lens: Vec<usize> =
                p["paths"].as_array().unwrap().iter().map(|q| q["hops"].as_array().unwrap().len()).collect();
            let (long, short) = (*lens.iter().max().unwrap(), *lens.iter().min().unwrap());
            assert!(long <= n.div_ceil(k) + 1, "{}: k {k}: longest {long}", f.display());
            assert!(long - short <= 1, "{}: k {k}: {lens:?}", f.display());
            assert_eq!(p["stats"]["split"], 0);
        }
    }
}

#[test]
fn euler_trails_take_every_link_once() {
    for f in fixtures() {
        let t = read_topo(&f);
        // A budget no trail reaches, so that the trails stay whole.
        let p = plan(&f, &["--algo", "euler", "--mtu", "60000", "--mbuf-room", "60000", "--mea", "0"]);
        if p["stats"]["split"] != 0 {
            continue; // past the INT shim's 50 hops: pieces, checked below
        }
        let taken = check_hops(&t, &p);
        assert_eq!(taken.len(), t.links.len(), "{}", f.display());
        assert!(taken.values().all(|&c| c == 1), "{}: {taken:?}", f.display());
        let mut degree: HashMap<&str, usize> = HashMap::new();
        for (a, b) in t.links.values() {
            *degree.entry(a).or_default() += 1;
            *degree.entry(b).or_default() += 1;
        }
        let odd = degree.values().filter(|&&d| d % 2 == 1).count();
        assert_eq!(p["paths"].as_array().unwrap().len(), (odd / 2).max(1), "{}", f.display());
    }
}

#[test]
fn long_trails_are_cut_to_the_probe_budget_without_losing_a_link() {
    let f = repo_root().join("tests/fixtures/gpint/ws100.toml");
    let t = read_topo(&f);
    let p = plan(&f, &["--algo", "euler"]);
    assert!(p["stats"]["split"].as_u64().unwrap() >= 1, "{}", p["stats"]);
    let taken = check_hops(&t, &p);
    assert_eq!(taken.len(), t.links.len());
    assert_eq!(p["stats"]["covered_links"].as_u64().unwrap() as usize, t.links.len());
    // SNMP: one poll a switch.
    let s = plan(&f, &["--algo", "snmp"]);
    check_hops(&t, &s);
    assert_eq!(s["paths"].as_array().unwrap().len(), 100);
}

#[test]
fn gpint_3_paths_are_a_tenth_of_eulers_on_ws_100_4_002() {
    let f = repo_root().join("tests/fixtures/gpint/ws100-p002.toml");
    let g = plan(&f, &["--algo", "gpint"]);
    assert_eq!(g["k"], 30, "GPINT-3 is the default: floor(3 |V| / 10)");
    let e = plan(&f, &["--algo", "euler"]);
    let (gl, el) = (g["stats"]["longest"].as_u64().unwrap(), e["stats"]["longest_planned"].as_u64().unwrap());
    assert!(gl * 10 <= el, "GPINT-3 longest {gl}, Euler's {el}");
}

#[test]
fn fixtures_are_what_gpint_topo_makes_and_bad_input_is_refused() {
    let d = Scratch::new("gpint-topo");
    for (n, p, seed, name) in [("20", "0.1", "20", "ws20"), ("100", "0.02", "100", "ws100-p002")] {
        let out = d.path(&format!("{name}.toml"));
        let st = Command::new(workspace_bin("intcollector"))
            .args(["gpint", "topo", "ws", "--n", n, "--p", p, "--seed", seed, "--name", name, "--out"])
            .arg(&out)
            .status()
            .unwrap();
        assert!(st.success());
        let shipped = repo_root().join(format!("tests/fixtures/gpint/{name}.toml"));
        assert_eq!(std::fs::read_to_string(out).unwrap(), std::fs::read_to_string(shipped).unwrap(), "{name}");
    }
    let bad = d.path("bad.toml");
    std::fs::write(&bad, "[[switch]]\nname = \"a\"\n[[switch]]\nname = \"b\"\n").unwrap();
    let out =
        Command::new(workspace_bin("intcollector")).args(["gpint", "plan", "--topology"]).arg(&bad).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not connected"), "{}", String::from_utf8_lossy(&out.stderr));
    for args in [&["--algo", "dijkstra"][..], &["--k", "0"], &["--k", "2", "--path-len", "3"]] {
        let out = Command::new(workspace_bin("intcollector"))
            .args(["gpint", "plan", "--topology"])
            .arg(repo_root().join("configs/testbed/chain3.toml"))
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        assert!(!out.stderr.is_empty());
    }
}
