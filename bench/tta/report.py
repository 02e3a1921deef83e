"""The outputs of a time-to-accuracy run (in OUT_DIR): tta.json (the
schema), tta_curves.csv, tta_summary.csv, tta.md and tta.png. RESULTS is a
list of (Scenario, [SystemResult]) in run order."""
import csv
import json
import os
import time

from scenarios import ALL_SYSTEMS, POWERSGD_RANKS
from summary import TRAIN_TIME, WALL_TIME, best_powersgd, project_ddp, resolve_targets


def log(msg):
    print("[tta %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


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


def scenario_json(sc, sys_res, netns):
    """One scenario of tta.json (the issue's schema, plus lower_bound flags and notes)."""
    def by(get):
        return {s.system: (None if s.crashed else get(s)) for s in sys_res}
    return {
        "name": sc.name, "model": sc.model, "workers": sc.workers, "topology": sc.topology,
        "rate_mbit": sc.rate_mbit if sc.topology != "fluctuating" else "trace",
        "metric": sc.metric, "target_acc": sc.target_acc, "target_vs_ddp": sc.target_vs_ddp,
        "tta_s": by(lambda s: s.tta.time), "final_acc": by(lambda s: s.final_acc),
        "iter_s": by(lambda s: s.iter_s),
        "lower_bound": {s.system: bool(s.tta.lower_bound) for s in sys_res if not s.crashed},
        "bytes_per_iter": by(lambda s: s.bytes_per_iter),
        "tta_projected_s": by(lambda s: s.tta.projected),
        "crashed": {s.system: s.error for s in sys_res if s.crashed},
        "second_target": {"target_acc": sc.second_target, "tta_s": by(lambda s: s.tta2.time),
                          "lower_bound": {s.system: bool(s.tta2.lower_bound) for s in sys_res},
                          "tta_projected_s": by(lambda s: s.tta2.projected)},
        "best_powersgd": best_powersgd_json(sys_res, sc),
        "epochs": sc.epochs, "frugal_epochs": sc.frugal_epochs, "eval_every": sc.eval_every,
        "budget_s": {s.system: s.budget_s for s in sys_res},
        "netns": netns}


def best_powersgd_json(sys_res, sc):
    """{system, rank, reached_target} of the best PowerSGD rank, or None."""
    best = best_powersgd(sys_res, sc)
    if best is None:
        return None
    return {"system": best.system, "rank": POWERSGD_RANKS[best.system], "reached_target": not best.tta.lower_bound}


def best_powersgd_line(sys_res, sc):
    """The markdown sentence naming the best PowerSGD rank, or None."""
    best = best_powersgd(sys_res, sc)
    if best is None:
        return None
    ran = sorted(POWERSGD_RANKS[s.system] for s in sys_res if s.system in POWERSGD_RANKS and not s.crashed)
    how = ("first to the target, in %.1f s" % best.tta.time if not best.tta.lower_bound else
           "none reached the target; best %s %s" % (sc.metric, fmt(best.best_acc, 4)))
    return "Best PowerSGD rank (of %s): %d (`%s`, %s)." % (", ".join(map(str, ran)), POWERSGD_RANKS[best.system],
                                                          best.system, how)


def write_curves_csv(path, results):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["scenario", "system", "time_s", "time_basis", "step", "value", "metric"])
        for sc, sys_res in results:
            for s in sys_res:
                for t, step, value in s.curve:
                    w.writerow([sc.name, s.system, "%.3f" % t, s.time_basis, step, "%.4f" % value, sc.metric])


def write_summary_csv(path, results):
    def step(x):
        return x if x is not None else ""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["scenario", "system", "target_acc", "tta_s", "tta_lower_bound", "second_target", "tta2_s",
                    "tta2_lower_bound", "tta_step", "tta2_step", "iter_s", "bytes_per_iter", "bytes_source",
                    "steps", "final_acc", "best_acc", "budget_s", "crashed", "error", "compute_s", "time_basis",
                    "metric"])
        for sc, sys_res in results:
            for s in sys_res:
                w.writerow([sc.name, s.system, sc.target_acc, fmt(s.tta.time, 2), int(bool(s.tta.lower_bound)),
                            sc.second_target or "", fmt(s.tta2.time, 2), int(bool(s.tta2.lower_bound)),
                            step(s.tta.step), step(s.tta2.step), fmt(s.iter_s, 4), fmt(s.bytes_per_iter, 0),
                            s.bytes_src, s.steps, fmt(s.final_acc, 4), fmt(s.best_acc, 4), s.budget_s,
                            int(s.crashed), s.error, fmt(s.compute_s, 4), s.time_basis, sc.metric])


