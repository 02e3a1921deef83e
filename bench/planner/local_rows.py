#!/usr/bin/python3
"""Rows for `frugal plan frugal-validate` from the time-to-accuracy runs of
Frugal's local-update mode (frugal train's default; the planner
against Frugal's own testbed runs).

  bench/planner/local_rows.py RESULTS_DIR... [--out FILE]

Each RESULTS_DIR is a `bench/tta/run.py --out-dir` directory. A run is taken
when its rank-0 log says it ran the local mode with the sharded exchange
(one cluster) or on clusters, and its scenario has a fixed rate (flat-R or
clusters-R; the fluctuating WAN and models the planner does not know are
skipped). Per row: the measured median iteration and compute per step (the
worker's "compute": forward, backward and the inner step), the local steps,
and on one cluster the wire bytes per value that the run's payload implies
(sharded: each worker sends 2 (N-1)/N of a round per round); on clusters
none (the wire's own figure), since rank 0, a leader, also relays.
"""
import argparse
import csv
import os
import re
import sys

MODELS = {"mlp", "cnn", "resnet18"}
HEADER = re.compile(r"frugal train: (\d+) workers, model (\S+) \((\d+) parameters")
LOCAL = re.compile(r"local updates: (\d+) inner steps per round")


def header_of(log):
    with open(log, encoding="utf-8", errors="replace") as f:
        text = f.read(4000)
    m, local = HEADER.search(text), LOCAL.search(text)
    if not m or not local:
        return None
    return {"workers": int(m.group(1)), "model": m.group(2), "params": int(m.group(3)),
            "local_steps": int(local.group(1)), "sharded": "exchange sharded" in text}


def topology(scenario, workers):
    """(clusters, intra, inter) in the CSV's terms, or None."""
    m = re.fullmatch(r"(\w+)-(flat|clusters)-(\d+)", scenario)
    if not m:
        return None
    rate = m.group(3)
    if m.group(2) == "flat":
        return str(workers), rate, "unlimited"
    half = workers // 2
    return f"{half}+{workers - half}", "unlimited", rate


def rows_of(results_dir):
    with open(os.path.join(results_dir, "tta_summary.csv"), encoding="utf-8") as f:
        for s in csv.DictReader(f):
            log = os.path.join(results_dir, "tta-runs", s["scenario"], s["system"], "rank0.log")
            h = header_of(log) if os.path.exists(log) else None
            topo = topology(s["scenario"], h["workers"]) if h else None
            if not h or not topo or h["model"] not in MODELS or not s["compute_s"]:
                continue
            clusters, intra, inter = topo
            one_cluster = "+" not in clusters
            if one_cluster and not h["sharded"]:
                continue
            n = h["workers"]
            per_round = float(s["bytes_per_iter"]) * h["local_steps"]
            bpv = round(per_round / (h["params"] * 2 * (n - 1) / n), 4) if one_cluster else ""
            yield {"model": h["model"], "clusters": clusters, "intra mbps": intra, "inter mbps": inter,
                   "density": 1, "batch per worker": 64,
                   "iteration time (ms)": round(1000 * float(s["iter_s"]), 2),
                   "compute ms per sample": round(1000 * float(s["compute_s"]) / 64, 5),
                   "local steps": h["local_steps"], "bytes per value": bpv,
                   "# source": f"{results_dir} {s['scenario']} {s['system']}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--out", default="-")
    args = ap.parse_args()
    rows = [r for d in args.results for r in rows_of(d)]
    if not rows:
        sys.exit("local_rows.py: no local-mode run with a fixed rate in " + ", ".join(args.results))
    out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8", newline="")
    for r in rows:
        out.write("# " + r.pop("# source") + "\n")
    w = csv.DictWriter(out, fieldnames=list(rows[0].keys()), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    if out is not sys.stdout:
        out.close()


if __name__ == "__main__":
    main()
