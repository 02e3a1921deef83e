"""Runs one system of a scenario on a freshly brought-up testbed and
summarises it (bench/harness does the testbed and the processes)."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for harness
from harness import PY, ROOT, CpuGroups, FrugalJob, ProcessGroup, free_port, read_jsonl  # noqa: E402
from report import fmt, log  # noqa: E402
from scenarios import DDP_SYSTEMS, frugal_variant_args, is_frugal, is_powersgd, slow_worker_quotas  # noqa: E402
from summary import summarise  # noqa: E402

DDP = os.path.join(ROOT, "bench", "baselines", "ddp.py")


def frugal_worker_args(args, sc, system, rank, run_dir):
    """The `frugal worker` flags of one rank after the ones every worker gets."""
    cmd = ["--model", sc.model, "--epochs", str(sc.frugal_epochs or sc.epochs),
           # Same metrics cadence as ddp.py, so the median "iter" of both
           # excludes the windows that contain an evaluation.
           "--eval-every", str(sc.eval_every), "--log-every", str(max(1, args.log_every // 5)),
           "--runs-dir", run_dir, "--run-name", "run", "--timeout-s", "120"]
    if sc.max_steps:
        cmd += ["--max-steps", str(sc.max_steps)]
    cmd += list(sc.train_args) + list(sc.frugal_args)
    if args.frugal_density is not None:
        cmd += ["--density", str(args.frugal_density)]
    return cmd + args.frugal_args.split() + frugal_variant_args(system, rank)


def run_frugal(args, sc, system, tb, run_dir, budget):
    """Runs one Frugal job; returns the path of rank 0's metrics.jsonl and whether it was killed."""
    job = FrugalJob(args.frugal, tb, port=29500 if tb.use_netns else free_port(), with_cluster=True)
    quotas = slow_worker_quotas(system, sc.workers)
    groups = CpuGroups(quotas).make() if quotas else None
    try:
        with ProcessGroup() as procs:
            workers = job.start(procs, lambda rank: frugal_worker_args(args, sc, system, rank, run_dir),
                                log_dir=run_dir, coordinator_log=os.path.join(run_dir, "coordinator.log"))
            for rank, p in enumerate(workers if groups else []):
                groups.place(rank, p.pid)
            # Startup (data loading, rendezvous) is not in the budget; training time is.
            ok = procs.wait_all(time.time() + budget + args.grace_s).all_exited
            if not ok:
                log("  %s: over budget (%.0f s), stopping it" % (system, budget))
    finally:
        if groups:
            groups.remove()
    return os.path.join(run_dir, "run", "metrics.jsonl"), (not ok)


def slow_ddp(sc, system):
    """Plain DDP (or fp16) below 50 Mbit/s: one step takes tens of seconds (~19 s per mlp step at 10 Mbit/s,
    and the initial broadcast from rank 0 about a minute)."""
    return sc.rate_mbit is not None and 0 < sc.rate_mbit < 50 and system in ("ddp", "ddp_fp16")


