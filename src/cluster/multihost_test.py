#!/usr/bin/env python3
"""Elastic jobs spanning hosts (ctest cluster_multihost).

Four network namespaces of testbed/testbed.sh are the hosts (10.77.1.1-4):
the server runs on host 0 with a bearer token, and a `frugal cluster agent`
with one CPU slot on each of hosts 1-3, all sharing one work dir (the runs
dir the jobs' processes write to). `--max-nodes-per-job 3` lets a job span
them. It checks that

  1. job a (mlp, 1-3 workers) starts on the 2 hosts up, every process of it
     with the job's CurveZMQ key (--key; the key file mode 0600:
     Note [Job keys]), its coordinator listening on a testbed address; its step
     records reach the server;
  2. a third host comes up: a grows onto it in place (a --join worker that
     the job's key admits), and reports steps at 3 workers;
  3. job b (1 worker) makes afs-p shrink a in place; b finishes;
  4. a host running one of a's workers (not its coordinator) is lost: its
     agent and processes are SIGKILLed. The server marks it down, shrinks a
     in place onto the hosts left, and a finishes without a restart, its
     step never going back.

Exit 77 (ctest: skipped) with the reason where namespaces cannot be made
(not root, no iproute2). The test re-runs itself inside host 0, so that the
server's loopback and the hosts' addresses are both reachable.

Usage: multihost_test.py --frugal build/frugal [--keep DIR]
Stdlib only. Every wait has a deadline; on failure the logs are printed.
"""

import glob
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time

from cluster_test_util import get_json, parse_args, stop_processes, wait_for, wait_for_server, write_mlp_job

SKIP = 77
HOSTS = 3  # Agents, on hosts 1-3; the server is on host 0.
TESTBED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testbed", "testbed.sh")
INSIDE = "FRUGAL_MULTIHOST_INSIDE"


def address(i):
    return f"10.77.1.{i + 1}"


