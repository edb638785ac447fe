//! Helpers for the end-to-end tests: find the `intswitch` binary, run it on
//! a config (to completion or in the background), read and write pcaps,
//! build network namespaces and always tear them down.

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
    assert!(p.exists(), "{} not built: run `cargo build --release --bins` (scripts/test.sh does)", p.display());
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
