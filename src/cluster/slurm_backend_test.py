#!/usr/bin/env python3
"""The Slurm backend against a real single-host Slurm (ctest cluster_slurm).

The fixture starts munged, slurmctld and slurmd from Debian's slurm-wlm and
munge, with a generated slurm.conf that declares one node of 4 CPU slots on
this machine (private ports, sockets and spool under a temporary dir). Then
`frugal cluster serve --backend slurm` schedules two small elastic jobs
(mlp), every worker a Slurm batch job. It checks that

  1. job a (1-4 workers) starts as 4 Slurm jobs pinned to the node;
  2. job b (2 workers) makes afs-p shrink a to 2 in place: two of a's Slurm
     jobs are cancelled (scancel's SIGTERM: the workers leave the job), the
     other two run on; b runs as 2 new Slurm jobs and finishes, none of its
     jobs left running;
  3. the server killed with SIGKILL and restarted finds a's Slurm jobs still
     running and adopts them; their coordinator ran on the server's host and
     died with it, so a restarts once from its checkpoint, not from step 0;
  4. a, cancelled, has no Slurm job left running.

Exit 77 (ctest: skipped) with the reason when Slurm cannot be started here
(not installed, not root, daemons failing).

Usage: slurm_backend_test.py --frugal build/frugal [--keep DIR]
Stdlib only. Every wait has a deadline; on failure the logs are printed.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

from cluster_test_util import get_json, parse_args, stop_processes, wait_for, wait_for_server, write_mlp_job

SKIP = 77
NODE = "frugal-test-node"
SLOTS = 4
LIVE = {"RUNNING", "PENDING", "COMPLETING", "CONFIGURING"}


class Skip(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Slurm:
    """munged + slurmctld + slurmd on this host, private to `root`."""

    def __init__(self, root):
        self.root = root
        self.procs = []
        self.env = dict(os.environ, SLURM_CONF=os.path.join(root, "slurm.conf"))

    def start(self):
        for tool in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo"):
            if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None:
                raise Skip(f"{tool} is not installed (scripts/setup installs slurmctld, slurmd, slurm-client, munge)")
        if os.geteuid() != 0:
            raise Skip("slurmd must run as root to launch jobs")
        r = self.root
        for d in ("munge", "state", "spool", "log"):
            os.makedirs(os.path.join(r, d), exist_ok=True)
        os.chmod(os.path.join(r, "munge"), 0o700)
        key = os.path.join(r, "munge", "key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        sock = os.path.join(r, "munge", "sock")
        self.run_daemon(["munged", "--foreground", "--force", f"--socket={sock}", f"--key-file={key}",
                         f"--log-file={r}/log/munged.log", f"--pid-file={r}/munge/pid",
                         f"--seed-file={r}/munge/seed"], "munged.out")
        wait_for(lambda: os.path.exists(sock), "munged's socket", 20)
        host = socket.gethostname().split(".")[0]
        with open(self.env["SLURM_CONF"], "w") as f:
            f.write(f"""ClusterName=frugaltest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=10
MinJobAge=600
NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={SLOTS} State=UNKNOWN
PartitionName=frugal Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        self.run_daemon(["slurmctld", "-D", "-i"], "slurmctld.out")
        self.run_daemon(["slurmd", "-D", "-N", NODE], "slurmd.out")
        try:
            wait_for(lambda: self.cmd(["sinfo", "-h", "-o", "%T"]).strip() == "idle", "the node idle", 60)
        except AssertionError:
            raise Skip("Slurm did not come up here:\n" + self.logs()) from None

    def run_daemon(self, argv, out):
        self.procs.append(subprocess.Popen(argv, env=self.env, stdout=open(os.path.join(self.root, "log", out), "a"),
                                           stderr=subprocess.STDOUT))

    def cmd(self, argv):
        try:
            return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=30).stdout
        except subprocess.TimeoutExpired:
            return ""

    def jobs(self):
        """Our Slurm jobs: name -> (id, state)."""
        out = self.cmd(["squeue", "-h", "-t", "all", "-O", "JobID:|,Name:300|,State:|"])
        jobs = {}
        for line in out.splitlines():
            f = [x.strip() for x in line.split("|")]
            if len(f) >= 3 and f[1].startswith("frugal-"):
                jobs[f[1][len("frugal-"):]] = (int(f[0]), f[2])
        return jobs

    def logs(self):
        out = ""
        d = os.path.join(self.root, "log")
        for name in sorted(os.listdir(d)):
            out += f"---- {name}\n" + open(os.path.join(d, name), errors="replace").read()[-3000:]
        return out

    def stop(self):
        if self.procs:  # Jobs end before the daemons stop, or their slurmstepd waits on for the controller.
            self.cmd(["scancel", "--full", "--signal=KILL", "--user=root"])
            try:
                wait_for(lambda: not any(st in LIVE for _, st in self.jobs().values()), "the jobs to end", 60)
            except AssertionError as e:
                print(e)
        stop_processes(self.procs)


