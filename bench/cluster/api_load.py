#!/usr/bin/env python3
"""Load test of the cluster server's API on loopback: N fake agents heartbeat
at 1 Hz while clients submit M jobs; reports API latency percentiles per
endpoint and checks that nothing was lost (every submission has its job and
its 'submit' event). The fake agents start nothing: the jobs the policy
places on them simply stay 'running'.

Usage: bench/cluster/api_load.py --frugal build/frugal [--agents 100]
       [--jobs 10000] [--submitters 4] [--policy afs-p] [--round-s 5]
"""

import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time


class Conn:
    def __init__(self, port):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def post(self, path, body):
        t = time.perf_counter()
        self.c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = self.c.getresponse()
        data = r.read()
        return r.status, data, time.perf_counter() - t


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--frugal", required=True)
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--submitters", type=int, default=4)
    ap.add_argument("--policy", default="afs-p")
    ap.add_argument("--round-s", default="5")
    ap.add_argument("--hold-s", type=float, default=20, help="heartbeats go on this long after the last submission")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="frugal-api-load-")
    out = os.path.join(root, "server.out")
    server = subprocess.Popen([args.frugal, "cluster", "serve", "--listen", "127.0.0.1:0", "--state",
                               os.path.join(root, "c.db"), "--policy", args.policy, "--round-s", args.round_s,
                               "--node-timeout-s", "30"], stdout=open(out, "w"), stderr=subprocess.STDOUT)
    port = None
    while port is None:
        m = re.search(r"serving on http://127.0.0.1:(\d+)", open(out).read())
        port = int(m.group(1)) if m else None
        time.sleep(0.1)
    lat = {"heartbeat": [], "submit": []}
    errors = []
    lock = threading.Lock()
    done = threading.Event()

    def agent(i):
        c = Conn(port)
        nxt = time.time()
        while not done.is_set():
            s, _, dt = c.post("/api/agent/heartbeat", {"node": f"fake-{i}", "slots": 4})
            with lock:
                lat["heartbeat"].append(dt)
                if s != 200:
                    errors.append(("heartbeat", s))
            nxt += 1.0
            time.sleep(max(0, nxt - time.time()))

    def submitter(k):
        c = Conn(port)
        for j in range(k, args.jobs, args.submitters):
            s, _, dt = c.post("/api/jobs", {"name": f"j{j}", "config_toml": 'model = "mlp"\n', "min_workers": 2,
                                            "max_workers": 4})
            with lock:
                lat["submit"].append(dt)
                if s != 201:
                    errors.append(("submit", s))

    agents = [threading.Thread(target=agent, args=(i,), daemon=True) for i in range(args.agents)]
    for t in agents:
        t.start()
    t0 = time.time()
    subs = [threading.Thread(target=submitter, args=(k,)) for k in range(args.submitters)]
    for t in subs:
        t.start()
    for t in subs:
        t.join()
    submit_s = time.time() - t0
    time.sleep(args.hold_s)
    done.set()
    for t in agents:
        t.join(timeout=60)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("GET", "/api/jobs")
    jobs = json.loads(c.getresponse().read())
    c.request("GET", f"/api/events?limit={args.jobs * 3}")
    events = json.loads(c.getresponse().read())
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=60)
    submits = sum(1 for e in events if e["kind"] == "submit")
    print(f"{args.jobs} submissions in {submit_s:.1f} s ({args.jobs / submit_s:.0f}/s) from {args.submitters} "
          f"clients while {args.agents} agents heartbeat at 1 Hz (then {args.hold_s:.0f} s more); policy {args.policy}, "
          f"round every {args.round_s} s")
    for k, v in lat.items():
        print(f"  {k}: {len(v)} requests, p50 {pct(v, .5):.1f} ms, p99 {pct(v, .99):.1f} ms, max {pct(v, 1):.1f} ms")
    print(f"  errors: {len(errors)}; jobs stored {len(jobs)}, submit events {submits}")
    ok = not errors and len(jobs) == args.jobs and submits == args.jobs
    print("  nothing lost" if ok else "  LOST OR FAILED REQUESTS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
