#!/usr/bin/env python3
"""A message that takes longer on the wire than the receive timeout
(Note [Messages in parts] in src/comm/transport/zmq/zmq_transport.cc).

Two testbed hosts (testbed/testbed.sh `flat`, each link shaped to --rate
Mbit/s), a `frugal coordinator` on host 0 and one `frugal run --workers 1`
per host running a script that sums a float64 tensor of --mb MB over
frugal.all_reduce with timeout_s --timeout-s: each rank sends the other its
whole tensor, so the transfer takes about mb * 8 / rate seconds. Prints one
JSON line per rank (ok, seconds, error) and exits 1 unless both ranks got
the right sum.

Needs root (network namespaces). Example:
  bench/comm/slow_link.py --frugal build/frugal --rate 10 --mb 40 --timeout-s 15
"""
import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness.frugal import FrugalJob  # noqa: E402
from harness.procs import ProcessGroup, free_port  # noqa: E402
from harness.testbed import Testbed, hold_testbed_lock  # noqa: E402

SCRIPT = r'''
import json, sys, time
import torch
import frugal

mb, timeout_s = float(sys.argv[1]), float(sys.argv[2])
world = frugal.init()
x = torch.full((int(mb * 2**20 / 8),), float(world.rank + 1), dtype=torch.float64)
start = time.time()
try:
    y = frugal.all_reduce(x, op="sum", timeout_s=timeout_s)
    ok, error = bool((y == sum(range(1, world.world_size + 1))).all()), ""
except Exception as e:  # the figure is whether it fails, and how
    ok, error = False, f"{type(e).__name__}: {e}"
print(json.dumps({"rank": world.rank, "ok": ok, "seconds": round(time.time() - start, 2), "error": error[:300]}))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frugal", default="build/frugal")
    ap.add_argument("--python-path", default="build/python", help="where the frugal package is")
    ap.add_argument("--rate", type=int, default=10, help="each host's link, Mbit/s")
    ap.add_argument("--mb", type=float, default=40, help="MB each rank sends")
    ap.add_argument("--timeout-s", type=float, default=15, help="the all_reduce's timeout")
    ap.add_argument("--limit-s", type=float, default=600, help="the run is stopped after this")
    args = ap.parse_args()
    ok_testbed, why = Testbed.available()
    if not ok_testbed:
        sys.exit("slow_link: needs the namespace testbed: " + why)
    lock = hold_testbed_lock(wait=True)  # noqa: F841 (held for the run)
    out_dir = tempfile.mkdtemp(prefix="frugal-slow-link-")
    script = os.path.join(out_dir, "script.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.path.abspath(args.python_path), OMP_NUM_THREADS="1")
    results = []
    tb = Testbed().up("flat", "2", rate=args.rate, expect=2)
    try:
        with ProcessGroup() as procs:
            job = FrugalJob(os.path.abspath(args.frugal), tb, port=free_port())
            procs.start(job.coordinator_command(), os.path.join(out_dir, "coordinator.log"), daemon=True)
            time.sleep(0.3)
            logs = [os.path.join(out_dir, "rank%d.log" % r) for r in range(2)]
            for r in range(2):
                host = tb.hosts[r]
                cmd = tb.prefix(r) + [os.path.abspath(args.frugal), "run", "--workers", "1", "--coordinator",
                                      job.coordinator, "--insecure", "--listen", "tcp://%s:*" % host.address,
                                      "--threads", "1", "--timeout-s", str(args.timeout_s), "--",
                                      "/usr/bin/python3", script, str(args.mb), str(args.timeout_s)]
                procs.start(cmd, logs[r], env=env)
            procs.wait_all(time.time() + args.limit_s)
        for log in logs:
            with open(log) as f:
                lines = [line for line in f if line.startswith("{")]
            results.append(json.loads(lines[-1]) if lines else {"ok": False, "error": "no result: see " + log})
    finally:
        tb.down()
    print(json.dumps({"rate_mbit": args.rate, "mb": args.mb, "timeout_s": args.timeout_s,
                      "wire_s_estimate": round(args.mb * 2**20 * 8 / (args.rate * 1e6), 1), "ranks": results}))
    sys.exit(0 if all(r.get("ok") for r in results) else 1)


if __name__ == "__main__":
    main()