class Cluster:
    def __init__(self, frugal, root):
        self.frugal = frugal
        self.root = root
        self.work = os.path.join(root, "work")
        self.token = os.path.join(root, "token")
        with open(os.open(self.token, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(os.urandom(18).hex() + "\n")
        self.server = None
        self.port = None
        self.agents = {}

    def start(self):
        out = os.path.join(self.root, "server.out")
        self.server = subprocess.Popen(
            [self.frugal, "cluster", "serve", "--listen", "0.0.0.0:0", "--token-file", self.token, "--state",
             os.path.join(self.root, "cluster.db"), "--policy", "afs-p", "--round-s", "1", "--node-timeout-s", "4",
             "--checkpoint-every", "200", "--max-nodes-per-job", str(HOSTS)],
            stdout=open(out, "w"), stderr=subprocess.STDOUT)
        self.port = wait_for_server(self.server, out)

    def start_agent(self, i):
        self.agents[i] = subprocess.Popen(
            ["ip", "netns", "exec", f"fgtb-h{i}", self.frugal, "cluster", "agent", "--server",
             f"{address(0)}:{self.port}", "--token-file", self.token, "--slots", "1", "--name", f"h{i}",
             "--host", address(i), "--work-dir", self.work, "--heartbeat-s", "0.5", "--stop-grace-s", "20"],
            stdout=open(os.path.join(self.root, f"agent{i}.out"), "w"), stderr=subprocess.STDOUT)
        wait_for(lambda: f"h{i}" in [n["name"] for n in self.get("/api/nodes") or [] if n["up"]], f"h{i} up", 60)

    def get(self, path):
        return get_json(self.port, path)

    def job(self, job_id):
        return next((j for j in self.get("/api/jobs") or [] if j["id"] == job_id), None)

    def node_ids(self):
        return {n["name"]: n["id"] for n in self.get("/api/nodes")}

    def submit(self, name, lo, hi, steps):
        path = write_mlp_job(self.root, name, lo, hi, steps)
        out = subprocess.run([self.frugal, "cluster", "submit", path, "--server", f"127.0.0.1:{self.port}",
                              "--token-file", self.token], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return int(re.search(r"submitted job (\d+)", out.stdout).group(1))

    def events(self, job_id, kind):
        return [e["message"] for e in self.get("/api/events?limit=1000") if e["job_id"] == job_id and e["kind"] == kind]

    def lose_host(self, i):
        """SIGKILL host i's agent and every process in its namespace."""
        self.agents[i].kill()
        self.agents[i].wait(timeout=10)
        pids = subprocess.run(["ip", "netns", "pids", f"fgtb-h{i}"], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass

    def logs(self):
        text = ""
        for name in ["server.out"] + [f"agent{i}.out" for i in self.agents]:
            p = os.path.join(self.root, name)
            if os.path.exists(p):
                text += f"---- {name}\n" + open(p).read()[-4000:]
        return text

    def stop(self):
        stop_processes(list(self.agents.values()) + ([self.server] if self.server else []))


def started_lines(cluster, job_id):
    lines = []
    for i in cluster.agents:
        lines += [line for line in open(os.path.join(cluster.root, f"agent{i}.out"))
                  if f"starting job-{job_id}-" in line]
    return lines


def scenario(c):
    c.start()
    c.start_agent(1)
    c.start_agent(2)
    a = c.submit("a", 1, HOSTS, 1000)
    wait_for(lambda: (j := c.job(a)) and j["workers"] == 2 and len(j["placement"]) == 2, "job a on hosts 1 and 2", 60)
    wait_for(lambda: c.job(a)["coordinator"], "a's coordinator endpoint", 60)
    assert c.job(a)["coordinator"].startswith("tcp://10.77.1."), c.job(a)
    home = int(re.match(r"tcp://10\.77\.1\.(\d+):", c.job(a)["coordinator"]).group(1)) - 1
    wait_for(lambda: c.job(a)["step"] >= 20, "a's step records reaching the server", 120)
    lines = started_lines(c, a)
    assert len(lines) == 3 and all("--key" in line and "--authorized-keys" in line for line in lines), lines
    for key in glob.glob(os.path.join(c.work, f"job-{a}-*.key")):
        assert stat.S_IMODE(os.stat(key).st_mode) == 0o600, key
    incarnation = c.job(a)["incarnation"]

    c.start_agent(3)
    wait_for(lambda: c.job(a)["workers"] == 3, "a grown onto h3", 60)
    wait_for(lambda: any("--join" in line for line in started_lines(c, a)), "h3's agent starting a's joiner", 30)
    joiners = [line for line in started_lines(c, a) if "--join" in line]
    assert len(joiners) == 1 and "--key" in joiners[0] and f"--listen tcp://{address(3)}:" in joiners[0], joiners
    wait_for(lambda: any(s["workers"] == 3 and s["samples_per_s"] > 0
                         for s in get_json(c.port, f"/api/jobs/{a}")["samples"]), "a's steps at 3 workers", 120)

    b = c.submit("b", 1, 1, 40)
    wait_for(lambda: c.job(a)["workers"] == 2 and c.job(b)["workers"] == 1, "afs-p shrinking a for b", 60)
    wait_for(lambda: c.job(b)["state"] == "finished", "b finished", 180)
    resizes = c.events(a, "resize")
    assert len(resizes) >= 2 and all("[in place]" in r for r in resizes), resizes
    assert c.job(a)["incarnation"] == incarnation and c.job(a)["restarts"] == 0, c.job(a)

    # Lose a host that runs a worker of a but not its coordinator.
    ids = c.node_ids()
    held = {s["node_id"] for s in c.job(a)["placement"]}
    lost = next(i for i in c.agents if i != home and ids[f"h{i}"] in held)
    c.lose_host(lost)
    wait_for(lambda: not next(n for n in c.get("/api/nodes") if n["id"] == ids[f"h{lost}"])["up"],
             f"h{lost} marked down", 30)
    wait_for(lambda: all(s["node_id"] != ids[f"h{lost}"] for s in c.job(a)["placement"]), "a moved off the lost host", 30)
    step = c.job(a)["step"]
    wait_for(lambda: c.job(a)["state"] == "finished", "a finished without the lost host", 400)
    a_end = c.job(a)
    assert a_end["restarts"] == 0 and a_end["incarnation"] == incarnation, a_end
    assert a_end["step"] >= step, (step, a_end)
    steps = [s["step"] for s in get_json(c.port, f"/api/jobs/{a}")["samples"] if s["samples_per_s"] > 0]
    assert steps == sorted(steps), f"a's step went back: {steps}"


def inside(frugal, root, keep):
    c = Cluster(frugal, root)
    ok = False
    t0 = time.time()
    try:
        scenario(c)
        ok = True
    finally:
        c.stop()
        if not ok:
            print(c.logs())
        elif not keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"cluster_multihost: {'ok' if ok else 'FAILED'} in {time.time() - t0:.0f} s")
    return 0 if ok else 1


def main():
    frugal, root, keep = parse_args("frugal-cluster-multihost-")
    if os.environ.get(INSIDE):
        return inside(frugal, root, keep)
    if os.geteuid() != 0:
        print("cluster_multihost: skipped: needs root (network namespaces)")
        return SKIP
    check = subprocess.run(["bash", TESTBED, "check"], capture_output=True, text=True)
    if check.returncode != 0:
        print(f"cluster_multihost: skipped: {(check.stderr or check.stdout).strip()}")
        return SKIP
    env = dict(os.environ, TESTBED_QUIET="1")
    subprocess.run(["bash", TESTBED, "up", "flat", "--hosts", str(HOSTS + 1), "--rate", "0"], check=True, env=env)
    try:
        argv = [sys.executable, os.path.abspath(__file__), "--frugal", frugal, "--keep", root]
        return subprocess.run(["ip", "netns", "exec", "fgtb-h0"] + argv, env=dict(env, **{INSIDE: "1"}),
                              timeout=1100).returncode
    finally:
        subprocess.run(["bash", TESTBED, "down"], capture_output=True, env=env)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
