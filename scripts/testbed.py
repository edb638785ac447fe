#!/usr/bin/env python3
"""intswitch testbed: builds a multi-switch network in network namespaces.

    testbed.sh up FILE          create namespaces, veths, addresses, routes,
                                impairments; start every switch (and collector)
                                and wait until each answers on its socket
    testbed.sh down FILE        stop what `up` started (by PID) and remove every
                                namespace and link, also after a failed `up`
    testbed.sh status [FILE]    what runs (all testbeds without FILE)
    testbed.sh exec HOST CMD..  run CMD in HOST (TESTBED/HOST when several are up)
    testbed.sh impair LINK [--reverse] NETEM-ARGS|none
                                change a live link's impairment (a->b, or b->a)

The topology file (TOML) is described in configs/testbed/README.md.
State lives in $INTSWITCH_TESTBED_DIR (default /run/intswitch-testbed)/<name>/.
"""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import tomllib

STATE_ROOT = os.environ.get("INTSWITCH_TESTBED_DIR", "/run/intswitch-testbed")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START_TIMEOUT_S = 60


class TestbedError(Exception):
    pass


def run(cmd, check=True, capture=False):
    """Runs a command (list); raises TestbedError with its output on failure."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if check and p.returncode != 0:
        raise TestbedError(f"{' '.join(shlex.quote(c) for c in cmd)} failed: {p.stdout.strip()}")
    return p.stdout if capture else p.returncode == 0


def bin_path(name):
    d = os.environ.get("INTSWITCH_BIN_DIR") or os.path.join(REPO, "target", "release")
    p = os.path.join(d, name)
    if not os.access(p, os.X_OK):
        raise TestbedError(f"{p} not found: build with `cargo build --release --bins` or set INTSWITCH_BIN_DIR")
    return p


# ---- topology ----

class Topology:
    def __init__(self, path):
        try:
            with open(path, "rb") as f:
                t = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise TestbedError(f"{path}: {e}")
        self.path = os.path.abspath(path)
        self.dir = os.path.dirname(self.path)
        allowed = {"name", "description", "host", "switch", "link", "collector"}
        for k in t:
            if k not in allowed:
                raise TestbedError(f"{path}: unknown key '{k}' (expected {', '.join(sorted(allowed))})")
        self.name = t.get("name") or ""
        if not self.name or not all(c.isalnum() or c in "-_" for c in self.name) or len(self.name) > 20:
            raise TestbedError(f"{path}: name: 1-20 letters, digits, '-' or '_'")
        self.hosts = t.get("host", [])
        self.switches = t.get("switch", [])
        self.links = t.get("link", [])
        self.collectors = t.get("collector", [])
        nodes = [n["name"] for n in self.hosts + self.switches]
        if len(set(nodes)) != len(nodes):
            raise TestbedError(f"{path}: node names must be unique")
        for i, l in enumerate(self.links):
            for k in ("name", "a", "b"):
                if k not in l:
                    raise TestbedError(f"{path}: link[{i}].{k} is required")
            for end in ("a", "b"):
                if l[end] not in nodes:
                    raise TestbedError(f"{path}: link[{i}].{end}: no host or switch named '{l[end]}'")
        self.state_dir = os.path.join(STATE_ROOT, self.name)

    def ns(self, node):
        return f"tb-{self.name}-{node}"

    def all_ns(self):
        own = [c["name"] for c in self.collectors if c.get("mgmt")]
        return [self.ns(n["name"]) for n in self.hosts + self.switches] + [self.ns(n) for n in own]

    def link(self, name):
        for l in self.links:
            if l["name"] == name:
                return l
        raise TestbedError(f"no link named '{name}' in {self.name}")

    def iface(self, link, node):
        """Interface name of `node`'s end of `link`."""
        for sw in self.switches:
            if sw["name"] == node:
                for k, p in enumerate(sw.get("port", [])):
                    if p.get("link") == link["name"]:
                        return p.get("name", f"p{k}")
                raise TestbedError(f"switch {node} has no [[switch.port]] for link {link['name']}")
        for h in self.hosts:
            if h["name"] == node:
                for i in h.get("iface", []):
                    if i.get("link") == link["name"] and i.get("name"):
                        return i["name"]
                mine = [l["name"] for l in self.links if node in (l["a"], l["b"])]
                return f"eth{mine.index(link['name'])}"
        raise TestbedError(f"no node {node}")


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TestbedError(f"cannot write {v!r} as TOML")


