#!/usr/bin/env python3
"""Chaos run and membership-change costs of an elastic job.

Two modes, both on loopback with real processes (docs/architecture.md,
"Membership generations"):

  --mode changes  one kill, one join and one graceful leave (SIGTERM to one
                  of the first workers), one at a time;
                  for each, the time the job stood still (from the
                  disturbance until the new generation trains again) and the
                  iterations redone (rolled back).
  --mode chaos    every 20-40 s (seeded) a random worker is SIGKILLed or a
                  new one joins, keeping 4-6 workers; then the same run
                  undisturbed; compares final test accuracy (the language
                  model: its final validation loss on --lm-eval-batches
                  fixed windows).

--testbed-rate R (changes mode, root): every process runs in its own network
namespace of the shaped testbed (testbed/testbed.sh, `flat`, each host's
link R Mbit/s both ways): the coordinator and the --workers first workers
(default 3) on hosts 0 to workers-1, the joiner on the next host. Then a
join's state crosses a real link, and the bytes the joiner's host received
until the new generation trains are counted (join_rx_bytes).

--script runs an own script under `frugal run --elastic` instead of
`frugal worker`: bench/chaos/script.py (the mlp), or with --script lm the
language model of examples/lm/train.py (--lm-size, default 25m, at
--lm-batch-size x --lm-seq-len tokens per worker, --lm-steps steps; the
data from examples/lm/prepare.py in --lm-data).

Both runs use --global-batch (default 256, the undisturbed run's 4 x 64):
the global batch, the steps per epoch and the learning-rate schedule stay
the same whatever the world size, so the chaos run differs from the calm
one only by its membership changes. --sync local runs the workers in the local-update mode
(Note [Local mode across worlds]). --global-batch 0 gives each worker
--batch-size 64 instead: then the global batch follows the world size, and
the two runs differ by more than the membership changes.

The stall of a change is measured from the coordinator's own progress
reports (`frugal job status`): the wall time between the disturbance and the
first iteration reported in the new generation beyond the restore point, so
it includes detection (heartbeat timeout for a kill), re-forming, state
transfer and the rebuild of the world.

Example:
  bench/chaos/run.py --frugal build/frugal --mode changes --out build/bench/chaos/changes.json
"""
import argparse
import glob
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from harness.testbed import Testbed, hold_testbed_lock  # noqa: E402


class Hosts:
    """Where each process runs: loopback, or testbed host i (namespace, address)."""

    def __init__(self, testbed=None):
        self.testbed = testbed

    def prefix(self, i):
        return self.testbed.prefix(i) if self.testbed else []

    def address(self, i):
        return self.testbed.hosts[i].address if self.testbed else "127.0.0.1"

    def secure_args(self):
        # The testbed's hosts are namespaces of this machine: plain TCP off
        # loopback needs --insecure.
        return ["--insecure"] if self.testbed else []


LOOPBACK = Hosts()


LM = os.path.join(HERE, "..", "..", "examples", "lm", "train.py")


class Script:
    """The workers of --script: an own training script under `frugal run
    --elastic` instead of `frugal worker`: bench/chaos/script.py (mlp), or
    examples/lm/train.py (lm)."""

    def __init__(self, args, run_name):
        self.python_path = os.path.abspath(args.python_path)
        self.run_flags = ["--heartbeat-timeout-s", str(args.heartbeat_s), "--threads", "1"]
        run_dir = os.path.join(args.runs, run_name)
        if args.script == "lm":
            self.command = [args.python, os.path.abspath(LM), "--run-dir", run_dir, "--size", args.lm_size,
                            "--steps", str(args.lm_steps), "--batch-size", str(args.lm_batch_size),
                            "--seq-len", str(args.lm_seq_len), "--data", os.path.abspath(args.lm_data),
                            "--eval-every", "0", "--eval-batches", str(args.lm_eval_batches), "--log-every", "10",
                            "--trace"]
        else:
            self.command = [args.python, os.path.join(HERE, "script.py"), "--run-dir", run_dir,
                            "--epochs", str(args.epochs), "--global-batch", str(args.global_batch or 256), "--trace"]


