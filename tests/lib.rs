//! Helpers for the end-to-end tests: find the `intswitch` binary, run it on
//! a config (to completion or in the background), read and write pcaps,
//! build network namespaces and always tear them down.

pub mod fuzz_targets;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A binary of this workspace: `target/<profile>/NAME`, next to the test
/// binary's `deps/`.
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test exe path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target/<profile>");
    let p = dir.join(name);
    assert!(p.exists(), "{} not built: run `cargo build --profile ci --bins` (scripts/test.sh does)", p.display());
    p
}

pub fn intswitch_bin() -> PathBuf {
    workspace_bin("intswitch")
}

pub fn intctl_bin() -> PathBuf {
    workspace_bin("intctl")
}

/// A `[control]` section with the socket in `dir` and metrics on an
/// ephemeral port, so tests never collide on paths or ports.
pub fn control_section(dir: &Scratch) -> String {
    format!("[control]\nsocket = \"{}\"\nmetrics = \"127.0.0.1:0\"\n", dir.path("sw.sock").display())
}

/// A scratch directory removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("intswitch-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
    pub fn path(&self, f: &str) -> PathBuf {
        self.0.join(f)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut w = dataplane::pcap::PcapWriter::new(std::fs::File::create(path).unwrap(), 65535).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write(i as u64 * 1000, f).unwrap();
    }
}

pub fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    dataplane::pcap::read_all(f).unwrap().into_iter().map(|(_, b)| b).collect()
}

