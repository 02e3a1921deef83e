#!/usr/bin/env python3
"""A worker of a running elastic cluster job crashes: is the job restarted
from its checkpoint and finished, not lost?

One `frugal cluster serve` (afs-p, elastic controller) + one agent on
loopback; one job. Once the job has reported a step past its first
checkpoint, one of its `frugal worker` processes (found under this run's
agent work dir) gets SIGKILL. The script then waits for the job to end and
prints the server's events for it, the first step record of the new
incarnation in the job's metrics.jsonl (a restart from the step-10
checkpoint logs step 15 next; from scratch, step 5) and its final state.
Exit 0 iff the job finished after exactly one restart and resumed from a
checkpoint.

Usage: bench/cluster/crash_worker.py --frugal build/frugal [--steps 60] [--out crash.json]
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live import get, start_cluster, stop_all  # noqa: E402


def job_workers(root):
    """PIDs of `frugal worker` processes whose arguments name this run's dir."""
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, timeout=30).stdout
    pids = []
    for line in out.splitlines():
        pid, _, cmd = line.strip().partition(" ")
        if " worker " in cmd and root in cmd:
            pids.append(int(pid))
    return pids


def resumed_at(metrics_path):
    """The first step record written after the step counter went back (the
    new incarnation's first record), or None if it never went back."""
    last = -1
    with open(metrics_path) as f:
        for line in f:
            r = json.loads(line)
            if "event" in r or "step" not in r:
                continue
            if r["step"] < last or (r["step"] == last and "loss" in r):
                return r["step"]
            last = r["step"]
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frugal", required=True)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--crash-after-step", type=int, default=15)
    ap.add_argument("--timeout-s", type=float, default=900)
    ap.add_argument("--out")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="frugal-crash-")
    frugal = os.path.abspath(args.frugal)
    server, agents, port = start_cluster(frugal, "afs-p", "elastic", root, slots=4)
    result = {"root": root}
    try:
        path = os.path.join(root, "job.toml")
        with open(path, "w") as f:
            f.write(f'name = "crash"\nmin_workers = 2\nmax_workers = 4\nmodel = "mlp"\ndataset = "synthetic"\n'
                    f"synthetic_train_size = 8192\nsynthetic_test_size = 256\nmax_steps = {args.steps}\n"
                    f"log_every = 5\nbatch_size = 32\ntimeout_s = 60\nelastic_every = 5\n")
        subprocess.run([frugal, "cluster", "submit", path, "--server", f"127.0.0.1:{port}"], check=True,
                       capture_output=True, timeout=300)
        deadline = time.time() + args.timeout_s
        while time.time() < deadline and get(port, "/api/jobs")[0]["step"] < args.crash_after_step:
            time.sleep(1)
        victims = job_workers(root)
        if not victims:
            raise RuntimeError("no worker process found under " + root)
        os.kill(victims[0], signal.SIGKILL)
        result.update(killed_pid=victims[0], step_at_crash=get(port, "/api/jobs")[0]["step"])
        print(f"killed worker pid {victims[0]} at step {result['step_at_crash']}", flush=True)
        while time.time() < deadline and get(port, "/api/jobs")[0]["state"] not in ("finished", "failed"):
            time.sleep(1)
        job = get(port, "/api/jobs")[0]
        events = [e for e in get(port, "/api/events?limit=1000") if e["job_id"] == job["id"]]
        metrics = os.path.join(root, "agent", "runs", f"job-{job['id']}", "metrics.jsonl")
        result.update(state=job["state"], restarts=job["restarts"], generation=job["generation"],
                      jct_s=job["finish_time"] - job["submit_time"],
                      first_record_of_new_incarnation=resumed_at(metrics) if os.path.exists(metrics) else None,
                      events=[f"{e['kind']}: {e['message']}" for e in events])
    finally:
        stop_all(*agents, server)
    for e in result.get("events", []):
        print("  " + e)
    print(json.dumps({k: v for k, v in result.items() if k != "events"}, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    # Resumed from a checkpoint: the new incarnation's first record (every
    # 5 steps) comes after step 5; from scratch it would be step 5.
    ok = result.get("state") == "finished" and result.get("restarts") == 1 and (
        result.get("first_record_of_new_incarnation") or 0) > 5
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
