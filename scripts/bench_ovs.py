#!/usr/bin/env python3
"""OVS-DPDK as a peer in scripts/bench.sh (not a test).

Debian's openvswitch-switch-dpdk (OVS 3.1 on DPDK 22.11), run from a
private directory (no systemd, no system database): one PMD thread on
core 1, the main thread on core 0, the bench case's own vdevs (net_pcap in,
net_null out) read from the case's intswitch config, so that OVS sees the
same ports and the same trace as the switch and testpmd.

  start --dir D --config CASE.toml   start ovsdb-server and ovs-vswitchd,
      --kinds K1,K2                  build br0, load the static FDB and
                                     each kind's flows (a table each), then
                                     stop (SIGSTOP) until `run`
  run --dir D --kind K --seconds S   continue, point table 0 at kind K's
      [--stats FILE]                 table, measure p0's receive rate, write
                                     pmd-stats-show to FILE, stop again;
                                     prints "<mpps> <tx_share>"
  stop --dir D                       end both daemons (by PID)

Kinds: `normal` (the NORMAL action, learning, with the config's static
MACs as static FDB entries), `dl-dst` (an OpenFlow rule per static MAC
and VLAN, FLOOD for the rest), `routes` (an OpenFlow rule per route:
nw_dst / ipv6_dst prefix -> mod_dl_src, mod_dl_dst to the neighbour's MAC,
dec_ttl, output), `xconnect` (in_port -> the peer port).

The figure is the frames OVS took from p0 a second: the replay never runs
dry, so that is the rate OVS switches at. tx_share is the frames it sent
on the other ports over those it took (1.00 for a unicast case; above 1
where it floods; below 1 where it drops).
"""

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib

VSWITCHD = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk"
KINDS = ["normal", "dl-dst", "routes", "xconnect"]
SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"


def fail(msg):
    sys.exit(f"bench_ovs.py: {msg}")


def env(d):
    return dict(os.environ, OVS_RUNDIR=d, OVS_LOGDIR=d, OVS_DBDIR=d)


