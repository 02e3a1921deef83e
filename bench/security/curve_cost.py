#!/usr/bin/env python3
"""CURVE's cost on the shaped testbed (docs/design/security.md, "Cost"): the same
`frugal coordinator` + `frugal worker` job with plain TCP (--insecure) and
with CurveZMQ keys, alternating, on `testbed.sh up flat --hosts N --rate R`.
Prints the median iteration time (rank 0's metrics.jsonl "iter_s", first
window dropped) of each run and the CURVE / plain ratio per pair. Needs root.

    bench/security/curve_cost.py --build-dir build --rate 100 --model mlp --pairs 3
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for harness
from harness import FrugalJob, ProcessGroup, Testbed, hold_testbed_lock, read_jsonl  # noqa: E402


class KeyedJob(FrugalJob):
    """FrugalJob with --key/--authorized-keys instead of --insecure: host i's
    processes use key i (the coordinator shares host 0's)."""

    def __init__(self, keys, authorized, **kw):
        super().__init__(**kw)
        self.keys, self.authorized = keys, authorized

    def _secure(self, cmd, host):
        i = cmd.index("--insecure")
        return cmd[:i] + ["--key", self.keys[host], "--authorized-keys", self.authorized] + cmd[i + 1:]

    def coordinator_command(self):
        return self._secure(super().coordinator_command(), 0)

    def worker_command(self, rank, args):
        return self._secure(super().worker_command(rank, args), rank)


def make_keys(frugal, n, out):
    keys = []
    for i in range(n):
        path = os.path.join(out, "host%d.key" % i)
        if not os.path.exists(path):  # frugal keys generate never overwrites a key
            subprocess.run([frugal, "keys", "generate", "--out", path], check=True, stdout=subprocess.DEVNULL)
        keys.append(path)
    authorized = os.path.join(out, "authorized_keys")
    with open(authorized, "w") as f:
        for k in keys:
            f.write(open(k + ".pub").read())
    os.chmod(authorized, 0o600)
    return keys, authorized


def run_once(args, tb, job, run_dir):
    os.makedirs(run_dir, exist_ok=True)
    # --sync step: an exchange every step, as when CURVE's cost was first measured (docs/design/security.md).
    worker_args = ["--sync", "step", "--model", args.model, "--max-steps", str(args.steps),
                   "--log-every", str(args.log_every), "--eval-every", "0", "--runs-dir", run_dir, "--run-name", "run", "--timeout-s", "120"] + args.worker_args.split()
    with ProcessGroup() as procs:
        job.start(procs, lambda rank: worker_args, log_dir=run_dir,
                  coordinator_log=os.path.join(run_dir, "coordinator.log"))
        if not procs.wait_all(time.time() + args.budget_s).all_exited:
            raise SystemExit("run in %s did not finish within %d s" % (run_dir, args.budget_s))
    recs = [r for r in read_jsonl(os.path.join(run_dir, "run", "metrics.jsonl")) if "iter_s" in r]
    if len(recs) < 2:
        raise SystemExit("run in %s wrote %d metric windows; see its rank*.log" % (run_dir, len(recs)))
    return statistics.median(r["iter_s"] for r in recs[1:])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", default="build")
    p.add_argument("--model", default="mlp")
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--rate", type=int, default=100, help="whole Mbit/s per host link, as testbed.sh takes it (0: unshaped)")
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--pairs", type=int, default=3, help="plain/CURVE pairs, alternating")
    p.add_argument("--budget-s", type=int, default=600)
    p.add_argument("--worker-args", default="", help="more `frugal worker` flags, e.g. '--density 1'")
    p.add_argument("--out-dir", default=None)
    args = p.parse_args()
    frugal = os.path.abspath(os.path.join(args.build_dir, "frugal"))
    out = args.out_dir or tempfile.mkdtemp(prefix="frugal-curve-cost-")
    os.makedirs(out, exist_ok=True)
    keys, authorized = make_keys(frugal, args.hosts, out)
    results = []
    lock = hold_testbed_lock(wait=True, on_wait=lambda: print("waiting for another testbed run", flush=True))
    with Testbed().up("flat", str(args.hosts), rate=args.rate) as tb:
        for pair in range(args.pairs):
            row = {}
            for mode in ("plain", "curve"):
                common = dict(frugal=frugal, testbed=tb, port=29700 + 2 * pair + (mode == "curve"))
                job = FrugalJob(**common) if mode == "plain" else KeyedJob(keys, authorized, **common)
                run_dir = os.path.join(out, "%s-%d" % (mode, pair))
                row[mode] = run_once(args, tb, job, run_dir)
                print("pair %d %-5s %.4f s/iter" % (pair, mode, row[mode]), flush=True)
            results.append(row)
    lock.close()
    ratios = [r["curve"] / r["plain"] for r in results]
    print("%s %s, %d hosts, flat %g Mbit/s, %d steps: plain %.4f s/iter, CURVE %.4f s/iter (medians of %d runs); "
          "CURVE / plain per pair: %s, median %.3f" % (
              args.model, args.worker_args, args.hosts, args.rate, args.steps, statistics.median(r["plain"] for r in results),
              statistics.median(r["curve"] for r in results), len(results),
              " ".join("%.3f" % x for x in ratios), statistics.median(ratios)))


if __name__ == "__main__":
    main()
