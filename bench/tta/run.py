#!/usr/bin/python3
"""Time-to-accuracy benchmark: Frugal against PyTorch DDP on shaped links (issue 5).

Every system of a scenario runs in the same testbed (testbed/testbed.sh),
one after the other, each on a freshly created set of namespaces (so the
fluctuating trace starts at the same second for every system):

  frugal         frugal worker processes (topology-aware exchange: --exchange auto)
  frugal_flat    clusters/fluctuating only: Frugal forced to --exchange flat
  frugal_adapt   Frugal with the bandwidth-adaptive controller (--adapt on, issue 8)
  frugal_dX      Frugal at fixed density X (e.g. frugal_d0.02): the hindsight sweep
  frugal_slow    one of four workers 2x slower (CPU cgroup quota), equal batches
  frugal_slow_balanced  the same with batch sizes balanced by the controller (--adapt batch)
  ddp            PyTorch DDP over Gloo (bench/baselines/ddp.py)
  ddp_fp16       DDP + fp16 compression hook
  ddp_powersgd   DDP + PowerSGD hook, rank 4
  ddp_unlimited  DDP on the same hosts with no rate limit (datacenter reference)

Each system gets a time budget (seconds of training); one that does not reach
the target accuracy within its run gets its elapsed training time as a lower
bound and is flagged. Wall time is measured by the rank-0 process from the
start of training (after rendezvous, data loading and the initial parameter
broadcast), and includes evaluations, for every system alike.

Outputs (in --out-dir, default <build-dir>/bench):
  tta.json          schema of issue 5
  tta_curves.csv    scenario,system,wall_time_s,step,test_accuracy
  tta_summary.csv   one row per (scenario, system)
  tta.md            markdown table with ratios
  tta.png           test accuracy vs wall time, one panel per scenario

  bench/tta/run.py --quick                 # reduced set, < 10 minutes
  bench/tta/run.py --scenarios mlp-flat-100
  bench/tta/run.py --smoke                 # 2 workers, a few steps (the ctest)
"""
import argparse
import csv
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TESTBED = os.path.join(ROOT, "testbed", "testbed.sh")
DDP = os.path.join(ROOT, "bench", "baselines", "ddp.py")
PY = "/usr/bin/python3"
sys.path.insert(0, os.path.join(ROOT, "bench", "adapt"))
import hetero  # noqa: E402  (CPU cgroups for the heterogeneous-worker variants)
sys.path.insert(0, os.path.join(ROOT, "bench"))
from jsonl_records import read_jsonl  # noqa: E402

DDP_HOOKS = {"ddp": "none", "ddp_fp16": "fp16", "ddp_powersgd": "powersgd", "ddp_unlimited": "none"}
SWEEP_DENSITIES = ["0.0025", "0.005", "0.02", "0.04"]
ALL_SYSTEMS = ["frugal", "frugal_flat", "frugal_adapt", "frugal_slow", "frugal_slow_balanced"] + \
    ["frugal_d" + d for d in SWEEP_DENSITIES] + ["ddp", "ddp_fp16", "ddp_powersgd", "ddp_unlimited"]
# frugal_slow*: every worker in its own CPU cgroup (bench/adapt/hetero.py):
# HETERO_CORES each, rank SLOW_RANK half of that, so each computes at its own
# fixed speed as on separate devices. (--compute-slowdown sleeps, which on 4
# workers sharing 2 cores frees CPU for the others and hides the slowness.)
SLOW_RANK = 1
HETERO_CORES = 0.45


def frugal_variant_args(system, rank):
    """Extra `frugal worker` flags of a Frugal system variant."""
    if system == "frugal_flat":
        return ["--exchange", "flat"]
    if system == "frugal_adapt":
        return ["--adapt", "on"]
    if system.startswith("frugal_d"):
        return ["--density", system[len("frugal_d"):]]
    if system == "frugal_slow_balanced":
        return ["--adapt", "batch"]
    return []


