#!/usr/bin/env python3
"""GPINT evaluation (issue 33; gpint-sqr-reliable-int §V, Figs. 12 and 15).

1. Planner figures: GPINT-2/3/5 and Euler on the WS(20..100, 4, 0.1)
   fixtures, and GPINT-3 on a WS(1000, 4, 0.1): probes, longest path,
   total hops, largest probe, planning time (planner.csv, planner.svg).
2. Loss sweep on a WS(16, 4, 0.1) testbed (the monitor linked to every
   switch): 5, 10, 15 and 20 % loss on every switch link both ways, the
   fast and the paper profile with recovery, and the fast profile without:
   session completion, collection time, recovery probes against the probe
   transmissions the links lost (L_tx, from the switches' counters), and
   failed sessions without recovery against 1 - (1 - p)^h (sweep.csv,
   sweep.svg).

Usage: scripts/gpint_eval.sh [--planner-only] [OUT_DIR]
(GPINT_EVAL_SESSIONS, default 20; GPINT_EVAL_LOSSES, default 5,10,15,20;
--planner-only: the planner's figures alone). Needs root (network
namespaces) for the sweep.
"""

import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def bin_path(name):
    d = os.environ.get("INTSWITCH_BIN_DIR") or os.path.join(ROOT, "target", "release")
    return os.path.join(d, name)


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def testbed(*args):
    return run([os.path.join(HERE, "testbed.sh"), *args], env=dict(os.environ, INTSWITCH_BIN_DIR=os.path.dirname(bin_path("intswitch"))))


# ---- planner figures ----

