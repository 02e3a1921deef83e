#!/usr/bin/python3
"""Validates the planner's model of Frugal's own pipeline against measured
runs on this machine.

  bench/planner/frugal_runs.py [--steps 40] [--out-dir build/bench/planner]

1. `frugal profile --hardware-out` measures this machine (GEMM rate, memory
   bandwidth, sparsify and sparse-optimizer throughput) and the mlp's
   operators.
2. Runs 12 configurations of `frugal worker` x N on testbed/testbed.sh's
   `flat` topology: workers 2 and 4; links 100 Mbit/s, 500 Mbit/s and
   unlimited; density 1% and 10%; batch 32 or 64 (alternating); each for
   --steps steps, and takes the median iteration time of the second half.
3. With --hybrid (the check of `plan hybrid`'s iteration model),
   4 more on the `clusters` topology with uneven clusters: 3+1 and 2+1
   workers, joined by a WAN of 100 or 20 Mbit/s, unlimited inside a cluster,
   each worker given its cluster (--cluster), density 1% and 10%.
4. Writes frugal_runs.csv (flat) and frugal_runs_clusters.csv (--hybrid) in
   the `frugal plan frugal-validate` format, with Frugal's staleness, and
   validates each three times: from the profile alone (independent
   selections), with the measured compute time per sample, and with both
   the compute and the measured merged density (the controller's
   situation; Note [Selections overlap]).
Every run is at a fixed density (--adapt off) and --staleness STALENESS.
Needs root (network namespaces).
"""
import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from harness import hold_testbed_lock, read_jsonl, run_job  # noqa: E402