def target_cells(s, key, fr):
    """The TTA cell and the Frugal speed-up cell of system S for target KEY; FR is the reference."""
    res, ref = s.target(key), fr.target(key) if fr is not None else None
    cell = (">=" if res.lower_bound else "") + fmt(res.time, 1)
    if res.projected is not None:
        cell += " (proj. %.0f)" % res.projected
    if fr is None or s is fr:
        return [cell, "1.0x" if s is fr else "-"]
    r = ratio_str(res.time, res.lower_bound, ref.time, ref.lower_bound)
    if res.projected is not None and ref.time and not ref.lower_bound:
        r += " (proj. %.1fx)" % (res.projected / ref.time)
    return [cell, r]


def system_row(s, keys, fr, ncols):
    """One markdown table row; NCOLS is the header's column count."""
    if s.crashed:
        cols = ["**crashed**: `%s`" % (s.error or "see logs")[:200]] + ["-"] * (ncols - 3)
        return "| %s | %s | %s |" % (s.system, " | ".join(cols), s.budget_s)
    row = [s.system]
    for key in keys:
        row += target_cells(s, key, fr)
    sent = "-"
    if s.bytes_per_iter is not None:
        sent = "%.2f MB" % (s.bytes_per_iter / 1e6) + (" (iface)" if s.bytes_src == "interface" else " (payload)")
    per_compute = "-"
    if s.iter_s and s.compute_s:
        per_compute = "%.3f (%.2fx)" % (s.compute_s, s.iter_s / s.compute_s)
    row += [fmt(s.iter_s, 3), per_compute, sent, str(s.steps), fmt(s.best_acc, 4), fmt(s.final_acc, 4),
            "%g" % s.budget_s]
    return "| " + " | ".join(row) + " |"


def time_basis_line(sys_res):
    """Says whether the times exclude the evaluations, and warns when the systems differ."""
    bases = sorted({s.time_basis for s in sys_res if s.curve})
    if bases == [TRAIN_TIME]:
        return "Times are training time: wall time less the evaluations (train_time_s)."
    if bases == [WALL_TIME]:
        return "Times are wall time, evaluations included (these runs recorded no train_time_s)."
    return "**Mixed time bases** (%s): these systems' times are not comparable." % ", ".join(
        "%s: %s" % (s.system, s.time_basis) for s in sys_res if s.curve)


def scenario_markdown(sc, sys_res):
    rate = "trace (mean ~117 Mbit/s, 40-247)" if sc.topology == "fluctuating" else "%s Mbit/s" % sc.rate_mbit
    epochs = "%d epoch(s)" % sc.epochs + (" (Frugal: %d)" % sc.frugal_epochs if sc.frugal_epochs else "")
    lines = ["### %s: %s, %d workers, %s (%s), %s, eval every %d steps" % (
        sc.name, sc.model, sc.workers, sc.topology, rate, epochs, sc.eval_every), "", time_basis_line(sys_res), ""]
    t1, t2 = sc.target_acc, sc.second_target
    # The reference: Frugal at its defaults, else the scenario's first Frugal variant.
    ok = [s for s in sys_res if not s.crashed]
    fr = next((s for s in ok if s.system == "frugal"), next((s for s in ok if s.system.startswith("frugal")), None))
    head = "| system | to %s (s) | Frugal speed-up | " % sc.target_label(t1)
    if t2:
        head += "to %s (s) | Frugal speed-up | " % sc.target_label(t2)
    what = "acc" if sc.metric == "test_accuracy" else sc.metric
    head += "iter (s) | compute (s) (iter/compute) | bytes/iter sent | steps run | best %s | final %s | budget (s) |" % (
        what, what)
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    keys = ("tta", "tta2") if t2 else ("tta",)
    lines += [system_row(s, keys, fr, head.count("|") - 1) for s in sys_res]
    lines += ["", "Speed-up = system TTA / Frugal TTA (>= when the system did not reach the target in its "
              "budget, so its TTA is a lower bound). proj. = projection for DDP variants stopped by their budget: "
              "steps ddp_unlimited needed x this system's measured seconds per step. final acc is empty for runs "
              "stopped by their budget. compute: median forward+backward seconds per step (Frugal: no exchange in "
              "it; DDP: includes the allreduce DDP runs inside backward).", ""]
    if sc.target_vs_ddp is not None:
        lines += ["Targets: ddp_unlimited's final %s %s %s (%s)." % (
            sc.metric, "plus" if sc.lower_is_better else "minus",
            " and ".join(("%g%%" if sc.lower_is_better else "%g points") % (100 * m)
                         for m in sc.target_vs_ddp if m is not None),
            "it completed" if any(s.system == "ddp_unlimited" and s.completed for s in sys_res)
            else "it did not complete, so the scenario's fixed targets"), ""]
    best = best_powersgd_line(sys_res, sc)
    return lines + ([best, ""] if best else [])


