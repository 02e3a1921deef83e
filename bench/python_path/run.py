#!/usr/bin/env python3
"""What the Python path costs: the same model and settings trained by
`frugal train` and by an own script through frugal.DistributedModel.

Each repeat runs, back to back, `frugal train --model M` (mlp on the
synthetic dataset, gpt-tiny on the text corpus) and `frugal run -- python3
script.py --model M` (the same zoo model in PyTorch, the optimizer by name as
frugal train runs it, and with --torch-optimizer a torch.optim.SGD as a third
system), on the same worker count, batch, sync mode and one LibTorch thread
per worker. With --testbed R each worker is a host of the flat testbed
(testbed/testbed.sh, links of R Mbit/s; root): `frugal coordinator` and one
`frugal worker` or one `frugal run --workers 1` per host. Both write metrics.jsonl through
the same reporter; the iteration time of a run is the median over its
windows (after the first two: start-up and warm-up) of the training
seconds per step. The summary
gives each system's median over the repeats and its ratio to frugal train
of the same repeat (median of the ratios): the goal is at most 1.05.

    bench/python_path/run.py --frugal build/frugal --python-path build/python --repeats 5 \\
        --out build/bench/python_path
    bench/python_path/run.py --model gpt-tiny --batch-size 8 --steps 60 --testbed 100

Run it on a quiet machine (`nice -n 19` does not shield it from other work).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from harness.frugal import FrugalJob  # noqa: E402
from harness.procs import ProcessGroup  # noqa: E402
from harness.testbed import Testbed  # noqa: E402


def iteration_seconds(metrics_path):
    """The median training seconds per step over the windows of a
    metrics.jsonl after the first two (the start-up and the warm-up: the
    first window's record has no predecessor, the second holds the first
    rounds); ValueError with fewer than three records of steps."""
    windows = []
    with open(metrics_path) as f:
        for line in f:
            r = json.loads(line)
            if "loss" in r and "train_time_s" in r and "step" in r:
                windows.append((r["step"], r["train_time_s"]))
    if len(windows) < 3:
        raise ValueError(f"{metrics_path}: {len(windows)} windows of steps; need at least 3 (more --steps)")
    per_step = [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in zip(windows[1:], windows[2:]) if s1 > s0]
    return statistics.median(per_step)


def summarize(runs):
    """runs: {system: [seconds per repeat]}, with "frugal_train" among them.
    Returns {system: {"median_s", "ratios", "median_ratio"}}."""
    base = runs["frugal_train"]
    out = {}
    for system, seconds in runs.items():
        ratios = [s / b for s, b in zip(seconds, base)]
        out[system] = {"median_s": statistics.median(seconds), "seconds": seconds, "ratios": ratios,
                       "median_ratio": statistics.median(ratios)}
    return out


def run(cmd, env, log_path, timeout_s):
    with open(log_path, "w") as log:
        rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s).returncode
    if rc != 0:
        raise SystemExit(f"python_path: {' '.join(cmd)} exited {rc}; see {log_path}")


def train_args(args, run_name):
    """frugal train's (or frugal worker's) model and run flags."""
    data = ["--dataset", "synthetic"] if args.model == "mlp" else ["--dataset", "text"]
    return ["--model", args.model] + data + [
        "--max-steps", str(args.steps), "--epochs", "1000000", "--threads", "1", "--log-every", str(args.log_every), "--runs-dir",
        os.path.abspath(args.out), "--run-name", run_name, "--batch-size", str(args.batch_size), "--sync", args.sync]


def script_args(args, optimizer, run_dir):
    return [args.python, os.path.join(HERE, "script.py"), "--model", args.model, "--steps", str(args.steps),
            "--optimizer", optimizer, "--run-dir", run_dir, "--log-every", str(args.log_every), "--batch-size",
            str(args.batch_size), "--sync", args.sync]


def run_loopback(args, env, optimizer, run_name, run_dir):
    if optimizer is None:
        cmd = [args.frugal, "train", "--workers", str(args.workers), "--quiet"] + train_args(args, run_name)
    else:
        cmd = [args.frugal, "run", "--workers", str(args.workers), "--"] + script_args(args, optimizer, run_dir)
    run(cmd, env, run_dir + ".log", args.timeout_s)


def run_testbed(args, env, tb, port, optimizer, run_name, run_dir):
    """One run with one worker per testbed host; logs in RUN_DIR.logs/."""
    logs = run_dir + ".logs"
    os.makedirs(logs, exist_ok=True)
    job = FrugalJob(args.frugal, tb, port=port, quiet_all=True)
    with ProcessGroup() as procs:
        if optimizer is None:
            job.start(procs, lambda rank: train_args(args, run_name), log_dir=logs)
        else:
            procs.start(job.coordinator_command(), os.path.join(logs, "coordinator.log"), env=env, daemon=True)
            time.sleep(0.3)
            for rank in range(job.world):
                cmd = tb.prefix(rank) + [args.frugal, "run", "--workers", "1", "--coordinator", job.coordinator,
                                         "--insecure", "--"] + script_args(args, optimizer, run_dir)
                procs.start(cmd, os.path.join(logs, f"rank{rank}.log"), env=env)
        procs.wait_all(time.time() + args.timeout_s, poll_s=0.2)
        if procs.failed():
            raise SystemExit(f"python_path: the run failed (logs in {logs})")


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frugal", default="build/frugal")
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--python-path", default="build/python", help="where the frugal package is")
    p.add_argument("--model", default="mlp", choices=["mlp", "gpt-tiny"])
    p.add_argument("--workers", type=int, default=2, help="workers (testbed hosts with --testbed)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--sync", default="local", choices=["local", "step"])
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--torch-optimizer", action="store_true", help="also the script with a torch.optim.SGD")
    p.add_argument("--testbed", type=int, default=None, metavar="MBIT",
                   help="one worker per host of the flat testbed, links of MBIT Mbit/s (root)")
    p.add_argument("--port", type=int, default=29760, help="--testbed: the first coordinator port")
    p.add_argument("--timeout-s", type=float, default=1800)
    p.add_argument("--out", default="build/bench/python_path")
    args = p.parse_args(argv)
    if args.steps < 3 * args.log_every:
        p.error(f"--steps {args.steps} gives fewer than 3 metrics windows of --log-every {args.log_every}")
    if args.testbed is not None:
        ok, why = Testbed.available()
        if not ok:
            p.error(f"--testbed needs the testbed: {why}")
    return args


def main(argv=None):
    args = parse(argv)
    os.makedirs(args.out, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.path.abspath(args.python_path), OMP_NUM_THREADS="1")
    systems = {"frugal_train": None, "script": "engine"}
    if args.torch_optimizer:
        systems["script_torch_optimizer"] = "torch"
    seconds = {name: [] for name in systems}
    tb = Testbed().up("flat", args.workers, rate=args.testbed, expect=args.workers) if args.testbed else None
    try:
        for r in range(args.repeats):
            for i, (name, optimizer) in enumerate(systems.items()):
                run_name = f"{name}-{r}"
                run_dir = os.path.join(os.path.abspath(args.out), run_name)
                t0 = time.time()
                if tb is None:
                    run_loopback(args, env, optimizer, run_name, run_dir)
                else:
                    run_testbed(args, env, tb, args.port + 10 * r + i, optimizer, run_name, run_dir)
                seconds[name].append(iteration_seconds(os.path.join(run_dir, "metrics.jsonl")))
                print(f"repeat {r} {name}: {seconds[name][-1] * 1000:.1f} ms/step ({time.time() - t0:.0f} s)",
                      flush=True)
    finally:
        if tb is not None:
            tb.down()
    report(args, systems, seconds)


def report(args, systems, seconds):
    summary = summarize(seconds)
    summary["settings"] = vars(args)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    for name in systems:
        s = summary[name]
        print(f"{name}: median {s['median_s'] * 1000:.1f} ms/step, x{s['median_ratio']:.3f} frugal train "
              f"(ratios {', '.join(f'{x:.3f}' for x in s['ratios'])})")


if __name__ == "__main__":
    sys.exit(main())
