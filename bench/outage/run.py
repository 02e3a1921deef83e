#!/usr/bin/env python3
"""What a WAN outage does to a two-site run.

On the namespace testbed (testbed/testbed.sh `clusters`, hosts 2+2, the WAN
veth between the two routers shaped to --rate Mbit/s) a coordinator on host 0
and one `frugal worker` per host train the mlp; once rank 0 has trained
--outage-after-steps steps the WAN veth goes down for each outage length,
then up again. Each scenario (sync mode x elastic or not x outage length)
records how the run ended: every worker's exit status, its first error line,
the world size each worker ended in (elastic: the coordinator's "lost" lines),
and the wall time compared with the same run without an outage. --script
runs an own script instead (bench/python_path/script.py: the same mlp through
frugal.DistributedModel, one `frugal run --workers 1 [--elastic]` per host).

Needs root (network namespaces). Example:
  bench/outage/run.py --frugal build/frugal --outage-s 5 20 40 --out build/bench/outage/after.json
  bench/outage/run.py --frugal build/frugal --outage-s 5 --sync step local --check
--check exits 1 unless every scenario ended with exit 0 in the world it started with.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness.frugal import FrugalJob  # noqa: E402
from harness.procs import ProcessGroup, free_port  # noqa: E402
from harness.testbed import Testbed, hold_testbed_lock  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WAN_NAMESPACE = "fgtb-ra"
WAN_DEVICE = "wan"


def set_wan(up):
    """Takes router A's end of the WAN veth down or up. Taking a device down
    drops the routes through it, so bringing it up puts router A's route to
    cluster B back (what a router's routing daemon would do)."""
    ns = ["ip", "netns", "exec", WAN_NAMESPACE]
    subprocess.run(ns + ["ip", "link", "set", WAN_DEVICE, "up" if up else "down"], check=True)
    if up:
        subprocess.run(ns + ["ip", "route", "replace", "10.77.2.0/24", "via", "10.77.0.2"], check=True)


def rank0_steps(log_dir):
    """The newest step rank 0's metrics file shows (0 before the first record)."""
    best = 0
    for path in glob.glob(os.path.join(log_dir, "runs", "*", "metrics.jsonl")):
        with open(path) as f:
            for line in f:
                try:
                    best = max(best, int(json.loads(line).get("step", 0)))
                except (ValueError, AttributeError):
                    pass
    return best


def longest_stall(log_dir):
    """The longest gap, in seconds, between two consecutive progress records of
    rank 0 (--log-every 1: one per step), with the step it ended at."""
    times = []
    for path in glob.glob(os.path.join(log_dir, "runs", "*", "metrics.jsonl")):
        with open(path) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if "step" in r and "wall_time_s" in r and "test_accuracy" not in r:
                    times.append((float(r["wall_time_s"]), int(r["step"])))
    times.sort()
    gaps = [(b[0] - a[0], b[1]) for a, b in zip(times, times[1:])]
    return max(gaps) if gaps else (0.0, 0)


def first_error(log_path):
    with open(log_path, errors="replace") as f:
        for line in f:
            if re.search(r"error|failed|Unavailable|Timeout|lost", line, re.I) and (
                    "frugal worker: " in line or "frugal run: " in line or "Error: " in line):
                return line.strip()[:300]
    return ""


def script_command(args, tb, job, rank, sync, elastic, out_dir):
    """One `frugal run --workers 1` of bench/python_path/script.py on testbed
    host `rank`, with the settings frugal worker gets in run_scenario."""
    host = tb.hosts[rank]
    cmd = tb.prefix(rank) + [args.frugal, "run", "--workers", "1", "--coordinator", job.coordinator, "--insecure",
                             "--cluster", host.cluster, "--listen", "tcp://%s:*" % host.address, "--threads", "1"]
    if args.link_grace_s is not None:
        cmd += ["--link-grace-s", str(args.link_grace_s)]
    if elastic:
        cmd += ["--elastic"]
    cmd += list(args.run_args)
    cmd += ["--", "/usr/bin/python3", os.path.join(HERE, "..", "python_path", "script.py"), "--model", "mlp",
            "--sync", sync, "--steps", str(args.steps), "--run-dir", os.path.join(out_dir, "runs", "outage"),
            "--log-every", "1"]
    return cmd + (["--density", "0.03"] if sync == "step" else ["--local-steps", "10"])


def run_scenario(args, tb, sync, elastic, outage_s, out_dir):
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    port = free_port()
    job = FrugalJob(args.frugal, tb, port=port, with_cluster=True, quiet_all=False)
    worker_args = ["--model", "mlp", "--sync", sync, "--max-steps", str(args.steps), "--eval-every", "0",
                   "--epochs", "100", "--runs-dir", os.path.join(out_dir, "runs"), "--run-name", "outage", "--adapt", "off", "--log-every", "1",
                   "--density", "0.03" if sync == "step" else "1"]
    if sync == "local":
        worker_args += ["--local-steps", "10"]
    coordinator = job.coordinator_command() + list(args.coordinator_args)
    if args.link_grace_s is not None:
        worker_args += ["--link-grace-s", str(args.link_grace_s)]
        coordinator += ["--link-grace-s", str(args.link_grace_s)]
    worker_args += list(args.worker_args)
    if elastic:
        coordinator += ["--elastic", "--min-workers", "2"]
        worker_args += ["--elastic"]
    outage = {}
    with ProcessGroup() as procs:
        procs.start(coordinator, os.path.join(out_dir, "coordinator.log"), daemon=True)
        time.sleep(0.3)
        started = time.time()
        if args.script:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(args.python_path), OMP_NUM_THREADS="1")
            workers = [procs.start(script_command(args, tb, job, r, sync, elastic, out_dir),
                                   os.path.join(out_dir, "rank%d.log" % r), env=env) for r in range(job.world)]
        else:
            workers = [procs.start(job.worker_command(r, worker_args), os.path.join(out_dir, "rank%d.log" % r))
                       for r in range(job.world)]

        def cut():
            while time.time() - started < args.limit_s and rank0_steps(out_dir) < args.outage_after_steps:
                if any(w.poll() is not None for w in workers):
                    return
                time.sleep(0.1)
            outage["at_step"] = rank0_steps(out_dir)
            outage["down_at_s"] = time.time() - started
            set_wan(False)
            time.sleep(outage_s)
            set_wan(True)
            outage["up_at_s"] = time.time() - started

        cutter = threading.Thread(target=cut) if outage_s > 0 else None
        if cutter:
            cutter.start()
        deadline = started + args.limit_s
        while time.time() < deadline and any(w.poll() is None for w in workers):
            time.sleep(0.2)
        wall = time.time() - started
        if cutter:
            cutter.join()
        set_wan(True)
        rcs = [w.poll() for w in workers]
    logs = [os.path.join(out_dir, "rank%d.log" % r) for r in range(job.world)]
    with open(os.path.join(out_dir, "coordinator.log"), errors="replace") as f:
        lost = [line.strip() for line in f if " lost" in line]
    stall_s, stall_step = longest_stall(out_dir)
    return {
        "stall_s": round(stall_s, 1), "stall_step": stall_step,
        "sync": sync, "elastic": elastic, "outage_s": outage_s, "wall_s": round(wall, 1),
        "exit_codes": rcs, "ok": all(rc == 0 for rc in rcs) and not lost,
        "reshaped": bool(lost), "steps": rank0_steps(out_dir), "outage": outage,
        "errors": [e for e in (first_error(p) for p in logs) if e][:2], "coordinator_lost": lost[:4],
        "logs": out_dir,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default="build/frugal")
    ap.add_argument("--outage-s", type=float, nargs="+", default=[5, 20, 40])
    ap.add_argument("--sync", nargs="+", choices=["step", "local"], default=["step", "local"])
    ap.add_argument("--elastic", nargs="+", choices=["off", "on"], default=["off", "on"])
    ap.add_argument("--steps", type=int, default=120, help="--max-steps of every run")
    ap.add_argument("--outage-after-steps", type=int, default=30)
    ap.add_argument("--rate", type=int, default=100, help="WAN Mbit/s")
    ap.add_argument("--limit-s", type=float, default=240, help="a scenario still running then is stopped")
    ap.add_argument("--link-grace-s", type=float, help="given to the coordinator and every worker (default: theirs)")
    ap.add_argument("--worker-args", nargs=argparse.REMAINDER, default=[],
                    help="more frugal worker flags (last on the line)")
    ap.add_argument("--coordinator-args", nargs="*", default=[], help="more frugal coordinator flags")
    ap.add_argument("--script", action="store_true",
                    help="an own script (bench/python_path/script.py) under frugal run instead of frugal worker")
    ap.add_argument("--python-path", default="build/python", help="--script: where the frugal package is")
    ap.add_argument("--run-args", nargs="*", default=[], help="--script: more frugal run flags")
    ap.add_argument("--out")
    ap.add_argument("--label", default="", help="a name for this set of runs in the table")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    args.frugal = os.path.abspath(args.frugal)
    ok, why = Testbed.available()
    if not ok:
        print("SKIP: the outage benchmark needs the namespace testbed: " + why)
        return 77
    raw = os.path.abspath(os.path.join(os.path.dirname(args.out), "raw")) if args.out else tempfile.mkdtemp(
        prefix="frugal_outage_")
    lock = hold_testbed_lock(wait=True)  # noqa: F841 (held for the run)
    results = []
    with Testbed().up("clusters", "2+2", rate=args.rate, expect=4) as tb:
        for sync in args.sync:
            for elastic in args.elastic:
                for outage_s in args.outage_s:
                    name = "%s-%s-%gs" % (sync, "elastic" if elastic == "on" else "fixed", outage_s)
                    r = run_scenario(args, tb, sync, elastic == "on", outage_s, os.path.join(raw, name))
                    print(json.dumps(r), flush=True)
                    results.append(r)
    print("| %s | sync | elastic | outage s | ended | exit codes | longest stall s | wall s |" % args.label)
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        ended = "ok" if r["ok"] else ("reshaped" if r["reshaped"] else "failed")
        print("| | %s | %s | %g | %s | %s | %.1f | %.1f |" % (r["sync"], "on" if r["elastic"] else "off", r["outage_s"],
                                                         ended, " ".join(str(c) for c in r["exit_codes"]),
                                                         r["stall_s"], r["wall_s"]))
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    if args.check and not all(r["ok"] for r in results):
        print("FAIL: a run did not end with exit 0 in the world it started with", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
