"""`frugal run`: the environment it sets up, and supervision of a failed
worker."""

import json
import os
import subprocess
import sys

from conftest import HERE as HERE_DIR, PYTHON as PYTHON_EXE, frugal_binary, run_workers


def test_run_sets_up_ranks_and_torch_variables(tmp_path):
    proc, results = run_workers(2, "launch_worker.py", "env", tmp_path=tmp_path,
                                extra=("--local-clusters", "a,b", "--link-grace-s", "45"))
    assert proc.returncode == 0, proc.stderr
    for r, res in enumerate(results):
        assert res is not None, proc.stderr
        assert (res["joined_rank"], res["world_size"]) == (r, 2)
        assert res["cluster"] == "ab"[r]
        env = res["env"]
        assert env["FRUGAL_RANK"] == env["RANK"] == str(r)
        assert env["FRUGAL_WORLD_SIZE"] == env["WORLD_SIZE"] == "2"
        assert env["FRUGAL_COORDINATOR"].startswith("tcp://127.0.0.1:")
        assert env["MASTER_ADDR"] == "127.0.0.1" and int(env["MASTER_PORT"]) > 0
        assert float(env["FRUGAL_LINK_GRACE_S"]) == 45.0
    assert results[0]["env"]["MASTER_PORT"] == results[1]["env"]["MASTER_PORT"]


def test_killed_worker_fails_the_others_cleanly(tmp_path):
    proc, results = run_workers(3, "launch_worker.py", "kill", tmp_path=tmp_path, timeout_s=8)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "worker 1 failed (signal Killed)" in proc.stderr
    assert results[1] is None  # it was killed before writing anything
    for r in (0, 2):
        res = results[r]
        assert res is not None, proc.stderr
        assert res["error"] in ("ConnectionError", "TimeoutError"), res
        assert "rank 1" in res["message"], res
        assert res["seconds"] < 8 + 4, res  # within the network timeout