def switch_config(topo, sw, sock):
    """The intswitch config of one switch: its `config` text plus generated
    name, EAL, idle mode, control socket and af_packet ports."""
    lines = [
        f'name = "{topo.name}-{sw["name"]}"',
        f'mode = {toml_value(sw.get("mode", "router"))}',
        "[eal]",
        # Threads float over the CPUs: many switches share few cores.
        'lcores = "0@(0-1),1@(0-1)"',
        "memory_mb = 256",
        f'file_prefix = "tb-{topo.name}-{sw["name"]}"',
        "[dataplane]",
        "idle = true",
        f"idle_sleep_us = {int(sw.get('idle_sleep_us', 100))}",
        "mbufs = 4095",
        "[control]",
        f"socket = {toml_value(sock)}",
        'metrics = ""',
    ]
    port_keys = {"link", "name", "ipv4", "ipv6", "mac", "peer", "mtu"}
    for k, p in enumerate(sw.get("port", [])):
        bad = set(p) - port_keys
        if bad:
            raise TestbedError(f"switch {sw['name']} port[{k}]: unknown keys {sorted(bad)}")
        link = topo.link(p["link"])
        iface = topo.iface(link, sw["name"])
        if len(iface) > 15:
            raise TestbedError(f"switch {sw['name']}: interface name {iface} longer than 15")
        # qdisc_bypass=0 keeps the kernel's qdisc in the path of what the switch sends.
        lines += ["[[port]]", f'name = "{iface}"',
                  f'device = "net_af_packet{k},iface={iface},framecnt=16384,qdisc_bypass=0"']
        for key in ("ipv4", "ipv6", "mac", "peer", "mtu"):
            if key in p:
                lines.append(f"{key} = {toml_value(p[key])}")
        imp = egress_impairment(topo, sw["name"], p["link"])
        if imp:
            lines.append(f"impair = {toml_value(imp)}")
    return "\n".join(lines) + "\n" + sw.get("config", "") + "\n"


# ---- state ----

