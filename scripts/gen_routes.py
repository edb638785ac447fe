#!/usr/bin/env python3
"""A full-size routing table for benchmarks (a `routes_file`), seeded.

    scripts/gen_routes.py [--v4 900000] [--v6 200000] [--seed 1] > routes.txt

Prints one `PREFIX PORT VIA` line per route, in random order (so that any
leading slice of the file, which `gen-traffic --dst-spread` draws flows
from, is spread over the whole address space). Prefix lengths follow the
shape of today's Internet table (BGP DFZ, 2024: IPv4 about 60 % /24 and
nothing longer; IPv6 about half /48 under a few tens of thousands of RIR
allocations); IPv4 prefixes lie anywhere in unicast space outside
0/8, 10/8, 127/8, 100.64/10, 169.254/16, 172.16/12, 192.168/16 and
multicast, IPv6 ones in the RIRs' 2001::/16, 2400::/12, 2600::/12,
2800::/12, 2a00::/12 and 2c00::/12 outside 2001:db8::/32. Gateways are
`scripts/bench.sh`'s router neighbours: IPv4 neighbour j of 256 on port
p = 1 + j % 3 at 10.0.(p+1).(10 + j / 3); IPv6 neighbour j of 48 at
2001:db8:f<p>::<16 + j / 3>.
"""
import argparse
import ipaddress
import random
import sys

V4_LENGTHS = {8: 0.01, 11: 0.05, 12: 0.1, 13: 0.1, 14: 0.2, 15: 0.3, 16: 1.4, 17: 0.8, 18: 1.4, 19: 2.7,
              20: 4.4, 21: 5.5, 22: 11.5, 23: 10.5, 24: 61.3}
V6_LENGTHS = {24: 0.3, 28: 1.0, 29: 3.0, 30: 0.5, 31: 0.5, 32: 12.0, 33: 1.0, 34: 0.5, 35: 0.5, 36: 3.0,
              38: 1.0, 39: 1.0, 40: 6.0, 41: 0.5, 42: 1.5, 43: 0.5, 44: 8.0, 45: 1.0, 46: 3.0, 47: 2.0,
              48: 48.0, 56: 1.0, 64: 1.0}
V4_EXCLUDED = [(int(n.network_address), int(n.broadcast_address)) for n in map(ipaddress.ip_network, (
    "0.0.0.0/8", "10.0.0.0/8", "127.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16", "172.16.0.0/12",
    "192.168.0.0/16"))]
V6_BLOCKS = [(0x2001, 16)] + [(b, 12) for b in (0x2400, 0x2600, 0x2800, 0x2A00, 0x2C00)]
V6_DOC = 0x20010DB8


def v4_excluded(addr, length):
    last = addr | ((1 << (32 - length)) - 1)
    return any(addr <= hi and last >= lo for lo, hi in V4_EXCLUDED)


def v4_routes(n, rng):
    lengths, weights = zip(*V4_LENGTHS.items())
    seen = set()
    while len(seen) < n:
        length = rng.choices(lengths, weights)[0]
        addr = rng.randrange(1 << 24, 224 << 24) & ~((1 << (32 - length)) - 1)
        if (addr, length) in seen or v4_excluded(addr, length):
            continue
        seen.add((addr, length))
    return sorted(seen)


def v6_routes(n, rng):
    lengths, weights = zip(*V6_LENGTHS.items())
    # The RIR allocations (/32s) the prefixes sit in: about one per 7 routes.
    allocations = []
    while len(allocations) < max(1, n // 7):
        top, bits = rng.choice(V6_BLOCKS)
        a = ((top >> (16 - bits)) << (128 - bits)) | (rng.getrandbits(32 - bits) << 96)
        if a >> 96 != V6_DOC:
            allocations.append(a)
    seen = set()
    while len(seen) < n:
        length = rng.choices(lengths, weights)[0]
        base = rng.choice(allocations)
        # Shorter than /32: the allocation's covering block.
        addr = (base | (rng.getrandbits(96) if length > 32 else 0)) & ~((1 << (128 - length)) - 1)
        if addr >> 96 == V6_DOC or (length < 32 and V6_DOC >> (32 - length) == addr >> (128 - length)):
            continue
        seen.add((addr, length))
    return sorted(seen)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--v4", type=int, default=900_000, help="IPv4 prefixes (default 900000)")
    ap.add_argument("--v6", type=int, default=200_000, help="IPv6 prefixes (default 200000)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.v4 < 0 or a.v6 < 0 or a.v4 > 4_000_000 or a.v6 > 4_000_000:
        sys.exit("gen_routes.py: --v4 and --v6 take 0 to 4000000")
    rng = random.Random(a.seed)
    lines = []
    for addr, length in v4_routes(a.v4, rng):
        j = rng.randrange(256)
        p = 1 + j % 3
        lines.append(f"{ipaddress.IPv4Address(addr)}/{length} p{p} 10.0.{p + 1}.{10 + j // 3}")
    for addr, length in v6_routes(a.v6, rng):
        j = rng.randrange(48)
        p = 1 + j % 3
        lines.append(f"{ipaddress.IPv6Address(addr)}/{length} p{p} 2001:db8:f{p}::{16 + j // 3:x}")
    rng.shuffle(lines)
    out = sys.stdout
    out.write("# scripts/gen_routes.py --v4 %d --v6 %d --seed %d\n" % (a.v4, a.v6, a.seed))
    out.write("\n".join(lines))
    out.write("\n")


if __name__ == "__main__":
    main()
