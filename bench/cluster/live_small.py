#!/usr/bin/env python3
"""A small live workload on one machine (CPU slots, loopback): the same jobs
under several policies, each on a fresh `frugal cluster serve` + one agent.

Reports per-job JCT (finish - submit, from the server's own records), the
average, the makespan, the number of resizes, and for every resize of a
running job how long it took: from the server's resize event to the first
step record the job reports at its new size (server receive times), and the
step regression (the newest step reported before the event minus the first
after it, when positive; work redone between two log records is not seen). Everything is real: the jobs are elastic Frugal
jobs (--controllers elastic: resized in place) or `frugal train` runs that
the agent restarts from checkpoints (--controllers restart).

Each run is then replayed in the simulator (replay.py): the jobs' submit
times and the throughput measured at each worker count become a workload and
a `--table` CSV for `frugal cluster simulate` with the same policy, and the
simulated average JCT is printed beside the live one.

Usage: bench/cluster/live_small.py --frugal build/frugal [--policies afs-p,fifo]
       [--controllers elastic,restart] [--slots 4] [--jobs 3] [--steps 60]
       [--gap-s 20] [--out results.json]
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replay  # noqa: E402


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return json.loads(r.read())


def resize_times(port, jobs, events):
    """Per resize of a running job: seconds until the job reports a step at
    its new size, and the steps redone."""
    out = []
    for e in events:
        m = re.match(r"(\d+) -> (\d+) workers", e["message"])
        if e["kind"] != "resize" or not m:
            continue
        samples = [s for s in get(port, f"/api/jobs/{e['job_id']}")["samples"] if s["samples_per_s"] > 0]
        before = [s["step"] for s in samples if s["time"] <= e["time"]]
        after = [s for s in samples if s["time"] > e["time"] and s["workers"] == int(m.group(2))]
        out.append({"job": e["job_id"], "from": int(m.group(1)), "to": int(m.group(2)),
                    "how": "in place" if "[in place]" in e["message"] else "restart",
                    "seconds": after[0]["time"] - e["time"] if after else None,
                    "step_regression": max(0, max(before) - after[0]["step"]) if before and after else None})
    return out


def start_cluster(frugal, policy, controller, root, slots):
    """A fresh server (rounds every 2 s, checkpoints every 10 steps) and one
    agent with `slots` CPU slots; returns (server, agent, port)."""
    out = os.path.join(root, "server.out")
    server = subprocess.Popen([frugal, "cluster", "serve", "--listen", "127.0.0.1:0", "--state",
                               os.path.join(root, "cluster.db"), "--policy", policy, "--round-s", "2",
                               "--checkpoint-every", "10", "--controller", controller],
                              stdout=open(out, "w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    port = None
    while port is None and time.time() < deadline and server.poll() is None:
        m = re.search(r"serving on http://127.0.0.1:(\d+)", open(out).read())
        port = int(m.group(1)) if m else None
        time.sleep(0.1)
    if port is None:
        stop_all(None, server)
        raise RuntimeError("server did not start: " + open(out).read())
    agent = subprocess.Popen([frugal, "cluster", "agent", "--server", f"127.0.0.1:{port}", "--slots",
                              str(slots), "--name", "host", "--work-dir", os.path.join(root, "agent"),
                              "--heartbeat-s", "0.5", "--stop-grace-s", "60"],
                             stdout=open(os.path.join(root, "agent.out"), "w"), stderr=subprocess.STDOUT)
    return server, agent, port


def stop_all(*procs):
    for p in procs:
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        if p is not None:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def run_policy(frugal, policy, controller, args, root):
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load_start = os.getloadavg()[0]
    server, agent, port = start_cluster(frugal, policy, controller, root, args.slots)
    try:
        t0 = time.time()
        for k in range(args.jobs):
            while time.time() < t0 + k * args.gap_s:
                time.sleep(0.2)
            path = os.path.join(root, f"job{k}.toml")
            with open(path, "w") as f:
                f.write(f'name = "job{k}"\nmin_workers = 2\nmax_workers = {args.slots}\nmodel = "mlp"\n'
                        f'dataset = "synthetic"\nsynthetic_train_size = 8192\nsynthetic_test_size = 256\n'
                        f"max_steps = {args.steps}\nlog_every = 5\nbatch_size = 32\ntimeout_s = 60\n"
                        f"elastic_every = 5\n")
            subprocess.run([frugal, "cluster", "submit", path, "--server", f"127.0.0.1:{port}"], check=True,
                           capture_output=True, timeout=300)
        deadline = time.time() + args.timeout_s
        while time.time() < deadline:
            jobs = get(port, "/api/jobs")
            if len(jobs) == args.jobs and all(j["state"] in ("finished", "failed") for j in jobs):
                break
            time.sleep(1)
        jobs = get(port, "/api/jobs")
        events = get(port, "/api/events?limit=1000")
        resizes = resize_times(port, jobs, events)
        details = {j["id"]: [s for s in get(port, f"/api/jobs/{j['id']}")["samples"] if s["samples_per_s"] > 0]
                   for j in jobs}
    finally:
        stop_all(agent, server)
    rows = [{"job": j["name"], "state": j["state"], "jct_s": j["finish_time"] - j["submit_time"],
             "restarts": j["restarts"], "generations": j["generation"]} for j in jobs]
    changes = sum(1 for e in events if e["kind"] in ("resize", "preempt"))
    done = [r["jct_s"] for r in rows if r["state"] == "finished"]
    return {"policy": policy, "controller": controller, "started_utc": started,
            "loadavg_1min_start_end": [load_start, os.getloadavg()[0]], "jobs": rows, "resizes": resizes,
            "avg_jct_s": sum(done) / len(done) if done else None,
            "all_finished": len(done) == len(rows), "resizes_and_preemptions": changes,
            "makespan_s": max(j["finish_time"] for j in jobs) - min(j["submit_time"] for j in jobs),
            "replay": replay.replay(frugal, root, policy, args, jobs, details, events)
            if len(done) == len(rows) else None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frugal", required=True)
    ap.add_argument("--policies", default="afs-p,fifo")
    ap.add_argument("--controllers", default="elastic")
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--gap-s", type=float, default=20)
    ap.add_argument("--timeout-s", type=float, default=1800)
    ap.add_argument("--out")
    ap.add_argument("--keep", action="store_true", help="keep the run directories (printed)")
    args = ap.parse_args()
    results = []
    for policy, controller in [(p, c) for c in args.controllers.split(",") for p in args.policies.split(",")]:
        root = tempfile.mkdtemp(prefix=f"frugal-live-{policy}-{controller}-")
        print(f"{policy} ({controller}): {root}", flush=True)
        r = run_policy(os.path.abspath(args.frugal), policy, controller, args, root)
        results.append(r)
        for z in r["resizes"]:
            print(f"  resize of job {z['job']} {z['from']} -> {z['to']} ({z['how']}): {z['seconds']} s to the first "
                  f"step at the new size, step regression {z['step_regression']}")
        print(f"{policy} ({controller}): avg JCT {r['avg_jct_s']:.1f} s, makespan {r['makespan_s']:.1f} s, "
              f"{r['resizes_and_preemptions']} resizes/preemptions, all finished: {r['all_finished']}, "
              f"load average {r['loadavg_1min_start_end'][0]:.1f} -> {r['loadavg_1min_start_end'][1]:.1f}")
        rp = r["replay"]
        if rp:
            rates = ", ".join(f"{w}: {v:.3f}" for w, v in rp["steps_per_s"].items())
            sim = rp["sim"]["avg_jct_s"]
            print(f"  measured steps/s by workers {{{rates}}}, start overhead {rp['realloc_cost_s']:.1f} s; "
                  f"simulated avg JCT {sim:.1f} s (live {r['avg_jct_s']:.1f} s, "
                  f"{100 * (sim - r['avg_jct_s']) / r['avg_jct_s']:+.1f}%); "
                  f"without the overhead {rp['sim_no_realloc']['avg_jct_s']:.1f} s; on this table: "
                  + ", ".join(f"{p} {v:.1f} s" for p, v in rp["sim_by_policy"].items()))
        for j in r["jobs"]:
            print(f"  {j['job']}: {j['state']}, JCT {j['jct_s']:.1f} s, generations {j['generations']}, "
                  f"restarts {j['restarts']}")
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if all(r["all_finished"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