def planner(out):
    rows = []
    for n in (20, 40, 60, 80, 100):
        topo = os.path.join(ROOT, "tests", "fixtures", "gpint", f"ws{n}.toml")
        for name, args in (("GPINT-2", ["--k", str(max(1, 2 * n // 10))]),
                           ("GPINT-3", ["--k", str(max(1, 3 * n // 10))]),
                           ("GPINT-5", ["--k", str(max(1, 5 * n // 10))]),
                           ("Euler", ["--algo", "euler"])):
            p = json.loads(run([bin_path("intcollector"), "gpint", "plan", "--topology", topo, *args]))
            s = p["stats"]
            rows.append({"n": n, "algo": name, "probes": s["probes"], "longest": s["longest"],
                         "longest_planned": s["longest_planned"], "total_hops": s["total_hops"],
                         "max_probe_bytes": s["max_probe_bytes"], "split": s["split"], "plan_us": s["plan_us"]})
    # GPINT on a thousand switches (the planner's time is plan_us).
    with tempfile.TemporaryDirectory() as d:
        topo = os.path.join(d, "ws1000.toml")
        with open(topo, "w") as f:
            f.write(run([bin_path("intcollector"), "gpint", "topo", "ws", "--n", "1000", "--seed", "7"]))
        p = json.loads(run([bin_path("intcollector"), "gpint", "plan", "--topology", topo]))
        s = p["stats"]
        rows.append({"n": 1000, "algo": "GPINT-3", "probes": s["probes"], "longest": s["longest"],
                     "longest_planned": s["longest_planned"], "total_hops": s["total_hops"],
                     "max_probe_bytes": s["max_probe_bytes"], "split": s["split"], "plan_us": s["plan_us"]})
    write_csv(os.path.join(out, "planner.csv"), rows)
    series = {}
    for r in rows:
        if r["n"] <= 100:
            series.setdefault(r["algo"], []).append((r["n"], r["longest_planned"]))
    svg(os.path.join(out, "planner.svg"), "Longest probe path (switches) vs network size",
        "switches |V|", "longest path", series)
    return rows


# ---- loss sweep ----

def switch_counters(name, k):
    sock = os.path.join(STATE, name, f"s{k}.sock")
    return json.loads(run([bin_path("intctl"), "--socket", sock, "--json", "show", "gpint"]))["counters"]


def totals(name, n):
    fwd = rx = 0
    for k in range(1, n + 1):
        c = switch_counters(name, k)
        fwd += c["sqr_stored"] + c["sqr_buffer_full"]
        rx += c["gpint_rx"]
    return fwd, rx


def impair_all(links, loss):
    for l in links:
        for rev in ([], ["--reverse"]):
            args = ["loss", f"{loss}%"] if loss else ["none"]
            testbed("impair", l, *rev, *args)


def monitor(name, plan, n, sessions, profile, recovery):
    cmd = ["ip", "netns", "exec", f"tb-{name}-mon", bin_path("intcollector"), "gpint", "run", "--plan", plan,
           "--sessions", str(sessions), "--profile", profile, "--duration", "3000"]
    for k in range(1, n + 1):
        cmd += ["--via", f"s{k}=10.77.{k}.1"]
    if not recovery:
        cmd.append("--no-recovery")
    lines = [json.loads(l) for l in run(cmd).splitlines()]
    return lines[:-1], lines[-1]


def sweep(out, sessions, losses):
    rows = []
    n = 16
    for profile, hold, runs in (("fast", 400, [True, False]), ("paper", 1500, [True])):
        name = f"ws16{profile[0]}"
        topo = os.path.join(tempfile.mkdtemp(), f"{name}.toml")
        with open(topo, "w") as f:
            f.write(run([bin_path("intcollector"), "gpint", "topo", "ws", "--n", "16", "--degree", "4", "--p", "0.1",
                         "--seed", "16", "--name", name, "--monitor", "--hold-ms", str(hold)]))
        plan = topo.replace(".toml", "-plan.json")
        run([bin_path("intcollector"), "gpint", "plan", "--topology", topo, "--out", plan])
        hops = [len(p["hops"]) for p in json.load(open(plan))["paths"]]
        links = [l.split('"')[1] for l in open(topo) if l.startswith('name = "s') and "-" in l]
        testbed("up", topo)
        try:
            for loss in losses:
                impair_all(links, loss)
                for recovery in runs:
                    f0, r0 = totals(name, n)
                    lines, summary = monitor(name, plan, n, sessions, profile, recovery)
                    f1, r1 = totals(name, n)
                    sent = summary["probes"] + summary["recovery_probes"]
                    l_tx = (f1 - f0) - ((r1 - r0) - sent)
                    p = loss / 100
                    # A session fails without recovery if any path loses a
                    # transmission: 1 - (1-p)^(sum of links on the paths).
                    expect = 1 - (1 - p) ** sum(h - 1 for h in hops)
                    failed = sum(1 for l in lines if not l["complete"])
                    lo, hi = wilson(failed, len(lines))
                    row = {"profile": profile, "recovery": recovery, "loss_pct": loss, "sessions": len(lines),
                           "complete": sum(1 for l in lines if l["complete"]),
                           "elapsed_ms_mean": round(sum(l["elapsed_ms"] for l in lines) / max(1, len(lines)), 1),
                           "probes": summary["probes"], "recovery_probes": summary["recovery_probes"],
                           "notices": summary["notices"], "l_tx": l_tx,
                           "recovery_per_l_tx": round(summary["recovery_probes"] / l_tx, 3) if l_tx else "",
                           "failed_sessions": failed,
                           # Without recovery: what 1-(1-p)^h predicts, and
                           # the 95 % (Wilson) interval of what was seen.
                           "failed_expected": "" if recovery else round(expect, 3),
                           "failed_ci95": "" if recovery else f"{lo:.3f}-{hi:.3f}"}
                    print(json.dumps(row), flush=True)
                    rows.append(row)
        finally:
            testbed("down", topo)
    write_csv(os.path.join(out, "sweep.csv"), rows)
    series = {}
    for r in rows:
        key = f"{r['profile']}{'' if r['recovery'] else ' no recovery'}"
        series.setdefault(key, []).append((r["loss_pct"], r["elapsed_ms_mean"]))
    svg(os.path.join(out, "sweep.svg"), "Collection time per session vs link loss (ws16)", "loss on every link (%)",
        "mean ms a session", series)
    series = {}
    for r in rows:
        if r["recovery"] and r["l_tx"]:
            series.setdefault(r["profile"], []).append((r["loss_pct"], r["recovery_probes"] / r["l_tx"]))
    svg(os.path.join(out, "recovery.svg"), "Recovery probes per lost probe transmission (L_tx)",
        "loss on every link (%)", "recovery probes / L_tx", series)
    return rows


def wilson(k, n, z=1.96):
    if n == 0:
        return 0.0, 1.0
    ph = k / n
    d = 1 + z * z / n
    c = (ph + z * z / (2 * n)) / d
    h = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


# ---- output ----

def write_csv(path, rows):
    if not rows:
        return
    keys = list(rows[0].keys())
    with open(path, "w") as f:
        f.write(",".join(keys) + "\n")
        for r in rows:
            f.write(",".join(str(r[k]) for k in keys) + "\n")
    print(f"wrote {path}", file=sys.stderr)


def svg(path, title, xlabel, ylabel, series):
    """A line chart of {name: [(x, y)]}: `intcollector plot` draws it from
    plot_point lines, as an SVG and a PNG beside it."""
    if not any(series.values()):
        return
    points = path[:-4] + ".points.jsonl"
    with open(points, "w") as f:
        for name, pts in sorted(series.items()):
            for x, y in pts:
                f.write(json.dumps({"type": "plot_point", "chart": title, "x_label": xlabel, "y_label": ylabel,
                                    "series": name, "x": x, "y": y}) + "\n")
    for out in (path, path[:-4] + ".png"):
        run([bin_path("intcollector"), "plot", "--in", points, "--out", out, "--kind", "series"])
        print(f"wrote {out}", file=sys.stderr)


STATE = os.environ.setdefault("INTSWITCH_TESTBED_DIR", "/run/intswitch-testbed")

def env_ints(name, default):
    """A comma-separated list of integers from the environment."""
    v = os.environ.get(name, default)
    try:
        return [int(x) for x in v.split(",")]
    except ValueError:
        sys.exit(f"gpint_eval.py: {name}={v!r}: not integers separated by commas")


def parse_args(argv):
    """(output folder, planner only) from the command line."""
    flags = [a for a in argv if a.startswith("-")]
    if any(f in ("-h", "--help") for f in flags):
        print(__doc__)
        sys.exit(0)
    unknown = [f for f in flags if f != "--planner-only"]
    if unknown:
        sys.exit(f"gpint_eval.py: unknown option {unknown[0]} (see --help)")
    dirs = [a for a in argv if not a.startswith("-")]
    if len(dirs) > 1:
        sys.exit("gpint_eval.py: one OUT_DIR at most (see --help)")
    return (dirs[0] if dirs else os.path.join(ROOT, "target", "gpint-eval")), "--planner-only" in flags


if __name__ == "__main__":
    out, planner_only = parse_args(sys.argv[1:])
    sessions = env_ints("GPINT_EVAL_SESSIONS", "20")[0]
    losses = env_ints("GPINT_EVAL_LOSSES", "5,10,15,20")
    os.makedirs(out, exist_ok=True)
    planner(out)
    if not planner_only:
        sweep(out, sessions, losses)