def ddp_log_every(args, sc, system):
    """ddp.py's --log-every: every step for slow_ddp, so that the projection has steps to count."""
    return 1 if slow_ddp(sc, system) else max(1, args.log_every // 5)


def ddp_stall_s(args, sc, system):
    """Seconds without a new metrics record before a DDP run counts as hung (slow_ddp: broadcast + a step)."""
    return max(args.stall_s, 360) if slow_ddp(sc, system) else args.stall_s


def ddp_command(args, sc, system, tb, rank, port, budget, run_dir):
    cmd = tb.prefix(rank) + ["env", "GLOO_SOCKET_IFNAME=" + tb.ifname(rank), PY, DDP, "--rank", str(rank),
                             "--world", str(sc.workers), "--master", "%s:%d" % (tb.hosts[0].address, port),
                             "--model", sc.model] + DDP_SYSTEMS[system] + ["--epochs", str(sc.epochs),
                             "--eval-every", str(sc.eval_every), "--log-every", str(ddp_log_every(args, sc, system)),
                             "--threads", "1", "--time-budget", str(budget), "--run-dir", run_dir,
                             "--timeout-s", "120"]
    if sc.max_steps:
        cmd += ["--max-steps", str(sc.max_steps)]
    cmd += list(sc.train_args)
    if is_powersgd(system) and args.powersgd_buckets == "single":
        cmd.append("--single-bucket")
    return cmd


def run_ddp(args, sc, system, tb, run_dir, budget):
    """Runs one DDP job; returns the path of rank 0's metrics.jsonl and whether it was killed."""
    port = 29600 if tb.use_netns else free_port()
    stall_s = ddp_stall_s(args, sc, system)
    with ProcessGroup() as procs:
        for i in range(sc.workers):
            env = dict(os.environ, GLOO_SOCKET_IFNAME=tb.ifname(i), OMP_NUM_THREADS="1")
            # py_*: the frugal package of the build, reachable at this rank's address.
            env["PYTHONPATH"] = os.path.join(os.path.dirname(os.path.abspath(args.frugal)), "python")
            env["FRUGAL_ADVERTISE_HOST"] = tb.hosts[i].address
            procs.start(ddp_command(args, sc, system, tb, i, port, budget, run_dir),
                        os.path.join(run_dir, "rank%d.log" % i), env=env)
        # The budget counts training time only (ddp.py leaves its evaluations
        # out), so the wall-clock deadline allows as long again for them;
        # a hang is caught by the stall check.
        waited = procs.wait_all(time.time() + 2 * budget + args.grace_s + 60,
                                progress_file=os.path.join(run_dir, "metrics.jsonl"), stall_s=stall_s)
        ok = waited.all_exited
        if waited.stalled:
            procs.signal_all(signal.SIGUSR1)  # ddp.py dumps its Python stacks into the rank logs
            time.sleep(2)
            log("  %s: no progress for %.0f s (hung), killing it" % (system, stall_s))
            with open(os.path.join(run_dir, "hung.txt"), "w") as f:
                f.write("no new metrics record for %.0f s; killed by the harness\n" % stall_s)
            ok = True  # not a budget kill: reported as a failure below
        elif not ok:
            log("  %s: did not stop on its own, killing it" % system)
    return os.path.join(run_dir, "metrics.jsonl"), (not ok)


def crash_message(run_dir, workers):
    """The most specific message: a C++ exception (what()) on any rank, else the first error line."""
    candidates = []
    for i in range(workers):
        lp = os.path.join(run_dir, "rank%d.log" % i)
        if os.path.exists(lp):
            lines = [l.strip() for l in open(lp, errors="replace").read().splitlines() if l.strip()]
            candidates += ["rank %d: %s" % (i, l) for l in lines if "what()" in l]
            candidates += ["rank %d: %s" % (i, l) for l in lines if "what()" not in l and
                           ("Error" in l or "error" in l)]
    candidates.sort(key=lambda c: 0 if "enforce" in c else 1 if "what()" in c else 2)
    if candidates:
        return candidates[0]
    if os.path.exists(os.path.join(run_dir, "hung.txt")):
        return "hung: " + open(os.path.join(run_dir, "hung.txt")).read().strip()
    return ""


def bring_up(tb, sc, rate):
    """The scenario's hosts for one system: namespaces shaped at RATE, or loopback."""
    n = sc.workers
    if not tb.use_netns:
        tb.up_loopback(["c%d" % (i * 2 // n) if sc.topology != "flat" else "c0" for i in range(n)])
    elif sc.topology == "fluctuating" and rate == 0:
        tb.up("clusters", sc.hosts, rate=0, expect=n)
    else:
        tb.up(sc.topology, sc.hosts, rate=None if sc.topology == "fluctuating" else rate, expect=n)


def clean_run_dir(run_dir):
    """Removes the logs of an earlier run."""
    os.makedirs(run_dir, exist_ok=True)
    for name in os.listdir(run_dir):
        p = os.path.join(run_dir, name)
        if os.path.isfile(p):
            os.remove(p)


def run_system(args, sc, system, tb):
    """Runs SYSTEM on scenario SC (or, with --report-only, reads its earlier run); returns its SystemResult."""
    rate = 0 if system == "ddp_unlimited" else sc.rate_mbit
    budget = sc.budget(system) * args.budget_scale
    run_dir = os.path.join(args.out_dir, "tta-runs", sc.name, system)
    os.makedirs(run_dir, exist_ok=True)
    if not args.report_only:
        clean_run_dir(run_dir)
    log("%s / %s: rate %s Mbit/s, budget %.0f s, %s" % (sc.name, system, "unlimited" if rate == 0 else
                                                          (rate or "trace"), budget,
                                                          "namespaces" if tb.use_netns else "loopback"))
    t0 = time.time()
    path = os.path.join(run_dir, "run", "metrics.jsonl") if is_frugal(system) else \
        os.path.join(run_dir, "metrics.jsonl")
    killed = False
    if not args.report_only:
        try:
            bring_up(tb, sc, rate)
            run = run_frugal if is_frugal(system) else run_ddp
            path, killed = run(args, sc, system, tb, run_dir, budget)
        finally:
            tb.down()
    recs = read_jsonl(path)
    s = summarise(system, recs, budget, killed, sc)
    if not any(r.get("final") for r in recs):
        s.crashed = not killed
        s.error = crash_message(run_dir, sc.workers)
        if s.crashed:
            log("  %s CRASHED: %s" % (system, s.error or "(no message; see %s)" % run_dir))
    log("  %s: %.0f s wall, steps %s, iter %s s, best %s %s, TTA %s%s" % (
        system, time.time() - t0, s.steps, fmt(s.iter_s, 3), sc.metric, fmt(s.best_acc, 4), fmt(s.tta.time, 1),
        " (lower bound)" if s.tta.lower_bound else ""))
    return s
