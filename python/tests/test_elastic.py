"""`frugal run --elastic`: an own script (elastic_worker.py) keeps training
when a worker is SIGKILLed, leaves on SIGTERM, or joins; the survivors'
replicas agree at the end; bad flags are one-line usage errors."""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import HERE, PYTHON, frugal_binary

STEPS = 300


def _env():
    return dict(os.environ, OMP_NUM_THREADS="1")


def _start(out_dir, workers, *flags, steps=STEPS, sleep_s=0.01, worker_args=()):
    cmd = [frugal_binary(), "run", "--elastic", "--workers", str(workers), "--timeout-s", "10", "--elastic-every", "5",
           *flags, "--", PYTHON, os.path.join(HERE, "elastic_worker.py"), str(out_dir), str(steps), str(sleep_s),
           *worker_args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())


def _wait_for_progress(out_dir, workers, step, timeout_s=60):
    """The pids of the workers once each has passed `step`."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        progress = glob.glob(os.path.join(out_dir, "progress-*"))
        done = [f for f in progress if int(open(f).read() or 0) >= step]
        if len(done) >= workers:
            return sorted(int(f.rsplit("-", 1)[1]) for f in done)
        time.sleep(0.05)
    raise AssertionError(f"the workers did not reach step {step} in {timeout_s} s")


def _results(out_dir):
    return {r["pid"]: r for r in (json.load(open(f)) for f in glob.glob(os.path.join(out_dir, "result-*.json")))}


def _mean(losses, first):
    values = [v for k, v in sorted(losses.items(), key=lambda kv: int(kv[0]))]
    part = values[:20] if first else values[-20:]
    return sum(part) / len(part)


def _assert_survivors_agree(results, survivors, joiners=()):
    assert sorted(results) == sorted(survivors), results.keys()
    checksums = {results[p]["checksum"] for p in survivors}
    assert len(checksums) == 1 and None not in checksums, checksums
    for p in survivors:
        r = results[p]
        assert not r["left"] and r["iteration"] == STEPS, r
        assert r["generation"] == 2 and r["world_size"] == len(survivors), r
        start = _mean(results[survivors[0] if p in joiners else p]["losses"], first=True)
        assert _mean(r["losses"], first=False) < 0.5 * start, r["losses"]
        assert r["sched_epoch"] == STEPS  # the scheduler's state travelled with the rollback


@pytest.mark.parametrize("sync", ["local", "step"])
def test_a_killed_worker_does_not_end_the_run(tmp_path, sync):
    p = _start(tmp_path, 3, "--min-workers", "2", worker_args=["step"] if sync == "step" else [])
    pids = _wait_for_progress(tmp_path, 3, 50)
    os.kill(pids[1], signal.SIGKILL)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert "exited (signal Killed); the elastic job goes on without it" in err
    results = _results(tmp_path)
    survivors = [pids[0], pids[2]]
    _assert_survivors_agree(results, survivors)
    for s in survivors:
        (change,) = results[s]["changes"]  # on_world_change was called once, with the new world
        assert change["world_size"] == 2 and change["generation"] == 2
        assert 0 < change["iteration"] <= STEPS


@pytest.mark.parametrize("sync,die_in", [("local", "finish"), ("step", "all-reduce")])
def test_a_worker_killed_in_a_collective_after_the_loop_or_of_the_script(tmp_path, sync, die_in):
    """A worker dies as the others enter finish(): they finish again in the
    next world, losing nothing (Note [Finishing an elastic script]); or as
    they enter a frugal.all_reduce: they get frugal.WorldChanged, the model
    rolls back to the step's start, and the all_reduce of the step trained
    again reduces over the survivors."""
    p = _start(tmp_path, 3, "--min-workers", "2", worker_args=[f"die-in-{die_in}"] + (["step"] if sync == "step" else []))
    out, err = p.communicate(timeout=180)
    assert p.returncode == 0, err
    assert "exited (signal Killed); the elastic job goes on without it" in err
    results = _results(tmp_path)
    survivors = sorted(results)
    _assert_survivors_agree(results, survivors)
    for s in survivors:
        (change,) = results[s]["changes"]
        if die_in == "finish":
            assert change["iteration"] == STEPS  # nothing trained again
        else:
            assert change["iteration"] == STEPS // 2
            assert results[s]["reduced"][0] == [1, "missing"], results[s]["reduced"]
            assert len(results[s]["reduced"]) == 2 and results[s]["reduced"][1][0] == 2
    if die_in == "all-reduce":
        r = [results[s] for s in survivors]
        mean = sum(x["losses"][str(STEPS // 2)] for x in r) / 2
        assert r[0]["reduced"][1][1] == r[1]["reduced"][1][1] == pytest.approx(mean)


@pytest.mark.parametrize("lost", [1, 2], ids=["a-member", "a-whole-cluster"])
def test_a_site_replica_loses_members_and_stays_one_replica(tmp_path, lost):
    """sync='site' over clusters a, a, b, b: one member of b, or both, are
    killed; the others go on as a, a(, b), and the two members of a hold
    the same parameters after every step of both worlds (Note [Elastic
    site replicas])."""
    p = _start(tmp_path, 4, "--min-workers", "2", "--local-clusters", "a,a,b,b", worker_args=["site"])
    pids = _wait_for_progress(tmp_path, 4, 50)
    cluster = {pid: open(os.path.join(tmp_path, f"pid-{pid}")).read() for pid in pids}
    victims = [pid for pid in pids if cluster[pid] == "b"][:lost]
    for victim in victims:
        os.kill(victim, signal.SIGKILL)
    out, err = p.communicate(timeout=180)
    assert p.returncode == 0, err
    survivors = [pid for pid in pids if pid not in victims]
    results = _results(tmp_path)
    _assert_survivors_agree(results, survivors)
    a = [results[pid] for pid in survivors if cluster[pid] == "a"]
    assert len(a) == 2 and a[0]["cluster"] == a[1]["cluster"] == "a"
    assert len(a[0]["sums"]) == STEPS and a[0]["sums"] == a[1]["sums"]
    for b in (results[pid] for pid in survivors if cluster[pid] == "b"):
        assert b["sums"] != a[0]["sums"]  # two replicas inside a round


def _coordinator(listen):
    """`frugal coordinator --elastic` for three script workers; its endpoint."""
    p = subprocess.Popen([frugal_binary(), "coordinator", "--elastic", "--listen", listen, "--world", "3",
                          "--min-workers", "2", "--timeout-s", "60", "--heartbeat-timeout-s", "4"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    m = re.search(r"listening on (tcp://\S+)", line)
    assert m, line + p.stderr.read()
    return p, m.group(1)


def test_script_workers_are_adopted_by_a_restarted_coordinator(tmp_path):
    """Three scripts under `frugal run --elastic --coordinator`; the
    coordinator is SIGKILLed and restarted on its address: it adopts the
    running generation from the scripts' heartbeats (Note [Coordinator
    restart]) and then handles a killed script as if it had never died."""
    coordinator, endpoint = _coordinator("tcp://127.0.0.1:*")
    workers = [subprocess.Popen([frugal_binary(), "run", "--elastic", "--coordinator", endpoint, "--workers", "1",
                                 "--timeout-s", "10", "--elastic-every", "5", "--heartbeat-timeout-s", "4", "--",
                                 PYTHON, os.path.join(HERE, "elastic_worker.py"), str(tmp_path), str(STEPS), "0.05"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
               for _ in range(3)]
    try:
        pids = _wait_for_progress(tmp_path, 3, 30)
        coordinator.kill()
        coordinator.communicate(timeout=30)
        coordinator, again = _coordinator(endpoint)
        assert again == endpoint
        _wait_for_progress(tmp_path, 3, 60)  # training went on meanwhile
        time.sleep(6)  # the recovery ends once every rank is heard, or after the heartbeat timeout
        os.kill(pids[1], signal.SIGKILL)
        outs = [w.communicate(timeout=180) for w in workers]
        _, coord_err = coordinator.communicate(timeout=60)
    finally:
        for p in [coordinator, *workers]:
            if p.poll() is None:
                p.kill()
    assert "recovered generation 1: 3 of 3 workers" in coord_err, coord_err
    assert "lost" in coord_err, coord_err
    assert coordinator.returncode == 0, coord_err
    survivors = [pids[0], pids[2]]
    _assert_survivors_agree(_results(tmp_path), survivors)
    assert sum(w.returncode == 0 for w in workers) == 2, [o[1][-2000:] for o in outs]


def test_a_sigterm_leaves_gracefully(tmp_path):
    p = _start(tmp_path, 3, "--min-workers", "2")
    pids = _wait_for_progress(tmp_path, 3, 50)
    os.kill(pids[0], signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    results = _results(tmp_path)
    leaver = results.pop(pids[0])
    assert leaver["left"] and leaver["checksum"] is None and leaver["iteration"] < STEPS, leaver
    _assert_survivors_agree(results, pids[1:])
    # A leave switches at a gate: the survivors' optimizers are the
    # snapshot's, so they keep them (Note [Switching in place]).
    for p in pids[1:]:
        assert [c["kept_optimizer_state"] for c in results[p]["changes"]] == [True], results[p]["changes"]


def test_a_worker_joins_a_running_script(tmp_path):
    p = _start(tmp_path, 2, sleep_s=0.02)  # slow enough that the joiner starts before the end
    line = ""
    deadline = time.time() + 30
    while "elastic coordinator at" not in line and time.time() < deadline:
        line = p.stderr.readline()
    endpoint = re.search(r"at (tcp://\S+)", line).group(1)
    _wait_for_progress(tmp_path, 2, 30)
    joiner = subprocess.run([frugal_binary(), "run", "--elastic", "--join", "--coordinator", endpoint, "--workers",
                             "1", "--timeout-s", "10", "--elastic-every", "5", "--", PYTHON, os.path.join(HERE, "elastic_worker.py"),
                             str(tmp_path), str(STEPS), "0.02"], capture_output=True, text=True, timeout=120,
                            env=_env())
    out, err = p.communicate(timeout=120)
    assert joiner.returncode == 0, joiner.stderr
    assert p.returncode == 0, err
    results = _results(tmp_path)
    assert len(results) == 3
    joined = [p for p, r in results.items() if not r["changes"]]  # on_world_change is for a world that changed
    assert len(joined) == 1
    first = [p for p in results if p not in joined]
    _assert_survivors_agree(results, first + joined, joiners=joined)
    # Note [A joiner's own optimizer]: the joiner starts past step 0 with no
    # per-parameter state of rank 0's (its momentum builds from its first step)
    start = results[joined[0]]["start_optimizer"]
    assert start["iteration"] > 0 and start["entries"] == 0, start


def _usage(*flags):
    return subprocess.run([frugal_binary(), "run", *flags, "--", sys.executable, "-c", "pass"], capture_output=True,
                          text=True, timeout=30)


def test_elastic_usage_errors_are_one_line():
    for flags, expected in (
            (["--elastic", "--workers", "2", "--min-workers", "3"], "--min-workers must be in [1, --workers=2], got 3"),
            (["--elastic", "--workers", "2", "--max-workers", "1"], "--max-workers must be >= --workers"),
            (["--workers", "2", "--min-workers", "1"], "--min-workers and --max-workers need --elastic"),
            (["--workers", "1", "--join"], "--join adds workers to an elastic job: add --elastic"),
            (["--elastic", "--join", "--workers", "1"], "--join needs the running job's coordinator"),
            (["--elastic", "--workers", "2", "--elastic-every", "-1"], "--elastic-every must be >= 1 (or 0: auto)"),
            (["--elastic", "--workers", "2", "--heartbeat-timeout-s", "0"], "--heartbeat-timeout-s must be in")):
        p = _usage(*flags)
        assert p.returncode == 2, (flags, p.stderr)
        assert expected in p.stderr and len(p.stderr.strip().splitlines()) == 1, (flags, p.stderr)
