//! The Wireshark Lua dissectors (`scripts/wireshark/`) in tshark against
//! pcaps the switch writes (`intctl capture`): every field they show equals
//! what the independent decoder (tests/int_decode.py, written from the
//! specs) reads from the same bytes, or, for the AltMark option, what this
//! file reads from them by RFC 9343. INT-MD over UDP (NPT 1 and 2, all nine
//! instructions), INT-MD by DSCP (NPT 0, TCP and UDP), Telemetry Report v2.0
//! with the INT stack inside, AltMark in Hop-by-Hop and Destination options.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use intswitch_tests::{int_decode, intctl_bin, read_pcap, replay_config, Scratch, SwitchProcess};
use serde_json::Value;

const ALL_INSTRUCTIONS: &str =
    r#"["node_id", "l1_ports", "hop_latency", "queue", "ingress_ts", "egress_ts", "l2_ports", "tx_util", "buffer"]"#;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Plain traffic: IPv4 and IPv6, UDP and TCP, 16 flows.
fn plain_traffic(d: &Scratch) -> PathBuf {
    let out = d.path("plain.pcap");
    let st = Command::new(intswitch_tests::intswitch_bin())
        .args(["gen-traffic", "--out"])
        .arg(&out)
        .args(["--count", "256", "--flows", "16", "--tcp-share", "0.5", "--v6-share", "0.5", "--shuffle", "3"])
        .args(["--size", "200"])
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    out
}

/// Runs an xconnect switch p0 (replaying `input`) -> p1 with `extra`
/// config, captures `count` frames `port` transmits, stops it.
fn capture(d: &Scratch, name: &str, input: &Path, extra: &str, port: &str, count: usize) -> Vec<Vec<u8>> {
    let cfg = replay_config(d, name, "xconnect", input, "02:00:00:00:01:01", "peer = \"p1\"", "peer = \"p0\"", extra);
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    let sw = SwitchProcess::start(&d.path("c.toml"), None);
    let out = d.path(&format!("{name}.pcap"));
    let st = Command::new(intctl_bin())
        .arg("--socket")
        .arg(d.path("sw.sock"))
        .args(["capture", port, "--tx", "--count", &count.to_string(), "--timeout", "30", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(st.status.success(), "capture: {}", String::from_utf8_lossy(&st.stderr));
    sw.stop();
    let frames = read_pcap(&out);
    assert_eq!(frames.len(), count);
    std::fs::copy(&out, d.path("last.pcap")).unwrap();
    frames
}

const DISSECTORS: [&str; 3] = ["int_md.lua", "telemetry_report.lua", "altmark.lua"];

/// tshark with the three dissectors: per frame, field -> every occurrence.
/// Run twice, the two ways README gives: loaded per run (`-X lua_script:`)
/// and installed in the personal plugin folder (where the Wireshark GUI
/// finds them too); both must show the same.
fn tshark(pcap: &Path, fields: &[&str], prefs: &[&str]) -> Vec<BTreeMap<String, Vec<String>>> {
    let dir = repo().join("scripts/wireshark");
    let mut per_run = Command::new("tshark");
    for lua in DISSECTORS {
        per_run.arg("-X").arg(format!("lua_script:{}", dir.join(lua).display()));
    }
    let shown = tshark_run(per_run, pcap, fields, prefs);
    // One folder a run: tests run in parallel threads of one process.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let home = Scratch::new(&format!("ws-home-{}", RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    let plugins = home.path(".local/lib/wireshark/plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    for lua in DISSECTORS {
        std::fs::copy(dir.join(lua), plugins.join(lua)).unwrap();
    }
    let mut installed = Command::new("tshark");
    installed.env("HOME", home.path("")).env_remove("XDG_CONFIG_HOME");
    assert_eq!(tshark_run(installed, pcap, fields, prefs), shown, "installed as plugins, the dissectors show the same");
    shown
}

fn tshark_run(mut cmd: Command, pcap: &Path, fields: &[&str], prefs: &[&str]) -> Vec<BTreeMap<String, Vec<String>>> {
    // The switch replays its trace in a loop, so a capture can hold a TCP
    // segment twice; sequence analysis would call it a retransmission and
    // keep its payload from the dissectors.
    cmd.args(["-o", "tcp.analyze_sequence_numbers:FALSE"]);
    for p in prefs {
        cmd.args(["-o", p]);
    }
    cmd.arg("-r").arg(pcap).args(["-T", "fields", "-E", "separator=\t", "-E", "occurrence=a", "-E", "aggregator=,"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark (scripts/setup.sh installs it)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !err.contains("Lua: Error"), "tshark: {err}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            fields
                .iter()
                .zip(l.split('\t').chain(std::iter::repeat("")))
                .map(|(f, v)| {
                    let vals = if v.is_empty() { vec![] } else { v.split(',').map(str::to_string).collect() };
                    (f.to_string(), vals)
                })
                .collect()
        })
        .collect()
}

/// A number tshark printed (decimal, or 0x hex for base.HEX fields).
fn num(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap(),
        None => s.parse().unwrap_or_else(|_| panic!("'{s}' is not a number")),
    }
}

