#!/usr/bin/python3
"""Controller experiment on the shaped testbed (issue 8): the link steps from
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
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from jsonl_records import read_jsonl  # noqa: E402
TESTBED = os.path.join(ROOT, "testbed", "testbed.sh")


def main():
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
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("step_change: needs root (network namespaces)")
    os.makedirs(args.out_dir, exist_ok=True)
    run_dir = os.path.join(args.out_dir, "runs")
    metrics_path = os.path.join(run_dir, "step", "metrics.jsonl")
    if os.path.exists(metrics_path):
        os.remove(metrics_path)

    subprocess.run(["bash", TESTBED, "up", "flat", "--hosts", "4", "--rate", str(args.high)], check=True)
    procs = []
    switch_wall = None
    try:
        info = subprocess.run(["bash", TESTBED, "info"], check=True, capture_output=True, text=True).stdout
        hosts = [l.split() for l in info.splitlines() if l.strip() and not l.startswith("#")]
        coord = "tcp://%s:29600" % hosts[0][2]
        procs.append(subprocess.Popen(["ip", "netns", "exec", hosts[0][1], args.frugal, "coordinator", "--listen",
                                       coord, "--world", "4"], stdout=subprocess.DEVNULL))
        time.sleep(0.3)
        for i, h in enumerate(hosts):
            cmd = ["ip", "netns", "exec", h[1], args.frugal, "worker", "--coordinator", coord, "--rank", str(i),
                   "--listen", "tcp://%s:*" % h[2], "--threads", "1", "--model", "mlp", "--adapt", "on",
                   "--decide-every", str(args.decide_every), "--max-steps", str(args.steps), "--epochs", "5",
                   "--log-every", "1", "--eval-every", "100000", "--checksum-every", "50",
                   "--runs-dir", run_dir, "--run-name", "step", "--timeout-s", "120"] + args.frugal_args.split()
            if i > 0:
                cmd.append("--quiet")
            log = open(os.path.join(args.out_dir, "rank%d.log" % i), "w")
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
        deadline = time.time() + args.timeout_s
        while time.time() < deadline and any(p.poll() is None for p in procs[1:]):
            if switch_wall is None:
                steps = [r["step"] for r in read_jsonl(metrics_path) if "iter_s" in r]
                if steps and max(steps) >= args.switch_step:
                    subprocess.run(["bash", TESTBED, "set-rate", str(args.low)], check=True)
                    switch_wall = max(r["wall_time_s"] for r in read_jsonl(metrics_path))
                    print("switched %d -> %d Mbit/s at step %d" % (args.high, args.low, max(steps)), flush=True)
            time.sleep(0.2)
        failed = [i for i, p in enumerate(procs[1:]) if p.poll() not in (0,)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        subprocess.run(["bash", TESTBED, "down"], capture_output=True)
    if failed:
        sys.exit("step_change: workers %s failed; see %s/rank*.log" % (failed, args.out_dir))

    recs = read_jsonl(metrics_path)
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
    with open(os.path.join(args.out_dir, "step_change.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("settling iterations after the switch: %s (density changes at %s)" % (settle, changes_after))

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
    print("wrote %s/step_change.{json,png}" % args.out_dir)


if __name__ == "__main__":
    main()
