#!/usr/bin/python3
"""Heterogeneous workers: equal vs speed-proportional batch sizes.

Emulating a slower device with `--compute-slowdown` (the worker sleeps for
the extra time) frees CPU for the other workers when four of them share two
cores, so the "slow" worker is barely slower. Here every worker instead runs
in its own CPU cgroup (cgroup v1 `cpu` controller, CFS quota): the normal
workers get --cpu-per-worker cores each, the slow one that divided by
--slow-factor, and the quotas together stay below the machine's cores. Each
worker then computes at its own fixed speed, as on separate devices.

Two runs of `frugal train --workers 4 --max-steps N` on loopback, back to
back: `--adapt off` (equal batches) and `--adapt batch` (the controller
balances batch sizes from measured speed). Reports samples/s over the steps
after --skip (the controller's first decisions) and the final test accuracy
of both runs (same number of samples). Needs root (cgroups).

  /usr/bin/python3 bench/adapt/hetero.py                 # -> build/bench/hetero/hetero.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from harness import CpuGroups, read_jsonl, worker_pids  # noqa: E402


def place_workers(proc, groups):
    """Moves each `frugal worker` child of PROC into its rank's group as soon as it appears."""
    placed = {}
    deadline = time.time() + 30
    while len(placed) < len(groups.quotas) and time.time() < deadline and proc.poll() is None:
        for r, pid in worker_pids(proc.pid).items():
            if r not in placed:
                groups.place(r, pid)
                placed[r] = pid
        time.sleep(0.02)
    if len(placed) < len(groups.quotas):
        proc.kill()
        sys.exit("hetero: found only workers %s of %d" % (sorted(placed), len(groups.quotas)))


def run(args, mode, groups):
    run_dir = os.path.join(args.out_dir, "runs")
    name = "hetero-" + mode
    metrics = os.path.join(run_dir, name, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [args.frugal, "train", "--workers", str(len(groups.quotas)), "--sync", "step", "--adapt", mode,
           "--max-steps", str(args.steps), "--epochs", "1", "--eval-every", "100000", "--checksum-every", "0",
           "--log-every", "5", "--threads", "1", "--runs-dir", run_dir, "--run-name", name, "--quiet"]
    log = open(os.path.join(args.out_dir, name + ".log"), "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    place_workers(proc, groups)
    try:
        rc = proc.wait(timeout=args.timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        sys.exit("hetero: %s run over %d s" % (mode, args.timeout_s))
    if rc != 0:
        sys.exit("hetero: %s run failed (exit %d), see %s" % (mode, rc, log.name))
    recs = read_jsonl(metrics)
    steps = [r for r in recs if "samples_per_s" in r and r["step"] > args.skip]
    final = [r for r in recs if r.get("final")]
    return {"mode": mode, "samples_per_s": statistics.median(r["samples_per_s"] for r in steps),
            "iter_s": statistics.median(r["iter_s"] for r in steps),
            "batch_sizes_last": steps[-1].get("batch_sizes") if steps else None,
            "final_test_accuracy": final[0]["test_accuracy"] if final else None,
            "decisions": [{"step": r["step"], "reason": r["decision"].get("reason")} for r in recs
                          if "decision" in r and r["decision"].get("reason") not in (None, "", "unchanged")]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default=os.path.join(ROOT, "build", "frugal"))
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "build", "bench", "hetero"))
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--skip", type=int, default=30, help="steps left out of the throughput (controller settling)")
    ap.add_argument("--cpu-per-worker", type=float, default=0.45, help="cores per normal worker")
    ap.add_argument("--slow-factor", type=float, default=2.0)
    ap.add_argument("--slow-rank", type=int, default=1)
    ap.add_argument("--timeout-s", type=int, default=900)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("hetero: needs root (CPU cgroups)")
    if CpuGroups.available():
        sys.exit("hetero: " + CpuGroups.available())
    os.makedirs(args.out_dir, exist_ok=True)
    quotas = [args.cpu_per_worker] * 4
    quotas[args.slow_rank] /= args.slow_factor
    with CpuGroups(quotas) as groups:
        equal = run(args, "off", groups)
        balanced = run(args, "batch", groups)
    result = {"cpu_quota_cores": quotas, "steps": args.steps, "skip": args.skip, "equal": equal,
              "balanced": balanced, "throughput_ratio": balanced["samples_per_s"] / equal["samples_per_s"]}
    with open(os.path.join(args.out_dir, "hetero.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("equal batches:    %.0f samples/s, final acc %s" % (equal["samples_per_s"], equal["final_test_accuracy"]))
    print("balanced batches: %.0f samples/s, final acc %s, batches %s" % (
        balanced["samples_per_s"], balanced["final_test_accuracy"], balanced["batch_sizes_last"]))
    print("throughput ratio balanced / equal: %.2fx" % result["throughput_ratio"])


if __name__ == "__main__":
    main()
