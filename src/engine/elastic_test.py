#!/usr/bin/env python3
"""Elastic membership over real processes on loopback (ctest `elastic`).

Each scenario starts `frugal coordinator --elastic` and `frugal worker
--elastic` processes, disturbs the job (SIGKILL, --join, SIGTERM, a kill
during a join, a coordinator killed and restarted before a kill), and
checks that:
  - the coordinator and every remaining worker exit 0;
  - the remaining workers end in the same generation with equal checksums
    of the master parameters (the replicas are identical);
  - the generation number shows the change happened.

The -local scenarios (ctest elastic_local) run in the local-update mode
(--sync local), one of them down to a world of one worker.

Usage: elastic_test.py --frugal build/frugal [--scenario kill,join,leave,kill-during-join,coordinator-restart]
       elastic_test.py --frugal build/frugal --scenario kill-local,join-local,shrink-to-one-local
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

TIMEOUT_S = 300


# Samples in the one epoch a job trains. A scenario that only loses a worker
# needs the run to outlast the disturbance at iteration 10 and the lag of the
# status polls that find it (15 steps at load average 5): at 3 workers 1500
# samples are 31 steps. One that adds a worker, or restarts the coordinator,
# keeps the longer run, so that the joiner's start (loading LibTorch) or the
# recovery falls well inside it.
LONG_RUN = 2000
SHORT_RUN = 1500


def worker_args(frugal, endpoint, runs, name, extra=(), train_size=LONG_RUN):
    return [frugal, "worker", "--elastic", "--coordinator", endpoint, "--dataset", "synthetic",
            "--synthetic-train-size", str(train_size), "--epochs", "1", "--batch-size", "16", "--lr", "0.02",
            "--threads", "1", "--elastic-every", "5", "--checksum-every", "10", "--compute-slowdown", "10", "--heartbeat-timeout-s", "4",
            "--run-name", name, "--runs-dir", runs, "--quiet", *extra]


# The local-update mode (Note [Local mode across worlds]): rounds of 4 steps
# in 2 overlapped fragments, so that a check gate (every 5 steps) often
# falls with a fragment's exchange in flight.
LOCAL = ("--sync", "local", "--local-steps", "4", "--local-fragments", "2", "--local-overlap")
# The other scenarios keep the step mode's coverage (an elastic run's
# default is the local mode).
STEP = ("--sync", "step")


class Job:
    def __init__(self, frugal, world, min_workers, name, mode=STEP, train_size=LONG_RUN):
        self.frugal = frugal
        self.mode = mode  # flags every worker of the job gets
        self.train_size = train_size
        self.runs = tempfile.mkdtemp(prefix="frugal_elastic_")
        self.name = name
        self.world = world
        self.min_workers = min_workers
        self.endpoint = self.start_coordinator("tcp://127.0.0.1:*")
        self.workers = []

    def start_coordinator(self, listen):
        self.coordinator = subprocess.Popen(
            [self.frugal, "coordinator", "--elastic", "--listen", listen, "--world", str(self.world),
             "--min-workers", str(self.min_workers), "--timeout-s", "60", "--heartbeat-timeout-s", "4"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.coordinator.stdout.readline()
        m = re.search(r"listening on (tcp://\S+)", line)
        if not m:
            raise RuntimeError("coordinator did not start: " + line + self.coordinator.stderr.read())
        return m.group(1)

    def restart_coordinator(self):
        """SIGKILL the coordinator and start another with the same flags on its address."""
        self.coordinator.send_signal(signal.SIGKILL)
        self.coordinator.communicate()
        assert self.start_coordinator(self.endpoint) == self.endpoint

    def start_worker(self, *extra):
        p = subprocess.Popen(worker_args(self.frugal, self.endpoint, self.runs, self.name, (*self.mode, *extra),
                                         self.train_size),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.workers.append(p)
        return p

    def status(self):
        r = subprocess.run([self.frugal, "job", "status", "--json", "--coordinator", self.endpoint],
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            return None
        return json.loads(r.stdout)

    def wait_for_iteration(self, at_least, generation=1):
        deadline = time.time() + TIMEOUT_S
        while time.time() < deadline:
            s = self.status()
            if s and s["generation"] >= generation and s["members"] and \
                    min(m["iteration"] for m in s["members"] if m["state"] == "running") >= at_least:
                return s
            time.sleep(0.1)
        raise AssertionError("the job never reached iteration %d" % at_least)

    def finish(self):
        outs = []
        for p in self.workers:
            try:
                out, err = p.communicate(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
                err += "\n(killed: hung)"
            outs.append((p.returncode, out, err))
        try:
            cout, cerr = self.coordinator.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.coordinator.kill()
            cout, cerr = self.coordinator.communicate()
            cerr += "\n(killed: hung)"
        return outs, (self.coordinator.returncode, cout, cerr)


def check(job, outs, coord, expect_finished, expect_generation_at_least):
    def dump():
        text = "coordinator rc=%s\n%s%s\n" % coord
        for i, (rc, out, err) in enumerate(outs):
            text += "--- worker %d rc=%s\n%s%s\n" % (i, rc, out, err[-3000:])
        return text

    assert coord[0] == 0, "coordinator failed\n" + dump()
    done = []
    for rc, out, err in outs:
        m = re.search(r"worker done: generation (\d+) rank (\d+) checksum ([0-9a-f]+)", out)
        if m:
            assert rc == 0, "a finished worker exited non-zero\n" + dump()
            done.append((int(m.group(1)), int(m.group(2)), m.group(3)))
    assert len(done) == expect_finished, "expected %d finished workers, got %d\n%s" % (
        expect_finished, len(done), dump())
    generations = {d[0] for d in done}
    checksums = {d[2] for d in done}
    ranks = sorted(d[1] for d in done)
    assert len(generations) == 1, "workers ended in different generations %s\n%s" % (generations, dump())
    assert generations.pop() >= expect_generation_at_least, "no membership change happened\n" + dump()
    assert len(checksums) == 1, "replicas differ: %s\n%s" % (checksums, dump())
    assert ranks == list(range(expect_finished)), "ranks %s\n%s" % (ranks, dump())
    return done


def scenario_kill(frugal, mode=STEP):
    job = Job(frugal, world=3, min_workers=2, name="kill" + ("-local" if mode == LOCAL else ""), mode=mode,
              train_size=SHORT_RUN)
    for _ in range(3):
        job.start_worker()
    job.wait_for_iteration(10)
    victim = job.workers[2]
    victim.send_signal(signal.SIGKILL)
    outs, coord = job.finish()
    assert outs[2][0] == -signal.SIGKILL
    check(job, outs[:2], coord, expect_finished=2, expect_generation_at_least=2)


def scenario_join(frugal, mode=STEP):
    job = Job(frugal, world=2, min_workers=1, name="join" + ("-local" if mode == LOCAL else ""), mode=mode)
    for _ in range(2):
        job.start_worker()
    job.wait_for_iteration(10)
    job.start_worker("--join")
    outs, coord = job.finish()
    check(job, outs, coord, expect_finished=3, expect_generation_at_least=2)


def scenario_leave(frugal, mode=STEP, world=3):
    """A worker leaves gracefully (SIGTERM); the others finish. With world 2
    the last one finishes alone (a world of one)."""
    job = Job(frugal, world=world, min_workers=world - 1, name="leave-%d" % world + ("-local" if mode == LOCAL else ""),
              mode=mode, train_size=SHORT_RUN)
    for _ in range(world):
        job.start_worker()
    job.wait_for_iteration(10)
    job.workers[1].send_signal(signal.SIGTERM)
    outs, coord = job.finish()
    rc, out, err = outs[1]
    assert rc == 0 and "left the job" in out, "the leaving worker: rc=%s\n%s%s" % (rc, out, err)
    check(job, [o for i, o in enumerate(outs) if i != 1], coord, expect_finished=world - 1,
          expect_generation_at_least=2)


def scenario_kill_during_join(frugal):
    job = Job(frugal, world=2, min_workers=1, name="kill-join")
    for _ in range(2):
        job.start_worker()
    job.wait_for_iteration(10)
    joiner = job.start_worker("--join")
    deadline = time.time() + TIMEOUT_S
    while time.time() < deadline:  # kill it once the coordinator knows it
        s = job.status()
        if s and (s["joining"] > 0 or s["generation"] >= 2):
            break
        time.sleep(0.02)
    joiner.send_signal(signal.SIGKILL)
    outs, coord = job.finish()
    check(job, outs[:2], coord, expect_finished=2, expect_generation_at_least=1)


def scenario_coordinator_restart(frugal):
    """The coordinator dies (SIGKILL) and restarts on its address with the same
    flags: it adopts generation 1 from the workers' heartbeats
    (Note [Coordinator restart]) and then handles a loss as if it had never
    died."""
    job = Job(frugal, world=3, min_workers=2, name="coordinator-restart")
    for _ in range(3):
        job.start_worker()
    job.wait_for_iteration(10)
    job.restart_coordinator()
    deadline = time.time() + TIMEOUT_S
    s = None
    while time.time() < deadline:
        s = job.status()
        if s and not s["recovering"] and s["generation"] >= 1:
            break
        time.sleep(0.1)
    assert s and s["generation"] == 1 and len(s["members"]) == 3, "not recovered: %s" % s
    assert sorted(m["rank"] for m in s["members"]) == [0, 1, 2] and all(m["state"] == "running" for m in s["members"]), s
    victim = job.workers[2]
    victim.send_signal(signal.SIGKILL)
    outs, coord = job.finish()
    assert outs[2][0] == -signal.SIGKILL
    assert "recovered generation 1: 3 of 3 workers" in coord[2], coord[2]
    assert "lost: no heartbeat" in coord[2], coord[2]
    check(job, outs[:2], coord, expect_finished=2, expect_generation_at_least=2)


SCENARIOS = {"kill": scenario_kill, "join": scenario_join, "leave": scenario_leave,
             "kill-during-join": scenario_kill_during_join, "coordinator-restart": scenario_coordinator_restart}
# ctest elastic_local: the local mode's scenarios, apart so that each test
# has its own time limit.
LOCAL_SCENARIOS = {"kill-local": lambda frugal: scenario_kill(frugal, LOCAL),
                   "join-local": lambda frugal: scenario_join(frugal, LOCAL),
                   "shrink-to-one-local": lambda frugal: scenario_leave(frugal, LOCAL, world=2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frugal", required=True)
    ap.add_argument("--scenario", default=",".join(SCENARIOS),
                    help="comma-separated, of: " + ", ".join([*SCENARIOS, *LOCAL_SCENARIOS]))
    args = ap.parse_args()
    every = {**SCENARIOS, **LOCAL_SCENARIOS}
    failed = 0
    for name in args.scenario.split(","):
        t0 = time.time()
        try:
            every[name](os.path.abspath(args.frugal))
            print("PASS %s (%.1f s)" % (name, time.time() - t0))
        except AssertionError as e:
            failed += 1
            print("FAIL %s (%.1f s)\n%s" % (name, time.time() - t0, e))
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
