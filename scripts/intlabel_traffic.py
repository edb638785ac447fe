#!/usr/bin/env python3
"""INT-label evaluation traffic (int-label.txt §6.1): fixed-size UDP
datagrams, round robin over the destinations, Poisson pacing at a total rate.

  intlabel_traffic.py send --dst 10.40.2.2,10.40.3.2 --rate 700 --seconds 5 [--size 1000] [--port 9000] [--seed 1]
  intlabel_traffic.py sink [--port 9000] --seconds 6 [--ready FILE]

Each datagram carries (sender id, sequence) and a filler derived from them,
so the sink checks every byte it gets. Both print one JSON line at the end:
send {"sent", "errors", "seconds", "rate", "stalled" (seconds in gaps
between sends of over 2 ms)}; sink {"received", "bad", "senders"}.
A sink given --ready creates FILE once its socket is bound, so a harness
starts the senders only when every sink can receive.
"""
import argparse
import json
import random
import socket
import struct
import sys
import time


# The filler's byte i is (seq + i) mod 251: a slice of this cycle, so that
# neither side spends its (shared, two-core) CPU building it byte by byte.
CYCLE = bytes(range(251))
# A gap between sends longer than this (s) counts as "stalled": Poisson's
# own are rare at the rates used, so these are mostly the sender held off
# the CPU by a loaded machine, when its traffic was not "fast".
STALL = 0.002


def payload(sender, seq, size):
    head = struct.pack("!IQ", sender, seq)
    n = max(size - len(head), 0)
    start = seq % 251
    reps = (start + n) // 251 + 1
    return head + (CYCLE * reps)[start : start + n]


def send(a):
    dsts = [d for d in a.dst.split(",") if d]
    if not dsts:
        sys.exit("--dst: no destination")
    rng = random.Random(a.seed)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender = a.seed & 0xFFFFFFFF
    start = time.monotonic()
    end = start + a.seconds
    due = start
    sent = errors = 0
    seq = 0
    stalled, last = 0.0, start
    while True:
        due += rng.expovariate(a.rate)
        if due >= end:
            break
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        try:
            s.sendto(payload(sender, seq, a.size), (dsts[seq % len(dsts)], a.port))
            sent += 1
        except OSError:
            errors += 1
        seq += 1
        now = time.monotonic()
        if now - last > STALL:
            stalled += now - last
        last = now
    took = time.monotonic() - start
    print(json.dumps({"sent": sent, "errors": errors, "seconds": round(took, 3), "rate": round(sent / took, 1),
                      "stalled": round(stalled, 3)}))


def sink(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", a.port))
    s.settimeout(0.2)
    if a.ready:
        open(a.ready, "w").close()
    end = time.monotonic() + a.seconds
    received = bad = 0
    senders = {}
    while time.monotonic() < end:
        try:
            d, _ = s.recvfrom(65536)
        except socket.timeout:
            continue
        received += 1
        if len(d) < 12:
            bad += 1
            continue
        sender, seq = struct.unpack("!IQ", d[:12])
        if d != payload(sender, seq, len(d)):
            bad += 1
        senders[str(sender)] = senders.get(str(sender), 0) + 1
    print(json.dumps({"received": received, "bad": bad, "senders": senders}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    ps = sub.add_parser("send")
    ps.add_argument("--dst", required=True, help="comma-separated IPv4 destinations, sent to in turn")
    ps.add_argument("--rate", type=float, required=True, help="datagrams per second, all destinations together")
    ps.add_argument("--seconds", type=float, required=True)
    ps.add_argument("--size", type=int, default=1000, help="UDP payload bytes (at least 12)")
    ps.add_argument("--port", type=int, default=9000)
    ps.add_argument("--seed", type=int, default=1, help="pacing seed; also the sender id in the payload")
    pk = sub.add_parser("sink")
    pk.add_argument("--port", type=int, default=9000)
    pk.add_argument("--seconds", type=float, required=True)
    pk.add_argument("--ready", help="a file to create once the socket is bound")
    a = p.parse_args()
    if a.cmd == "send":
        if a.rate <= 0 or a.seconds <= 0 or a.size < 12:
            sys.exit("send: --rate and --seconds must be positive, --size at least 12")
        send(a)
    else:
        sink(a)


if __name__ == "__main__":
    main()
