"""The grid: Frugal's defaults on worker counts, rates and seeds that no
named scenario tunes for (run.py --grid K runs part K; grid.py summarises).

Each grid point is one model on one topology at one worker count and rate,
run with GRID_SEEDS seeds (`--seed` to every system, Frugal and ddp.py
alike). The points cover the space rather than a few corners: every worker
count from 2 to 8 except 5 and 7, rates between and beyond the named
scenarios' 10/100/500/1000 Mbit/s, flat and two-cluster topologies, and
mlp, cnn and gpt-tiny. Each point runs the default `frugal`, DDP on an
unlimited link (the targets: its final accuracy minus 0.3 points or its
final loss plus 1%, on the same seed) and the stock hooks a user would
pick: PowerSGD at ranks 4 and 8, post-local SGD every 16 steps.

On this 2-core machine, more workers means fewer cores for each: at 8 a
worker has a quarter of a core, so the iteration is compute-bound at the
higher rates. Say so next to every figure.

    python3 bench/tta/run.py --grid 1 --out-dir build/grid/part1      # one part, under an hour
    python3 bench/tta/grid.py --parts                                 # what each part runs
    python3 bench/tta/grid.py build/grid/part*/tta.json               # the summary: mean and spread per point
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scenarios  # noqa: E402

GRID_SEEDS = (1, 2, 3)
GRID_SYSTEMS = ["frugal", "ddp_unlimited", "ddp_powersgd", "ddp_powersgd8", "ddp_localsgd16"]
STOCK_HOOKS = ("ddp_powersgd", "ddp_powersgd8", "ddp_localsgd16")
# (model, topology, workers, Mbit/s). The clusters topology splits the
# workers into two equal clusters joined by the rate (an even count).
GRID_POINTS = [
    ("mlp", "flat", 2, 25), ("mlp", "flat", 3, 250), ("mlp", "flat", 4, 50), ("mlp", "flat", 6, 50),
    ("mlp", "flat", 8, 2000),
    ("mlp", "clusters", 4, 25), ("mlp", "clusters", 6, 250), ("mlp", "clusters", 8, 50),
    ("cnn", "flat", 2, 250), ("cnn", "flat", 3, 50), ("cnn", "flat", 6, 2000), ("cnn", "flat", 8, 25),
    ("cnn", "clusters", 6, 50), ("cnn", "clusters", 8, 250),
    # gpt-tiny's step is ~40x mlp's compute: 2 to 4 workers keep a part under an hour.
    ("gpt-tiny", "flat", 2, 25), ("gpt-tiny", "flat", 3, 250), ("gpt-tiny", "flat", 4, 50),
    ("gpt-tiny", "clusters", 4, 25),
]
# Scenario runs per part: about 10-15 minutes each on this machine.
RUNS_PER_PART = 4
# The goals (issue: defaults that hold where they were not tuned).
FINAL_MARGIN_POINTS = 0.2   # accuracy: at least DDP's mean minus 0.2 points
FINAL_MARGIN_LOSS = 0.01    # gpt-tiny: validation loss within 1% of DDP's
TTA_RATIO_SLOW = 0.7        # at or below 100 Mbit/s: at most 0.7x the best stock hook's time
TTA_RATIO_FAST = 1.0


def point_name(point):
    model, topology, workers, rate = point
    return "grid-%s-%s-w%d-r%d" % (model, topology, workers, rate)


def scenario(point, seed):
    """The Scenario of POINT on SEED: the named scenarios' targets and budgets for its model and rate."""
    model, topology, workers, rate = point
    name = "%s-s%d" % (point_name(point), seed)
    if topology == "clusters" and workers % 2:
        raise ValueError("%s: two equal clusters need an even worker count" % name)
    seed_args = ("--seed", str(seed))
    if model == "gpt-tiny":
        sc = scenarios._gpt(name, rate)
        return sc.with_(topology=topology, workers=workers, hosts="", systems=list(GRID_SYSTEMS),
                        train_args=sc.train_args + seed_args)
    target, second = (0.88, 0.85) if model == "mlp" else (0.90, 0.87)
    make = scenarios._low_rate if rate <= 20 else scenarios._full
    if make is scenarios._low_rate:
        sc = make(name, model, topology, rate, target, second)
    else:
        sc = make(name, model, topology, rate, target, scenarios.FLAT_SYSTEMS, second)
    return sc.with_(workers=workers, hosts="", systems=list(GRID_SYSTEMS), train_args=seed_args)


def runs():
    """Every (point, seed), seed-major, so that each part adds seeds across the grid."""
    return [(point, seed) for seed in GRID_SEEDS for point in GRID_POINTS]


def parts():
    all_runs = runs()
    return [all_runs[i:i + RUNS_PER_PART] for i in range(0, len(all_runs), RUNS_PER_PART)]