fn bool_of(s: &str) -> bool {
    matches!(s, "1" | "True" | "true")
}

/// (tshark field, decoder key) of per-hop values.
const HOP_FIELDS: &[(&str, &str)] = &[
    ("int.node_id", "node_id"),
    ("int.ingress_port", "ingress_port"),
    ("int.egress_port", "egress_port"),
    ("int.hop_latency", "hop_latency_ns"),
    ("int.queue_id", "queue_id"),
    ("int.queue_occupancy", "queue_occupancy"),
    ("int.ingress_ts", "ingress_ts_ns"),
    ("int.egress_ts", "egress_ts_ns"),
    ("int.l2_ingress", "l2_ingress"),
    ("int.l2_egress", "l2_egress"),
    ("int.tx_util", "tx_util"),
    ("int.buffer_id", "buffer_id"),
    ("int.buffer_occupancy", "buffer_occupancy"),
];

const INT_FIELDS: &[&str] = &[
    "int.shim.type",
    "int.shim.npt",
    "int.shim.len",
    "int.shim.orig_dport",
    "int.shim.orig_proto",
    "int.shim.orig_dscp",
    "int.ver",
    "int.d",
    "int.e",
    "int.m",
    "int.hopml",
    "int.rhc",
    "int.bitmap",
    "int.ds_id",
    "int.ds_instruction",
    "int.ds_flags",
    "int.hops",
];

/// Every INT field tshark shows for one block equals the decoder's.
fn check_int(t: &BTreeMap<String, Vec<String>>, p: &Value, at: usize) {
    let one = |f: &str| -> u64 { num(t[f].first().unwrap_or_else(|| panic!("frame {at}: no {f}: {t:?}"))) };
    assert_eq!(one("int.shim.type"), p["int_type"].as_u64().unwrap(), "frame {at}");
    assert_eq!(one("int.shim.npt"), p["npt"].as_u64().unwrap(), "frame {at}");
    assert_eq!(one("int.ver"), p["version"].as_u64().unwrap(), "frame {at}");
    for (f, k) in [("int.d", "d"), ("int.e", "e"), ("int.m", "m")] {
        assert_eq!(bool_of(&t[f][0]), p[k].as_bool().unwrap(), "frame {at}: {f}");
    }
    for (f, k) in [
        ("int.hopml", "hop_ml"),
        ("int.rhc", "rhc"),
        ("int.bitmap", "bitmap"),
        ("int.ds_id", "domain_id"),
        ("int.ds_instruction", "ds_instruction"),
        ("int.ds_flags", "ds_flags"),
    ] {
        assert_eq!(one(f), p[k].as_u64().unwrap(), "frame {at}: {f}");
    }
    let hops = p["hops"].as_array().unwrap();
    assert_eq!(one("int.hops") as usize, hops.len(), "frame {at}");
    let hopml = p["hop_ml"].as_u64().unwrap();
    assert_eq!(one("int.shim.len"), 3 + hopml * hops.len() as u64, "frame {at}");
    match p["npt"].as_u64().unwrap() {
        0 => assert_eq!(one("int.shim.orig_dscp"), p["orig_dscp"].as_u64().unwrap(), "frame {at}"),
        1 => assert_eq!(one("int.shim.orig_dport"), p["orig_dport"].as_u64().unwrap(), "frame {at}"),
        _ => assert_eq!(one("int.shim.orig_proto"), p["orig_proto"].as_u64().unwrap(), "frame {at}"),
    }
    for (f, k) in HOP_FIELDS {
        let want: Vec<u64> = hops.iter().filter_map(|h| h[*k].as_u64()).collect();
        let got: Vec<u64> = t[*f].iter().map(|s| num(s)).collect();
        assert_eq!(got, want, "frame {at}: {f}");
    }
}