class Server:
    def __init__(self, frugal, root, env):
        self.frugal = frugal
        self.root = root
        self.env = env
        self.port = None
        self.proc = None

    def start(self):
        out = os.path.join(self.root, "server.out")
        self.proc = subprocess.Popen(
            [self.frugal, "cluster", "serve", "--listen", f"127.0.0.1:{self.port or 0}", "--state",
             os.path.join(self.root, "cluster.db"), "--backend", "slurm", "--work-dir", os.path.join(self.root, "work"),
             "--round-s", "1", "--node-timeout-s", "10", "--checkpoint-every", "10"],
            env=self.env, stdout=open(out, "a"), stderr=subprocess.STDOUT)
        self.port = wait_for_server(self.proc, out)

    def get(self, path):
        return get_json(self.port, path)

    def job(self, job_id):
        return next((j for j in self.get("/api/jobs") or [] if j["id"] == job_id), None)

    def client(self, *args):
        out = subprocess.run([self.frugal, "cluster", *args, "--server", f"127.0.0.1:{self.port}"],
                             capture_output=True, text=True, timeout=60, env=self.env)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def submit(self, name, lo, hi, steps):
        path = write_mlp_job(self.root, name, lo, hi, steps)
        return int(re.search(r"submitted job (\d+)", self.client("submit", path)).group(1))


def tasks_of(jobs, job_id, states=None):
    return {name: st for name, (_, st) in jobs.items()
            if name.startswith(f"job-{job_id}-") and (states is None or st in states)}


def metrics(root, job_id):
    path = os.path.join(root, "work", "runs", f"job-{job_id}", "metrics.jsonl")
    out = []
    for line in open(path) if os.path.exists(path) else []:
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # A line being written.
    return out


def scenario(slurm, server, root):
    wait = wait_for
    server.start()
    a = server.submit("a", 1, 4, 100000)  # Runs until cancelled.
    wait(lambda: (j := server.job(a)) and j["workers"] == 4 and len(tasks_of(slurm.jobs(), a, {"RUNNING"})) == 4,
         "job a on 4 workers, 4 running Slurm jobs", 120)
    wait(lambda: server.job(a)["step"] >= 15, "job a past its first checkpoint", 300)
    incarnation = server.job(a)["incarnation"]

    b = server.submit("b", 2, 2, 20)
    wait(lambda: server.job(a)["workers"] == 2 and server.job(b)["workers"] == 2, "afs-p shrinking a to 2 for b", 60)
    wait(lambda: len(tasks_of(slurm.jobs(), a, {"CANCELLED"})) == 2, "two of a's Slurm jobs cancelled", 60)
    wait(lambda: any(r.get("event") == "generation" and r["workers"] == 2 for r in metrics(root, a)),
         "a's workers leaving in place: a generation of 2 in its metrics", 120)
    assert server.job(a)["incarnation"] == incarnation, server.job(a)
    assert len(tasks_of(slurm.jobs(), a, {"RUNNING"})) == 2, slurm.jobs()
    wait(lambda: server.job(b)["state"] == "finished", "b finished", 400)
    # Its workers end with it; those still exiting when the server sees the
    # coordinator's exit are cancelled (COMPLETED or CANCELLED, none running).
    wait(lambda: not tasks_of(slurm.jobs(), b, LIVE), "b's Slurm jobs ended", 60)
    assert len(tasks_of(slurm.jobs(), b)) == 2, slurm.jobs()

    # Server crash: a's Slurm jobs run on and are adopted; its coordinator is gone with the server.
    running = tasks_of(slurm.jobs(), a, {"RUNNING"})
    step = server.job(a)["step"]
    records_before = len(metrics(root, a))
    server.proc.kill()
    server.proc.wait(timeout=10)
    assert tasks_of(slurm.jobs(), a, {"RUNNING"}) == running, (running, slurm.jobs())
    server.start()
    log = lambda: open(os.path.join(root, "server.out")).read()
    wait(lambda: all(f"adopting {name}," in log() for name in running), f"the server adopting {sorted(running)}", 30)
    wait(lambda: server.job(a)["restarts"] == 1 and server.job(a)["state"] == "running", "a restarted once", 60)
    fresh = server.job(a)["incarnation"]
    assert fresh > incarnation, server.job(a)
    wait(lambda: tasks_of(slurm.jobs(), a, {"RUNNING"}) and all(
        name.startswith(f"job-{a}-g{fresh}-") for name in tasks_of(slurm.jobs(), a, {"RUNNING"})),
        "a's new incarnation running as Slurm jobs, the old ones gone", 120)
    wait(lambda: server.job(a)["step"] >= step + 10, "a training again past its step before the crash", 300)
    resumed = [r["step"] for r in metrics(root, a)[records_before:] if "loss" in r and "step" in r]
    assert resumed and min(resumed) > 5, f"a restarted from step 0, not from its checkpoint: {resumed}"

    server.client("cancel", str(a))
    wait(lambda: server.job(a)["state"] == "cancelled", "a cancelled", 30)
    wait(lambda: not tasks_of(slurm.jobs(), a, LIVE), "a's Slurm jobs ended", 60)
    events = [e["kind"] for e in server.get("/api/events")]
    assert events.count("finished") == 1 and events.count("cancelled") == 1, events


def main():
    frugal, root, keep = parse_args("frugal-cluster-slurm-")
    slurm = Slurm(root)
    server = Server(frugal, root, slurm.env)
    ok = False
    t0 = time.time()
    try:
        slurm.start()
        scenario(slurm, server, root)
        ok = True
    except Skip as e:
        print(f"cluster_slurm: skipped: {e}")
        slurm.stop()
        return SKIP
    finally:
        if server.proc and server.proc.poll() is None:
            server.proc.terminate()
            server.proc.wait(timeout=30)
        if not ok:
            p = os.path.join(root, "server.out")
            if os.path.exists(p):
                print("---- server.out\n" + open(p).read()[-6000:])
            print(slurm.cmd(["squeue", "-t", "all", "-O", "JobID:6,Name:30,State:12,exit_code:8"]))
        slurm.stop()
        if ok and not keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"cluster_slurm: {'ok' if ok else 'FAILED'} in {time.time() - t0:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
