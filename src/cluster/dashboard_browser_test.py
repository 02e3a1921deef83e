#!/usr/bin/env python3
"""Loads the cluster dashboard in headless Chromium against a running server
with a node, a running job and its metrics (ctest cluster_dashboard_browser).

The server is a real `frugal cluster serve`; the node and the job's metrics
come from heartbeats this script sends as an agent would (no training runs,
so the test takes seconds). Chromium runs the page's JavaScript, and the
test checks the DOM it produced: the node with its allocated slots, the job
row, an allocation bar of the timeline and the loss curve. A screenshot goes
to --screenshot (default: cluster_dashboard.png in the current directory,
the build directory under ctest).

Exits 77 (ctest: skipped) when no chromium binary is installed.
Usage: dashboard_browser_test.py --frugal build/frugal [--screenshot FILE]
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
import threading
import time
import urllib.request


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frugal", required=True)
    ap.add_argument("--screenshot", default="cluster_dashboard.png")
    args = ap.parse_args()
    browser = chromium()
    if browser is None:
        print("SKIPPED: no chromium binary (scripts/setup installs Debian's chromium)")
        return 77
    root = tempfile.mkdtemp(prefix="frugal-dashboard-")
    out = os.path.join(root, "server.out")
    server = subprocess.Popen([args.frugal, "cluster", "serve", "--listen", "127.0.0.1:0", "--state",
                               os.path.join(root, "cluster.db"), "--round-s", "0.5"],
                              stdout=open(out, "w"), stderr=subprocess.STDOUT)
    try:
        port = None
        deadline = time.time() + 30
        while port is None and time.time() < deadline:
            m = re.search(r"serving on http://127.0.0.1:(\d+)", open(out).read())
            port = int(m.group(1)) if m else None
            time.sleep(0.1)
        assert port, "server did not start: " + open(out).read()
        beat = {"node": "host-dash", "slots": 4, "running": [], "exited": [], "samples": []}
        post(port, "/api/agent/heartbeat", beat)
        # A command job first (it takes 1 slot), then a train job (the other 3).
        script = post(port, "/api/jobs", {"name": "own-script", "command": ["python3", "train.py", "--lr", "0.1"],
                                          "workdir": root, "min_workers": 1, "max_workers": 1, "max_steps": 100})["id"]
        job = post(port, "/api/jobs", {"name": "dash-job", "config_toml": 'model = "mlp"\n', "min_workers": 2,
                                       "max_workers": 4, "max_steps": 40})["id"]
        deadline = time.time() + 20
        while time.time() < deadline and len(post(port, "/api/agent/heartbeat", beat)["tasks"]) < 2:
            time.sleep(0.2)
        beat["samples"] = [{"job_id": job, "step": s, "workers": 4, "global_batch": 128, "loss": 2.3 - 0.05 * s,
                            "accuracy": -1, "samples_per_s": 500.0} for s in range(5, 25, 5)]
        beat["samples"].append({"job_id": job, "step": 20, "workers": 4, "accuracy": 0.61})
        beat["samples"].append({"job_id": script, "step": 50, "workers": 1, "global_batch": 16, "loss": 0.4,
                                "accuracy": -1, "samples_per_s": 300.0})
        post(port, "/api/agent/heartbeat", beat)
        beat["samples"] = []
        stop = threading.Event()

        def keep_alive():  # The node stays up while the browser works (it is slow on a busy machine).
            while not stop.wait(1.0):
                post(port, "/api/agent/heartbeat", beat)

        alive = threading.Thread(target=keep_alive, daemon=True)
        alive.start()
        url = f"http://127.0.0.1:{port}/"
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--virtual-time-budget=5000", f"--user-data-dir={root}/profile"]
        dom = subprocess.run([browser, *flags, "--dump-dom", url], capture_output=True, text=True,
                             timeout=120).stdout
        checks = {
            "page loaded its state": 'data-loaded="1"' in dom,
            "node listed and up": "<b>host-dash</b> up" in dom,
            "job row": 'class="job" data-job="%d"' % job in dom and "dash-job" in dom,
            "slots coloured by job": dom.count('title="job %d"' % job) == 3 and dom.count('title="job %d"' % script) == 1,
            "command job row": 'class="job" data-job="%d"' % script in dom and "own-script" in dom,
            "command job's program": '<td class="program">python3 train.py --lr 0.1</td>' in dom,
            "command job's progress": "50/100" in dom,
            "train job's program": '<td class="program">frugal train</td>' in dom,
            "timeline bar": 'class="alloc"' in dom,
            "loss curve": "<polyline" in dom,
            "accuracy shown": "61.0%" in dom,
        }
        failed = [k for k, ok in checks.items() if not ok]
        shot = os.path.abspath(args.screenshot)
        subprocess.run([browser, *flags, "--window-size=1200,1000", f"--screenshot={shot}", url],
                       capture_output=True, timeout=120)
        stop.set()
        print("screenshot:", shot if os.path.exists(shot) else "(not written)")
        if failed:
            print("FAILED checks:", failed)
            print(dom[:4000])
            return 1
        print("dashboard: all", len(checks), "checks passed")
        return 0
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
