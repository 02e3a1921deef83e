#!/usr/bin/env python3
"""Where a policy's average JCT goes (docs/design/scheduler.md).

Reads per-job CSVs written by `frugal cluster simulate --out` and splits each
job's JCT into
  wait:    submit -> first start (queueing before any GPU),
  ideal:   best_runtime (the job alone at its best size and batch, one start-up),
  resize:  30 s x num_reallocations (the re-allocation cost paid beyond the first start;
           a preemption to 0 GPUs counts once, its restart pays the cost),
  slow:    the rest (running on fewer GPUs than its best, or preempted to 0 mid-run),
averaged over all jobs of the workload (so the four columns add up to the average
JCT), in total and by size class of best_runtime.

Usage: jct_breakdown.py [--cost 30] a.csv [b.csv ...]
"""
import argparse
import csv
import sys

CLASSES = [(0, 600, "<10m"), (600, 3600, "10m-1h"), (3600, 4 * 3600, "1h-4h"), (4 * 3600, 1e18, ">4h")]


def breakdown(path, cost):
    rows = list(csv.DictReader(open(path)))
    n = len(rows)
    out = {name: [0, 0.0, 0.0, 0.0, 0.0, 0.0] for _, _, name in CLASSES}
    out["all"] = [0, 0.0, 0.0, 0.0, 0.0, 0.0]
    for r in rows:
        submit, start, finish = float(r["submit_time"]), float(r["start_time"]), float(r["finish_time"])
        best, re = float(r["best_runtime"]), int(r["num_reallocations"])
        wait = start - submit
        resize = cost * re
        slow = (finish - start) - best - resize
        cls = next(name for lo, hi, name in CLASSES if lo <= best < hi)
        for key in (cls, "all"):
            v = out[key]
            v[0] += 1
            v[1] += (finish - submit) / n
            v[2] += wait / n
            v[3] += best / n
            v[4] += resize / n
            v[5] += slow / n
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cost", type=float, default=30)
    p.add_argument("csvs", nargs="+")
    a = p.parse_args()
    tot = {}
    for path in a.csvs:
        for k, v in breakdown(path, a.cost).items():
            t = tot.setdefault(k, [0] * 6)
            for i in range(6):
                t[i] += v[i] / (1 if i == 0 else len(a.csvs))
    w = csv.writer(sys.stdout)
    w.writerow(["class", "jobs", "jct_share_s", "wait_s", "ideal_s", "resize_s", "slow_s"])
    for k in ["all"] + [name for _, _, name in CLASSES]:
        v = tot[k]
        w.writerow([k, v[0]] + [f"{x:.1f}" for x in v[1:]])


if __name__ == "__main__":
    main()
