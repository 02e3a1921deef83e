#!/usr/bin/env python3
"""What the Python path costs: the same model and settings trained by
`frugal train` and by an own script through frugal.DistributedModel.

Each repeat runs, back to back, `frugal train --model mlp --dataset synthetic`
and `frugal run -- python3 mlp_script.py` (the zoo's mlp in PyTorch, the
optimizer by name as frugal train runs it, and with --torch-optimizer a
torch.optim.SGD as a third system), on the same worker count, batch, sync
mode and one LibTorch thread per worker. Both write metrics.jsonl through
the same reporter; the iteration time of a run is the median over its
windows (after the first) of the training seconds per step. The summary
gives each system's median over the repeats and its ratio to frugal train
of the same repeat (median of the ratios): the goal is at most 1.05.

    bench/python_path/run.py --frugal build/frugal --python-path build/python --repeats 5 \\
        --out build/bench/python_path

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


def iteration_seconds(metrics_path):
    """The median training seconds per step over the windows of a
    metrics.jsonl after the first (the warm-up); ValueError with fewer than
    three windows."""
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


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frugal", default="build/frugal")
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--python-path", default="build/python", help="where the frugal package is")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--sync", default="local", choices=["local", "step"])
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--torch-optimizer", action="store_true", help="also the script with a torch.optim.SGD")
    p.add_argument("--timeout-s", type=float, default=1800)
    p.add_argument("--out", default="build/bench/python_path")
    args = p.parse_args(argv)
    if args.steps < 3 * args.log_every:
        raise SystemExit(f"python_path: --steps {args.steps} gives fewer than 3 metrics windows of --log-every "
                         f"{args.log_every}")
    os.makedirs(args.out, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.path.abspath(args.python_path), OMP_NUM_THREADS="1")
    systems = {"frugal_train": None, "script": "engine"}
    if args.torch_optimizer:
        systems["script_torch_optimizer"] = "torch"
    seconds = {name: [] for name in systems}
    common = ["--batch-size", str(args.batch_size), "--sync", args.sync]
    for r in range(args.repeats):
        for name, optimizer in systems.items():
            run_dir = os.path.join(os.path.abspath(args.out), f"{name}-{r}")
            if optimizer is None:
                cmd = [args.frugal, "train", "--model", "mlp", "--dataset", "synthetic", "--workers",
                       str(args.workers), "--max-steps", str(args.steps), "--threads", "1", "--log-every",
                       str(args.log_every), "--runs-dir", os.path.abspath(args.out), "--run-name", f"{name}-{r}",
                       "--quiet"] + common
            else:
                cmd = [args.frugal, "run", "--workers", str(args.workers), "--", args.python,
                       os.path.join(HERE, "mlp_script.py"), "--steps", str(args.steps), "--optimizer", optimizer,
                       "--run-dir", run_dir, "--log-every", str(args.log_every)] + common
            t0 = time.time()
            run(cmd, env, run_dir + ".log", args.timeout_s)
            seconds[name].append(iteration_seconds(os.path.join(run_dir, "metrics.jsonl")))
            print(f"repeat {r} {name}: {seconds[name][-1] * 1000:.1f} ms/step ({time.time() - t0:.0f} s)",
                  flush=True)
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
