//! The control socket, `intctl` and the metrics endpoint against a running
//! intswitch on vdevs: every command round trip, hostile clients, mutated
//! requests, socket ownership, updates under traffic, capture.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::Duration;

use control::client::Client;
use intswitch_tests::{
    int_source_section, intctl_bin, read_pcap, replay_router_config, write_pcap, Scratch, SwitchProcess,
};
use serde_json::{json, Value};

const P0_MAC: &str = "02:00:00:00:a0:00";

/// A router with p0 replaying `in.pcap` forever (UDP 10.0.1.10 -> 198.51.100.x)
/// into p1 (net_null).
fn start_router(d: &Scratch, name: &str, frames: usize) -> SwitchProcess {
    start_router_with(d, name, frames, "")
}

/// `start_router` with more config sections after the neighbours.
fn start_router_with(d: &Scratch, name: &str, frames: usize, extra: &str) -> SwitchProcess {
    std::fs::write(d.path("c.toml"), router_config(d, name, frames, extra)).unwrap();
    SwitchProcess::start(&d.path("c.toml"), None)
}

/// The configuration `start_router_with` runs (writes the traffic's pcap).
fn router_config(d: &Scratch, name: &str, frames: usize, extra: &str) -> String {
    let spec = control::traffic::TrafficSpec {
        count: frames,
        flows: frames,
        frame_len: 60,
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: control::config::parse_mac(P0_MAC).unwrap(),
        src: "10.0.1.10".parse().unwrap(),
        dst: "198.51.100.10".parse().unwrap(),
        vary_dst: true,
    };
    let frames: Vec<Vec<u8>> = (0..frames).map(|i| control::traffic::frame(&spec, i)).collect();
    write_pcap(&d.path("in.pcap"), &frames);
    replay_router_config(d, name, &d.path("in.pcap"), P0_MAC, "198.51.100.0/24", extra)
}

