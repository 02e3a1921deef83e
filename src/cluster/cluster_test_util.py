"""Helpers of the live cluster tests (cluster_live_test.py, slurm_backend_test.py,
multihost_test.py)."""

import argparse
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.request


def parse_args(prefix, controller=None):
    """--frugal and --keep: the frugal binary (absolute), the run directory
    (--keep DIR, or a new temporary one named by `prefix`) and whether it
    is kept; with `controller` (its default) also --controller, the
    server's, as a fourth value."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--frugal", required=True)
    ap.add_argument("--keep", help="keep the run directory here")
    if controller is not None:
        ap.add_argument("--controller", choices=["elastic", "restart"], default=controller)
    args = ap.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix=prefix)
    os.makedirs(root, exist_ok=True)
    out = (os.path.abspath(args.frugal), root, bool(args.keep))
    return out + (args.controller,) if controller is not None else out


def stop_processes(procs):
    """SIGTERM to each live process, newest first (SIGCONT before it: a test
    may have stopped one), then up to 20 s each to exit before SIGKILL."""
    for p in reversed(procs):
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGCONT)
            except OSError:
                pass
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


def get_json(port, path):
    """GET http://127.0.0.1:PORT/PATH as JSON, or None if the server does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return json.loads(r.read())
    except (OSError, TypeError, ValueError):
        return None


def wait_for_server(proc, out, timeout=120):
    """The port of a `frugal cluster serve` started as `proc`, writing to the
    file `out`, once it answers /api/health. Loading frugal took over 30 s at
    load average 28, hence the long default."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = re.findall(r"serving on http://[^:/\s]+:(\d+)", open(out).read())
        if m and get_json(int(m[-1]), "/api/health") is not None:
            return int(m[-1])
        if proc.poll() is not None:
            raise AssertionError("server exited: " + open(out).read())
        time.sleep(0.1)
    raise AssertionError("server did not start")


def wait_for(pred, what, timeout):
    """Polls PRED every 0.3 s; AssertionError naming WHAT after TIMEOUT seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def write_mlp_job(root, name, lo, hi, steps):
    """ROOT/NAME.toml: a small elastic mlp job (synthetic data, batch 32 per
    worker) of LO-HI workers and STEPS steps; returns its path."""
    path = os.path.join(root, name + ".toml")
    with open(path, "w") as f:
        f.write(f'name = "{name}"\nmin_workers = {lo}\nmax_workers = {hi}\nmodel = "mlp"\n'
                f'dataset = "synthetic"\nsynthetic_train_size = 4096\nsynthetic_test_size = 256\n'
                f"max_steps = {steps}\nlog_every = 5\nbatch_size = 32\ntimeout_s = 60\n"
                f"elastic_every = 5\nepochs = 1000\n")
    return path