def load_state(topo):
    try:
        with open(os.path.join(topo.state_dir, "state.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"file": topo.path, "pids": {}, "sockets": {}}


def save_state(topo, st):
    os.makedirs(topo.state_dir, exist_ok=True)
    tmp = os.path.join(topo.state_dir, "state.json.tmp")
    with open(tmp, "w") as f:
        json.dump(st, f, indent=1)
    os.replace(tmp, os.path.join(topo.state_dir, "state.json"))


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


# ---- up / down ----

def ns_exec(ns, *cmd, check=True, capture=False):
    return run(["ip", "netns", "exec", ns, *cmd], check=check, capture=capture)


def is_switch(topo, node):
    return node in [s["name"] for s in topo.switches]


def egress_impairment(topo, sw, port_link):
    """The netem string for the switch port on `port_link` (its egress), if any."""
    l = topo.link(port_link)
    if l["a"] == sw and l.get("netem"):
        return l["netem"]
    if l["b"] == sw and l.get("netem_reverse"):
        return l["netem_reverse"]
    return None


def set_netem(topo, link, reverse, args):
    """Impairs one direction of a link at its sending end: the switch's own
    link emulation when a switch sends (works on any kernel), `tc netem`
    when a host sends (needs sch_netem in the kernel)."""
    src = link["b"] if reverse else link["a"]
    ns, dev = topo.ns(src), topo.iface(link, src)
    args = args.strip() or "none"
    if is_switch(topo, src):
        sock = os.path.join(topo.state_dir, f"{src}.sock")
        run([bin_path("intctl"), "--socket", sock, "port", "impair", dev, *shlex.split(args)])
        return
    if args == "none":
        ns_exec(ns, "tc", "qdisc", "del", "dev", dev, "root", check=False)
        return
    try:
        ns_exec(ns, "tc", "qdisc", "replace", "dev", dev, "root", "netem", *shlex.split(args))
    except TestbedError as e:
        raise TestbedError(f"impairing {link['name']} at host {src} needs tc netem: {e}; "
                           "impair the direction a switch sends instead")


def up(topo):
    if os.path.exists(os.path.join(topo.state_dir, "state.json")):
        st = load_state(topo)
        if any(alive(p) for p in st["pids"].values()) or any(
                os.path.exists(f"/run/netns/{n}") for n in topo.all_ns()):
            raise TestbedError(f"testbed {topo.name} is already up (run `down` first)")
    intswitch, intctl = bin_path("intswitch"), bin_path("intctl")
    os.makedirs(topo.state_dir, exist_ok=True)
    st = {"file": topo.path, "pids": {}, "sockets": {}, "started": time.time()}
    save_state(topo, st)
    for n in topo.all_ns():
        run(["ip", "netns", "add", n])
        ns_exec(n, "ip", "link", "set", "lo", "up")
    for sw in topo.switches:
        # The kernel stays off the switch ports: no IPv6 autoconf noise.
        ns_exec(topo.ns(sw["name"]), "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        ns_exec(topo.ns(sw["name"]), "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
    for h in topo.hosts:
        ns_exec(topo.ns(h["name"]), "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0")
        ns_exec(topo.ns(h["name"]), "sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0")
    for l in topo.links:
        a_if, b_if = topo.iface(l, l["a"]), topo.iface(l, l["b"])
        run(["ip", "link", "add", a_if, "netns", topo.ns(l["a"]), "type", "veth",
             "peer", "name", b_if, "netns", topo.ns(l["b"])])
        for node, dev in ((l["a"], a_if), (l["b"], b_if)):
            ns = topo.ns(node)
            ns_exec(ns, "ip", "link", "set", dev, "up")
            # Frames crossing an af_packet switch must carry full checksums.
            ns_exec(ns, "ethtool", "-K", dev, "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off",
                    check=False)
        # Switch ends are impaired through their config (see switch_config).
        if l.get("netem") and not is_switch(topo, l["a"]):
            set_netem(topo, l, False, l["netem"])
        if l.get("netem_reverse") and not is_switch(topo, l["b"]):
            set_netem(topo, l, True, l["netem_reverse"])
    for h in topo.hosts:
        ns = topo.ns(h["name"])
        for i in h.get("iface", []):
            dev = topo.iface(topo.link(i["link"]), h["name"])
            if "mac" in i:
                ns_exec(ns, "ip", "link", "set", "dev", dev, "address", i["mac"])
            if "mtu" in i:
                # Room for INT headers the switches add on the way.
                ns_exec(ns, "ip", "link", "set", "dev", dev, "mtu", str(i["mtu"]))
            for a in i.get("addr", []):
                ns_exec(ns, "ip", "addr", "add", a, "dev", dev, *(["nodad"] if ":" in a else []))
        for r in h.get("routes", []):
            args = shlex.split(r)
            six = args[:1] == ["-6"]
            ns_exec(ns, "ip", *(["-6"] if six else []), "route", "add", *(args[1:] if six else args))
        for n in h.get("neighbours", []):
            ns_exec(ns, "ip", "neigh", "replace", *shlex.split(n))
    # Management veths first: a switch reaches its collectors from the start.
    for c in topo.collectors:
        if c.get("mgmt"):
            # Its own namespace, a management veth to each listed switch:
            # switch k (from 1) is 10.250.k.1, the collector 10.250.k.2.
            cns = topo.ns(c["name"])  # created with the others
            for k, swn in enumerate(c["mgmt"], 1):
                if not is_switch(topo, swn):
                    raise TestbedError(f"collector {c['name']}: mgmt: '{swn}' is not a [[switch]]")
                run(["ip", "link", "add", f"m{k}", "netns", cns, "type", "veth",
                     "peer", "name", "mgmt", "netns", topo.ns(swn)])
                ns_exec(cns, "ip", "addr", "add", f"10.250.{k}.2/24", "dev", f"m{k}")
                ns_exec(topo.ns(swn), "ip", "addr", "add", f"10.250.{k}.1/24", "dev", "mgmt")
                ns_exec(cns, "ip", "link", "set", f"m{k}", "up")
                ns_exec(topo.ns(swn), "ip", "link", "set", "mgmt", "up")
    for sw in topo.switches:
        sock = os.path.join(topo.state_dir, f"{sw['name']}.sock")
        cfg = os.path.join(topo.state_dir, f"{sw['name']}.toml")
        with open(cfg, "w") as f:
            f.write(switch_config(topo, sw, sock))
        log = open(os.path.join(topo.state_dir, f"{sw['name']}.log"), "w")
        p = subprocess.Popen(["ip", "netns", "exec", topo.ns(sw["name"]), intswitch, "--config", cfg,
                              "--stats-interval", "0"], stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        st["pids"][sw["name"]] = p.pid
        st["sockets"][sw["name"]] = sock
        save_state(topo, st)
    for c in topo.collectors:
        intcollector = bin_path("intcollector")
        host = c.get("host")
        if c.get("mgmt"):
            host = c["name"]
        elif host not in [n["name"] for n in topo.hosts + topo.switches]:
            raise TestbedError(f"collector {c.get('name')}: host '{host}' is not a [[host]] or [[switch]]")
        log = open(os.path.join(topo.state_dir, f"{c['name']}.log"), "w")
        # {state}: the state directory (the switches' sockets are there);
        # {web}: $TESTBED_WEB or 127.0.0.1:8080 (a dashboard's address).
        args = shlex.split(c.get("args", "").replace("{state}", topo.state_dir)
                           .replace("{web}", os.environ.get("TESTBED_WEB", "127.0.0.1:8080")))
        # outside: run from this namespace, receiving in the node's
        # (intcollector --netns), so its --web dashboard is reachable here.
        cmd = [intcollector, "--netns", topo.ns(host), *args] if c.get("outside") else \
            ["ip", "netns", "exec", topo.ns(host), intcollector, *args]
        p = subprocess.Popen(cmd,
                             stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        st["pids"][c["name"]] = p.pid
        save_state(topo, st)
    # Every switch must answer on its socket.
    deadline = time.time() + START_TIMEOUT_S
    waiting = dict(st["sockets"])
    while waiting:
        for name, sock in list(waiting.items()):
            if run([intctl, "--socket", sock, "show", "version"], check=False):
                del waiting[name]
            elif not alive(st["pids"][name]):
                tail = open(os.path.join(topo.state_dir, f"{name}.log")).read()[-2000:]
                raise TestbedError(f"switch {name} exited during start:\n{tail}")
        if waiting and time.time() > deadline:
            raise TestbedError(f"switches {sorted(waiting)} did not answer within {START_TIMEOUT_S} s")
        time.sleep(0.2)
    print(f"testbed {topo.name} is up: {len(topo.hosts)} hosts, {len(topo.switches)} switches, "
          f"{len(topo.links)} links (state in {topo.state_dir})")


def down(topo):
    st = load_state(topo)
    # Switches first: a stopping switch exports what it still holds (flow
    # records with reason stop, the last histogram snapshot) to collectors
    # that must still be there to take them; then the collectors, which
    # read what their sockets hold before they exit.
    procs = st.get("pids", {})
    switches = set(st.get("sockets", {}))
    phases = ([p for n, p in procs.items() if n in switches], [p for n, p in procs.items() if n not in switches])
    for phase in phases:
        pids = [p for p in phase if alive(p)]
        for p in pids:
            try:
                os.kill(p, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.time() + 15
        while any(alive(p) for p in pids) and time.time() < deadline:
            time.sleep(0.1)
        for p in pids:
            if alive(p):
                os.kill(p, signal.SIGKILL)
    # Anything else still running inside our namespaces goes too.
    for n in topo.all_ns():
        if os.path.exists(f"/run/netns/{n}"):
            for pid in run(["ip", "netns", "pids", n], check=False, capture=True).split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
    # Deleting a namespace deletes the veth ends inside it (and so the pairs).
    for n in topo.all_ns():
        if os.path.exists(f"/run/netns/{n}"):
            run(["ip", "netns", "del", n], check=False)
    for sock in st.get("sockets", {}).values():
        try:
            os.unlink(sock)
        except OSError:
            pass
    try:
        os.unlink(os.path.join(topo.state_dir, "state.json"))
    except OSError:
        pass
    print(f"testbed {topo.name} is down")


def status_of(topo):
    st = load_state(topo)
    out = {"name": topo.name, "file": topo.path, "namespaces": [], "processes": []}
    for n in topo.all_ns():
        if os.path.exists(f"/run/netns/{n}"):
            out["namespaces"].append(n)
    for name, pid in st.get("pids", {}).items():
        out["processes"].append({"name": name, "pid": pid, "alive": alive(pid),
                                 "socket": st.get("sockets", {}).get(name)})
    return out


def running_testbeds():
    res = []
    try:
        names = sorted(os.listdir(STATE_ROOT))
    except OSError:
        return res
    for n in names:
        try:
            with open(os.path.join(STATE_ROOT, n, "state.json")) as f:
                res.append(Topology(json.load(f)["file"]))
        except (OSError, ValueError, KeyError, TestbedError):
            continue
    return res


def find_node(spec):
    """HOST or TESTBED/HOST among the running testbeds."""
    tb, _, node = spec.rpartition("/")
    found = []
    for t in running_testbeds():
        if tb and t.name != tb:
            continue
        if node in [n["name"] for n in t.hosts + t.switches]:
            found.append(t)
    if not found:
        raise TestbedError(f"no running testbed has a node '{spec}'")
    if len(found) > 1:
        raise TestbedError(f"'{node}' is in several testbeds ({', '.join(t.name for t in found)}): use TESTBED/{node}")
    return found[0], node


def find_link(spec):
    tb, _, name = spec.rpartition("/")
    found = [t for t in running_testbeds() if (not tb or t.name == tb) and name in [l["name"] for l in t.links]]
    if len(found) != 1:
        raise TestbedError(f"link '{spec}' {'not found' if not found else 'is ambiguous: use TESTBED/LINK'}")
    return found[0], found[0].link(name)


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help", "help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    cmd, args = argv[1], argv[2:]
    try:
        if cmd == "up" and len(args) == 1:
            topo = Topology(args[0])
            try:
                up(topo)
            except (TestbedError, OSError) as e:
                print(f"testbed: up failed: {e}", file=sys.stderr)
                print(f"testbed: run `testbed.sh down {args[0]}` to clean up", file=sys.stderr)
                return 1
        elif cmd == "down" and len(args) == 1:
            down(Topology(args[0]))
        elif cmd == "status" and len(args) <= 1:
            tops = [Topology(args[0])] if args else running_testbeds()
            print(json.dumps([status_of(t) for t in tops], indent=1))
        elif cmd == "exec" and len(args) >= 2:
            topo, node = find_node(args[0])
            os.execvp("ip", ["ip", "netns", "exec", topo.ns(node), *args[1:]])
        elif cmd == "impair" and len(args) >= 2:
            reverse = "--reverse" in args
            rest = [a for a in args[1:] if a != "--reverse"]
            topo, link = find_link(args[0])
            set_netem(topo, link, reverse, " ".join(rest))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except TestbedError as e:
        print(f"testbed: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