def part(k):
    """The Scenarios of part K (1-based); ValueError naming the range."""
    p = parts()
    if not 1 <= k <= len(p):
        raise ValueError("--grid takes a part from 1 to %d, got %d" % (len(p), k))
    return [scenario(point, seed) for point, seed in p[k - 1]]


# --- the summary ------------------------------------------------------------

def _stats(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "n": len(values)}


def load(paths):
    """The grid runs of tta.json files: {point name: {seed: scenario record}}."""
    grid = {}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        for sc in doc.get("scenarios", []):
            name = sc.get("name", "")
            if not name.startswith("grid-") or "-s" not in name:
                continue
            point, seed = name.rsplit("-s", 1)
            grid.setdefault(point, {})[int(seed)] = sc
    return grid


def summarise_point(point, by_seed):
    """Mean and spread over the seeds of each system's final result and time to the target, the best
    stock hook per seed, and whether the point meets the goals."""
    seeds = sorted(by_seed)
    records = [by_seed[s] for s in seeds]
    metric = records[0].get("metric", "test_accuracy")
    loss = metric.endswith("loss")
    rate = records[0].get("rate_mbit")
    systems = {}
    for system in GRID_SYSTEMS:
        systems[system] = {"final": _stats([r["final_acc"].get(system) for r in records]),
                           "tta": _stats([r["tta_s"].get(system) if not r["lower_bound"].get(system, True) else None
                                          for r in records]),
                           "reached": sum(1 for r in records if r["tta_s"].get(system) is not None
                                          and not r["lower_bound"].get(system, True))}
    ratios = []
    for r in records:
        hooks = [r["tta_s"][h] for h in STOCK_HOOKS
                 if r["tta_s"].get(h) is not None and not r["lower_bound"].get(h, True)]
        fr = r["tta_s"].get("frugal")
        if fr is not None and not r["lower_bound"].get("frugal", True) and hooks:
            ratios.append(fr / min(hooks))
    fr, ddp = systems["frugal"]["final"], systems["ddp_unlimited"]["final"]
    final_ok = None
    if fr and ddp:
        final_ok = (fr["mean"] <= ddp["mean"] * (1 + FINAL_MARGIN_LOSS)) if loss else \
            (fr["mean"] >= ddp["mean"] - FINAL_MARGIN_POINTS / 100)
    limit = TTA_RATIO_SLOW if isinstance(rate, (int, float)) and rate <= 100 else TTA_RATIO_FAST
    ratio = _stats(ratios)
    tta_ok = None if ratio is None else ratio["mean"] <= limit
    return {"point": point, "seeds": seeds, "metric": metric, "rate_mbit": rate, "systems": systems,
            "ratio_to_best_hook": ratio, "ratio_limit": limit, "final_ok": final_ok, "tta_ok": tta_ok,
            "frugal_reached": systems["frugal"]["reached"]}


def _cell(st, scale=1.0, nd=2):
    if st is None:
        return "-"
    fmt = "%." + str(nd) + "f"
    return (fmt + " ± " + fmt + " (n=%d)") % (st["mean"] * scale, st["sd"] * scale, st["n"])


def markdown(summaries):
    lines = ["| point | seeds | frugal final | DDP unlimited final | frugal time to target (s) | "
             "frugal / best stock hook | goals: final, time |", "|---|---|---|---|---|---|---|"]
    for s in summaries:
        loss = s["metric"].endswith("loss")
        scale, nd = (1.0, 3) if loss else (100.0, 2)
        ok = {True: "yes", False: "**no**", None: "-"}
        lines.append("| %s | %d | %s | %s | %s | %s | %s, %s (limit %.1fx) |" % (
            s["point"], len(s["seeds"]), _cell(s["systems"]["frugal"]["final"], scale, nd),
            _cell(s["systems"]["ddp_unlimited"]["final"], scale, nd), _cell(s["systems"]["frugal"]["tta"], 1.0, 1),
            _cell(s["ratio_to_best_hook"], 1.0, 2), ok[s["final_ok"]], ok[s["tta_ok"]], s["ratio_limit"]))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tta_json", nargs="*", help="tta.json files of grid parts")
    ap.add_argument("--parts", action="store_true", help="list the parts and the runs in each")
    ap.add_argument("--json", help="also write the summary as JSON here")
    args = ap.parse_args(argv)
    if args.parts:
        for i, p in enumerate(parts(), 1):
            print("part %d: %s" % (i, ", ".join("%s-s%d" % (point_name(pt), seed) for pt, seed in p)))
        return 0
    if not args.tta_json:
        ap.error("give tta.json files of grid parts, or --parts")
    grid = load(args.tta_json)
    if not grid:
        print("grid.py: no grid runs in %s" % ", ".join(args.tta_json), file=sys.stderr)
        return 1
    order = [point_name(p) for p in GRID_POINTS]
    summaries = [summarise_point(name, grid[name]) for name in order if name in grid]
    print(markdown(summaries))
    missing = [name for name in order if name not in grid]
    if missing:
        print("\nnot run yet: %s" % ", ".join(missing))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summaries, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