def children(pid):
    """The child processes of pid (each belongs to the thread that started it)."""
    out = []
    try:
        for task in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                out += [int(c) for c in f.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def signal_worker(p, sig):
    """Sends sig to the training process of worker p: the script that p
    (frugal run) started, or p itself (frugal worker, which has no child)."""
    kids = children(p.pid)
    if kids:
        for kid in kids:
            os.kill(kid, sig)
    else:
        p.send_signal(sig)


def named(args, run_args, run_name):
    """The workers' arguments for the run called run_name (its metrics in
    <runs>/<run_name>)."""
    return Script(args, run_name) if args.script else run_args + ["--run-name", run_name]


def start_coordinator(frugal, world, min_workers, heartbeat_s, hosts=LOOPBACK):
    p = subprocess.Popen(hosts.prefix(0) + [frugal, "coordinator", "--elastic", "--listen",
                                            "tcp://%s:*" % hosts.address(0), "--world", str(world),
                                            "--min-workers", str(min_workers), "--heartbeat-timeout-s", str(heartbeat_s),
                                            "--timeout-s", "120"] + hosts.secure_args(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    m = re.search(r"listening on (tcp://\S+)", p.stdout.readline())
    if not m:
        raise RuntimeError("coordinator did not start: " + p.stderr.read())
    return p, m.group(1)


def start_worker(frugal, endpoint, run_args, join=False, hosts=LOOPBACK, host=0):
    """A `frugal worker --elastic` with run_args, or, when run_args is a
    Script, one `frugal run --elastic --workers 1` of the own script."""
    if isinstance(run_args, Script):
        args = hosts.prefix(host) + [frugal, "run", "--elastic", "--coordinator", endpoint, "--workers", "1",
                                     *run_args.run_flags]
        if hosts.testbed:
            args += ["--listen", "tcp://%s:*" % hosts.address(host)] + hosts.secure_args()
        if join:
            args.append("--join")
        args += ["--", *run_args.command]
        return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, PYTHONPATH=run_args.python_path, OMP_NUM_THREADS="1"))
    args = hosts.prefix(host) + [frugal, "worker", "--elastic", "--coordinator", endpoint, "--quiet", *run_args]
    if hosts.testbed:
        args += ["--listen", "tcp://%s:*" % hosts.address(host)] + hosts.secure_args()
    if join:
        args.append("--join")
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def status(frugal, endpoint, hosts=LOOPBACK):
    r = subprocess.run(hosts.prefix(0) + [frugal, "job", "status", "--json", "--coordinator", endpoint] +
                       hosts.secure_args(), capture_output=True, text=True, timeout=30)
    return json.loads(r.stdout) if r.returncode == 0 else None


def running(s):
    return [m for m in s["members"] if m["state"] == "running"] if s else []


def wait_progress(frugal, endpoint, generation, beyond, limit_s=600, hosts=LOOPBACK, seen_generation=None,
                  workers=()):
    """Waits until every running member of `generation` reported an iteration > beyond; returns the time.
    seen_generation, if given, gets the time the coordinator first showed `generation`."""
    deadline = time.time() + limit_s
    while time.time() < deadline:
        s = status(frugal, endpoint, hosts)
        ms = running(s)
        if seen_generation is not None and s and s["generation"] >= generation and not seen_generation:
            seen_generation.append(time.time())
        if s and s["generation"] >= generation and ms and min(m["iteration"] for m in ms) > beyond:
            return time.time(), s
        if workers and all(w.poll() is not None for w in workers):
            raise RuntimeError("every worker exited: " + " | ".join(w.stderr.read()[-300:] for w in workers))
        time.sleep(0.05)
    raise RuntimeError("no progress beyond iteration %d in generation %d" % (beyond, generation))


def rx_bytes(hosts, i):
    """Bytes received so far on testbed host i's interface (None on loopback,
    where every process shares one)."""
    if not hosts.testbed:
        return None
    r = subprocess.run(hosts.prefix(i) + ["cat", "/sys/class/net/%s/statistics/rx_bytes" % hosts.testbed.ifname(i)],
                       capture_output=True, text=True)
    return int(r.stdout) if r.returncode == 0 else None


def first_step(run_dir, worker):
    """The wall time of the first step the script of worker (frugal run) traced, or None."""
    for pid in children(worker.pid):
        try:
            with open(os.path.join(run_dir, "steps-%d.txt" % pid)) as f:
                line = f.readline().split()
            if line:
                return float(line[1])
        except FileNotFoundError:
            pass
    return None


def change_costs(args, run_args, hosts=LOOPBACK):
    n = args.workers
    co, ep = start_coordinator(args.frugal, n, n - 1, args.heartbeat_s, hosts)
    workers = [start_worker(args.frugal, ep, run_args, hosts=hosts, host=h) for h in range(n)]
    run_dir = os.path.join(args.runs, "changes")
    results = []
    _, s = wait_progress(args.frugal, ep, 1, 30, hosts=hosts, workers=workers)
    for kind in ("kill", "join", "leave"):
        before = max(m["iteration"] for m in running(s))
        gen = s["generation"]
        t0 = time.time()
        joiner = None
        if kind == "kill":
            victim = next(w for w in workers if w.poll() is None)
            signal_worker(victim, signal.SIGKILL)
        elif kind == "join":
            rx0 = rx_bytes(hosts, n)
            joiner = start_worker(args.frugal, ep, run_args, join=True, hosts=hosts, host=n)
            workers.append(joiner)
        else:
            # one of the first workers, not the joiner: a preempted worker
            # has trained for a while (a joiner's first gates, in fresh
            # memory, are slower than a leave)
            victim = next(w for w in workers[:n] if w.poll() is None)
            signal_worker(victim, signal.SIGTERM)
        # The restore point is at most `before`; wait for progress beyond it in the next generation.
        seen = []
        t1, s = wait_progress(args.frugal, ep, gen + 1, before, hosts=hosts, seen_generation=seen, workers=workers)
        after = s["generation"]
        # stall_s: from the disturbance (for a join: the joiner's start, while
        # the others train on); formed_to_progress_s: from the coordinator
        # first showing the new generation until every member trains in it
        # (the state transfer to a joiner included).
        results.append({"change": kind, "at": t0, "stall_s": round(t1 - t0, 2),
                        "formed_to_progress_s": round(t1 - seen[0], 2) if seen else None,
                        "iteration_at_change": before, "generation": after, "workers": len(running(s))})
        if joiner is not None and isinstance(run_args, Script):
            # joiner_start_to_step_s: from starting the joiner until its
            # first step (its interpreter's start, registration, waiting for
            # the others' gate, the state's transfer and restore).
            first = first_step(run_dir, joiner)
            results[-1]["joiner_start_to_step_s"] = round(first - t0, 2) if first else None
            if seen and first:
                results[-1]["joiner_formed_to_step_s"] = round(first - seen[0], 2)
            rx1 = rx_bytes(hosts, n)
            if rx0 is not None and rx1 is not None:
                results[-1]["join_rx_bytes"] = rx1 - rx0
        print(json.dumps(results[-1]), flush=True)
        _, s = wait_progress(args.frugal, ep, after, before + 20, hosts=hosts, workers=workers)
    for w in workers:
        if w.poll() is None:
            w.wait(timeout=900)
    co.wait(timeout=120)
    log = co.stderr.read()
    restores = [int(x) for x in re.findall(r"restoring the state of iteration (\d+)", log)]
    lost = re.findall(r"lost: (.*)", log)
    switches = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("event") == "generation":
                switches.append(rec)
    if lost:
        next(r for r in results if r["change"] == "kill")["coordinator_says"] = lost[0]
    for r, rest, sw in zip(results, restores, switches):
        r["restored_iteration"] = rest
        r["iterations_redone"] = max(0, r["iteration_at_change"] - rest)
        # Measured by the worker that is rank 0 of the new generation: from
        # leaving the old world (switch gate, or the failed wait after a
        # loss) until the new one was ready; the join's stall_s above also
        # counts the joiner's own start-up, while the others kept training.
        r["switch_s"] = round(sw["switch_s"], 3) if sw.get("switch_s") is not None else None
        # its parts (own scripts): leaving the old world, waiting for the
        # next generation, building the engine, restoring, the first gate
        r["switch_parts"] = {k: sw[k] for k in ("leave_s", "next_s", "build_s", "restore_s", "gate_s") if k in sw}
    if isinstance(run_args, Script):
        step_stalls(results, run_dir)
    for r in results:
        del r["at"]
    return results


WINDOW = 16  # steps after a change that window_lost_s covers: two of the LM's gates


def step_stalls(results, run_dir):
    """--script: what each change cost the workers that were there before
    and after it, from the scripts' own step times (steps-PID.txt:
    iteration, wall time, generation), without the status polls' latency:
    gap_s, the longest time between a worker's last step in the old
    generation and its first in the new one; lost_s, that less one ordinary
    step (step_s: the median of each worker's last 30 step times before the
    change) plus the iterations redone at step_s: the training time the
    change cost at the switch. window_lost_s also counts what the change
    costs after it (a joiner's first round and gate, which the others wait
    for): the time of the WINDOW steps from the old generation's last one,
    less WINDOW ordinary steps; an upper bound, as it also holds the
    window's own rounds and gates."""
    workers = []
    for path in glob.glob(os.path.join(run_dir, "steps-*.txt")):
        with open(path) as f:
            workers.append([(float(w), int(g)) for _, w, g in (line.split() for line in f if line.strip())])
    for r in results:
        gaps, around, window = [], [], []
        for steps in workers:
            before = [w for w, _ in steps if w < r["at"]][-31:]
            gaps += [b - a for a, b in zip(before, before[1:])]
            old = [w for w, g in steps if g < r["generation"]]
            new = [w for w, g in steps if g >= r["generation"]]
            if old and new:
                around.append(new[0] - old[-1])
            if old and len(new) >= WINDOW:
                window.append(new[WINDOW - 1] - old[-1])
        gaps.sort()
        step_s = gaps[len(gaps) // 2] if gaps else 0.0
        if around:
            r["gap_s"] = round(max(around), 2)
            r["lost_s"] = round(max(0.0, max(around) - step_s) + r.get("iterations_redone", 0) * step_s, 2)
            r["step_s"] = round(step_s, 3)
        if window:
            r["window_lost_s"] = round(max(window) - WINDOW * step_s + r.get("iterations_redone", 0) * step_s, 2)


def final_result(metrics_path):
    """The run's final test accuracy (frugal worker, the mlp script) or,
    for the language model, its final validation loss."""
    acc = loss = None
    with open(metrics_path) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("final") and "test_accuracy" in rec:
                acc = rec["test_accuracy"]
            if "val_loss" in rec:
                loss = rec["val_loss"]
    return acc if acc is not None else loss


def chaos(args, run_args, runs):
    rng = random.Random(args.seed)
    co, ep = start_coordinator(args.frugal, 4, 3, args.heartbeat_s)
    workers = [start_worker(args.frugal, ep, named(args, run_args, "chaos")) for _ in range(4)]
    events = []
    t_start = time.time()
    next_event = t_start + rng.uniform(20, 40)
    while co.poll() is None:
        time.sleep(0.2)
        if time.time() < next_event:
            continue
        alive = [w for w in workers if w.poll() is None]
        if not alive:
            break
        if len(alive) >= 6 or (len(alive) > 4 and rng.random() < 0.5):
            victim = rng.choice(alive)
            signal_worker(victim, signal.SIGKILL)
            events.append({"t_s": round(time.time() - t_start, 1), "event": "kill"})
        else:
            workers.append(start_worker(args.frugal, ep, named(args, run_args, "chaos"), join=True))
            events.append({"t_s": round(time.time() - t_start, 1), "event": "join"})
        print(json.dumps(events[-1]), flush=True)
        next_event = time.time() + rng.uniform(20, 40)
    chaos_s = time.time() - t_start
    chaos_rc = co.returncode
    co2, ep2 = start_coordinator(args.frugal, 4, 1, args.heartbeat_s)
    t0 = time.time()
    calm = [start_worker(args.frugal, ep2, named(args, run_args, "calm")) for _ in range(4)]
    for w in calm:
        w.wait()
    co2.wait()
    return {"seed": args.seed, "epochs": args.epochs, "global_batch": args.global_batch, "events": events, "chaos_coordinator_rc": chaos_rc, "chaos_s": round(chaos_s, 1),
            "metric": "val_loss" if args.script == "lm" else "test_accuracy",
            "chaos_result": final_result(os.path.join(runs, "chaos", "metrics.jsonl")),
            "calm_s": round(time.time() - t0, 1),
            "calm_result": final_result(os.path.join(runs, "calm", "metrics.jsonl"))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frugal", required=True)
    ap.add_argument("--mode", choices=["changes", "chaos"], default="changes")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--heartbeat-s", type=float, default=2.0)
    ap.add_argument("--global-batch", type=int, default=256, help="0: --batch-size 64 per worker")
    ap.add_argument("--testbed-rate", type=int, default=0,
                    help="changes mode: run on the shaped testbed, each link this many Mbit/s (0: loopback)")
    ap.add_argument("--sync", choices=["step", "local", "auto"], default="step",
                    help="the workers' mode (frugal worker --sync). Default step; an elastic job's own "
                         "default (auto) is local")
    ap.add_argument("--script", nargs="?", const="mlp", choices=["mlp", "lm"],
                    help="the workers run an own script under frugal run --elastic instead of frugal worker: mlp "
                         "(alone: bench/chaos/script.py, the mlp on Fashion-MNIST through frugal.DistributedModel, "
                         "sync auto) or lm (examples/lm/train.py, sync auto)")
    ap.add_argument("--workers", type=int, default=3, help="changes mode: the first world's workers (default 3)")
    ap.add_argument("--lm-size", default="25m", help="--script lm: the model size (default 25m)")
    ap.add_argument("--lm-steps", type=int, default=160, help="--script lm: the run's steps (default 160)")
    ap.add_argument("--lm-batch-size", type=int, default=1, help="--script lm: sequences per worker (default 1)")
    ap.add_argument("--lm-seq-len", type=int, default=64, help="--script lm: tokens per sequence (default 64)")
    ap.add_argument("--lm-data", default="build/lm/data", help="--script lm: prepare.py's output folder")
    ap.add_argument("--lm-eval-batches", type=int, default=20,
                    help="--script lm: validation windows of the final loss (the same in every run)")
    ap.add_argument("--python", default="/usr/bin/python3", help="--script: the interpreter")
    ap.add_argument("--python-path", default="build/python", help="--script: where the frugal package is")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.workers < 2:
        ap.error("--workers must be >= 2 (a kill must leave a world)")
    args.frugal = os.path.abspath(args.frugal)
    runs = tempfile.mkdtemp(prefix="frugal_chaos_")
    args.runs = runs
    run_args = ["--model", "mlp", "--epochs", str(args.epochs), "--threads", "1", "--runs-dir", runs,
                "--heartbeat-timeout-s", str(args.heartbeat_s), "--sync", args.sync]
    if args.global_batch > 0:
        run_args += ["--global-batch", str(args.global_batch)]
    if args.mode == "changes" and args.testbed_rate > 0:
        ok, why = Testbed.available()
        if not ok:
            sys.exit("--testbed-rate needs the namespace testbed: " + why)
        lock = hold_testbed_lock(wait=True)  # noqa: F841 (held for the run)
        hosts = args.workers + 1  # the joiner's too
        with Testbed().up("flat", str(hosts), rate=args.testbed_rate, expect=hosts) as tb:
            changes = change_costs(args, named(args, run_args, "changes"), Hosts(tb))
        result = {"mode": "changes", "testbed_rate_mbit": args.testbed_rate, "changes": changes}
    elif args.mode == "changes":
        result = {"mode": "changes", "changes": change_costs(args, named(args, run_args, "changes"))}
    if args.mode == "changes":
        result.update(workers=args.workers, script=args.script, runs=runs)
    else:
        result = dict(mode="chaos", **chaos(args, run_args, runs))
    print(json.dumps(result, indent=2))
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
