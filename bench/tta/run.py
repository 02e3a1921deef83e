#!/usr/bin/python3
"""Time-to-accuracy benchmark: Frugal against PyTorch DDP on shaped links.

Every system of a scenario runs in the same testbed (testbed/testbed.sh),
one after the other, each on a freshly created set of namespaces (so the
fluctuating trace starts at the same second for every system):

  frugal         frugal worker processes, defaults (--sync auto: the local mode, 16 steps per round)
  frugal_local*  the local mode with options of its own (bench/tta/scenarios.py: frugal_local,
                 frugal_local_dX, frugal_local_sharded, frugal_local_auto)
  frugal_step    the step mode's defaults (--sync step; --adapt auto: the controller); the step-mode
                 variants below all name --sync step
  frugal_flat    clusters/fluctuating only: Frugal forced to --exchange flat
  frugal_warmup  Frugal with --density-warmup-steps 150 (25% falling to the default density, --adapt off)
  frugal_adapt   Frugal with the bandwidth-adaptive controller (--adapt on)
  frugal_dX      Frugal at fixed density X (e.g. frugal_d0.02, --adapt off): the hindsight sweep
  frugal_slow    one of four workers 2x slower (CPU cgroup quota), equal batches
  frugal_slow_balanced  the same with batch sizes balanced by the controller (--adapt batch)
  ddp            PyTorch DDP over Gloo (bench/baselines/ddp.py)
  ddp_fp16       DDP + fp16 compression hook
  ddp_powersgd   DDP + PowerSGD hook, rank 4 (ddp_powersgd1, ddp_powersgd8: ranks 1 and 8; the
                 report names the best rank per scenario)
  ddp_localsgd4, ddp_localsgd16  PyTorch post-local SGD (PostLocalSGDOptimizer +
                 PeriodicModelAverager), parameters averaged every 4 or 16 steps
  ddp_unlimited  DDP on the same hosts with no rate limit (datacenter reference)
  py_hook        the DDP script with frugal.sparse_hook registered (Frugal's Python package)
  py_model       the same script with the model in frugal.DistributedModel instead of DDP
  py_model_local the same with DistributedModel(sync="local"), frugal train's default mode
  py_hook_dX     py_hook at density X (py_hook_d0.1, py_hook_d0.3)
  py_hook_raw    py_hook without deflate (hook_state(deflate=False))
  py_hook_sharded  py_hook over the sharded exchange (hook_state(exchange="sharded"))

Each system gets a time budget (seconds of training); one that does not reach
the target accuracy within its run gets its elapsed training time as a lower
bound and is flagged. Time is measured by the rank-0 process from the
start of training (after rendezvous, data loading and the initial parameter
broadcast), less the seconds spent evaluating (train_time_s, recorded by
Frugal and ddp.py alike), so the evaluation cadence does not decide the
result; runs recorded without train_time_s are read in wall time and the
report says so.

Outputs (in --out-dir, default <build-dir>/bench):
  tta.json          every scenario's results (schema in report.py)
  tta_curves.csv    scenario,system,time_s,time_basis,step,value,metric (test_accuracy or val_loss)
  tta_summary.csv   one row per (scenario, system)
  tta.md            markdown table with ratios
  tta.png           the metric vs training time, one panel per scenario

  bench/tta/run.py --quick                 # reduced set, < 10 minutes
  bench/tta/run.py --scenarios mlp-flat-100
  bench/tta/run.py --smoke                 # 2 workers, a few steps (the ctest)
  FRUGAL_BENCH_PYTHON=/venv/bin/python3 bench/tta/run.py --scenarios resnet18-flat-100 \
      --train-args "--device cuda"         # on a GPU machine (bench/gpu/device_run.sh, group tta100)

This file is the command line; scenarios.py holds the scenarios and systems,
runner.py runs one system (through bench/harness), summary.py turns its
metrics into a SystemResult, report.py writes the outputs.
"""
import argparse
import json
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from harness import Testbed, hold_testbed_lock  # noqa: E402
from report import log, write_outputs  # noqa: E402
from runner import run_system  # noqa: E402
import scenarios  # noqa: E402
import grid  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description="time to accuracy: Frugal vs PyTorch DDP on shaped links")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--frugal", help="frugal binary (default: BUILD_DIR/frugal)")
    ap.add_argument("--out-dir", help="default: BUILD_DIR/bench")
    ap.add_argument("--json", help="tta.json path (default: OUT_DIR/tta.json)")
    ap.add_argument("--quick", action="store_true", help="reduced set, under 10 minutes")
    ap.add_argument("--smoke", action="store_true", help="2 workers, a few steps (test suite)")
    ap.add_argument("--scenarios", default="", help="comma list of: " + ", ".join(scenarios.SCENARIOS) + " or all")
    ap.add_argument("--grid", type=int, default=0,
                    help="run part K of the grid (bench/tta/grid.py --parts lists them) instead of --scenarios")
    ap.add_argument("--systems", default="", help="comma list subset of: " + ", ".join(scenarios.ALL_SYSTEMS))
    ap.add_argument("--budget-scale", type=float, default=1.0, help="multiply every time budget")
    ap.add_argument("--epochs", type=int, help="override the scenarios' epochs")
    ap.add_argument("--frugal-density", type=float)
    ap.add_argument("--frugal-epochs", type=int,
                    help="epochs of the Frugal systems only (DDP keeps the scenario's, so the target stays DDP's "
                         "result at that length while Frugal may train longer to reach it)")
    ap.add_argument("--frugal-args", default="", help="extra flags for every frugal worker, e.g. '--staleness 0'")
    ap.add_argument("--train-args", default="",
                    help="extra flags for every system, Frugal and ddp.py alike, e.g. '--device cuda --data-dir D'")
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
    if args.smoke:
        args.grace_s = min(args.grace_s, 60)
    if args.report_only:
        args.no_netns = True
    return args