def write_plot(path, results):
    """The metric vs training time, one panel per scenario; a plot problem must not lose the measurements."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        n = len(results)
        fig, axes = plt.subplots(1, n, figsize=(6.5 * n, 4.5), squeeze=False)
        colors = system_colors([s.system for _, sys_res in results for s in sys_res], plt)
        for ax, (sc, sys_res) in zip(axes[0], results):
            plot_panel(ax, sc, sys_res, colors)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    except Exception as e:  # noqa: BLE001
        log("no plot: %s" % e)


def system_colors(systems, plt):
    """One colour per system of the run, the same in every panel and distinct (tab20 beyond ten systems),
    in ALL_SYSTEMS order (a variant outside it, e.g. frugal_d0.3, by name after them)."""
    order = sorted(set(systems), key=lambda x: (ALL_SYSTEMS.index(x) if x in ALL_SYSTEMS else len(ALL_SYSTEMS), x))
    if len(order) <= 10:
        return {x: "C%d" % i for i, x in enumerate(order)}
    return {x: plt.cm.tab20(i % 20) for i, x in enumerate(order)}


def plot_panel(ax, sc, sys_res, colors):
    for s in sys_res:
        color = colors[s.system]
        if s.curve:
            ax.plot([c[0] for c in s.curve], [c[2] for c in s.curve], marker=".", color=color, label=s.system)
        elif s.crashed:
            ax.plot([], [], color=color, label=s.system + " (crashed)")
    ax.axhline(sc.target_acc, color="grey", ls="--", lw=0.8)
    accs = [c[2] for s in sys_res for c in s.curve]
    if any(c[0] > 0 for s in sys_res for c in s.curve):
        ax.set_xscale("log")
    train_time = all(s.time_basis == TRAIN_TIME for s in sys_res if s.curve)
    ax.set_xlabel("%s since start of training (s, log)" % ("training time (evaluations excluded)" if train_time
                                                          else "wall time"))
    ax.set_ylabel(sc.metric.replace("_", " "))
    if not sc.lower_is_better:
        ax.set_ylim(max(0.0, min([0.5] + accs) - 0.02), max([0.95] + accs))
    ax.set_title(sc.name)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def write_outputs(out_dir, json_path, results, netns):
    """Writes every output for RESULTS; JSON_PATH None means OUT_DIR/tta.json."""
    os.makedirs(out_dir, exist_ok=True)
    results = [(resolve_targets(sc, sys_res), sys_res) for sc, sys_res in results]
    for sc, sys_res in results:
        project_ddp(sys_res, sc)
    json_path = json_path or os.path.join(out_dir, "tta.json")
    with open(json_path, "w") as f:
        json.dump({"scenarios": [scenario_json(sc, sys_res, netns) for sc, sys_res in results]}, f, indent=2)
    write_curves_csv(os.path.join(out_dir, "tta_curves.csv"), results)
    write_summary_csv(os.path.join(out_dir, "tta_summary.csv"), results)
    lines = [line for sc, sys_res in results for line in scenario_markdown(sc, sys_res)]
    with open(os.path.join(out_dir, "tta.md"), "w") as f:
        f.write("\n".join(lines))
    write_plot(os.path.join(out_dir, "tta.png"), results)
    log("wrote %s, %s" % (json_path, os.path.join(out_dir, "tta.md")))