def scenario(name, model, topology, rate, target, systems, workers=4, hosts=None, epochs=3, eval_every=25,
             budgets=None, second_target=None):
    return {"name": name, "model": model, "workers": workers, "topology": topology, "rate_mbit": rate,
            "hosts": hosts or (str(workers) if topology == "flat" else "%d+%d" % (workers // 2, workers // 2)),
            "target_acc": target, "second_target": second_target, "systems": systems, "epochs": epochs,
            "eval_every": eval_every, "budgets": budgets or {}}


FLAT_SYSTEMS = ["frugal", "ddp", "ddp_fp16", "ddp_powersgd", "ddp_unlimited"]
CLUSTER_SYSTEMS = ["frugal", "frugal_flat", "ddp", "ddp_fp16", "ddp_powersgd", "ddp_unlimited"]
# Budgets in seconds of training. Frugal and ddp_unlimited are sized to finish
# their epochs; shaped DDP runs ~3 s/iteration on mlp at 100 Mbit/s, so it
# gets a fixed slice and a lower bound.
FULL_BUDGETS = {"frugal": 900, "frugal_flat": 900, "ddp": 300, "ddp_fp16": 300, "ddp_powersgd": 300,
                "ddp_unlimited": 900, "frugal_adapt": 900, "frugal_slow": 900, "frugal_slow_balanced": 900}
FULL_BUDGETS.update({"frugal_d" + d: 900 for d in SWEEP_DENSITIES})
ADAPT_SYSTEMS = ["frugal", "frugal_adapt"] + ["frugal_d" + d for d in SWEEP_DENSITIES] + ["ddp", "ddp_unlimited"]
SCENARIOS = {
    "mlp-flat-100": scenario("mlp-flat-100", "mlp", "flat", 100, 0.88, FLAT_SYSTEMS, budgets=FULL_BUDGETS,
                             second_target=0.85),
    "mlp-flat-500": scenario("mlp-flat-500", "mlp", "flat", 500, 0.88, FLAT_SYSTEMS, budgets=FULL_BUDGETS,
                             second_target=0.85),
    "cnn-flat-100": scenario("cnn-flat-100", "cnn", "flat", 100, 0.90, FLAT_SYSTEMS, budgets=FULL_BUDGETS,
                             second_target=0.87),
    "cnn-flat-500": scenario("cnn-flat-500", "cnn", "flat", 500, 0.90, FLAT_SYSTEMS, budgets=FULL_BUDGETS,
                             second_target=0.87),
    "mlp-clusters-100": scenario("mlp-clusters-100", "mlp", "clusters", 100, 0.88, CLUSTER_SYSTEMS,
                                 budgets=FULL_BUDGETS, second_target=0.85),
    "mlp-fluctuating": scenario("mlp-fluctuating", "mlp", "fluctuating", None, 0.88, CLUSTER_SYSTEMS,
                                budgets=FULL_BUDGETS, second_target=0.85),
    # Issue 8: the adaptive controller against the default fixed density, a
    # fixed-density sweep (best in hindsight) and DDP, on the fluctuating WAN.
    "mlp-fluctuating-adapt": scenario("mlp-fluctuating-adapt", "mlp", "fluctuating", None, 0.88, ADAPT_SYSTEMS,
                                      budgets=FULL_BUDGETS, second_target=0.85),
    # Issue 8: one worker 2x slower; equal vs speed-proportional batch sizes.
    "mlp-hetero-100": scenario("mlp-hetero-100", "mlp", "flat", 100, 0.88,
                               ["frugal_slow", "frugal_slow_balanced"], budgets=FULL_BUDGETS,
                               second_target=0.85),
}
QUICK = [scenario("mlp-flat-100-quick", "mlp", "flat", 100, 0.80, FLAT_SYSTEMS, epochs=1, eval_every=25,
                  budgets={"frugal": 200, "ddp": 60, "ddp_fp16": 60, "ddp_powersgd": 60, "ddp_unlimited": 200},
                  second_target=0.75)]
SMOKE = [scenario("smoke", "mlp", "flat", 1000, 0.5, ["frugal", "ddp"], workers=2, epochs=1, eval_every=2,
                  budgets={"frugal": 60, "ddp": 60}, second_target=None)]


def log(msg):
    print("[tta %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


class Testbed:
    """Namespaces from testbed/testbed.sh, or plain loopback when unavailable."""

    def __init__(self, use_netns):
        self.use_netns = use_netns
        self.hosts = []  # (namespace, address, cluster)
        self.up_args = None

    @staticmethod
    def available():
        if os.geteuid() != 0:
            return False, "not root"
        r = subprocess.run(["bash", TESTBED, "check"], capture_output=True, text=True)
        if r.returncode != 0:
            return False, (r.stderr or r.stdout).strip()
        return True, ""

    def up(self, sc, rate):
        n = sc["workers"]
        if not self.use_netns:
            self.hosts = [(None, "127.0.0.1", "c%d" % (i * 2 // n) if sc["topology"] != "flat" else "c0")
                          for i in range(n)]
            return
        args = ["bash", TESTBED, "up", sc["topology"], "--hosts", sc["hosts"]]
        if sc["topology"] != "fluctuating":
            args += ["--rate", str(rate)]
        if sc["topology"] == "fluctuating" and rate == 0:
            args = ["bash", TESTBED, "up", "clusters", "--hosts", sc["hosts"], "--rate", "0"]
        subprocess.run(args, check=True, env=dict(os.environ, TESTBED_QUIET="1"))
        out = subprocess.run(["bash", TESTBED, "info"], check=True, capture_output=True, text=True).stdout
        self.hosts = []
        for line in out.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            f = line.split()
            self.hosts.append((f[1], f[2], f[4]))
        if len(self.hosts) != n:
            raise RuntimeError("testbed has %d hosts, scenario needs %d" % (len(self.hosts), n))

    def down(self):
        if self.use_netns:
            subprocess.run(["bash", TESTBED, "down"], capture_output=True)

    def prefix(self, i):
        ns = self.hosts[i][0]
        return ["ip", "netns", "exec", ns] if ns else []

    def ifname(self, i):
        return "eth0" if self.hosts[i][0] else "lo"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Procs:
    """Processes this harness started; killed by pid (whole process group)."""

    def __init__(self):
        self.procs = []
        self.daemons = set()

    def start(self, cmd, log_path, env=None, daemon=False):
        f = open(log_path, "w")
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.procs.append((p, f))
        if daemon:
            self.daemons.add(p.pid)
        return p

    def wait_all(self, deadline, progress_file=None, stall_s=None):
        """Waits until every non-daemon process exits or the deadline passes. True if all exited.
        With progress_file, also gives up (self.stalled = True) when the file has not changed for stall_s."""
        workers = [p for p, _ in self.procs if p.pid not in self.daemons]
        started = time.time()
        self.stalled = False
        while time.time() < deadline:
            if progress_file and stall_s:
                try:
                    last = max(started, os.path.getmtime(progress_file))
                except OSError:
                    last = started
                if time.time() - last > stall_s and any(p.poll() is None for p in workers):
                    self.stalled = True
                    return False
            if all(p.poll() is not None for p in workers):
                return True
            # A failed rank makes the others hang until their timeout: stop early.
            if any(p.poll() not in (None, 0) for p in workers):
                time.sleep(3)
                return all(p.poll() is not None for p in workers)
            time.sleep(0.5)
        return False

    def signal_all(self, sig):
        for p, _ in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass

    def kill_all(self):
        for p, f in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        time.sleep(1)
        for p, f in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            p.wait()
            f.close()
        self.procs = []


def run_frugal(args, sc, system, tb, run_dir, budget):
    """Runs one Frugal job; returns the path of rank 0's metrics.jsonl."""
    n = sc["workers"]
    port = 29500 if tb.use_netns else free_port()
    coord = "tcp://%s:%d" % (tb.hosts[0][1], port)
    procs = Procs()
    if system.startswith("frugal_slow"):
        hetero.make_groups([HETERO_CORES / (2 if r == SLOW_RANK else 1) for r in range(n)])
    try:
        procs.start(tb.prefix(0) + [args.frugal, "coordinator", "--listen", coord, "--world", str(n)],
                    os.path.join(run_dir, "coordinator.log"), daemon=True)
        time.sleep(0.3)
        for i in range(n):
            cmd = tb.prefix(i) + [args.frugal, "worker", "--coordinator", coord, "--rank", str(i),
                                  "--cluster", tb.hosts[i][2], "--listen", "tcp://%s:*" % tb.hosts[i][1],
                                  "--threads", "1", "--model", sc["model"], "--epochs", str(sc["epochs"]),
                                  # Same metrics cadence as ddp.py, so the median "iter" of both
                                  # excludes the windows that contain an evaluation.
                                  "--eval-every", str(sc["eval_every"]),
                                  "--log-every", str(max(1, args.log_every // 5)),
                                  "--runs-dir", run_dir, "--run-name", "run", "--timeout-s", "120"]
            if sc.get("max_steps"):
                cmd += ["--max-steps", str(sc["max_steps"])]
            if args.frugal_density is not None:
                cmd += ["--density", str(args.frugal_density)]
            cmd += args.frugal_args.split() + frugal_variant_args(system, i)
            if i > 0:
                cmd.append("--quiet")
            p = procs.start(cmd, os.path.join(run_dir, "rank%d.log" % i))
            if system.startswith("frugal_slow"):
                # `ip netns exec` execs the worker, so p.pid is the worker.
                with open(os.path.join(hetero.CGROUP, "r%d" % i, "cgroup.procs"), "w") as f:
                    f.write(str(p.pid))
        # Startup (data loading, rendezvous) is not in the budget; training time is.
        ok = procs.wait_all(time.time() + budget + args.grace_s)
        if not ok:
            log("  %s: over budget (%.0f s), stopping it" % (system, budget))
    finally:
        procs.kill_all()
        if system.startswith("frugal_slow"):
            hetero.remove_groups(n)
    return os.path.join(run_dir, "run", "metrics.jsonl"), (not ok)


def run_ddp(args, sc, system, tb, run_dir, budget):
    n = sc["workers"]
    port = 29600 if tb.use_netns else free_port()
    procs = Procs()
    ok = False
    try:
        for i in range(n):
            env = dict(os.environ, GLOO_SOCKET_IFNAME=tb.ifname(i), OMP_NUM_THREADS="1")
            cmd = tb.prefix(i) + ["env", "GLOO_SOCKET_IFNAME=" + tb.ifname(i), PY, DDP, "--rank", str(i),
                                  "--world", str(n), "--master", "%s:%d" % (tb.hosts[0][1], port),
                                  "--model", sc["model"], "--hook", DDP_HOOKS[system], "--epochs",
                                  str(sc["epochs"]), "--eval-every", str(sc["eval_every"]), "--log-every",
                                  str(max(1, args.log_every // 5)), "--threads", "1", "--time-budget",
                                  str(budget), "--run-dir", run_dir, "--timeout-s", "120"]
            if sc.get("max_steps"):
                cmd += ["--max-steps", str(sc["max_steps"])]
            if system == "ddp_powersgd" and args.powersgd_buckets == "single":
                cmd.append("--single-bucket")
            procs.start(cmd, os.path.join(run_dir, "rank%d.log" % i), env=env)
        ok = procs.wait_all(time.time() + budget + args.grace_s + 60,
                            progress_file=os.path.join(run_dir, "metrics.jsonl"), stall_s=args.stall_s)
        if procs.stalled:
            procs.signal_all(signal.SIGUSR1)  # ddp.py dumps its Python stacks into the rank logs
            time.sleep(2)
            log("  %s: no progress for %.0f s (hung), killing it" % (system, args.stall_s))
            with open(os.path.join(run_dir, "hung.txt"), "w") as f:
                f.write("no new metrics record for %.0f s; killed by the harness\n" % args.stall_s)
            ok = True  # not a budget kill: reported as a failure below
        elif not ok:
            log("  %s: did not stop on its own, killing it" % system)
    finally:
        procs.kill_all()
    return os.path.join(run_dir, "metrics.jsonl"), (not ok)


def median(xs):
    xs = sorted(xs)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else 0.5 * (xs[m - 1] + xs[m])


def first_reaching(curve, target):
    for t, _, acc in curve:
        if acc >= target:
            return t
    return None


def summarise(system, recs, budget, killed, sc):
    curve = sorted((r["wall_time_s"], r["step"], r["test_accuracy"]) for r in recs if "test_accuracy" in r)
    final = [r for r in recs if r.get("final")]
    logs = [r for r in recs if "iter_s" in r]
    iters = [r["iter_s"] for r in logs[1:]] or [r["iter_s"] for r in logs]
    if system.startswith("frugal"):
        bytes_ = [r.get("bytes_sent_intra", 0) + r.get("bytes_sent_inter", 0) for r in logs[1:] or logs]
        bytes_src = "payload"
    else:
        bytes_ = [r["bytes_sent_iface"] for r in logs[1:] or logs if "bytes_sent_iface" in r]
        bytes_src = "interface"
    completed = bool(final) and not final[0].get("stopped_by_budget", False) and not killed
    elapsed = max([c[0] for c in curve] + [r["wall_time_s"] for r in recs if "wall_time_s" in r] + [0])
    out = {"system": system, "curve": curve, "completed": completed, "crashed": False, "budget_s": budget,
           "elapsed_s": elapsed, "steps": max([r.get("step", 0) for r in recs] + [0]),
           "iter_s": median(iters), "bytes_per_iter": median(bytes_) if bytes_ else None, "bytes_src": bytes_src,
           "final_acc": final[0]["test_accuracy"] if completed else None,
           "best_acc": max([c[2] for c in curve] + [0])}
    for key, target in (("tta", sc["target_acc"]), ("tta2", sc.get("second_target"))):
        if target is None:
            continue
        t = first_reaching(curve, target)
        out[key] = t
        out[key + "_step"] = next((c[1] for c in curve if c[2] >= target), None)
        # Not reached: the training time it had is a lower bound.
        out[key + "_lower_bound"] = t is None
        if t is None:
            out[key] = min(budget, elapsed) if not completed else elapsed
    return out


def run_system(args, sc, system, tb):
    rate = 0 if system == "ddp_unlimited" else sc["rate_mbit"]
    budget = sc["budgets"].get(system, 300) * args.budget_scale
    run_dir = os.path.join(args.out_dir, "tta-runs", sc["name"], system)
    os.makedirs(run_dir, exist_ok=True)
    for name in [] if args.report_only else os.listdir(run_dir):  # stale logs of an earlier run
        p = os.path.join(run_dir, name)
        if os.path.isfile(p):
            os.remove(p)
    log("%s / %s: rate %s Mbit/s, budget %.0f s, %s" % (sc["name"], system, "unlimited" if rate == 0 else
                                                          (rate or "trace"), budget,
                                                          "namespaces" if tb.use_netns else "loopback"))
    t0 = time.time()
    path = os.path.join(run_dir, "run", "metrics.jsonl") if system.startswith("frugal") else \
        os.path.join(run_dir, "metrics.jsonl")
    killed = False
    if not args.report_only:
        try:
            tb.up(sc, rate)
            if system.startswith("frugal"):
                path, killed = run_frugal(args, sc, system, tb, run_dir, budget)
            else:
                path, killed = run_ddp(args, sc, system, tb, run_dir, budget)
        finally:
            tb.down()
    recs = read_jsonl(path)
    s = summarise(system, recs, budget, killed, sc)
    if not any(r.get("final") for r in recs):
        s["crashed"] = not killed
        # The most specific message: a C++ exception (what()) on any rank, else the first error line.
        tail = ""
        candidates = []
        for i in range(sc["workers"]):
            lp = os.path.join(run_dir, "rank%d.log" % i)
            if os.path.exists(lp):
                lines = [l.strip() for l in open(lp, errors="replace").read().splitlines() if l.strip()]
                candidates += ["rank %d: %s" % (i, l) for l in lines if "what()" in l]
                candidates += ["rank %d: %s" % (i, l) for l in lines if "what()" not in l and
                               ("Error" in l or "error" in l)]
        candidates.sort(key=lambda c: 0 if "enforce" in c else 1 if "what()" in c else 2)
        if candidates:
            tail = candidates[0]
        if not tail and os.path.exists(os.path.join(run_dir, "hung.txt")):
            tail = "hung: " + open(os.path.join(run_dir, "hung.txt")).read().strip()
        s["error"] = tail
        if s["crashed"]:
            log("  %s CRASHED: %s" % (system, tail or "(no message; see %s)" % run_dir))
    log("  %s: %.0f s wall, steps %s, iter %s s, best acc %.4f, TTA %s%s" % (
        system, time.time() - t0, s["steps"], fmt(s["iter_s"], 3), s["best_acc"], fmt(s.get("tta"), 1),
        " (lower bound)" if s.get("tta_lower_bound") else ""))
    return s


def fmt(x, nd):
    return "-" if x is None else ("%." + str(nd) + "f") % x


def ratio_str(num, num_lb, den, den_lb):
    """num/den, with >= / <= when one side is a lower bound."""
    if num is None or den is None or den == 0:
        return "-"
    r = num / den
    if num_lb and den_lb:
        return "?"
    if num_lb:
        return ">=%.1fx" % r
    if den_lb:
        return "<=%.1fx" % r
    return "%.1fx" % r


def project_ddp(sys_res, sc):
    """For DDP variants stopped by their budget: projected TTA = (steps ddp_unlimited needed to reach the
    target) x (this system's measured seconds per step, evaluations included). Plain DDP computes the same
    numbers at any bandwidth, so only the time per step differs; for the fp16/PowerSGD hooks it assumes
    their convergence per step matches plain DDP. Marked as a projection everywhere it appears."""
    ref = next((s for s in sys_res if s["system"] == "ddp_unlimited" and not s["crashed"]), None)
    for s in sys_res:
        for key, target in (("tta", sc["target_acc"]), ("tta2", sc.get("second_target"))):
            s[key + "_projected"] = None
            if target is None or ref is None or s["crashed"] or not s["system"].startswith("ddp"):
                continue
            if not s.get(key + "_lower_bound") or s["system"] == "ddp_unlimited" or s["steps"] == 0:
                continue
            hit = next((c for c in ref["curve"] if c[2] >= target), None)
            if hit is not None:
                s[key + "_projected"] = hit[1] * s["elapsed_s"] / s["steps"]


def write_outputs(args, results):
    os.makedirs(args.out_dir, exist_ok=True)
    for sc, sys_res in results:
        project_ddp(sys_res, sc)
    # tta.json in the schema (+ lower_bound flags and notes).
    scen_json = []
    for sc, sys_res in results:
        def by(key):
            return {s["system"]: (None if s["crashed"] else s.get(key)) for s in sys_res}
        scen_json.append({
            "name": sc["name"], "model": sc["model"], "workers": sc["workers"], "topology": sc["topology"],
            "rate_mbit": sc["rate_mbit"] if sc["topology"] != "fluctuating" else "trace",
            "target_acc": sc["target_acc"], "tta_s": by("tta"), "final_acc": by("final_acc"),
            "iter_s": by("iter_s"),
            "lower_bound": {s["system"]: bool(s.get("tta_lower_bound")) for s in sys_res if not s["crashed"]},
            "bytes_per_iter": by("bytes_per_iter"),
            "tta_projected_s": by("tta_projected"),
            "crashed": {s["system"]: s.get("error", "") for s in sys_res if s["crashed"]},
            "second_target": {"target_acc": sc.get("second_target"), "tta_s": by("tta2"),
                              "lower_bound": {s["system"]: bool(s.get("tta2_lower_bound")) for s in sys_res},
                              "tta_projected_s": by("tta2_projected")},
            "epochs": sc["epochs"], "eval_every": sc["eval_every"],
            "budget_s": {s["system"]: s["budget_s"] for s in sys_res},
            "netns": args.netns_used})
    json_path = args.json or os.path.join(args.out_dir, "tta.json")
    with open(json_path, "w") as f:
        json.dump({"scenarios": scen_json}, f, indent=2)

    with open(os.path.join(args.out_dir, "tta_curves.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["scenario", "system", "wall_time_s", "step", "test_accuracy"])
        for sc, sys_res in results:
            for s in sys_res:
                for t, step, acc in s["curve"]:
                    w.writerow([sc["name"], s["system"], "%.3f" % t, step, "%.4f" % acc])

    with open(os.path.join(args.out_dir, "tta_summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["scenario", "system", "target_acc", "tta_s", "tta_lower_bound", "second_target", "tta2_s",
                    "tta2_lower_bound", "tta_step", "tta2_step", "iter_s", "bytes_per_iter", "bytes_source", "steps", "final_acc",
                    "best_acc", "budget_s", "crashed", "error"])
        for sc, sys_res in results:
            for s in sys_res:
                w.writerow([sc["name"], s["system"], sc["target_acc"], fmt(s.get("tta"), 2),
                            int(bool(s.get("tta_lower_bound"))), sc.get("second_target") or "",
                            fmt(s.get("tta2"), 2), int(bool(s.get("tta2_lower_bound"))),
                            s.get("tta_step") if s.get("tta_step") is not None else "",
                            s.get("tta2_step") if s.get("tta2_step") is not None else "", fmt(s["iter_s"], 4),
                            fmt(s["bytes_per_iter"], 0), s["bytes_src"], s["steps"], fmt(s["final_acc"], 4),
                            fmt(s["best_acc"], 4), s["budget_s"], int(s["crashed"]), s.get("error", "")])

    lines = []
    for sc, sys_res in results:
        rate = "trace (mean ~117 Mbit/s, 40-247)" if sc["topology"] == "fluctuating" else \
            "%s Mbit/s" % sc["rate_mbit"]
        lines.append("### %s: %s, %d workers, %s (%s), %d epoch(s), eval every %d steps" % (
            sc["name"], sc["model"], sc["workers"], sc["topology"], rate, sc["epochs"], sc["eval_every"]))
        lines.append("")
        t1, t2 = sc["target_acc"], sc.get("second_target")
        # The reference: Frugal at its defaults, else the scenario's first Frugal variant.
        ok = [s for s in sys_res if not s["crashed"]]
        fr = next((s for s in ok if s["system"] == "frugal"), next((s for s in ok if s["system"].startswith("frugal")),
                                                                    None))
        head = "| system | TTA %.0f%% (s) | Frugal speed-up | " % (100 * t1)
        if t2:
            head += "TTA %.0f%% (s) | Frugal speed-up | " % (100 * t2)
        head += "iter (s) | bytes/iter sent | steps run | best acc | final acc | budget (s) |"
        lines.append(head)
        lines.append("|" + "---|" * (head.count("|") - 1))
        for s in sys_res:
            if s["crashed"]:
                cols = ["**crashed**: `%s`" % (s.get("error") or "see logs")[:200]] + ["-"] * (head.count("|") - 4)
                lines.append("| %s | %s | %s |" % (s["system"], " | ".join(cols), s["budget_s"]))
                continue
            row = [s["system"]]
            for key in ("tta", "tta2") if t2 else ("tta",):
                lb = s.get(key + "_lower_bound")
                cell = (">=" if lb else "") + fmt(s.get(key), 1)
                proj = s.get(key + "_projected")
                if proj is not None:
                    cell += " (proj. %.0f)" % proj
                row.append(cell)
                if fr is None or s is fr:
                    row.append("1.0x" if s is fr else "-")
                else:
                    r = ratio_str(s.get(key), lb, fr.get(key), fr.get(key + "_lower_bound"))
                    if proj is not None and fr.get(key) and not fr.get(key + "_lower_bound"):
                        r += " (proj. %.1fx)" % (proj / fr[key])
                    row.append(r)
            row += [fmt(s["iter_s"], 3),
                    ("%.2f MB" % (s["bytes_per_iter"] / 1e6) + (" (iface)" if s["bytes_src"] == "interface"
                                                               else " (payload)"))
                    if s["bytes_per_iter"] is not None else "-",
                    str(s["steps"]), fmt(s["best_acc"], 4), fmt(s["final_acc"], 4), "%g" % s["budget_s"]]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        lines.append("Speed-up = system TTA / Frugal TTA (>= when the system did not reach the target in its "
                     "budget, so its TTA is a lower bound). proj. = projection for DDP variants stopped by their budget: steps "
                     "ddp_unlimited needed x this system's measured seconds per step. final acc is empty for runs "
                     "stopped by their budget.")
        lines.append("")
    with open(os.path.join(args.out_dir, "tta.md"), "w") as f:
        f.write("\n".join(lines))

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        n = len(results)
        fig, axes = plt.subplots(1, n, figsize=(6.5 * n, 4.5), squeeze=False)
        for ax, (sc, sys_res) in zip(axes[0], results):
            for s in sys_res:
                color = "C%d" % ALL_SYSTEMS.index(s["system"])  # same colour in every panel
                if s["curve"]:
                    ax.plot([c[0] for c in s["curve"]], [c[2] for c in s["curve"]], marker=".", color=color,
                            label=s["system"])
                elif s["crashed"]:
                    ax.plot([], [], color=color, label=s["system"] + " (crashed)")
            ax.axhline(sc["target_acc"], color="grey", ls="--", lw=0.8)
            accs = [c[2] for s in sys_res for c in s["curve"]]
            if any(c[0] > 0 for s in sys_res for c in s["curve"]):
                ax.set_xscale("log")
            ax.set_xlabel("wall time since start of training (s, log)")
            ax.set_ylabel("test accuracy")
            ax.set_ylim(max(0.0, min([0.5] + accs) - 0.02), max([0.95] + accs))
            ax.set_title(sc["name"])
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(args.out_dir, "tta.png"), dpi=110)
    except Exception as e:  # noqa: BLE001 -- a plot problem must not lose the measurements
        log("no plot: %s" % e)
    log("wrote %s, %s" % (json_path, os.path.join(args.out_dir, "tta.md")))


def main():
    ap = argparse.ArgumentParser(description="time to accuracy: Frugal vs PyTorch DDP on shaped links")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--frugal", help="frugal binary (default: BUILD_DIR/frugal)")
    ap.add_argument("--out-dir", help="default: BUILD_DIR/bench")
    ap.add_argument("--json", help="tta.json path (default: OUT_DIR/tta.json)")
    ap.add_argument("--quick", action="store_true", help="reduced set, under 10 minutes")
    ap.add_argument("--smoke", action="store_true", help="2 workers, a few steps (test suite)")
    ap.add_argument("--scenarios", default="", help="comma list of: " + ", ".join(SCENARIOS) + " or all")
    ap.add_argument("--systems", default="", help="comma list subset of: " + ", ".join(ALL_SYSTEMS))
    ap.add_argument("--budget-scale", type=float, default=1.0, help="multiply every time budget")
    ap.add_argument("--epochs", type=int, help="override the scenarios' epochs")
    ap.add_argument("--frugal-density", type=float)
    ap.add_argument("--frugal-args", default="", help="extra flags for every frugal worker, e.g. '--staleness 0'")
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--stall-s", type=float, default=90,
                    help="DDP runs whose metrics file does not change for this long are reported as hung")
    ap.add_argument("--powersgd-buckets", choices=["single", "default"], default="single",
                    help="ddp_powersgd with one DDP bucket (default) or DDP's default buckets, with which "
                         "PowerSGD over Gloo crashes or hangs in torch 1.13")
    ap.add_argument("--powersgd-single-bucket", action="store_const", const="single", dest="powersgd_buckets",
                    help=argparse.SUPPRESS)
    ap.add_argument("--grace-s", type=float, default=90, help="startup + final evaluation allowance")
    ap.add_argument("--no-netns", action="store_true", help="run on loopback, unshaped")
    ap.add_argument("--report-only", action="store_true",
                    help="run nothing; rebuild the outputs from OUT_DIR/tta-runs of an earlier run")
    args = ap.parse_args()
    args.frugal = args.frugal or os.path.join(args.build_dir, "frugal")
    args.out_dir = args.out_dir or os.path.join(args.build_dir, "bench")
    if not os.access(args.frugal, os.X_OK):
        print("run.py: %s is not an executable; build it first (cmake --build BUILD -j 2 --target frugal)"
              % args.frugal, file=sys.stderr)
        return 2

    if args.smoke:
        scens = [dict(s, max_steps=4) for s in SMOKE]
        args.grace_s = min(args.grace_s, 60)
    elif args.quick:
        scens = QUICK
    else:
        names = args.scenarios.split(",") if args.scenarios and args.scenarios != "all" else list(SCENARIOS)
        unknown = [n for n in names if n not in SCENARIOS]
        if unknown:
            print("run.py: unknown scenario(s) %s (known: %s)" % (", ".join(unknown), ", ".join(SCENARIOS)),
                  file=sys.stderr)
            return 2
        scens = [SCENARIOS[n] for n in names]
    if args.epochs:
        scens = [dict(s, epochs=args.epochs) for s in scens]
    if args.systems:
        wanted = args.systems.split(",")
        bad = [w for w in wanted if w not in ALL_SYSTEMS]
        if bad:
            print("run.py: unknown system(s) %s" % ", ".join(bad), file=sys.stderr)
            return 2
        # The systems asked for, in the scenario's order, then any others
        # (e.g. a Frugal variant such as frugal_adapt on a scenario without it).
        scens = [dict(s, systems=[x for x in s["systems"] if x in wanted] +
                      [x for x in wanted if x not in s["systems"]]) for s in scens]

    use_netns = False
    if args.report_only:
        args.no_netns = True
    if not args.no_netns:
        use_netns, why = Testbed.available()
        if not use_netns:
            if not args.smoke:
                print("run.py: the shaped testbed needs root and network namespaces (%s); rerun as root, or pass "
                      "--no-netns for an unshaped loopback run" % why, file=sys.stderr)
                return 2
            log("network namespaces unavailable (%s): smoke run falls back to loopback" % why)
    if use_netns:
        # One testbed at a time: the namespace names are fixed.
        import fcntl
        lock = open("/run/frugal-testbed.lock", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            if args.smoke:
                log("another testbed run holds /run/frugal-testbed.lock: smoke run falls back to loopback")
                use_netns = False
            else:
                log("waiting for another testbed run (/run/frugal-testbed.lock)")
                fcntl.flock(lock, fcntl.LOCK_EX)
        args.lock = lock
        os.environ["FRUGAL_TESTBED_LOCKED"] = "1"  # testbed.sh: the harness holds the lock
    args.netns_used = use_netns
    if args.report_only:
        try:
            with open(args.json or os.path.join(args.out_dir, "tta.json")) as f:
                args.netns_used = json.load(f)["scenarios"][0]["netns"]
        except (OSError, ValueError, KeyError, IndexError):
            args.netns_used = None
    tb = Testbed(use_netns)

    def on_signal(signum, frame):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, on_signal)
    results = []
    try:
        for sc in scens:
            if sc["topology"] != "flat" and not use_netns and not args.report_only:
                log("%s: %s topology needs namespaces; skipped" % (sc["name"], sc["topology"]))
                continue
            res = [run_system(args, sc, system, tb) for system in sc["systems"]]
            results.append((sc, res))
            write_outputs(args, results)  # partial results survive an interrupted run
    finally:
        tb.down()
    if not results:
        return 1
    print(open(os.path.join(args.out_dir, "tta.md")).read())
    if args.smoke:
        # The smoke test checks that the harness produced curves for every system.
        missing = [s["system"] for _, res in results for s in res if not s["curve"]]
        if missing:
            print("smoke: no accuracy curve for %s" % ", ".join(missing), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
