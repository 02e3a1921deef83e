#!/usr/bin/python3
"""Iteration time of the local mode under --deflate auto, on and off, on the
testbed (Note [Deflate by trial] in src/engine/deflate_trial.cc).

  bench/deflate/modes.py [--configs "3+1 100" "4 10" ...] [--repeats 2] [--steps 160]
                         [--out build/bench/deflate/modes.csv]

Each config is WORKERS RATE: a worker count on the flat topology with
every link at RATE Mbit/s, or "3+1" for two clusters joined by a WAN of
RATE Mbit/s (0: unlimited). Per config and repeat the three modes run back
to back in turn (A/B/C, so that drift on the machine falls on all three),
mlp at batch 64, frugal's default local mode (a round every 16 steps in 4
overlapped fragments, density 1), logged once per round. Per run: the
median over the second half of rank 0's iteration, compute and wait per
step, and the WAN bytes it sent per step. Prints a table of medians over
the repeats; writes every run to --out. Needs root (network namespaces).
"""
import argparse
import csv
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from harness import hold_testbed_lock, read_jsonl, run_job  # noqa: E402

MODES = ("auto", "on", "off")
DEFAULT_CONFIGS = ["3+1 100", "3+1 20", "3+1 10", "2+2 100", "2+2 10", "4 100", "4 10"]
FIELDS = ("iter_s", "compute_s", "wait_s", "bytes_sent_inter", "bytes_sent_intra")


def run(args, workers, rate, mode, name):
    run_dir = os.path.join(os.path.dirname(os.path.abspath(args.out)), "runs")
    metrics = os.path.join(run_dir, name, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    worker_args = ["--sync", "local", "--deflate", mode, "--model", "mlp", "--batch-size", "64",
                   "--max-steps", str(args.steps), "--epochs", "5", "--eval-every", "100000",
                   "--checksum-every", "0", "--runs-dir", run_dir, "--run-name", name, "--timeout-s", "120",
                   "--log-every", "16"]
    run_job(args.frugal, workers, rate, worker_args, os.path.join(run_dir, name + "-logs"))
    recs = [r for r in read_jsonl(metrics) if "iter_s" in r and r["step"] > args.steps // 2]
    return {k: statistics.median(r.get(k, 0.0) for r in recs) for k in FIELDS}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default=os.path.join(ROOT, "build", "frugal"))
    ap.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=160)
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench", "deflate", "modes.csv"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("deflate/modes.py: needs root (network namespaces)")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    lock = hold_testbed_lock(True, lambda: print("deflate/modes.py: waiting for another testbed run", flush=True))
    rows = []
    with open(args.out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["workers", "mbps", "mode", "repeat", "iteration ms", "compute ms", "wait ms",
                    "wan bytes per step", "lan bytes per step"])
        for config in args.configs:
            workers, rate = config.split()
            for rep in range(args.repeats):
                for mode in MODES:
                    m = run(args, workers, int(rate), mode, "w%s-r%s-%s-%d" % (workers, rate, mode, rep))
                    row = [workers, rate, mode, rep] + ["%.1f" % (1e3 * m[k]) for k in FIELDS[:3]] + \
                          ["%.0f" % m[k] for k in FIELDS[3:]]
                    w.writerow(row)
                    f.flush()
                    rows.append(row)
                    print("%-6s %4s Mbit/s %-4s #%d: iteration %s ms, compute %s, wait %s" %
                          (workers, rate, mode, rep, row[4], row[5], row[6]), flush=True)
    lock.close()
    print("\nmedian iteration (ms) over %d repeats; auto against the better fixed mode" % args.repeats)
    for config in args.configs:
        workers, rate = config.split()
        med = {mode: statistics.median(float(r[4]) for r in rows if r[0] == workers and r[1] == rate and r[2] == mode)
               for mode in MODES}
        best = min(med["on"], med["off"])
        print("%-6s %4s Mbit/s  auto %6.1f  on %6.1f  off %6.1f  auto/best %.3f" %
              (workers, rate, med["auto"], med["on"], med["off"], med["auto"] / best))


if __name__ == "__main__":
    main()
