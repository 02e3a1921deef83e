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


def test_each_worker_sees_its_own_devices(tmp_path):
    """--gpus-per-worker G: local worker r sees devices r*G..r*G+G-1 of the
    launcher's CUDA_VISIBLE_DEVICES (what a cluster agent with --gpus sets);
    without the flag, or without the variable, nothing changes."""
    program = ("import os, sys; open(os.path.join(sys.argv[1], os.environ['LOCAL_RANK']), 'w')"
               ".write(os.environ.get('CUDA_VISIBLE_DEVICES', '-'))")

    def seen(flags, visible):
        env = dict(os.environ)
        env.pop("CUDA_VISIBLE_DEVICES", None)
        if visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible
        for f in tmp_path.iterdir():
            f.unlink()
        p = subprocess.run([frugal_binary(), "run", "--workers", "2", *flags, "--", sys.executable, "-c", program,
                            str(tmp_path)], capture_output=True, text=True, timeout=60, env=env)
        assert p.returncode == 0, p.stderr
        return [(tmp_path / str(r)).read_text() for r in range(2)]

    assert seen(["--gpus-per-worker", "2"], "3,4,5,6,7") == ["3,4", "5,6"]
    assert seen(["--gpus-per-worker", "1"], "GPU-a,GPU-b") == ["GPU-a", "GPU-b"]
    assert seen([], "3,4") == ["3,4", "3,4"]
    assert seen(["--gpus-per-worker", "1"], None) == ["-", "-"]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0,1,2")
    p = subprocess.run([frugal_binary(), "run", "--workers", "2", "--gpus-per-worker", "2", "--", sys.executable,
                        "-c", "pass"], capture_output=True, text=True, timeout=30, env=env)
    assert p.returncode == 2 and "needs 4 devices, and CUDA_VISIBLE_DEVICES lists 3" in p.stderr, p.stderr


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



def _coordinator(world, tmp_path, *extra):
    """A `frugal coordinator` on a free loopback port; (Popen, endpoint)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"tcp://127.0.0.1:{port}"
    log = open(tmp_path / "coordinator.out", "w")
    proc = subprocess.Popen([frugal_binary(), "coordinator", "--listen", endpoint, "--world", str(world),
                             "--timeout-s", "60", *extra], stdout=log, stderr=subprocess.STDOUT)
    return proc, endpoint


def _launch(endpoint, workers, script, *args, extra=()):
    return subprocess.Popen([frugal_binary(), "run", "--workers", str(workers), "--coordinator", endpoint,
                             "--timeout-s", "20", *extra, "--", PYTHON_EXE, *([os.path.join(HERE_DIR, script)]
                                                                              if script else []), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_line(proc, text, timeout_s=60):
    """Reads proc's stderr until a line holds `text` (kept in proc.first_lines)."""
    import time
    deadline = time.time() + timeout_s
    proc.first_lines = ""
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        proc.first_lines += line
        if text in line:
            return
    raise AssertionError(f"no line with {text!r} from {proc.args}: {proc.first_lines}")


def test_multi_host_form_sets_torch_variables_from_reserved_ranks(tmp_path):
    # Two "hosts" (two launchers, one with a port range) and a coordinator:
    # each child gets its global rank before it starts, and it is the rank
    # the coordinator's table gives it.
    coordinator, endpoint = _coordinator(3, tmp_path)
    try:
        a = _launch(endpoint, 2, "launch_worker.py", str(tmp_path), "env",
                    extra=("--cluster", "siteA", "--port-range", "29650-29670"))
        # b asks once a holds its ranks, so that a holds rank 0.
        wait_for_line(a, "ranks 0,1 of 3")
        b = _launch(endpoint, 1, "launch_worker.py", str(tmp_path), "env", extra=("--cluster", "siteB"))
        rb = b.communicate(timeout=120)
        ra = a.communicate(timeout=120)
        ra = (ra[0], a.first_lines + ra[1])
        assert a.returncode == 0, ra
        assert b.returncode == 0, rb
        assert coordinator.wait(timeout=60) == 0
    finally:
        coordinator.kill()
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(3)]
    masters = {(res["env"]["MASTER_ADDR"], res["env"]["MASTER_PORT"]) for res in results}
    assert len(masters) == 1 and next(iter(masters))[0] == "127.0.0.1", masters
    for r, res in enumerate(results):
        env = res["env"]
        assert res["joined_rank"] == r and res["world_size"] == 3
        assert env["RANK"] == env["FRUGAL_RANK"] == str(r)
        assert env["WORLD_SIZE"] == env["FRUGAL_WORLD_SIZE"] == "3"
        assert res["cluster"] == ("siteA" if r < 2 else "siteB")
        assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ((str(r), "2") if r < 2 else ("0", "1"))
    # Launcher a holds rank 0: its children and torch's store each take a
    # port of its range (the first free ones); b's children any port.
    ports = [int(results[r]["env"]["FRUGAL_LISTEN"].rsplit(":", 1)[1]) for r in range(2)]
    ports.append(int(next(iter(masters))[1]))
    assert all(29650 <= p <= 29670 for p in ports) and ports == sorted(set(ports)), ports
    assert results[0]["env"]["FRUGAL_LISTEN"].startswith("tcp://0.0.0.0:")
    assert results[2]["env"]["FRUGAL_LISTEN"] == "tcp://0.0.0.0:*"
    assert all(res["env"]["FRUGAL_ADVERTISE_HOST"] == "127.0.0.1" for res in results)
    assert "ranks 0,1 of 3 on this host" in ra[1]


def test_ddp_hook_example_runs_in_the_multi_host_form(tmp_path):
    # The unchanged DDP script: torch.distributed's gloo init from the
    # variables frugal run set, and Frugal's hook over Frugal's world.
    coordinator, endpoint = _coordinator(2, tmp_path)
    example = os.path.join(HERE_DIR, "..", "..", "examples", "ddp_hook.py")
    try:
        launchers = [_launch(endpoint, 1, None, example, "--steps", "30", "--density", "0.1",
                             extra=("--cluster", site)) for site in ("siteA", "siteB")]
        outs = [p.communicate(timeout=180) for p in launchers]
        assert coordinator.wait(timeout=60) == 0
    finally:
        coordinator.kill()
    for p, (out, err) in zip(launchers, outs):
        assert p.returncode == 0, err
    assert "done: 30 steps" in outs[0][0] + outs[1][0], outs


def test_an_elastic_coordinator_is_refused_with_a_reason(tmp_path):
    coordinator, endpoint = _coordinator(1, tmp_path, "--elastic")
    try:
        p = _launch(endpoint, 1, None, "-c", "pass")
        _, err = p.communicate(timeout=60)
    finally:
        coordinator.kill()
    assert p.returncode != 0
    assert "fixed-world coordinator" in err and len(err.strip().splitlines()) <= 2, err


def test_run_port_range_errors_are_one_line(tmp_path):
    import socket
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        for args, expected in ((["--port-range", "x-y"], "is not a port number"),
                               (["--port-range", f"{port}-{port + 1}"], "3 are needed"),
                               (["--port-range", f"{port}-{port + 2}"], f"in use: {port}")):
            p = subprocess.run([frugal_binary(), "run", "--workers", "2", *args, "--", sys.executable, "-c", "pass"],
                               capture_output=True, text=True, timeout=30)
            assert p.returncode == 2, (args, p.stderr)
            assert expected in p.stderr and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