def sh(d, *cmd, timeout=60):
    r = subprocess.run(cmd, env=env(d), capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        fail(f"{' '.join(cmd[:4])}...: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


def vsctl(d, *args):
    return sh(d, "ovs-vsctl", f"--db=unix:{d}/db.sock", "--timeout=30", *args)


def pid(d, name):
    with open(f"{d}/{name}.pid") as f:
        return int(f.read().strip())


def ctl_path(d):
    return f"{d}/ovs-vswitchd-dpdk.{pid(d, 'ovs-vswitchd')}.ctl"


def appctl(d, *args):
    return sh(d, "ovs-appctl", "-t", ctl_path(d), *args)


def unixctl_batch(d, requests):
    """Many unixctl commands over one connection (JSON-RPC 1.0): one
    ovs-appctl process each would take 10 ms a request."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(ctl_path(d))
    dec, buf = json.JSONDecoder(), ""
    for start in range(0, len(requests), 64):
        chunk = requests[start:start + 64]
        s.sendall("".join(json.dumps({"method": m, "params": p, "id": start + i})
                          for i, (m, p) in enumerate(chunk)).encode())
        got = 0
        while got < len(chunk):
            data = s.recv(65536)
            if not data:
                fail("ovs-vswitchd closed its control socket")
            buf += data.decode()
            while buf:
                buf = buf.lstrip()
                try:
                    msg, end = dec.raw_decode(buf)
                except ValueError:
                    break
                buf = buf[end:]
                got += 1
                if msg.get("error"):
                    fail(f"unixctl {chunk[0][0]}: {msg['error']}")
    s.close()


def ports(cfg):
    """(name, vdev devargs, driver instance name) of the config's ports, in order."""
    out = []
    for p in cfg.get("port", []):
        dev = p["device"]
        out.append((p["name"], dev, dev.split(",", 1)[0]))
    return out


def table(kind):
    return KINDS.index(kind) + 1


def port_mac(i):
    return "02:00:00:00:be:%02x" % i


def flows(cfg, kind):
    names = [p[0] for p in ports(cfg)]
    if kind == "normal":
        return ["priority=0,actions=NORMAL"]
    if kind == "dl-dst":
        out = []
        for e in cfg.get("bridge", {}).get("static_mac", []):
            vlan = e.get("vlan")
            match = f"dl_vlan={vlan}," if vlan else "vlan_tci=0x0000/0x1fff,"
            out.append(f"priority=10,{match}dl_dst={e['mac']},actions=output:{e['port']}")
        out.append("priority=0,actions=FLOOD")
        return out
    if kind == "routes":
        nbr = {n["ip"]: n for n in cfg.get("neighbour", [])}
        out = []
        for r in cfg.get("route", []):
            n = nbr.get(r.get("via", ""))
            if n is None:
                fail(f"route {r['prefix']}: no neighbour {r.get('via')} (routes need a gateway here)")
            net, plen = r["prefix"].split("/")
            field = "ipv6,ipv6_dst" if ":" in net else "ip,nw_dst"
            out.append(f"priority={int(plen) + 100},{field}={r['prefix']},actions="
                       f"mod_dl_src:{port_mac(names.index(r['port']))},mod_dl_dst:{n['mac']},"
                       f"dec_ttl,output:{r['port']}")
        out.append("priority=0,actions=drop")
        return out
    if kind == "xconnect":
        out = []
        for p in cfg.get("port", []):
            if p.get("peer"):
                out.append(f"priority=10,in_port={p['name']},actions=output:{p['peer']}")
        return out
    fail(f"unknown kind {kind}")


def start(a):
    d = a.dir
    with open(a.config, "rb") as f:
        cfg = tomllib.load(f)
    if not os.access(VSWITCHD, os.X_OK):
        fail(f"{VSWITCHD} missing: apt-get install openvswitch-switch-dpdk")
    os.makedirs(d, exist_ok=True)
    sh(d, "ovsdb-tool", "create", f"{d}/conf.db", SCHEMA)
    sh(d, "ovsdb-server", f"{d}/conf.db", f"--remote=punix:{d}/db.sock",
       f"--pidfile={d}/ovsdb-server.pid", "--detach", f"--log-file={d}/ovsdb-server.log")
    vdevs = " ".join(f"--vdev {dev}" for _, dev, _ in ports(cfg))
    vsctl(d, "--no-wait", "init")
    vsctl(d, "--no-wait", "set", "Open_vSwitch", ".", "other_config:dpdk-init=true",
          f"other_config:dpdk-extra=--no-pci {vdevs}", f"other_config:dpdk-socket-mem={a.socket_mem}",
          "other_config:dpdk-lcore-mask=0x1", "other_config:pmd-cpu-mask=0x2")
    sh(d, VSWITCHD, f"unix:{d}/db.sock", f"--pidfile={d}/ovs-vswitchd.pid", "--detach",
       f"--log-file={d}/ovs-vswitchd.log", timeout=120)
    macs = cfg.get("bridge", {}).get("mac_capacity", 8192)
    cmd = ["add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev",
           f"other_config:mac-table-size={max(macs, 8192)}", "fail_mode=secure"]
    for i, (name, _, inst) in enumerate(ports(cfg)):
        cmd += ["--", "add-port", "br0", name, "--", "set", "Interface", name, "type=dpdk",
                f"options:dpdk-devargs={inst}", f"mac=\"{port_mac(i)}\"", f"ofport_request={i + 1}"]
    vsctl(d, *cmd)
    # A flood copy to the bridge's own (tap) port would cost a system call.
    sh(d, "ovs-ofctl", "mod-port", "br0", "br0", "no-flood")
    sh(d, "ovs-ofctl", "del-flows", "br0")
    # Every kind's flows in a table of its own, installed now (10k rules
    # take seconds, longer with the PMD busy): `run` only points table 0
    # at one (the datapath's megaflows are the same as without the hop).
    for kind in a.kinds.split(","):
        path = f"{d}/flows-{kind}.txt"
        with open(path, "w") as f:
            f.write("".join(f"table={table(kind)},{rule}\n" for rule in flows(cfg, kind)))
        sh(d, "ovs-ofctl", "add-flows", "br0", path, timeout=600)
    fdb = [("fdb/add", ["br0", e["port"], str(e.get("vlan", 0)), e["mac"]])
           for e in cfg.get("bridge", {}).get("static_mac", [])]
    if fdb:
        unixctl_batch(d, fdb)
    for name, _, _ in ports(cfg):
        if not re.search(r"admin_state\s*:\s*up", vsctl(d, "list", "Interface", name)):
            fail(f"port {name} did not come up: see {d}/ovs-vswitchd.log")
    with open(f"{d}/config", "w") as f:
        f.write(os.path.abspath(a.config))
    os.kill(pid(d, "ovs-vswitchd"), signal.SIGSTOP)


def port_counts(d, names):
    """{port: (rx, tx)} from OpenFlow port stats (read live from the PMDs);
    port i of the config is OpenFlow port i + 1 (ofport_request)."""
    out = {}
    text = sh(d, "ovs-ofctl", "dump-ports", "br0")
    for m in re.finditer(r'port\s+(\d+):\s*rx pkts=(\d+).*?\n\s*tx pkts=(\d+)', text):
        if 1 <= int(m.group(1)) <= len(names):
            out[names[int(m.group(1)) - 1]] = (int(m.group(2)), int(m.group(3)))
    return out


def run(a):
    d = a.dir
    with open(f"{d}/config") as f, open(f.read().strip(), "rb") as g:
        cfg = tomllib.load(g)
    names = [p[0] for p in ports(cfg)]
    os.kill(pid(d, "ovs-vswitchd"), signal.SIGCONT)
    try:
        sh(d, "ovs-ofctl", "add-flow", "br0", f"table=0,priority=0,actions=resubmit(,{table(a.kind)})")
        appctl(d, "dpif-netdev/pmd-stats-clear")
        time.sleep(2)  # warm-up: the other figures skip their first 2 s too
        c0, t0 = port_counts(d, names), time.monotonic()
        time.sleep(a.seconds - 2)
        c1, t1 = port_counts(d, names), time.monotonic()
        if a.stats:
            with open(a.stats, "w") as f:
                f.write(appctl(d, "dpif-netdev/pmd-stats-show"))
                f.write(appctl(d, "dpif-netdev/pmd-rxq-show"))
    finally:
        os.kill(pid(d, "ovs-vswitchd"), signal.SIGSTOP)
    rx = c1["p0"][0] - c0["p0"][0]
    tx = sum(c1[n][1] - c0[n][1] for n in names if n != "p0" and n in c1)
    print("%.2f %.2f" % (rx / (t1 - t0) / 1e6, tx / rx if rx else 0))


def stop(a):
    d = a.dir
    for name in ("ovs-vswitchd", "ovsdb-server"):
        try:
            p = pid(d, name)
        except (OSError, ValueError):
            continue
        for sig in (signal.SIGCONT, signal.SIGTERM):
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                break
        for _ in range(100):  # up to 10 s, then SIGKILL
            try:
                os.kill(p, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(p, signal.SIGKILL)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start")
    s.add_argument("--dir", required=True)
    s.add_argument("--config", required=True)
    s.add_argument("--socket-mem", type=int, default=1024)
    s.add_argument("--kinds", required=True, help="comma-separated, of: " + ", ".join(KINDS))
    r = sub.add_parser("run")
    r.add_argument("--dir", required=True)
    r.add_argument("--kind", required=True, choices=KINDS)
    r.add_argument("--seconds", type=int, required=True)
    r.add_argument("--stats")
    t = sub.add_parser("stop")
    t.add_argument("--dir", required=True)
    a = ap.parse_args()
    if a.cmd == "run" and a.seconds < 4:
        fail("--seconds: at least 4 (2 of them warm-up)")
    if a.cmd == "start" and any(k not in KINDS for k in a.kinds.split(",")):
        fail(f"--kinds {a.kinds}: each one of {', '.join(KINDS)}")
    {"start": start, "run": run, "stop": stop}[a.cmd](a)


if __name__ == "__main__":
    main()
