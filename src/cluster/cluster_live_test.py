#!/usr/bin/env python3
"""End-to-end test of the live cluster service on loopback (ctest cluster_live).

Real processes: `frugal cluster serve` (elastic jobs), one `frugal cluster
agent` with 4 CPU slots, and two small training jobs (mlp), each an elastic
coordinator plus one `frugal worker --elastic` per slot. It checks that

  1. job b (2 workers) starts, then job a (2-4 workers) gets the 2 free slots;
  2. the server killed with SIGKILL and restarted on the same database
     re-adopts the running tasks (same generation, nothing restarted);
  3. b cancelled (all its tasks stopped), a grows to 4 in place with two
     --join workers (a generation event with 2 joined);
  4. a third job c makes afs-p shrink a to 2 workers in place: two workers
     leave, the same coordinator and run go on (no restart: its step counter
     never goes back); c finishes by its steps;
  5. a, cancelled, has all its tasks stopped;
  6. an agent that goes silent (SIGSTOP) is marked down, and up again
     when it comes back (SIGCONT).

Usage: cluster_live_test.py --frugal build/frugal [--keep DIR]
Stdlib only. Every wait has a deadline; on failure the logs are printed.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

from cluster_test_util import get_json, parse_args, stop_processes, wait_for_server

# a and b run until the test cancels them, so the test does not depend on
# how fast they train; c ends by its steps.
STEPS = {"a": 100000, "b": 100000, "c": 20}


def cancel(fx, job_id):
    out = subprocess.run([fx.frugal, "cluster", "cancel", str(job_id), "--server", f"127.0.0.1:{fx.port}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


class Fixture:
    def __init__(self, frugal, root):
        self.frugal = frugal
        self.root = root
        self.db = os.path.join(root, "cluster.db")
        self.procs = []
        self.port = None
        self.server = None
        self.agent = None

    def log(self, name):
        return open(os.path.join(self.root, name), "a")

    def start_server(self):
        listen = f"127.0.0.1:{self.port or 0}"
        out = os.path.join(self.root, "server.out")
        self.server = subprocess.Popen(
            [self.frugal, "cluster", "serve", "--listen", listen, "--state", self.db, "--round-s", "1",
             "--node-timeout-s", "4", "--checkpoint-every", "10"],
            stdout=open(out, "a"), stderr=subprocess.STDOUT)
        self.procs.append(self.server)
        self.port = wait_for_server(self.server, out)

    def start_agent(self):
        self.agent = subprocess.Popen(
            [self.frugal, "cluster", "agent", "--server", f"127.0.0.1:{self.port}", "--slots", "4", "--name",
             "host-a", "--work-dir", os.path.join(self.root, "agent"), "--heartbeat-s", "0.5",
             "--stop-grace-s", "60"],
            stdout=self.log("agent.out"), stderr=subprocess.STDOUT)
        self.procs.append(self.agent)

    def get(self, path):
        return get_json(self.port, path)

    def submit(self, name, lo, hi):
        path = os.path.join(self.root, name + ".toml")
        with open(path, "w") as f:
            f.write(f'name = "{name}"\nmin_workers = {lo}\nmax_workers = {hi}\nmodel = "mlp"\n'
                    f'dataset = "synthetic"\nsynthetic_train_size = 4096\nsynthetic_test_size = 256\n'
                    f"max_steps = {STEPS[name]}\nlog_every = 5\nbatch_size = 32\ntimeout_s = 60\n"
                    f"elastic_every = 5\nepochs = 1000\n")  # max_steps ends a job, not 3 epochs of 4096 samples
        out = subprocess.run([self.frugal, "cluster", "submit", path, "--server", f"127.0.0.1:{self.port}"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return int(re.search(r"submitted job (\d+)", out.stdout).group(1))

    def job(self, job_id):
        jobs = self.get("/api/jobs") or []
        return next((j for j in jobs if j["id"] == job_id), None)

    def wait(self, what, pred, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            v = pred()
            if v:
                return v
            time.sleep(0.3)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")

    def stop(self):
        stop_processes(self.procs)


def metrics(fx, job_id):
    path = os.path.join(fx.root, "agent", "runs", f"job-{job_id}", "metrics.jsonl")
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path):
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # A line being written.
    return out


def generations(fx, job_id):
    return [r for r in metrics(fx, job_id) if r.get("event") == "generation"]


def tasks_running(fx, job_id):
    """Tasks of the job the agent started and has not seen exit."""
    text = open(os.path.join(fx.root, "agent.out")).read()
    started = set(re.findall(rf"starting (job-{job_id}-g\d+-\w+):", text))
    exited = set(re.findall(rf"task (job-{job_id}-g\d+-\w+) exited", text))
    return len(started - exited)


def scenario(fx):
    fx.start_server()
    fx.start_agent()
    b = fx.submit("b", 2, 2)
    fx.wait("job b running on 2 workers", lambda: (j := fx.job(b)) and j["state"] == "running" and j["workers"] == 2, 60)
    a = fx.submit("a", 2, 4)
    fx.wait("job a running on the 2 free slots",
            lambda: (j := fx.job(a)) and j["state"] == "running" and j["workers"] == 2, 60)
    fx.wait("job a past its first checkpoint", lambda: fx.job(a)["step"] >= 15, 480)
    incarnation = fx.job(a)["incarnation"]

    # Server crash and restart on the same database: the tasks keep running and are adopted.
    before = {j["id"]: j["generation"] for j in fx.get("/api/jobs")}
    fx.server.kill()
    fx.server.wait(timeout=10)
    fx.start_server()
    after = {j["id"]: (j["generation"], j["state"]) for j in fx.get("/api/jobs")}
    for job_id, g in before.items():
        assert after[job_id][0] == g, f"job {job_id} changed generation across the restart: {before} -> {after}"
    nodes = fx.get("/api/nodes")
    assert len(nodes) == 1 and nodes[0]["name"] == "host-a", nodes

    # b cancelled: a grows to 4 in place. a has never run at 4, so the policy
    # extrapolates its 2-worker rate (Note [Live throughput prior]); a rate it
    # measured at 4 would decide instead, and 4 processes on this 2-core
    # machine train slower than 2 (measured: 647 against 925 samples/s).
    cancel(fx, b)
    fx.wait("b cancelled", lambda: fx.job(b)["state"] == "cancelled", 30)
    # The two joiners may start far enough apart to join in two generations.
    try:
        fx.wait("a grown to 4 with --join workers",
                lambda: (gs := generations(fx, a)) and gs[-1]["workers"] == 4 and sum(g["joined"] for g in gs) >= 2,
                240)
    except AssertionError as e:  # Say what the policy saw: the rates it learned per worker count.
        raise AssertionError(f"{e}; job a: {fx.job(a)}") from None

    # A new job c makes afs-p shrink a to 2 in place: two workers leave, the
    # same coordinator and run go on.
    c = fx.submit("c", 2, 2)
    fx.wait("afs-p shrinking a to 2 workers for c", lambda: fx.job(a)["workers"] == 2 and fx.job(c)["workers"] == 2, 30)
    fx.wait("a's workers leaving: a later generation of 2 in its metrics",
            lambda: (gs := generations(fx, a)) and gs[-1]["workers"] == 2 and any(g["workers"] == 4 for g in gs), 120)
    fx.wait("c finished", lambda: fx.job(c)["state"] == "finished", 400)
    assert fx.job(c)["step"] >= STEPS["c"], fx.job(c)
    # The three configurations differ only in max_steps: one profile, whose
    # rates (those a and b measured at 2 and a at 4) c saw too.
    profiles = {fx.job(j)["profile"] for j in (a, b, c)}
    assert len(profiles) == 1 and profiles.pop().startswith("mlp-"), [fx.job(j)["profile"] for j in (a, b, c)]

    cancel(fx, a)
    fx.wait("a cancelled", lambda: fx.job(a)["state"] == "cancelled", 30)
    for j in (a, b):
        fx.wait(f"every task of job {j} exited", lambda: tasks_running(fx, j) == 0, 120)
    for j in (a, b, c):
        detail = fx.get(f"/api/jobs/{j}")
        assert any(s["loss"] > 0 for s in detail["samples"]), detail["samples"][:3]
    # No restart: one coordinator for a, and its step counter never went back.
    assert fx.job(a)["incarnation"] == incarnation and fx.job(a)["restarts"] == 0, fx.job(a)
    logs = os.listdir(os.path.join(fx.root, "agent"))
    assert [f for f in logs if re.fullmatch(rf"job-{a}-g\d+-c\.log", f)] == [f"job-{a}-g{incarnation}-c.log"], logs
    steps = [r["step"] for r in metrics(fx, a) if "loss" in r and "step" in r]
    assert steps == sorted(steps), f"job a's steps went back (a restart): {steps}"
    events = fx.get("/api/events")
    resized = [e["message"] for e in events if e["job_id"] == a and e["kind"] == "resize"]
    assert any(m.startswith("2 -> 4 workers") and "[in place]" in m for m in resized), resized
    assert any(m.startswith("4 -> 2 workers") and "[in place]" in m for m in resized), resized
    assert fx.get(f"/api/jobs/{a}")["samples"][0]["workers"] == 2
    print("job a's generations:", [(g["generation"], g["workers"], g["joined"], g["switch_s"]) for g in generations(fx, a)])
    kinds = [e["kind"] for e in events]
    assert "resize" in kinds and kinds.count("finished") == 1 and kinds.count("cancelled") == 2, kinds

    # Agent silent -> node down; back -> node up.
    os.kill(fx.agent.pid, signal.SIGSTOP)
    fx.wait("the silent node marked down", lambda: not fx.get("/api/nodes")[0]["up"], 30)
    os.kill(fx.agent.pid, signal.SIGCONT)
    fx.wait("the node back up", lambda: fx.get("/api/nodes")[0]["up"], 30)
    page = urllib.request.urlopen(f"http://127.0.0.1:{fx.port}/", timeout=5).read().decode()
    assert "/api/state" in page


def main():
    frugal, root, keep = parse_args("frugal-cluster-live-")
    fx = Fixture(frugal, root)
    ok = False
    t0 = time.time()
    try:
        scenario(fx)
        ok = True
    finally:
        fx.stop()
        if not ok:
            for name in ("server.out", "agent.out"):
                p = os.path.join(root, name)
                if os.path.exists(p):
                    print(f"---- {name}\n" + open(p).read()[-6000:])
            for dirpath, _, files in os.walk(os.path.join(root, "agent")):
                for f in files:
                    if f.endswith(".log"):
                        print(f"---- {f}\n" + open(os.path.join(dirpath, f)).read()[-2000:])
        elif not keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"cluster_live: {'ok' if ok else 'FAILED'} in {time.time() - t0:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