fn intctl(d: &Scratch, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(intctl_bin()).arg("--socket").arg(d.path("sw.sock")).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn intctl_json(d: &Scratch, args: &[&str]) -> Value {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    let (ok, out, err) = intctl(d, &a);
    assert!(ok, "intctl {args:?}: {err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("intctl {args:?}: {e}: {out}"))
}

fn rx_packets(d: &Scratch) -> u64 {
    intctl_json(d, &["show", "ports"])[0]["rx_packets"].as_u64().unwrap()
}

/// Polls `cond` until it holds, for at most 10 s.
fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Waits (bounded) until p0 has received more than `than` packets.
fn rx_beyond(d: &Scratch, than: u64) -> bool {
    eventually(|| rx_packets(d) > than)
}

fn http_get(addr: &str, path: &str) -> String {
    http_raw(addr, format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
}

/// Sends `request` as it is and reads the answer to the end.
fn http_raw(addr: &str, request: &[u8]) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(request).unwrap();
    let mut body = Vec::new();
    s.read_to_end(&mut body).unwrap();
    String::from_utf8_lossy(&body).into_owned()
}

#[test]
fn every_command_round_trips() {
    let d = Scratch::new("api-all");
    let sw = start_router(&d, "apiall", 64);
    let mode = std::fs::metadata(d.path("sw.sock")).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660, "socket file mode");

    let v = intctl_json(&d, &["show", "version"]);
    assert_eq!((v["protocol"].as_u64(), v["mode"].as_str()), (Some(1), Some("router")));
    assert!(v["dpdk"].as_str().unwrap().contains("22.11"));
    assert_eq!(intctl_json(&d, &["show", "config"])["name"], "apiall");
    let ports = intctl_json(&d, &["show", "ports"]);
    assert_eq!(ports[0]["name"], "p0");
    assert_eq!(ports[0]["mac"], P0_MAC);
    assert_eq!(intctl_json(&d, &["show", "workers"])[0]["lcore"], 1);
    let routes = intctl_json(&d, &["show", "routes"]);
    assert!(routes.as_array().unwrap().iter().any(|r| r["prefix"] == "198.51.100.0/24" && r["via"] == "10.0.2.254"));
    let first = intctl_json(&d, &["show", "routes", "--max", "1"]);
    assert_eq!(first.as_array().unwrap().len(), 1, "{first}");
    assert_eq!(first[0]["kind"], "connected", "connected routes come first: {first}");
    assert_eq!(intctl_json(&d, &["show", "neighbours"]).as_array().unwrap().len(), 2);

    // Traffic is flowing and learned into the flow table.
    assert!(rx_beyond(&d, 0));
    let flows = intctl_json(&d, &["show", "flows", "--max", "10"]);
    assert_eq!(flows.as_array().unwrap().len(), 10);
    // A text dump cut at --max says so; one that holds everything does not.
    let cut = "the table may hold more: --max raises it";
    for (args, cut_short) in [
        (&["show", "flows", "--max", "10"][..], true),
        (&["show", "flows", "--max", "100000"], false),
        (&["show", "routes", "--max", "1"], true),
        (&["show", "routes"], false),
    ] {
        let (ok, out, err) = intctl(&d, args);
        assert!(ok, "{err}");
        assert_eq!(out.contains(cut), cut_short, "{args:?}: {out}");
    }

    // Mutations, each visible in the matching view.
    let flow_key = [
        "--in-port",
        "p0",
        "--src",
        "10.0.1.10",
        "--dst",
        "198.51.100.10",
        "--proto",
        "udp",
        "--src-port",
        "1024",
        "--dst-port",
        "5001",
    ];
    let flow_add: Vec<&str> = [&["flow", "add"][..], &flow_key, &["--action", "drop"]].concat();
    let flow_del: Vec<&str> = [&["flow", "del"][..], &flow_key].concat();
    for args in [
        &["route", "add", "203.0.113.0/24", "--port", "p1", "--via", "10.0.2.253"][..],
        &["neighbour", "add", "10.0.2.9", "02:00:00:00:02:09", "--port", "p1"],
        &flow_add[..],
    ] {
        let (ok, _, err) = intctl(&d, args);
        assert!(ok, "{args:?}: {err}");
    }
    assert!(intctl_json(&d, &["show", "routes"]).to_string().contains("203.0.113.0/24"));
    // route get: the configuration's longest match and the workers' next hop.
    let g = intctl_json(&d, &["route", "get", "203.0.113.77"]);
    let named = |g: &serde_json::Value, k: &str| g[k].as_str().map(str::to_string);
    assert_eq!(
        ["route", "kind", "port", "via", "via_mac"].map(|k| named(&g, k)),
        ["203.0.113.0/24", "static", "p1", "10.0.2.253", "02:00:00:00:02:fd"].map(|v| Some(v.to_string())),
        "{g}"
    );
    let (ok, out, err) = intctl(&d, &["route", "get", "10.0.1.1"]);
    assert!(ok && out.contains("10.0.1.1 local on p0, route 10.0.1.1/32 (local)"), "{out} {err}");
    let (ok, out, err) = intctl(&d, &["route", "get", "10.0.2.99"]);
    assert!(ok && out.contains("10.0.2.99 dev p1, route 10.0.2.0/24 (connected)"), "{out} {err}");
    assert!(intctl_json(&d, &["show", "neighbours"]).to_string().contains("10.0.2.9"));
    assert!(eventually(|| intctl_json(&d, &["show", "drops"])["total"]["flow_drop"].as_u64().unwrap() > 0));
    let flows = intctl_json(&d, &["show", "flows", "--max", "100000"]);
    assert!(flows.as_array().unwrap().iter().any(|f| f["installed"] == true && f["action"] == "drop"));
    for args in [
        &["route", "del", "203.0.113.0/24"][..],
        &["neighbour", "del", "10.0.2.9"],
        &flow_del[..],
        &["port", "disable", "p1"],
    ] {
        let (ok, _, err) = intctl(&d, args);
        assert!(ok, "{args:?}: {err}");
    }
    // A flow no worker holds is an error, as a route's (not the one
    // removed above: the traffic has the workers learn it again).
    let absent: Vec<&str> = flow_del.iter().map(|a| if *a == "1024" { "7" } else { a }).collect();
    let (ok, _, err) = intctl(&d, &absent);
    assert!(!ok && err.contains("key: no worker has this flow"), "{err}");
    let (ok, out, err) = intctl(&d, &["route", "get", "203.0.113.77"]);
    assert!(ok && out.starts_with("203.0.113.77: no route (generation "), "{out} {err}");
    // As `ip route`: a prefix with host bits set is refused (it would be a
    // second route to its network), and so is a gateway the switch could
    // never resolve, unless a neighbour is configured for it there.
    let (ok, _, err) = intctl(&d, &["route", "add", "203.0.113.1/24", "--port", "p1"]);
    assert!(!ok && err.contains("prefix: '203.0.113.1/24' has host bits set (the network is 203.0.113.0/24)"), "{err}");
    let (ok, _, err) = intctl(&d, &["route", "del", "198.51.100.1/24"]);
    assert!(!ok && err.contains("has host bits set"), "{err}");
    let off_link = ["route", "add", "203.0.113.0/24", "--port", "p1", "--via", "192.0.2.7"];
    let (ok, _, err) = intctl(&d, &off_link);
    assert!(!ok && err.contains("via: gateway 192.0.2.7 is on no subnet of port 'p1' (10.0.2.0/24"), "{err}");
    std::fs::write(d.path("off.txt"), "203.0.113.0/24 p1 192.0.2.7\n").unwrap();
    let (ok, _, err) = intctl(&d, &["route", "load", &d.path("off.txt").display().to_string()]);
    assert!(!ok && err.contains("off.txt: 203.0.113.0/24: gateway 192.0.2.7 is on no subnet"), "{err}");
    for args in [
        &["neighbour", "add", "192.0.2.7", "02:00:00:00:02:07", "--port", "p1"][..],
        &off_link,
        &["route", "del", "203.0.113.0/24"],
    ] {
        let (ok, _, err) = intctl(&d, args);
        assert!(ok, "{args:?}: {err}");
    }
    // A routes file: added in one generation; with an error, nothing is.
    std::fs::write(d.path("more.txt"), "# two more\n203.0.113.0/24 p1 10.0.2.253\n2001:db8:99::/48 p1\n").unwrap();
    std::fs::write(d.path("bad.txt"), "192.0.2.0/24 p1\n192.0.2.0/99 p1\n").unwrap();
    let more = d.path("more.txt").display().to_string();
    let r = intctl_json(&d, &["route", "load", &more]);
    assert_eq!(r["loaded"], 2, "{r}");
    let shown = intctl_json(&d, &["show", "routes"]).to_string();
    assert!(
        shown.contains("203.0.113.0/24") && shown.contains("2001:db8:99::/48") && shown.contains("198.51.100.0/24")
    );
    // A load this small rebuilds its routes' regions: the workers' LPM has them.
    let (ok, out, err) = intctl(&d, &["route", "get", "2001:db8:99::1"]);
    assert!(ok && out.contains("dev p1, route 2001:db8:99::/48 (static)"), "{out} {err}");
    let (ok, _, err) = intctl(&d, &["route", "load", &d.path("bad.txt").display().to_string()]);
    assert!(!ok && err.contains("line 2"), "{err}");
    assert!(!intctl_json(&d, &["show", "routes"]).to_string().contains("192.0.2.0/24"), "a bad file changes nothing");
    // --replace: the file's routes instead of the configured ones.
    std::fs::write(d.path("only.txt"), "198.51.100.0/24 p1 10.0.2.254\n").unwrap();
    let (ok, out, err) = intctl(&d, &["route", "load", "--replace", &d.path("only.txt").display().to_string()]);
    assert!(ok && out.contains("1 routes loaded, 1 configured"), "{out} {err}");
    let shown = intctl_json(&d, &["show", "routes"]).to_string();
    assert!(!shown.contains("203.0.113.0/24") && shown.contains("198.51.100.0/24"), "{shown}");
    assert_eq!(intctl_json(&d, &["show", "ports"])[1]["enabled"], false);
    assert!(eventually(|| intctl_json(&d, &["show", "drops"])["total"]["port_down"].as_u64().unwrap() > 0));
    assert!(intctl(&d, &["port", "enable", "p1"]).0);
    assert!(intctl(&d, &["clear", "counters"]).0);
    let c = intctl_json(&d, &["show", "counters"]);
    assert!(c["total_drops"].as_u64().unwrap() < 1000, "cleared: {c}");

    // Text output of every view works too.
    for what in [
        "ports",
        "workers",
        "counters",
        "drops",
        "flows",
        "macs",
        "routes",
        "neighbours",
        "config",
        "version",
        "metrics",
    ] {
        let (ok, out, err) = intctl(&d, &["show", what]);
        assert!(ok && !out.is_empty(), "show {what}: {err}");
    }

    // monitor: one refresh as JSON with per-port and per-worker rates.
    let m = intctl_json(&d, &["monitor", "--iterations", "1", "--interval", "0.3"]);
    assert!(m["ports"][0]["rx_mpps"].as_f64().unwrap() > 0.0, "{m}");
    assert!(m["workers"][0]["busy_pct"].is_number());

    // Errors name the bad argument and exit non-zero.
    for (args, want) in [
        (&["route", "add", "10.9.0.0/16", "--port", "p9"][..], "port: no port named 'p9'"),
        (&["route", "add", "10.9.0.0/33", "--port", "p1"], "prefix"),
        (&["route", "del", "192.0.2.0/24"], "no route 192.0.2.0/24"),
        (&["route", "get", "203.0.113"], "'203.0.113' is not an IP address"),
        (&["neighbour", "add", "10.0.2.7", "zz:00", "--port", "p1"], "mac"),
        // The switch itself, or no one host: taken before.
        (
            &["neighbour", "add", "10.0.2.1", "02:00:00:00:02:07", "--port", "p1"],
            "the switch's own address on port 'p1'",
        ),
        (&["neighbour", "add", "10.0.2.255", "02:00:00:00:02:07", "--port", "p1"], "the broadcast address"),
        (
            &[
                "flow",
                "add",
                "--in-port",
                "p0",
                "--src",
                "10.0.1.1",
                "--dst",
                "x",
                "--proto",
                "udp",
                "--action",
                "drop",
            ],
            "dst",
        ),
        (&["port", "disable", "p5"], "no port named 'p5'"),
        (&["capture", "p0", "--count", "0", "--out", "/tmp/x.pcap"], "count"),
        // NaN went as JSON null, so the capture ran with the default timeout.
        (&["capture", "p0", "--count", "5", "--out", "/tmp/x.pcap", "--timeout", "nan"], "not a finite number"),
        (&["monitor", "--interval", "inf", "--iterations", "1"], "not a finite number"),
        (&["monitor", "--iterations", "0"], "--iterations: at least 1"),
    ] {
        let (ok, _, err) = intctl(&d, args);
        assert!(!ok, "{args:?} should fail");
        assert!(err.contains(want), "{args:?}: {err}");
    }

    // Prometheus endpoint.
    let body = http_get(&sw.metrics_addr(), "/metrics");
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(body.contains("intswitch_port_rx_packets_total{port=\"p0\",worker=\"0\"}"));
    assert!(body.contains("intswitch_drops_total{worker=\"0\",reason=\"port_down\"}"));
    assert!(body.contains("intswitch_ethdev_ipackets_total{port=\"p0\"}"));
    assert!(body.contains("intswitch_worker_mac_sync_lost_total{worker=\"0\"} 0"), "{body}");
    assert!(http_get(&sw.metrics_addr(), "/other").starts_with("HTTP/1.1 404"));
    // Another method, a request that is not HTTP, HEAD: each its own status.
    let post = http_raw(&sw.metrics_addr(), b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
    assert!(post.starts_with("HTTP/1.1 405") && post.contains("Allow: GET, HEAD"), "{post}");
    assert!(http_raw(&sw.metrics_addr(), b"\x16\x03\x01 hello\r\n\r\n").starts_with("HTTP/1.1 400"));
    let head = http_raw(&sw.metrics_addr(), b"HEAD /metrics HTTP/1.1\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200") && head.ends_with("\r\n\r\n"), "a body after HEAD: {head}");
    let long = [b"GET /metrics HTTP/1.1\r\nX: ".as_slice(), &[b'a'; 20_000], b"\r\n\r\n"].concat();
    assert!(http_raw(&sw.metrics_addr(), &long).starts_with("HTTP/1.1 431"));
    let body = http_get(&sw.metrics_addr(), "/metrics");
    assert!(body.contains("intswitch_metrics_http_requests_total{result=\"not_found\"} 1"), "{body}");
    assert!(body.contains("intswitch_metrics_http_requests_total{result=\"bad_request\"} 2"), "{body}");
    assert!(body.contains("intswitch_metrics_http_requests_total{result=\"failed\"} 1"), "{body}");
    assert!(body.contains("intswitch_neighbour_resolution_total{result=\"no_mbuf\"} 0"), "{body}");
    // The typed view of the same: every resolution outcome is a number.
    let res = &intctl_json(&d, &["show", "counters"])["resolution"];
    for k in ["sent", "no_address", "no_mbuf", "queue_full", "gave_up"] {
        assert!(res[k].is_u64(), "{k}: {res}");
    }

    let out = sw.stop();
    assert!(out["ports"][1]["tx_packets"].as_u64().unwrap() > 0);
    assert!(!d.path("sw.sock").exists(), "socket removed at exit");
}

#[test]
fn hostile_clients_get_errors_and_forwarding_goes_on() {
    let d = Scratch::new("api-hostile");
    let mut sw = start_router(&d, "apihostile", 16);
    let sock = d.path("sw.sock").display().to_string();
    let pid = sw.pid();
    let fds = || std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
    let threads = || std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().count();
    // Warm up once so lazily opened descriptors exist before the baseline.
    Client::connect(&sock).unwrap().call("show_version", json!({})).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let (fd0, th0) = (fds(), threads());
    let rx0 = rx_packets(&d);

    let mut c = Client::connect(&sock).unwrap();
    c.send_raw(b"{not json\n").unwrap();
    let r: Value = serde_json::from_str(&c.read_line().unwrap()).unwrap();
    assert_eq!(r["error"]["code"], "bad_request");
    c.send_raw(b"[1,2]\n").unwrap();
    assert!(c.read_line().unwrap().contains("bad_request"));
    let e = c.call("frobnicate", json!({})).unwrap_err();
    assert_eq!((e.code.as_str(), e.argument.as_deref()), ("unknown_command", Some("cmd")));
    let e = c.call("route_add", json!({"prefix": "10.0.0.0/8", "port": "p1", "colour": 1})).unwrap_err();
    assert_eq!(e.argument.as_deref(), Some("colour"));
    c.send_raw(b"{\"version\":9,\"id\":1,\"cmd\":\"show_version\"}\n").unwrap();
    assert!(c.read_line().unwrap().contains("unsupported_version"));
    // The same connection still works after errors.
    assert!(c.call("show_version", json!({})).is_ok());

    // 10 MB request line: refused and closed.
    let mut big = UnixStream::connect(&sock).unwrap();
    big.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..10 {
        if big.write_all(&chunk).is_err() {
            break; // the switch may close before we finish sending
        }
    }
    let mut answer = String::new();
    let _ = big.read_to_string(&mut answer);
    assert!(answer.contains("too_large"), "{answer}");

    // A client that disconnects mid-request.
    let mut half = UnixStream::connect(&sock).unwrap();
    half.write_all(b"{\"version\":1,\"id\":1,\"cmd\":\"show_po").unwrap();
    drop(half);

    // 100 clients at once, each asking for counters.
    let handles: Vec<_> = (0..100)
        .map(|_| {
            let s = sock.clone();
            std::thread::spawn(move || Client::connect(&s).and_then(|mut c| c.call("show_counters", json!({}))).is_ok())
        })
        .collect();
    let ok = handles.into_iter().map(|h| h.join().unwrap()).filter(|x| *x).count();
    assert_eq!(ok, 100, "every concurrent client answered");
    drop(c);

    // Still forwarding, and every descriptor and thread of the clients is gone.
    assert!(rx_beyond(&d, rx0));
    assert!(sw.alive());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while (fds() > fd0 || threads() > th0) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(fds() <= fd0, "descriptors leaked: {} > {fd0}", fds());
    assert!(threads() <= th0, "threads leaked: {} > {th0}", threads());
    sw.stop();
}

/// The metrics endpoint serves one request at a time: a client that
/// trickles its request in is cut off after a few seconds, and a scrape
/// behind it is answered then, not when the trickle ends.
#[test]
fn slow_metrics_client_cannot_hold_up_the_scrape() {
    let d = Scratch::new("api-slowhttp");
    let sw = start_router(&d, "apislowhttp", 16);
    let addr = sw.metrics_addr();
    let mut slow = std::net::TcpStream::connect(&addr).unwrap();
    let trickle = std::thread::spawn(move || {
        // One byte every 400 ms for 20 s, never the blank line that ends a head.
        let started = std::time::Instant::now();
        for b in b"GET /metrics HTTP/1.1\r\nX: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter().take(50) {
            if slow.write_all(&[*b]).is_err() {
                return Some(started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(400));
        }
        None
    });
    std::thread::sleep(Duration::from_millis(300));
    let t = std::time::Instant::now();
    let body = http_get(&addr, "/metrics");
    let waited = t.elapsed();
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(waited < Duration::from_secs(10), "the scrape waited {waited:?} behind a trickling client");
    let cut = trickle.join().unwrap();
    assert!(cut.is_some_and(|c| c < Duration::from_secs(15)), "the trickling client was not cut off: {cut:?}");
    // The endpoint counted the client it cut off, and the scrape it served.
    let body = http_get(&addr, "/metrics");
    assert!(body.contains("intswitch_metrics_http_requests_total{result=\"failed\"} 1"), "{body}");
    assert!(body.contains("intswitch_metrics_http_requests_total{result=\"served\"} 1"), "{body}");
    sw.stop();
}

#[test]
fn second_switch_on_the_same_socket_fails_clearly() {
    let d = Scratch::new("api-dup");
    let sw = start_router(&d, "apidup", 4);
    let cfg = std::fs::read_to_string(d.path("c.toml"))
        .unwrap()
        .replace("apidup-", "apidup2-")
        .replace("net_pcap0", "net_pcap5");
    std::fs::write(d.path("c2.toml"), cfg).unwrap();
    let out = Command::new(intswitch_tests::intswitch_bin())
        .arg("--config")
        .arg(d.path("c2.toml"))
        .args(["--duration", "2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is in use by a running intswitch"), "{err}");
    // The first one is unharmed.
    assert!(rx_beyond(&d, 0));
    sw.stop();

    // A stale socket file (no switch behind it) is replaced.
    drop(std::os::unix::net::UnixListener::bind(d.path("sw.sock")).unwrap());
    assert!(d.path("sw.sock").exists());
    let sw = start_router(&d, "apidup3", 4);
    assert!(rx_beyond(&d, 0));
    sw.stop();
}

#[test]
fn updates_under_traffic_lose_no_packet() {
    let d = Scratch::new("api-churn");
    let sw = start_router(&d, "apichurn", 200);
    churn_loses_no_packet(&d, sw, 1);
}

/// The same with two workers, each polling an RX queue of p0 (net_pcap
/// replays the traffic on both), on one CPU (lcore 2 is mapped onto CPU 1):
/// every generation reaches both while both forward.
#[test]
fn updates_under_traffic_lose_no_packet_with_two_workers() {
    let d = Scratch::new("api-churn2");
    let cfg = router_config(
        &d,
        "apichurn2",
        200,
        "[[worker]]\nlcore = 1\nrx = [\"p0:0\", \"p1:0\"]\n[[worker]]\nlcore = 2\nrx = [\"p0:1\"]\n",
    );
    let pcap = d.path("in.pcap").display().to_string();
    let two_queues = format!("rx_pcap={pcap},rx_pcap={pcap},infinite_rx=1");
    let cfg = cfg.replacen(&format!("rx_pcap={pcap},infinite_rx=1"), &two_queues, 1).replacen(
        "[eal]\n",
        "[eal]\nlcores = \"0@0,1@1,2@1\"\n",
        1,
    );
    assert!(cfg.contains(&two_queues) && cfg.contains("2@1"), "{cfg}");
    std::fs::write(d.path("c.toml"), cfg).unwrap();
    let sw = SwitchProcess::start(&d.path("c.toml"), None);
    churn_loses_no_packet(&d, sw, 2);
}

fn churn_loses_no_packet(d: &Scratch, sw: SwitchProcess, workers: usize) {
    let mut c = Client::connect(&d.path("sw.sock").display().to_string()).unwrap();
    // 1,000 updates that keep every packet forwardable: the traffic's route
    // flips between two resolved gateways, and one of its flows is installed
    // (forward:p1) and removed again.
    let flow = json!({"in_port": "p0", "src": "10.0.1.10", "dst": "198.51.100.10", "proto": "udp",
                      "src_port": 1024, "dst_port": 5001});
    for i in 0..250 {
        let gw = if i % 2 == 0 { "10.0.2.253" } else { "10.0.2.254" };
        c.call("route_add", json!({"prefix": "198.51.100.0/24", "port": "p1", "via": gw})).unwrap();
        c.call("route_add", json!({"prefix": "192.0.2.0/24", "port": "p1", "via": gw})).unwrap();
        let mut add = flow.clone();
        add["action"] = "forward:p1".into();
        c.call("flow_add", add).unwrap();
        c.call("flow_del", flow.clone()).unwrap();
    }
    let shown = c.call("show_workers", json!({})).unwrap();
    assert_eq!(shown.as_array().map(Vec::len), Some(workers), "{shown}");
    for w in 0..workers {
        assert!(shown[w]["table_generation"].as_u64().unwrap() >= 500, "{shown}");
        assert!(shown[w]["rx_packets"].as_u64().unwrap() > 1000, "worker {w} forwarded during the updates: {shown}");
    }
    drop(c);
    let out = sw.stop();
    let rx = out["ports"][0]["rx_packets"].as_u64().unwrap();
    let tx = out["ports"][1]["tx_packets"].as_u64().unwrap();
    assert!(rx > 10_000, "traffic ran during the updates: {rx}");
    assert_eq!(out["total_drops"], 0, "{out}");
    assert_eq!(tx, rx, "every received packet left on p1");
    assert_eq!(out["ports"][1]["ethdev"]["opackets"].as_u64().unwrap(), tx);
}

#[test]
fn capture_writes_a_pcap_tshark_reads() {
    let d = Scratch::new("api-cap");
    let sw = start_router(&d, "apicap", 32);
    let sent = read_pcap(&d.path("in.pcap"));
    let (ok, out, err) =
        intctl(&d, &["capture", "p0", "--rx", "--count", "40", "--out", &d.path("rx.pcap").display().to_string()]);
    assert!(ok, "{err}");
    assert!(out.contains("captured 40 of 40"), "{out}");
    let (ok, _, err) =
        intctl(&d, &["capture", "p1", "--tx", "--count", "10", "--out", &d.path("tx.pcap").display().to_string()]);
    assert!(ok, "{err}");
    // Every received frame captured is one of the frames sent, byte for byte.
    let rx = read_pcap(&d.path("rx.pcap"));
    assert_eq!(rx.len(), 40);
    assert!(rx.iter().all(|f| sent.contains(f)));
    // Transmitted frames carry the rewrite (gateway MAC, TTL 63).
    let tx = read_pcap(&d.path("tx.pcap"));
    assert_eq!(tx.len(), 10);
    assert!(tx.iter().all(|f| f[0..6] == [2, 0, 0, 0, 2, 0xfe] && f[22] == 63));
    // tshark opens both and sees the UDP packets.
    for (f, n) in [("rx.pcap", 40), ("tx.pcap", 10)] {
        let out = Command::new("tshark")
            .args(["-r", &d.path(f).display().to_string(), "-T", "fields", "-e", "ip.src", "-e", "udp.dstport"])
            .output()
            .expect("tshark installed (scripts/setup.sh)");
        assert!(out.status.success(), "tshark: {}", String::from_utf8_lossy(&out.stderr));
        let lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
        assert_eq!(lines.len(), n, "{f}");
        assert!(lines.iter().all(|l| l == "10.0.1.10\t5001" || l.starts_with("10.0.1.")), "{lines:?}");
    }
    let out = sw.stop();
    assert_eq!(out["total_drops"], 0);
}

/// A capture that ends before its count (time up, or the switch stopping)
/// answers with what it wrote and why it ended, and its file holds exactly
/// those packets: none are lost with the stop.
#[test]
fn a_capture_cut_short_answers_with_what_its_file_holds() {
    let d = Scratch::new("api-cap-short");
    let sw = start_router(&d, "apicapshort", 32);
    let sent = read_pcap(&d.path("in.pcap"));
    // p1 receives nothing: the time runs out with nothing written.
    let idle = d.path("idle.pcap").display().to_string();
    let out = intctl_json(&d, &["capture", "p1", "--rx", "--count", "5", "--timeout", "0.5", "--out", &idle]);
    assert_eq!((out["packets"].as_u64(), out["complete"].as_bool()), (Some(0), Some(false)), "{out}");
    assert_eq!((out["ended"].as_str(), out["missed"].as_u64()), (Some("timeout"), Some(0)), "{out}");
    assert!(read_pcap(&d.path("idle.pcap")).is_empty());
    // More than the traffic gives before the switch stops.
    let file = d.path("cut.pcap");
    let (sock, path) = (d.path("sw.sock"), file.display().to_string());
    let capture = std::thread::spawn(move || {
        Command::new(intctl_bin())
            .arg("--socket")
            .arg(sock)
            .args(["capture", "p0", "--rx", "--count", "10000000", "--timeout", "120", "--out", &path])
            .output()
            .unwrap()
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::fs::metadata(&file).map_or(0, |m| m.len()) < 24 + 100 * 76 {
        assert!(std::time::Instant::now() < deadline, "no 100 packets captured in 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    sw.stop();
    let out = capture.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
    let written = read_pcap(&file);
    assert!(written.len() >= 100, "{}", written.len());
    assert!(written.iter().all(|f| sent.contains(f)));
    assert!(
        text.starts_with(&format!("captured {} of 10000000 rx packets on p0", written.len()))
            && text.contains("(ended: stopped)"),
        "{text}"
    );
}

/// One valid request per command (capture aside: it waits for packets and
/// writes files) for a router with INT and AM-PM.
fn valid_requests() -> Vec<(&'static str, Value)> {
    let key = json!({"in_port": "p0", "src": "10.0.1.10", "dst": "198.51.100.10", "proto": "udp",
                     "src_port": 1024, "dst_port": 5001});
    let mut flow_add = key.clone();
    flow_add["action"] = json!("drop");
    vec![
        ("show_version", json!({})),
        ("show_config", json!({})),
        ("show_ports", json!({})),
        ("show_workers", json!({})),
        ("show_counters", json!({})),
        ("show_drops", json!({})),
        ("show_routes", json!({})),
        ("show_neighbours", json!({})),
        ("show_flows", json!({"max": 10})),
        ("show_macs", json!({"max": 10})),
        ("flow_add", flow_add),
        ("flow_del", key),
        ("route_add", json!({"prefix": "203.0.113.0/24", "port": "p1", "via": "10.0.2.253"})),
        ("route_del", json!({"prefix": "203.0.113.0/24"})),
        ("neighbour_add", json!({"ip": "10.0.2.9", "mac": "02:00:00:00:02:09", "port": "p1"})),
        ("neighbour_del", json!({"ip": "10.0.2.9"})),
        ("port_disable", json!({"port": "p1"})),
        ("port_enable", json!({"port": "p1"})),
        ("port_impair", json!({"port": "p1", "netem": "delay 1ms 100us loss 1% rate 100mbit limit 100"})),
        ("clear_counters", json!({})),
        ("metrics", json!({})),
        ("show_int", json!({})),
        ("show_reports", json!({})),
        (
            "int_watch_add",
            json!({"name": "w", "role": "source", "priority": 5, "src": "10.0.1.0/24", "proto": "udp",
                   "dst_port": "5000/0xff00", "dscp": 0, "in_port": "p0",
                   "instructions": ["node_id", "l1_ports", "hop_latency"], "max_hops": 8, "domain_id": 0}),
        ),
        ("int_watch_del", json!({"name": "w"})),
        ("int_export", json!({"paused": true})),
        ("show_ampm", json!({})),
        (
            "ampm_add",
            json!({"name": "a", "flow_mon_id": 7, "role": "initiator", "method": "muxed", "carrier": "dscp",
                   "l_bit": 0, "d_bit": 1, "priority": 0, "src": "10.0.1.0/24", "proto": "udp",
                   "dst_port": 5001}),
        ),
        ("ampm_del", json!({"name": "a"})),
        ("rule_show", json!({"table": "muxed-initiator"})),
        (
            "rule_add",
            json!({"table": "muxed-initiator", "name": "r", "priority": 5, "time": "01*", "mark": "*1",
                   "reg": "*", "set_l": true, "color": 1, "count": true, "timestamp": false}),
        ),
        ("rule_del", json!({"table": "muxed-initiator", "name": "r"})),
    ]
}

/// Values of the wrong type, at the edges of their type, or malformed.
fn odd_value(rng: &mut dataplane::rand::XorShift) -> Value {
    let pool = [
        Value::Null,
        json!(true),
        json!(-1),
        json!(0),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(1e300),
        json!(0.5),
        json!(""),
        json!("x".repeat(5000)),
        json!("\u{1f4a5}\u{0}"),
        json!([]),
        json!({}),
        json!([1, "a", null]),
        json!("10.0.0.0/33"),
        json!("::/0"),
        json!("0.0.0.0/0"),
        json!("255.255.255.255"),
        json!("ff:ff:ff:ff:ff:ff"),
        json!("p9"),
        json!("*"),
        json!("1e999"),
        json!("65536"),
        json!("0x1ffff/0xffff"),
        json!("delay 1e300s"),
        json!("rate 0.1bit"),
        json!("loss nan%"),
        json!("limit 99999999999999999999"),
        json!("0101010101010101010101010101010101010101010101010101010101010101010101"),
        json!("**1"),
        json!(["node_id", "node_id", "bogus"]),
        json!(4294967296u64),
        json!(256),
    ];
    pool[rng.below(pool.len())].clone()
}

/// A string with one character replaced, inserted or removed.
fn edit_string(rng: &mut dataplane::rand::XorShift, s: &str) -> String {
    let mut c: Vec<char> = s.chars().collect();
    let alphabet = ['0', '9', '.', '/', ':', '*', '-', 'x', 'f', ' ', '%', '\u{e9}'];
    let at = rng.below(c.len() + 1);
    let ch = alphabet[rng.below(alphabet.len())];
    match rng.below(3) {
        0 if at < c.len() => c[at] = ch,
        1 => c.insert(at, ch),
        _ if at < c.len() => {
            c.remove(at);
        }
        _ => c.push(ch),
    }
    c.into_iter().collect()
}

fn mutate(rng: &mut dataplane::rand::XorShift, args: &mut Value) {
    let Some(m) = args.as_object_mut() else { return };
    let keys: Vec<String> = m.keys().cloned().collect();
    let pick = |rng: &mut dataplane::rand::XorShift| keys.get(rng.below(keys.len())).cloned();
    for _ in 0..1 + rng.below(3) {
        match rng.below(5) {
            0 => {
                if let Some(k) = pick(rng) {
                    m.insert(k, odd_value(rng));
                }
            }
            1 => {
                if let Some(k) = pick(rng) {
                    m.remove(&k);
                }
            }
            2 => {
                m.insert(["colour", "", "max_hops ", "\u{0}"][rng.below(4)].to_string(), odd_value(rng));
            }
            3 => {
                if let Some(k) = pick(rng) {
                    if let Some(Value::String(s)) = m.get(&k) {
                        let e = edit_string(rng, s);
                        m.insert(k, json!(e));
                    }
                }
            }
            _ => {
                // A number as a string, or a string as a number.
                if let Some(k) = pick(rng) {
                    let v = match m.get(&k) {
                        Some(Value::Number(n)) => json!(n.to_string()),
                        Some(Value::String(s)) => json!(s.len()),
                        _ => continue,
                    };
                    m.insert(k, v);
                }
            }
        }
    }
}

/// Every command with mutated arguments (wrong types, edge values, edited
/// strings, missing and unknown keys; now and then a misspelt command or
/// arguments that are not an object): each request gets exactly one answer,
/// its result or an error with a code and a message, on the same
/// connection; the switch stays up and forwarding.
#[test]
fn mutated_requests_get_an_answer_and_forwarding_goes_on() {
    let d = Scratch::new("api-mutate");
    // Reports and AM-PM records go to a socket of this test's.
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = sink.local_addr().unwrap();
    let extra = format!(
        r#"{int}[[int.collector]]
address = "{to}"
[ampm]
node_id = 3
interval = "1s"
max_flows = 64
[[ampm.flow]]
name = "f"
flow_mon_id = 1
role = "initiator"
method = "muxed"
carrier = "dscp"
proto = "udp"
[[ampm.collector]]
address = "{to}"
"#,
        int = int_source_section(3, "p0", &["node_id", "hop_latency"])
    );
    let mut sw = start_router_with(&d, "apimut", 16, &extra);
    let sock = d.path("sw.sock");
    let mut conn = UnixStream::connect(&sock).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut reader = std::io::BufReader::new(conn.try_clone().unwrap());
    let rx0 = rx_packets(&d);

    let valid = valid_requests();
    let mut rng = dataplane::rand::XorShift::new(0xa91);
    let (mut ok, mut refused) = (0u32, std::collections::BTreeMap::<String, u32>::new());
    for id in 1..=4000u64 {
        let (cmd, mut args) = valid[rng.below(valid.len())].clone();
        mutate(&mut rng, &mut args);
        // Now and then the whole args is not an object, or the command is misspelt.
        let (cmd, args) = match rng.below(40) {
            0 => (cmd.to_string(), odd_value(&mut rng)),
            1 => (edit_string(&mut rng, cmd), args),
            _ => (cmd.to_string(), args),
        };
        let req = json!({"version": 1, "id": id, "cmd": cmd, "args": args});
        writeln!(conn, "{req}").unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut reader, &mut line).unwrap_or_else(|e| panic!("{req}: no answer: {e}"));
        let r: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{req}: answer {line:?}: {e}"));
        assert_eq!((r["version"].as_u64(), r["id"].as_u64()), (Some(1), Some(id)), "{req}: {r}");
        match r["ok"].as_bool() {
            Some(true) => ok += 1,
            Some(false) => {
                let (code, msg) = (r["error"]["code"].as_str(), r["error"]["message"].as_str());
                assert!(code.is_some_and(|c| !c.is_empty()) && msg.is_some_and(|m| !m.is_empty()), "{req}: {r}");
                *refused.entry(code.unwrap().to_string()).or_default() += 1;
            }
            None => panic!("{req}: {r}"),
        }
    }
    // Both outcomes occur: the mutations reach past argument parsing.
    assert!(ok > 400, "{ok} accepted, refused: {refused:?}");
    assert!(refused.values().sum::<u32>() > 1000, "{ok} accepted, refused: {refused:?}");
    assert!(refused.contains_key("bad_argument"), "{refused:?}");

    // Undo what the accepted ones may have set, then the switch forwards on
    // and every view still answers.
    let mut c = Client::connect(sock.to_str().unwrap()).unwrap();
    for p in ["p0", "p1"] {
        c.call("port_enable", json!({"port": p})).unwrap();
        c.call("port_impair", json!({"port": p, "netem": "none"})).unwrap();
    }
    assert!(sw.alive());
    assert!(rx_beyond(&d, rx0));
    for (cmd, args) in valid.iter().filter(|(c, _)| c.starts_with("show") || *c == "metrics") {
        c.call(cmd, args.clone()).unwrap_or_else(|e| panic!("{cmd}: {e:?}"));
    }
    let out = sw.stop();
    assert!(out["ports"][1]["tx_packets"].as_u64().unwrap() > 0, "{out}");
}
