#!/usr/bin/env python3
"""Steady UDP traffic for measurement tests (run inside a host namespace).

  udp_traffic.py send DST:PORT[,DST:PORT...] --pps N --seconds S [--start-on NS]
      Sends round-robin over the destinations, N datagrams per second in all,
      paced against the clock; prints {"sent": {dest: count}} as JSON. With
      --start-on, the first datagram leaves when CLOCK_REALTIME next reaches
      a multiple of NS nanoseconds (an AM-PM interval start).
  udp_traffic.py sink PORT[,PORT...] [--v6] --seconds S
      Receives and discards on the ports (so the host sends no ICMP
      unreachables back); prints {"received": {port: count}}.
"""
import json
import select
import socket
import sys
import time


def parse_dest(d):
    host, port = d.rsplit(":", 1)
    host = host.strip("[]")
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    return fam, host, int(port)


def send(dests, pps, seconds, start_on=0):
    socks = {}
    targets = []
    for d in dests:
        fam, host, port = parse_dest(d)
        if fam not in socks:
            socks[fam] = socket.socket(fam, socket.SOCK_DGRAM)
        targets.append((d, socks[fam], (host, port)))
    counts = {d: 0 for d in dests}
    payload = b"x" * 64
    n_total = int(pps * seconds)
    if start_on > 0:
        time.sleep((start_on - time.time_ns() % start_on) / 1e9)
    start = time.monotonic()
    for i in range(n_total):
        due = start + i / pps
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        d, s, addr = targets[i % len(targets)]
        s.sendto(payload, addr)
        counts[d] += 1
    print(json.dumps({"sent": counts}))


def sink(ports, v6, seconds):
    socks = []
    for p in ports:
        for fam, any_addr in ((socket.AF_INET, "0.0.0.0"),) + (((socket.AF_INET6, "::"),) if v6 else ()):
            s = socket.socket(fam, socket.SOCK_DGRAM)
            if fam == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind((any_addr, p))
            s.setblocking(False)
            socks.append((p, s))
    counts = {p: 0 for p in ports}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        r, _, _ = select.select([s for _, s in socks], [], [], 0.2)
        for p, s in socks:
            if s in r:
                while True:
                    try:
                        s.recv(2048)
                        counts[p] += 1
                    except BlockingIOError:
                        break
    print(json.dumps({"received": counts}))


def main(argv):
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if len(argv) < 2 or argv[0] not in ("send", "sink"):
        print(__doc__, file=sys.stderr)
        return 2
    opts = {}
    rest = argv[2:]
    i = 0
    while i < len(rest):
        if rest[i] == "--v6":
            opts["v6"] = True
            i += 1
        elif rest[i] in ("--pps", "--seconds", "--start-on") and i + 1 < len(rest):
            try:
                opts[rest[i][2:].replace("-", "_")] = float(rest[i + 1])
            except ValueError:
                print(f"udp_traffic.py: {rest[i]} {rest[i + 1]}: not a number", file=sys.stderr)
                return 2
            i += 2
        else:
            print(f"udp_traffic.py: unknown argument {rest[i]}", file=sys.stderr)
            return 2
    seconds = opts.get("seconds", 5.0)
    if argv[0] == "send":
        send(argv[1].split(","), opts.get("pps", 1000.0), seconds, int(opts.get("start_on", 0)))
    else:
        sink([int(p) for p in argv[1].split(",")], opts.get("v6", False), seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
