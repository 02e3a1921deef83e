#!/usr/bin/python3
"""Controller experiment on the shaped testbed: the link steps from
HIGH to LOW Mbit/s mid-run; how many iterations until the controller's
density settles?

  bench/adapt/step_change.py [--high 500] [--low 50] [--steps 240] [--switch-step 100]

Runs 4 `frugal worker` processes with --adapt on in testbed/testbed.sh's
`flat` topology (one namespace per host, every host link shaped), changes
the rate with `testbed.sh set-rate` once rank 0 has logged --switch-step,
and writes OUT_DIR/step_change.{json,png}: density, bandwidth estimate and
iteration time per step, the decisions, and the settling time (iterations
from the switch to the last density change after it). Needs root.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from harness import FrugalJob, ProcessGroup, Testbed, read_jsonl  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default=os.path.join(ROOT, "build", "frugal"))
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "build", "bench", "adapt"))
    ap.add_argument("--high", type=int, default=500)
    ap.add_argument("--low", type=int, default=50)
    ap.add_argument("--steps", type=int, default=240)
    ap.add_argument("--switch-step", type=int, default=100)
    ap.add_argument("--decide-every", type=int, default=5)
    ap.add_argument("--timeout-s", type=float, default=900)
    ap.add_argument("--frugal-args", default="", help="extra flags for every worker, e.g. '--staleness 1'")
    return ap.parse_args()


class RateSwitch:
    """Polled while the run goes: once rank 0 has logged --switch-step, sets the
    testbed's rate to --low and remembers the wall time of that moment."""

    def __init__(self, args, metrics_path):
        self.args = args
        self.metrics_path = metrics_path
        self.wall = None

    def __call__(self):
        if self.wall is not None:
            return
        recs = read_jsonl(self.metrics_path)
        steps = [r["step"] for r in recs if "iter_s" in r]
        if steps and max(steps) >= self.args.switch_step:
            Testbed.set_rate(self.args.low)
            self.wall = max(r["wall_time_s"] for r in read_jsonl(self.metrics_path))
            print("switched %d -> %d Mbit/s at step %d" % (self.args.high, self.args.low, max(steps)), flush=True)


def run_workers(args, run_dir, metrics_path):
    """4 workers with --adapt on in the `flat` testbed, the rate switched mid-run.
    Returns the switch's wall time (None if it never came); exits if a worker failed."""
    worker_args = ["--model", "mlp", "--adapt", "on", "--decide-every", str(args.decide_every), "--max-steps",
                   str(args.steps), "--epochs", "5", "--log-every", "1", "--eval-every", "100000",
                   "--checksum-every", "50", "--runs-dir", run_dir, "--run-name", "step", "--timeout-s", "120"]
    worker_args += args.frugal_args.split()
    switch = RateSwitch(args, metrics_path)
    with Testbed(quiet=False).up("flat", 4, rate=args.high) as tb, ProcessGroup() as procs:
        FrugalJob(args.frugal, tb, port=29600).start(procs, lambda rank: worker_args, log_dir=args.out_dir)
        procs.wait_all(time.time() + args.timeout_s, on_poll=switch, poll_s=0.2)
        failed = procs.failed()
    if failed:
        sys.exit("step_change: workers %s failed; see %s/rank*.log" % (failed, args.out_dir))
    return switch.wall


def main():
    args = parse_args()
    if os.geteuid() != 0:
        sys.exit("step_change: needs root (network namespaces)")
    os.makedirs(args.out_dir, exist_ok=True)
    run_dir = os.path.join(args.out_dir, "runs")
    metrics_path = os.path.join(run_dir, "step", "metrics.jsonl")
    if os.path.exists(metrics_path):
        os.remove(metrics_path)
    switch_wall = run_workers(args, run_dir, metrics_path)
    result = summarise(args, read_jsonl(metrics_path), switch_wall)
    with open(os.path.join(args.out_dir, "step_change.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("settling iterations after the switch: %s (density changes at %s)" % (
        result["settling_iterations"], result["density_changes_after_switch"]))
    plot(args, result)
    print("wrote %s/step_change.{json,png}" % args.out_dir)


def summarise(args, recs, switch_wall):
    """step_change.json: the steps, the decisions and the settling time after the switch."""
    steps = [r for r in recs if "iter_s" in r]
    decisions = [r for r in recs if "decision" in r]
    switch_step = next((r["step"] for r in steps if r["wall_time_s"] >= switch_wall), None) if switch_wall else None
    changes_after = [d["step"] for d in decisions if switch_step is not None and d["step"] >= switch_step
                     and d["decision"]["reason"] not in ("unchanged",) and "density" in d["decision"]["reason"]]
    settle = (changes_after[-1] - switch_step) if changes_after else None
    result = {"high_mbit": args.high, "low_mbit": args.low, "switch_step": switch_step,
              "density_changes_after_switch": changes_after, "settling_iterations": settle,
              "steps": [{k: r.get(k) for k in ("step", "density", "bandwidth_mbit", "iter_s", "bytes_sent_intra")}
                        for r in steps],
              "decisions": [{"step": d["step"], **d["decision"]} for d in decisions]}
    return result


def plot(args, result):
    switch_step = result["switch_step"]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax1 = plt.subplots(figsize=(8, 4))
    ds = [d for d in result["decisions"]]
    ax1.step([d["step"] for d in ds], [100 * d["density"] for d in ds], where="post", color="tab:blue",
             label="density chosen (%)")
    ax1.set_xlabel("iteration")
    ax1.set_ylabel("density (%)", color="tab:blue")
    ax2 = ax1.twinx()
    ax2.plot([d["step"] for d in ds], [d["bandwidth_mbit"] for d in ds], "o-", color="tab:red", ms=3,
             label="bandwidth estimate (Mbit/s)")
    ax2.set_ylabel("link estimate (Mbit/s)", color="tab:red")
    if switch_step is not None:
        ax1.axvline(switch_step, color="gray", ls="--")
        ax1.text(switch_step, ax1.get_ylim()[1] * 0.95, " %d -> %d Mbit/s" % (args.high, args.low), color="gray")
    fig.tight_layout()
    fig.savefig(os.path.join(args.out_dir, "step_change.png"), dpi=110)


if __name__ == "__main__":
    main()