/// The independent decoder (tests/int_decode.py) on a pcap: one JSON value
/// per frame (`mode` pcap or reports; `extra` e.g. `--int-dscp 0x17`).
pub fn int_decode(mode: &str, pcap: &Path, extra: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new("python3")
        .arg(repo_root().join("tests/int_decode.py"))
        .arg(mode)
        .arg(pcap)
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "int_decode.py {mode}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// A background intswitch; SIGTERM and final counters on `stop`.
pub struct SwitchProcess {
    /// What the switch printed on stderr before it was running.
    pub startup: Vec<String>,
    child: Option<Child>,
    stdout: mpsc::Receiver<String>,
    stderr_log: mpsc::Receiver<String>,
}

impl SwitchProcess {
    /// Starts `intswitch --config FILE` (optionally inside a netns) and waits
    /// until it says it is running.
    pub fn start(config: &Path, netns: Option<&str>) -> SwitchProcess {
        let bin = intswitch_bin();
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&bin);
                c
            }
            None => Command::new(&bin),
        };
        cmd.arg("--config").arg(config).args(["--json", "--stats-interval", "0", "--duration", "600"]);
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn intswitch");
        let (otx, orx) = mpsc::channel();
        let (etx, erx) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = otx.send(l);
            }
        });
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = etx.send(l);
            }
        });
        let mut p = SwitchProcess { startup: Vec::new(), child: Some(child), stdout: orx, stderr_log: erx };
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = Vec::new();
        loop {
            match p.stderr_log.recv_timeout(Duration::from_millis(200)) {
                Ok(l) => {
                    if l.contains("intswitch: running") {
                        p.startup = seen;
                        return p;
                    }
                    seen.push(l);
                }
                Err(_) => {
                    if let Some(st) = p.child.as_mut().unwrap().try_wait().unwrap() {
                        panic!("intswitch exited ({st}) before running:\n{}", seen.join("\n"));
                    }
                    if Instant::now() > deadline {
                        panic!("intswitch did not start in 30 s:\n{}", seen.join("\n"));
                    }
                }
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// The metrics address the switch announced at startup.
    pub fn metrics_addr(&self) -> String {
        self.startup
            .iter()
            .find_map(|l| l.strip_prefix("intswitch: metrics http://").and_then(|r| r.strip_suffix("/metrics")))
            .expect("metrics address in the startup log")
            .to_string()
    }

    /// True while the process has not exited.
    pub fn alive(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// SIGTERM, wait (bounded), and return the final counters.
    pub fn stop(mut self) -> serde_json::Value {
        let mut child = self.child.take().unwrap();
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("intswitch did not stop within 20 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut last = None;
        while let Ok(l) = self.stdout.recv_timeout(Duration::from_millis(500)) {
            if l.starts_with('{') {
                last = Some(l);
            }
        }
        let errs: Vec<String> = self.stderr_log.try_iter().collect();
        let l = last.unwrap_or_else(|| panic!("no final counters; stderr:\n{}", errs.join("\n")));
        serde_json::from_str(&l).expect("final counters are JSON")
    }
}

impl Drop for SwitchProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A switch replaying `pcap` forever from p0 (net_pcap, MAC `p0_mac`) into
/// p1 (net_null), idle mode and flow learning on. `p0` and `p1` add lines
/// to the ports, `extra` sections after them.
#[allow(clippy::too_many_arguments)]
pub fn replay_config(
    d: &Scratch,
    name: &str,
    mode: &str,
    pcap: &Path,
    p0_mac: &str,
    p0: &str,
    p1: &str,
    extra: &str,
) -> String {
    format!(
        r#"name = "{name}"
mode = "{mode}"
[eal]
file_prefix = "{name}-{pid}"
[dataplane]
idle = true
mbufs = 8191
{control}
[flow_table]
learn = true
hash_seed = 1
[[port]]
name = "p0"
device = "net_pcap0,rx_pcap={pcap},infinite_rx=1"
mac = "{p0_mac}"
{p0}
[[port]]
name = "p1"
device = "net_null0,no-rx=1"
{p1}
{extra}
"#,
        pid = std::process::id(),
        control = control_section(d),
        pcap = pcap.display()
    )
}

/// A router for [`replay_config`]: p0 10.0.1.1/24, p1 10.0.2.1/24, `prefix`
/// via 10.0.2.254, and two resolved gateways on p1 (.254 and .253).
pub fn replay_router_config(d: &Scratch, name: &str, pcap: &Path, p0_mac: &str, prefix: &str, extra: &str) -> String {
    let neighbour = |ip: &str, mac: &str| format!("[[neighbour]]\nip = \"{ip}\"\nmac = \"{mac}\"\nport = \"p1\"\n");
    let routes = format!(
        "[[route]]\nprefix = \"{prefix}\"\nport = \"p1\"\nvia = \"10.0.2.254\"\n{}{}{extra}",
        neighbour("10.0.2.254", "02:00:00:00:02:fe"),
        neighbour("10.0.2.253", "02:00:00:00:02:fd"),
    );
    replay_config(d, name, "router", pcap, p0_mac, "ipv4 = [\"10.0.1.1/24\"]", "ipv4 = [\"10.0.2.1/24\"]", &routes)
}

/// An `[int]` section with one watch rule that sources all UDP entering
/// by `edge` with these instructions.
pub fn int_source_section(node_id: u32, edge: &str, instructions: &[&str]) -> String {
    format!(
        "[int]\nnode_id = {node_id}\nedge_ports = [\"{edge}\"]\n[[int.watch]]\nname = \"udp\"\nrole = \"source\"\n\
proto = \"udp\"\ninstructions = {instructions:?}\n"
    )
}

/// Runs intswitch on `config` for `secs` and returns its final counters.
pub fn run_for(config: &Path, secs: f64) -> serde_json::Value {
    let out = Command::new(intswitch_bin())
        .arg("--config")
        .arg(config)
        .args(["--json", "--stats-interval", "0", "--duration", &secs.to_string()])
        .output()
        .expect("run intswitch");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "intswitch failed: {}\n{}", String::from_utf8_lossy(&out.stderr), stdout);
    let line = stdout.lines().rev().find(|l| l.starts_with('{')).expect("final counters line");
    serde_json::from_str(line).unwrap()
}

/// Runs a command; panics with its output if it fails.
pub fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command inside a namespace; returns (success, stdout+stderr).
pub fn ns_try(ns: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new("ip").args(["netns", "exec", ns]).args(args).output().expect("ip netns exec");
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), s)
}