def test_program_is_started_by_the_path_given(tmp_path):
    # A virtual environment's python is a symlink that finds its packages
    # from the path it was started by: frugal run must not resolve it.
    script = tmp_path / "program.sh"
    script.write_text('#!/bin/sh\necho "$0" > "$1"\n')
    script.chmod(0o755)
    link = tmp_path / "venv-python"
    link.symlink_to(script)
    out = tmp_path / "argv0.txt"
    proc = subprocess.run([frugal_binary(), "run", "--workers", "1", "--", str(link), str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().strip() == str(link)


def test_run_usage_errors():
    binary = frugal_binary()
    p = subprocess.run([binary, "run", "--workers", "2"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "needs a program" in p.stderr
    p = subprocess.run([binary, "run", "--workers", "0", "--", sys.executable, "-c", "pass"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2 and "--workers must be in [1, 256], got 0" in p.stderr
    p = subprocess.run([binary, "run", "--workers", "1", "--timeout-s", "5", "--", "/nonexistent/prog"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "cannot start /nonexistent/prog" in p.stderr


def test_a_failing_program_fails_the_run():
    p = subprocess.run([frugal_binary(), "run", "--workers", "2", "--timeout-s", "5", "--", sys.executable, "-c",
                        "import os, sys; sys.exit(3 if os.environ['FRUGAL_RANK'] == '1' else 0)"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert "worker 1 failed (exit code 3)" in p.stderr


def test_init_falls_back_to_torchrun_variables(tmp_path):
    # What torchrun sets; rank 0 then serves Frugal's rendezvous on MASTER_PORT + 1.
    import os
    import socket
    from conftest import HERE, PYTHON
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(2):
        env = {k: v for k, v in os.environ.items() if not k.startswith("FRUGAL_")}
        env.update(RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port - 1),
                   FRUGAL_TIMEOUT_S="20")
        procs.append(subprocess.Popen([PYTHON, os.path.join(HERE, "launch_worker.py"), str(tmp_path), "env"], env=env,
                                      stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    import json
    for r in range(2):
        res = json.load(open(tmp_path / f"rank{r}.json"))
        assert (res["joined_rank"], res["world_size"]) == (r, 2)
        assert res["env"]["FRUGAL_COORDINATOR"] is None


def _site_keys(tmp_path):
    key = tmp_path / "site.key"
    p = subprocess.run([frugal_binary(), "keys", "generate", "--out", str(key)], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr
    authorized = tmp_path / "authorized_keys"
    authorized.write_text((tmp_path / "site.key.pub").read_text())
    authorized.chmod(0o644)
    return key, authorized


def test_run_passes_keys_to_init(tmp_path):
    # Relative paths on the command line reach the children as absolute ones.
    key, authorized = _site_keys(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run([frugal_binary(), "run", "--workers", "2", "--timeout-s", "20", "--key", "site.key",
                           "--authorized-keys", "authorized_keys", "--", PYTHON_EXE,
                           os.path.join(HERE_DIR, "launch_worker.py"), str(out), "env"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for r in range(2):
        res = json.loads((out / f"rank{r}.json").read_text())
        assert (res["joined_rank"], res["world_size"]) == (r, 2)
        env = res["env"]
        assert env["FRUGAL_KEY"] == os.path.realpath(key)
        assert env["FRUGAL_AUTHORIZED_KEYS"] == os.path.realpath(authorized)
        assert env["FRUGAL_INSECURE"] is None
        assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == (str(r), "2")


def test_a_rank_without_keys_cannot_join_a_keyed_run(tmp_path):
    # The in-process coordinator speaks CurveZMQ: a plain-TCP registration
    # never completes, and the run fails within the rendezvous timeout.
    key, authorized = _site_keys(tmp_path)
    proc, results = run_workers(1, "launch_worker.py", "plain", tmp_path=tmp_path, timeout_s=5,
                                extra=("--key", str(key), "--authorized-keys", str(authorized),
                                       "--rendezvous-timeout-s", "5"))
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert results[0] is None
    assert "worker 0 failed" in proc.stderr


def test_run_refuses_a_remote_coordinator_without_keys(tmp_path):
    binary = frugal_binary()
    base = [binary, "run", "--workers", "1", "--coordinator", "tcp://192.0.2.1:29500", "--timeout-s", "5"]
    p = subprocess.run(base + ["--", sys.executable, "-c", "pass"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "a multi-host run needs keys" in p.stderr, p.stderr
    p = subprocess.run(base + ["--key", "x.key", "--", sys.executable, "-c", "pass"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2 and "--key and --authorized-keys go together" in p.stderr, p.stderr
    p = subprocess.run(base + ["--insecure", "--key", "x.key", "--", sys.executable, "-c", "pass"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--insecure cannot be combined" in p.stderr, p.stderr


def test_init_refuses_a_remote_world_without_keys(tmp_path):
    # Resolved before any network wait: the error comes at once.
    code = ("import frugal, sys\n"
            "try:\n"
            "    frugal.init(**eval(sys.argv[1]))\n"
            "except Exception as e:\n"
            "    print(type(e).__name__ + ': ' + str(e)); sys.exit(0)\n"
            "sys.exit('joined')\n")
    env = dict(os.environ, FRUGAL_COORDINATOR="tcp://192.0.2.1:29500", FRUGAL_RENDEZVOUS_TIMEOUT_S="5")
    for kwargs, expected in (("{}", "ValueError: a multi-host run needs keys"),
                             ("dict(key='missing.key', authorized_keys='missing')", "FileNotFoundError"),
                             ("dict(key=3, authorized_keys='a')", "TypeError: key must be a path")):
        p = subprocess.run([sys.executable, "-c", code, kwargs], capture_output=True, text=True, timeout=60,
                           env=env, cwd=tmp_path)
        assert p.returncode == 0 and p.stdout.startswith(expected), (kwargs, p.stdout, p.stderr)


def test_all_reduce_and_barrier_over_the_world(tmp_path):
    proc, results = run_workers(2, "launch_worker.py", "reduce", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for res in results:
        assert res is not None, proc.stderr
        assert res["mean"] == [0.5, 1.0]
        assert res["total"] == [[3.0, 3.0], [3.0, 3.0]]
        assert res["scalar"] == results[0]["scalar"]  # the same bits on every rank
        assert abs(res["scalar"] - 0.15) < 1e-12
        assert "every rank must pass as many" in res["uneven"]