def run_config(args, workers, rate, density, batch, name, sync="step"):
    """WORKERS: a count (flat topology, every link RATE) or "3+1" (clusters
    joined by a WAN of RATE). SYNC: step (the sparse gradient pipeline) or
    local (a round of parameter changes every --local-steps steps, Frugal's
    default; logged once per round)."""
    run_dir = os.path.join(args.out_dir, "runs")
    metrics = os.path.join(run_dir, name, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    steps = args.steps if sync == "step" else args.local_steps_total
    worker_args = ["--sync", sync, "--model", "mlp", "--density", str(density), "--batch-size", str(batch),
                   "--max-steps", str(steps), "--epochs", "5", "--eval-every", "100000",
                   "--checksum-every", "0", "--runs-dir", run_dir, "--run-name", name, "--timeout-s", "120"]
    if sync == "step":
        worker_args += ["--log-every", "1", "--adapt", "off", "--staleness", str(args.staleness)]
    else:  # a window of one round holds each of its fragments' sync points once
        worker_args += ["--log-every", str(LOCAL_STEPS)]
    run_job(args.frugal, workers, rate, worker_args, os.path.join(run_dir, name + "-logs"))
    steps = [r for r in read_jsonl(metrics) if "iter_s" in r and r["step"] > steps // 2]
    iter_s = statistics.median(r["iter_s"] for r in steps)
    compute = statistics.median(r["compute_s"] for r in steps)
    # The pipeline thread's stages per step (engine counters), for the stage
    # breakdown next to the planner's.
    stages = {k: statistics.median(r.get(k, 0.0) for r in steps) for k in STAGES}
    return iter_s, compute / batch, stages


STAGES = ("sparsify_s", "exchange_s", "optimizer_s", "wait_s", "merged_density")
LOCAL_STEPS = 16  # frugal's default --local-steps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default=os.path.join(ROOT, "build", "frugal"))
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "build", "bench", "planner"))
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--combine-gbs", default="0.2", help="[host] cpu_combine_gbs written into the profile")
    ap.add_argument("--staleness", type=int, default=0, choices=(0, 1), help="frugal --staleness (default 0, frugal's)")
    ap.add_argument("--hybrid", action="store_true", help="also the uneven two-cluster runs (plan hybrid's check)")
    ap.add_argument("--no-flat", action="store_true", help="skip the 12 flat runs")
    ap.add_argument("--local", action="store_true",
                    help="also uneven two-cluster runs in the local mode (frugal train's default; plan hybrid's default)")
    ap.add_argument("--local-steps-total", type=int, default=160, help="steps of each --local run (16 per round)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("frugal_runs: needs root (network namespaces)")
    os.makedirs(args.out_dir, exist_ok=True)
    # One testbed for the whole run, so that no other benchmark runs between
    # the profile and the configurations.
    lock = hold_testbed_lock(True, lambda: print("frugal_runs: waiting for another testbed run", flush=True))
    hw = os.path.join(args.out_dir, "this-machine.toml")
    ops = os.path.join(args.out_dir, "mlp_ops.csv")
    subprocess.run([args.frugal, "profile", "--model", "mlp", "--micro-batch", "64", "--out", ops,
                    "--hardware-out", hw], check=True)
    # The profile does not measure these two: the host's cores, and
    # the combine rate fitted once on the 2-worker rows (docs/design/planner.md).
    with open(hw) as f:
        text = f.read()
    if "cores =" not in text:
        text = text.replace("[host]\n", "[host]\ncores = %d.0\ncpu_combine_gbs = %s\n" % (os.cpu_count(), args.combine_gbs))
        with open(hw, "w") as f:
            f.write(text)
    groups = []
    if not args.no_flat:
        configs = []
        k = 0
        for workers in (2, 4):
            for rate in (100, 500, 0):
                for density in (0.01, 0.1):
                    configs.append((workers, rate, density, 32 if k % 2 else 64))
                    k += 1
        groups.append(("frugal_runs", configs, "step"))
    if args.hybrid:
        groups.append(("frugal_runs_clusters", [("3+1", 100, 0.01, 64), ("3+1", 100, 0.1, 32),
                                                ("3+1", 20, 0.1, 64), ("2+1", 100, 0.1, 32)], "step"))
    if args.local:  # compute-bound at 100 Mbit/s, the WAN the bottleneck below (plan frugal)
        groups.append(("frugal_runs_clusters_local", [("3+1", 100, 1, 64), ("3+1", 20, 1, 64),
                                                      ("3+1", 10, 1, 64), ("2+1", 20, 1, 64)], "local"))
    outputs = []
    for stem, configs, sync in groups:
        rows = []
        for workers, rate, density, batch in configs:
            name = "w%s-r%d-d%g-b%d%s" % (workers, rate, density, batch, "-local" if sync == "local" else "")
            iter_s, s_per_sample, stages = run_config(args, workers, rate, density, batch, name, sync)
            print("%-22s iteration %.3f s, compute %.2f ms/sample, %s, merged density %.4f" %
                  (name, iter_s, 1e3 * s_per_sample,
                   " ".join("%s %.1f ms" % (k, 1e3 * v) for k, v in stages.items() if k.endswith("_s")),
                   stages["merged_density"]), flush=True)
            rows.append((workers, rate, density, batch, iter_s, s_per_sample, stages))
        outputs += write_rows(args, stem, rows, LOCAL_STEPS if sync == "local" else 0)
    # Every worker runs on this one host: --workers-per-host 0.
    # The wire bytes are frugal-validate's default, Frugal's default wire
    # (int4 chunks, int8 merged updates, varint block ids); rows of runs that
    # sent fp16 are validated with --bytes-per-value 2.25.
    common = ["--workers-per-host", "0"]
    lock.close()
    for path, fed in outputs:
        extra = common if fed else ["--shared-cpu"] + common
        print("\n$ frugal plan frugal-validate %s --hardware %s %s" % (os.path.basename(path), hw, " ".join(extra)))
        subprocess.run([args.frugal, "plan", "frugal-validate", path, "--hardware", hw] + extra)


def write_rows(args, stem, rows, local_steps):
    """STEM.csv, STEM_with_compute.csv, STEM_with_telemetry.csv (validate
    format) and STEM_stages.csv; returns [(path, has measured compute)]. A
    flat run's link limit is the intra-cluster rate; a clusters run's is the
    WAN (inter) rate. LOCAL_STEPS > 0: local-mode runs (a `local steps`
    column; no merged density, which only the step mode has)."""
    header = "model,clusters,intra mbps,inter mbps,density,batch per worker,iteration time (ms),staleness"
    if local_steps:
        return write_local_rows(args, stem, rows, header + ",local steps")
    plain = os.path.join(args.out_dir, stem + ".csv")
    fed = os.path.join(args.out_dir, stem + "_with_compute.csv")
    tele = os.path.join(args.out_dir, stem + "_with_telemetry.csv")
    with open(plain, "w") as f, open(fed, "w") as g, open(tele, "w") as h:
        f.write(header + "\n")
        g.write(header + ",compute ms per sample\n")
        h.write(header + ",compute ms per sample,merged density\n")
        for workers, rate, density, batch, iter_s, sps, stages in rows:
            bw = str(rate) if rate else "unlimited"
            intra, inter = ("unlimited", bw) if "+" in str(workers) else (bw, "unlimited")
            line = "mlp,%s,%s,%s,%g,%d,%.2f,%d" % (workers, intra, inter, density, batch, 1e3 * iter_s, args.staleness)
            f.write(line + "\n")
            g.write(line + ",%.4f\n" % (1e3 * sps))
            h.write(line + ",%.4f,%.5f\n" % (1e3 * sps, stages["merged_density"]))
    with open(os.path.join(args.out_dir, stem + "_stages.csv"), "w") as f:
        f.write("workers,mbps,density,batch,iteration ms,compute ms," +
                ",".join(k[:-2] + " ms" for k in STAGES if k.endswith("_s")) + ",merged density\n")
        for workers, rate, density, batch, iter_s, sps, stages in rows:
            f.write("%s,%s,%g,%d,%.2f,%.2f,%s,%.5f\n" % (
                workers, rate or "unlimited", density, batch, 1e3 * iter_s, 1e3 * sps * batch,
                ",".join("%.2f" % (1e3 * stages[k]) for k in STAGES if k.endswith("_s")), stages["merged_density"]))
    return [(plain, False), (fed, True), (tele, True)]


def write_local_rows(args, stem, rows, header):
    """The local-mode runs: STEM.csv and STEM_with_compute.csv."""
    plain = os.path.join(args.out_dir, stem + ".csv")
    fed = os.path.join(args.out_dir, stem + "_with_compute.csv")
    with open(plain, "w") as f, open(fed, "w") as g:
        f.write(header + "\n")
        g.write(header + ",compute ms per sample\n")
        for workers, rate, density, batch, iter_s, sps, _ in rows:
            line = "mlp,%s,unlimited,%s,%g,%d,%.2f,0,%d" % (workers, rate or "unlimited", density, batch,
                                                            1e3 * iter_s, LOCAL_STEPS)
            f.write(line + "\n")
            g.write(line + ",%.4f\n" % (1e3 * sps))
    return [(plain, False), (fed, True)]


if __name__ == "__main__":
    main()