pub fn ns(ns: &str, args: &[&str]) -> String {
    let (ok, s) = ns_try(ns, args);
    assert!(ok, "in {ns}: {args:?} failed: {s}");
    s
}

/// Network namespaces deleted (with their veths) on drop, even on panic.
pub struct Namespaces(pub Vec<String>);

impl Namespaces {
    pub fn create(names: &[&str]) -> Namespaces {
        let g = Namespaces(names.iter().map(|s| s.to_string()).collect());
        for n in names {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
            sh(&["ip", "netns", "add", n]);
            ns(n, &["ip", "link", "set", "lo", "up"]);
        }
        g
    }

    /// A veth pair between two namespaces, up, with offloads off so frames
    /// that cross the af_packet switch carry complete checksums.
    pub fn veth(&self, a_ns: &str, a: &str, b_ns: &str, b: &str) {
        sh(&["ip", "link", "add", a, "netns", a_ns, "type", "veth", "peer", "name", b, "netns", b_ns]);
        for (n, i) in [(a_ns, a), (b_ns, b)] {
            ns(n, &["ip", "link", "set", i, "up"]);
            let _ =
                ns_try(n, &["ethtool", "-K", i, "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"]);
        }
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

/// One's-complement checksum written here, independent of the switch's code.
pub fn inet_checksum(data: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in data.chunks(2) {
        s += (c[0] as u32) << 8 | *c.get(1).unwrap_or(&0) as u32;
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

pub const TRANSFER_BYTES: usize = 4 * 1024 * 1024;

/// Sends `bytes` from h1 to `dst` on h2 over TCP; checks the SHA-256
/// on both ends with Python's own TCP stack.
pub fn tcp_transfer(h1: &str, h2: &str, dst: &str, bytes: usize) {
    let server = format!(
        "import socket,hashlib\ns=socket.socket(socket.AF_INET6 if ':' in '{dst}' else socket.AF_INET)\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('{dst}',5201))\ns.listen(1)\ns.settimeout(60)\nc,_=s.accept()\nc.settimeout(60)\nh=hashlib.sha256()\nn=0\nwhile True:\n  b=c.recv(65536)\n  if not b: break\n  h.update(b); n+=len(b)\nprint(n,h.hexdigest())\n"
    );
    let client = format!(
        "import socket,hashlib,time,os\ndata=bytes((i*7)%251 for i in range({bytes}))\nfor i in range(50):\n  try:\n    c=socket.create_connection(('{dst}',5201),timeout=5); break\n  except OSError: time.sleep(0.2)\nc.settimeout(60)\nc.sendall(data)\nc.close()\nprint({bytes},hashlib.sha256(data).hexdigest())\n"
    );
    let h2n = h2.to_string();
    let srv = std::thread::spawn(move || ns_try(&h2n, &["timeout", "90", "python3", "-c", &server]));
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (ok, sent) = ns_try(h1, &["timeout", "90", "python3", "-c", &client]);
    let (sok, got) = srv.join().unwrap();
    assert!(ok && sok, "client: {sent}\nserver: {got}");
    assert_eq!(sent.trim(), got.trim(), "received bytes differ from sent");
}

/// `h1` sends `count` numbered UDP datagrams with IP TOS / traffic class
/// `tos` to `dst:port` in `h2`, which checks every byte of each one and the
/// TOS it arrived with.
pub fn udp_exchange(h1: &str, h2: &str, dst: &str, port: u16, count: usize, tos: u8) {
    let (fam, level, recv_opt, send_opt) =
        if dst.contains(':') { ("AF_INET6", 41, 66, 67) } else { ("AF_INET", 0, 13, 1) };
    let server = format!(
        "import socket\ns=socket.socket(socket.{fam},socket.SOCK_DGRAM)\ns.setsockopt({level},{recv_opt},1)\n\
s.bind(('{dst}',{port}))\ns.settimeout(10)\ngot=set()\nwhile len(got)<{count}:\n  \
try:\n    b,anc,_,_=s.recvmsg(4096,64)\n  \
except TimeoutError:\n    raise SystemExit('10 s without a datagram; missing %s' % sorted(set(range({count}))-got)[:20])\n  \
i=int(b[:6])\n  assert b==b'%06d'%i+bytes((i+k)%251 for k in range(100+i)), 'corrupt datagram %d'%i\n  \
tos=[d[0] if len(d)==1 else int.from_bytes(d,'little') for (l,t,d) in anc]\n  \
assert tos==[{tos}], 'datagram %d arrived with TOS %s' % (i,tos)\n  got.add(i)\nprint(len(got))\n"
    );
    let client = format!(
        "import socket,time\ns=socket.socket(socket.{fam},socket.SOCK_DGRAM)\ns.setsockopt({level},{send_opt},{tos})\n\
for i in range({count}):\n  s.sendto(b'%06d'%i+bytes((i+k)%251 for k in range(100+i)),('{dst}',{port}))\n  \
time.sleep(0.003)\n"
    );
    let h2n = h2.to_string();
    let srv = std::thread::spawn(move || ns_try(&h2n, &["timeout", "30", "python3", "-c", &server]));
    wait_udp_bound(h2, port);
    ns(h1, &["python3", "-c", &client]);
    let (ok, out) = srv.join().unwrap();
    assert!(ok && out.trim() == count.to_string(), "UDP to {dst}:{port}: {out}");
}

/// Waits (up to 10 s) until a UDP socket in namespace `ns` is bound to
/// `port`: a datagram sent before its receiver exists is lost, and on a
/// loaded host Python can take longer to start than any fixed pause.
fn wait_udp_bound(ns: &str, port: u16) {
    let local = format!(":{port}");
    for _ in 0..200 {
        // `ss -Hlun`: state, queues, local address:port, peer (`*`).
        let (_, out) = ns_try(ns, &["ss", "-Hlun"]);
        if out.lines().any(|l| l.split_whitespace().nth(3).is_some_and(|a| a.ends_with(&local))) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("no UDP socket bound to port {port} in {ns} after 10 s");
}

/// The report lines of an intcollector `--json` log (not the summary),
/// each checked to carry no decode error; waits (up to 10 s) until `want`
/// of them are there, since the last reports and the collector's output
/// may still be on their way.
pub fn collector_reports(log: &Path, want: u64) -> Vec<serde_json::Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let mut out = Vec::new();
        for line in text.lines().filter(|l| l.starts_with('{')) {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            if v.get("summary").is_none() {
                assert!(v.get("error").is_none(), "{line}");
                out.push(v);
            }
        }
        if out.len() as u64 >= want || std::time::Instant::now() >= deadline {
            return out;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// A decoded report's inner flow: (destination, protocol, destination port).
pub fn report_flow(v: &serde_json::Value) -> (String, u64, u64) {
    let f = &v["flow"];
    (f["dst"].as_str().unwrap().to_string(), f["proto"].as_u64().unwrap(), f["dst_port"].as_u64().unwrap())
}

/// The four flows the chain3 tests send from h1 to h2 (UDP and TCP, v4 and v6).
pub const CHAIN3_FLOWS: [(&str, u64, u64); 4] =
    [("10.31.2.2", 17, 5001), ("2001:db8:31:2::2", 17, 5002), ("10.31.2.2", 6, 5201), ("2001:db8:31:2::2", 6, 5201)];

pub fn ping(from: &str, to: &str) {
    // Reachable first (address resolution along the path), then three that must all come back.
    wait_reachable(from, to);
    ns(from, &["ping", "-c", "3", "-i", "0.2", "-W", "2", to]);
}

/// How long `wait_reachable` gives a path to answer.
const REACHABLE_WITHIN: Duration = Duration::from_secs(20);

/// One-echo pings from `from` until `to` answers, for at most
/// `REACHABLE_WITHIN`: on a loaded CI machine the first echoes of a fresh
/// multi-switch testbed can all be lost while every hop resolves its next
/// one. A ping that fails at once (no route yet) is retried after a pause,
/// not in a tight loop of processes.
pub fn wait_reachable(from: &str, to: &str) {
    let deadline = Instant::now() + REACHABLE_WITHIN;
    let mut last = String::new();
    while Instant::now() < deadline {
        let (ok, out) = ns_try(from, &["ping", "-c", "1", "-W", "1", to]);
        if ok {
            return;
        }
        last = out;
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("in {from}: {to} did not answer a ping within {REACHABLE_WITHIN:?}: {last}");
}

/// A testbed brought up by `scripts/testbed.sh` (the same code path users
/// run), torn down on drop even when the test fails.
pub struct Testbed {
    pub file: PathBuf,
    pub name: String,
    state: PathBuf,
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repo root").to_path_buf()
}

impl Testbed {
    fn script(state: &Path, args: &[&str]) -> std::process::Output {
        let bin_dir = intswitch_bin().parent().expect("bin dir").to_path_buf();
        Command::new(repo_root().join("scripts/testbed.sh"))
            .args(args)
            .env("INTSWITCH_BIN_DIR", bin_dir)
            .env("INTSWITCH_TESTBED_DIR", state)
            .output()
            .expect("run scripts/testbed.sh")
    }

    /// `testbed.sh up FILE`; Err carries its output when `up` fails (the
    /// testbed is then still torn down by `down`).
    pub fn try_up(file: &Path) -> Result<Testbed, (Testbed, String)> {
        let name = std::fs::read_to_string(file)
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("name = \"").and_then(|r| r.strip_suffix('"')).map(str::to_string))
            .expect("topology name");
        let state = std::env::temp_dir().join(format!("intswitch-testbed-{}-{name}", std::process::id()));
        let tb = Testbed { file: file.to_path_buf(), name, state };
        let out = Self::script(&tb.state, &["up", &file.display().to_string()]);
        if out.status.success() {
            Ok(tb)
        } else {
            let msg = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            Err((tb, msg))
        }
    }

    pub fn up(file: &Path) -> Testbed {
        Self::try_up(file).unwrap_or_else(|(_, e)| panic!("testbed up {}: {e}", file.display()))
    }

    /// A shipped topology from configs/testbed/.
    pub fn shipped(name: &str) -> PathBuf {
        repo_root().join("configs/testbed").join(format!("{name}.toml"))
    }

    /// The namespace of a host or switch.
    pub fn ns(&self, node: &str) -> String {
        format!("tb-{}-{node}", self.name)
    }

    /// Output of a node's process (switch or collector).
    pub fn log(&self, node: &str) -> PathBuf {
        self.state.join(&self.name).join(format!("{node}.log"))
    }

    pub fn socket(&self, switch: &str) -> PathBuf {
        self.state.join(&self.name).join(format!("{switch}.sock"))
    }

    /// `intctl --json ARGS` against one of the switches.
    pub fn intctl(&self, switch: &str, args: &[&str]) -> serde_json::Value {
        let out = Command::new(intctl_bin())
            .arg("--socket")
            .arg(self.socket(switch))
            .arg("--json")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "intctl {args:?} on {switch}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Where a sink's reports went, for assertion messages: the switch's
    /// `show reports` and the kernel's UDP counters in its namespace (a
    /// collector that fell behind shows as RcvbufErrors there).
    pub fn report_path(&self, switch: &str) -> String {
        let snmp = ns_try(&self.ns(switch), &["cat", "/proc/net/snmp"]).1;
        let udp: Vec<&str> = snmp.lines().filter(|l| l.starts_with("Udp:")).collect();
        format!(
            "{switch} show reports: {}\n{switch} kernel: {}",
            self.intctl(switch, &["show", "reports"]),
            udp.join(" / ")
        )
    }

    /// Runs a `testbed.sh` command against this testbed's state.
    pub fn run(&self, args: &[&str]) -> (bool, String) {
        let out = Self::script(&self.state, args);
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    }

    pub fn down(&self) -> (bool, String) {
        self.run(&["down", &self.file.display().to_string()])
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let _ = self.down();
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// A child process killed (by PID) and reaped when dropped, also when a
/// test fails half way.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