#[test]
fn int_over_udp_and_altmark_show_every_field_as_the_independent_decoders_read_them() {
    let d = Scratch::new("ws-udp");
    let input = plain_traffic(&d);
    let extra = format!(
        "[int]\nnode_id = 7\nedge_ports = [\"p0\"]\n[[int.watch]]\nname = \"v4\"\nrole = \"source\"\nsrc = \"10.0.1.0/24\"\n\
instructions = {ALL_INSTRUCTIONS}\ndomain_id = 0x1234\nmax_hops = 6\n\
[ampm]\nnode_id = 7\ninterval = \"1s\"\n\
[[ampm.flow]]\nname = \"v6-udp\"\nflow_mon_id = 0x12345\nrole = \"initiator\"\nmethod = \"double\"\ncarrier = \"ipv6_hbh\"\n\
src = \"2001:db8:1::/64\"\nproto = \"udp\"\n\
[[ampm.flow]]\nname = \"v6-tcp\"\nflow_mon_id = 77\nrole = \"initiator\"\nmethod = \"muxed\"\ncarrier = \"ipv6_dest\"\n\
src = \"2001:db8:1::/64\"\nproto = \"tcp\"\n"
    );
    let frames = capture(&d, "wsudp", &input, &extra, "p1", 200);
    let pcap = d.path("last.pcap");
    let mut fields: Vec<&str> = INT_FIELDS.to_vec();
    fields.extend(HOP_FIELDS.iter().map(|(f, _)| *f));
    fields.extend([
        "altmark.header",
        "altmark.flow_mon_id",
        "altmark.l",
        "altmark.d",
        "altmark.reserved",
        "udp.dstport",
    ]);
    let shown = tshark(&pcap, &fields, &[]);
    let decoded = int_decode("pcap", &pcap, &[]);
    assert_eq!(shown.len(), frames.len());
    let (mut int, mut npt) = (0, [0; 3]);
    let (mut am, mut headers) = (0, BTreeMap::<String, usize>::new());
    let mut marks = [0usize; 2];
    for (i, ((t, p), f)) in shown.iter().zip(&decoded).zip(&frames).enumerate() {
        if p.get("error").is_none() {
            check_int(t, p, i);
            int += 1;
            npt[p["npt"].as_u64().unwrap() as usize] += 1;
            assert_eq!(p["hops"][0]["node_id"], 7);
            continue;
        }
        assert!(t["int.ver"].is_empty(), "frame {i}: no INT, yet tshark shows some: {t:?}");
        // IPv6 with an options header: the AltMark option, read here by RFC 9343.
        if f[12..14] != [0x86, 0xdd] {
            continue;
        }
        let (nh, ext) = (f[14 + 6], 14 + 40);
        assert!(nh == 0 || nh == 60, "frame {i}: IPv6 without the AltMark header (next header {nh})");
        let mut o = ext + 2;
        let end = ext + 8 * (f[ext + 1] as usize + 1);
        let mut found = None;
        while o + 2 <= end {
            match f[o] {
                0 => o += 1,
                0x12 => {
                    assert_eq!(f[o + 1], 4);
                    found = Some(u32::from_be_bytes(f[o + 2..o + 6].try_into().unwrap()));
                    break;
                }
                _ => o += 2 + f[o + 1] as usize,
            }
        }
        let v = found.unwrap_or_else(|| panic!("frame {i}: no AltMark option"));
        let want_header = if nh == 0 { "hbh" } else { "dest" };
        assert_eq!(t["altmark.header"], vec![want_header.to_string()], "frame {i}");
        assert_eq!(num(&t["altmark.flow_mon_id"][0]), (v >> 12) as u64, "frame {i}");
        assert_eq!(num(&t["altmark.l"][0]), ((v >> 11) & 1) as u64, "frame {i}");
        assert_eq!(num(&t["altmark.d"][0]), ((v >> 10) & 1) as u64, "frame {i}");
        assert_eq!(num(&t["altmark.reserved"][0]), (v & 0x3ff) as u64, "frame {i}");
        assert_eq!((v >> 12, nh == 0), if v >> 12 == 0x12345 { (0x12345, true) } else { (77, false) });
        marks[((v >> 11) & 1) as usize] += 1;
        am += 1;
        *headers.entry(want_header.to_string()).or_default() += 1;
    }
    eprintln!(
        "{int} INT frames (NPT 1: {}, NPT 2: {}), {am} AltMark frames {headers:?}, L 0/1: {marks:?}",
        npt[1], npt[2]
    );
    assert!(npt[1] > 20 && npt[2] > 20, "UDP (NPT 1) and TCP (NPT 2) both carried INT: {npt:?}");
    assert!(headers.len() == 2 && am > 40, "{headers:?}");
    assert_eq!(int + am, frames.len(), "every frame was one or the other");

    // The Telemetry Reports a sink sends of these frames (through a DPDK
    // port, so `intctl capture` sees them), with the stack inside.
    let d2 = Scratch::new("ws-tr");
    let int_only: Vec<Vec<u8>> =
        frames.iter().zip(&decoded).filter(|(_, p)| p.get("error").is_none()).map(|(f, _)| f.clone()).collect();
    intswitch_tests::write_pcap(&d2.path("int.pcap"), &int_only);
    // (p2 and p3 cross-connect each other: xconnect gives every port a peer;
    // neither receives anything.)
    let extra = "[[port]]\nname = \"p2\"\ndevice = \"net_null1,no-rx=1\"\nipv4 = [\"192.0.2.1/24\"]\npeer = \"p3\"\n\
[[port]]\nname = \"p3\"\ndevice = \"net_null2,no-rx=1\"\npeer = \"p2\"\n\
[int]\nnode_id = 9\nedge_ports = [\"p1\"]\n\
report_md = [\"l1_ports\", \"hop_latency\", \"queue\", \"ingress_ts\", \"egress_ts\"]\n\
[[int.collector]]\naddress = \"192.0.2.50:32766\"\nport = \"p2\"\nmac = \"02:00:00:00:00:32\"\n";
    capture(&d2, "wstr", &d2.path("int.pcap"), extra, "p2", 40);
    let pcap = d2.path("last.pcap");
    let tr_md: Vec<(String, &str)> = HOP_FIELDS.iter().skip(1).map(|(f, k)| (f.replace("int.", "tr."), *k)).collect();
    let mut fields: Vec<&str> = vec![
        "tr.ver",
        "tr.hw_id",
        "tr.seq",
        "tr.node_id",
        "tr.reports",
        "tr.rep_type",
        "tr.in_type",
        "tr.md_len",
        "tr.d",
        "tr.q",
        "tr.f",
        "tr.i",
        "tr.rep_md_bits",
        "tr.ds_id",
    ];
    fields.extend(tr_md.iter().map(|(f, _)| f.as_str()));
    fields.extend(INT_FIELDS);
    fields.extend(HOP_FIELDS.iter().map(|(f, _)| *f));
    let shown = tshark(&pcap, &fields, &[]);
    let decoded = int_decode("reports", &pcap, &[]);
    assert_eq!(shown.len(), 40);
    let mut reports = 0;
    for (i, (t, g)) in shown.iter().zip(&decoded).enumerate() {
        assert!(g.get("error").is_none(), "frame {i}: {g}");
        let one = |f: &str| num(&t[f][0]);
        let all = |f: &str| -> Vec<u64> { t[f].iter().map(|s| num(s)).collect() };
        for (f, k) in [("tr.ver", "version"), ("tr.hw_id", "hw_id"), ("tr.seq", "seq"), ("tr.node_id", "node_id")] {
            assert_eq!(one(f), g[k].as_u64().unwrap(), "frame {i}: {f}");
        }
        let reps = g["reports"].as_array().unwrap();
        assert_eq!(one("tr.reports") as usize, reps.len(), "frame {i}");
        // Per report, in order: its header, its metadata, its inner INT block.
        let per = |k: &str| -> Vec<u64> { reps.iter().map(|r| r[k].as_u64().unwrap()).collect() };
        for (f, k) in [
            ("tr.rep_type", "rep_type"),
            ("tr.in_type", "in_type"),
            ("tr.md_len", "md_len"),
            ("tr.rep_md_bits", "rep_md_bits"),
            ("tr.ds_id", "domain_id"),
        ] {
            assert_eq!(all(f), per(k), "frame {i}: {f}");
        }
        let flags: Vec<String> = (0..reps.len())
            .map(|n| {
                [("tr.d", 'D'), ("tr.q", 'Q'), ("tr.f", 'F'), ("tr.i", 'I')]
                    .iter()
                    .filter(|(f, _)| bool_of(&t[*f][n]))
                    .map(|(_, c)| *c)
                    .collect()
            })
            .collect();
        let want: Vec<String> = reps.iter().map(|r| r["flags"].as_str().unwrap().to_string()).collect();
        assert_eq!(flags, want, "frame {i}");
        for (f, k) in &tr_md {
            let want: Vec<u64> = reps.iter().filter_map(|r| r["metadata"][*k].as_u64()).collect();
            assert_eq!(all(f), want, "frame {i}: {f}");
        }
        let inner: Vec<&Value> = reps.iter().map(|r| &r["inner"]).collect();
        for (f, k) in [("int.ver", "version"), ("int.bitmap", "bitmap"), ("int.shim.npt", "npt"), ("int.rhc", "rhc")] {
            assert_eq!(all(f), inner.iter().map(|p| p[k].as_u64().unwrap()).collect::<Vec<_>>(), "frame {i}: {f}");
        }
        let hops: Vec<&Value> = inner.iter().flat_map(|p| p["hops"].as_array().unwrap()).collect();
        for (f, k) in HOP_FIELDS {
            let want: Vec<u64> = hops.iter().filter_map(|h| h[*k].as_u64()).collect();
            assert_eq!(all(f), want, "frame {i}: {f}");
        }
        reports += reps.len();
    }
    eprintln!("{reports} reports in 40 report packets");
    assert!(reports >= 40);
}