def choose_netns(args):
    """Whether to run in namespaces (holding the testbed lock in args.lock), or
    None after printing why a shaped run cannot go ahead."""
    if args.no_netns:
        return False
    use_netns, why = Testbed.available()
    if not use_netns:
        if not args.smoke:
            print("run.py: the shaped testbed needs root and network namespaces (%s); rerun as root, or pass "
                  "--no-netns for an unshaped loopback run" % why, file=sys.stderr)
            return None
        log("network namespaces unavailable (%s): smoke run falls back to loopback" % why)
        return False
    # One testbed at a time: the namespace names are fixed.
    args.lock = hold_testbed_lock(wait=not args.smoke,
                                  on_wait=lambda: log("waiting for another testbed run (/run/frugal-testbed.lock)"))
    if args.lock is None:
        log("another testbed run holds /run/frugal-testbed.lock: smoke run falls back to loopback")
        return False
    return True


def earlier_netns(args):
    """--report-only: whether the earlier run used namespaces, from its tta.json."""
    try:
        with open(args.json or os.path.join(args.out_dir, "tta.json")) as f:
            return json.load(f)["scenarios"][0]["netns"]
    except (OSError, ValueError, KeyError, IndexError):
        return None


def run_scenarios(args, scens, tb):
    """Runs every system of every scenario; writes the outputs after each scenario, so that partial
    results survive an interrupted run. Returns [(Scenario, [SystemResult])]."""
    results = []
    try:
        for sc in scens:
            if sc.topology != "flat" and not tb.use_netns and not args.report_only:
                log("%s: %s topology needs namespaces; skipped" % (sc.name, sc.topology))
                continue
            results.append((sc, [run_system(args, sc, system, tb) for system in sc.systems]))
            write_outputs(args.out_dir, args.json, results, args.netns_used)
    finally:
        tb.down()
    return results


def main():
    args = parse_args()
    if not os.access(args.frugal, os.X_OK):
        print("run.py: %s is not an executable; build it first (cmake --build BUILD -j 2 --target frugal)"
              % args.frugal, file=sys.stderr)
        return 2
    try:
        if args.grid:
            if args.scenarios or args.smoke or args.quick:
                raise scenarios.ScenarioError("--grid selects its own scenarios: drop --scenarios, --smoke, --quick")
            try:
                scens = grid.part(args.grid)
            except ValueError as e:
                raise scenarios.ScenarioError(str(e)) from None
            scens = scenarios.select(False, False, "", args.epochs, args.systems, scens=scens)
        else:
            scens = scenarios.select(args.smoke, args.quick, args.scenarios, args.epochs, args.systems)
        scens = [sc.with_(train_args=sc.train_args + tuple(args.train_args.split()),
                          frugal_epochs=args.frugal_epochs or sc.frugal_epochs) for sc in scens]
    except scenarios.ScenarioError as e:
        print("run.py: %s" % e, file=sys.stderr)
        return 2
    use_netns = choose_netns(args)
    if use_netns is None:
        return 2
    args.netns_used = earlier_netns(args) if args.report_only else use_netns

    def on_signal(signum, frame):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, on_signal)
    results = run_scenarios(args, scens, Testbed(use_netns))
    if not results:
        return 1
    print(open(os.path.join(args.out_dir, "tta.md")).read())
    if args.smoke:
        # The smoke test checks that the harness produced curves for every system.
        missing = [s.system for _, res in results for s in res if not s.curve]
        if missing:
            print("smoke: no accuracy curve for %s" % ", ".join(missing), file=sys.stderr)
            return 1
        # ... and that every system recorded its training time apart from its evaluations.
        walled = [s.system for _, res in results for s in res if s.time_basis != "train_time_s"]
        if walled:
            print("smoke: no train_time_s in the records of %s" % ", ".join(walled), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