#[test]
fn int_by_dscp_shows_over_tcp_and_udp() {
    let d = Scratch::new("ws-dscp");
    let input = plain_traffic(&d);
    let extra = format!(
        "[int]\nnode_id = 5\npresence = \"dscp\"\ndscp_value = 0x17\nedge_ports = [\"p0\"]\n[[int.watch]]\nname = \"all\"\n\
role = \"source\"\ninstructions = {ALL_INSTRUCTIONS}\n"
    );
    let frames = capture(&d, "wsdscp", &input, &extra, "p1", 100);
    let pcap = d.path("last.pcap");
    let mut fields: Vec<&str> = INT_FIELDS.to_vec();
    fields.extend(HOP_FIELDS.iter().map(|(f, _)| *f));
    fields.push("ip.proto");
    // (TCP to 80/443 has a port dissector, tried before heuristics unless asked.)
    let first = ["tcp.try_heuristic_first:TRUE", "udp.try_heuristic_first:TRUE"];
    let shown = tshark(&pcap, &fields, &first);
    let decoded = int_decode("pcap", &pcap, &["--int-dscp", "0x17"]);
    let mut by_proto = BTreeMap::<u64, usize>::new();
    for (i, (t, p)) in shown.iter().zip(&decoded).enumerate() {
        assert!(p.get("error").is_none(), "frame {i}: {p}");
        check_int(t, p, i);
        *by_proto.entry(p["proto"].as_u64().unwrap()).or_default() += 1;
    }
    assert_eq!(shown.len(), frames.len());
    assert!(by_proto.get(&6).is_some_and(|n| *n > 10) && by_proto.get(&17).is_some_and(|n| *n > 10), "{by_proto:?}");
    // With DSCP detection off, the same frames show no INT.
    let off = tshark(&pcap, &["int.ver"], &["int_md.dscp_enabled:FALSE", first[0], first[1]]);
    assert!(off.iter().all(|t| t["int.ver"].is_empty()));
}
