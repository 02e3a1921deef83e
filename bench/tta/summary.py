"""What one system's run measured, summarised from its rank-0 metrics.jsonl."""
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from scenarios import POWERSGD_RANKS, is_frugal, is_localsgd

CurvePoint = Tuple[float, int, float]  # (time s, step, test accuracy); time: see time_basis
# Times are training time (train_time_s: wall time less the evaluations, which
# both Frugal and ddp.py record) when every evaluation and logging record of a
# run carries it, else wall time (older records without it). One cnn evaluation takes
# about as long as many training steps on a CPU, so wall time would measure mostly the evaluation cadence.
TRAIN_TIME, WALL_TIME = "train_time_s", "wall_time_s"


@dataclass
class TargetResult:
    """Time to one target accuracy. lower_bound: not reached, so time is the
    training time the system had; projected: see project_ddp."""
    time: Optional[float] = None
    step: Optional[int] = None
    lower_bound: bool = False
    projected: Optional[float] = None


@dataclass
class SystemResult:
    system: str
    curve: List[CurvePoint]
    completed: bool
    budget_s: float
    elapsed_s: float
    steps: int
    iter_s: Optional[float]
    bytes_per_iter: Optional[float]
    bytes_src: str
    final_acc: Optional[float]
    best_acc: float
    crashed: bool = False
    error: str = ""
    time_basis: str = TRAIN_TIME
    # Median seconds of forward+backward per step (Frugal's compute_s: no
    # exchange in it; ddp.py's step_s includes the allreduce that DDP runs
    # inside backward): the compute-only reference.
    compute_s: Optional[float] = None
    tta: TargetResult = field(default_factory=TargetResult)
    tta2: TargetResult = field(default_factory=TargetResult)

    def target(self, key):
        """The TargetResult of "tta" or "tta2"."""
        return getattr(self, key)


def median(xs):
    xs = sorted(xs)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else 0.5 * (xs[m - 1] + xs[m])


def first_reaching(curve, target, sc):
    """The first curve point that meets TARGET on SC's metric, or None."""
    return next((c for c in curve if sc.reaches(c[2], target)), None)


def _bytes_per_iter(system, logs):
    """Median bytes sent per iteration and where the count comes from."""
    if is_frugal(system):
        return [r.get("bytes_sent_intra", 0) + r.get("bytes_sent_inter", 0) for r in logs[1:] or logs], "payload"
    return [r["bytes_sent_iface"] for r in logs[1:] or logs if "bytes_sent_iface" in r], "interface"


def _typical(system, per_window):
    """Bytes per iteration of a run: the median over its logging windows, except for the systems that send
    only every H steps (local updates), whose median window sends nothing: their mean."""
    if not per_window:
        return None
    if is_localsgd(system) or system.startswith("frugal_local"):
        return sum(per_window) / len(per_window)
    return median(per_window)


def time_basis(recs):
    """TRAIN_TIME when every evaluation and logging-window record has
    train_time_s, else WALL_TIME (event records, e.g. the controller's
    decisions, carry wall time only)."""
    timed = [r for r in recs if WALL_TIME in r and ("test_accuracy" in r or "iter_s" in r)]
    return TRAIN_TIME if timed and all(TRAIN_TIME in r for r in timed) else WALL_TIME


def summarise(system, recs, budget, killed, sc):
    """The SystemResult of SYSTEM's records RECS on scenario SC. killed: the
    harness stopped it (over budget), so it did not complete. The curve, best
    and final values are of SC's metric (best_acc/final_acc name the
    accuracy, the default metric)."""
    basis = time_basis(recs)
    curve = sorted((r[basis], r["step"], r[sc.metric]) for r in recs if r.get(sc.metric) is not None)
    final = [r for r in recs if r.get("final")]
    logs = [r for r in recs if "iter_s" in r]
    iters = [r["iter_s"] for r in logs[1:]] or [r["iter_s"] for r in logs]
    bytes_, bytes_src = _bytes_per_iter(system, logs)
    completed = bool(final) and not final[0].get("stopped_by_budget", False) and not killed
    elapsed = max([c[0] for c in curve] + [r[basis] for r in recs if basis in r] + [0])
    out = SystemResult(system=system, curve=curve, completed=completed, budget_s=budget, elapsed_s=elapsed,
                       steps=max([r.get("step", 0) for r in recs] + [0]), iter_s=median(iters),
                       bytes_per_iter=_typical(system, bytes_), bytes_src=bytes_src,
                       final_acc=final[0].get(sc.metric) if completed else None,
                       best_acc=sc.best([c[2] for c in curve]), time_basis=basis,
                       compute_s=median([r.get("compute_s", r.get("step_s")) for r in logs[1:] or logs
                                         if r.get("compute_s", r.get("step_s")) is not None]))
    apply_targets(out, sc)
    return out


def apply_targets(out, sc):
    """Sets OUT's time to each of SC's targets (a lower bound where it did not get there)."""
    for key, target in sc.targets():
        res = out.target(key)
        res.time, res.step, res.lower_bound = None, None, False
        if target is None:
            continue
        hit = first_reaching(out.curve, target, sc)
        res.time, res.step = (hit[0], hit[1]) if hit else (None, None)
        # Not reached: the training time it had is a lower bound.
        res.lower_bound = hit is None
        if hit is None:
            res.time = min(out.budget_s, out.elapsed_s) if not out.completed else out.elapsed_s


def resolve_targets(sc, sys_res):
    """SC with its targets set from DDP's own final result where SC asks for that (target_vs_ddp) and
    ddp_unlimited completed, and every result's target times recomputed; else SC unchanged."""
    ref = next((s for s in sys_res if s.system == "ddp_unlimited" and s.completed and s.final_acc is not None),
               None)
    if sc.target_vs_ddp is None or ref is None:
        return sc
    def target(margin):
        if margin is None:
            return None
        # A loss: relative (plus 1%); an accuracy: points (minus 0.3 points).
        return ref.final_acc * (1 + margin) if sc.lower_is_better else ref.final_acc - margin

    sc = sc.with_(target_acc=target(sc.target_vs_ddp[0]), second_target=target(sc.target_vs_ddp[1]))
    for s in sys_res:
        apply_targets(s, sc)
    return sc


def project_ddp(sys_res, sc):
    """For DDP variants stopped by their budget (not ones that completed their steps short of the target):
    projected TTA = (steps ddp_unlimited needed to reach the
    target) x (this system's measured seconds per step, evaluations included). Plain DDP computes the same
    numbers at any bandwidth, so only the time per step differs; for the fp16/PowerSGD hooks it assumes
    their convergence per step matches plain DDP. Local SGD is not projected: its steps cost differently
    (a full exchange every H steps) and converge differently. Marked as a projection everywhere it appears."""
    ref = next((s for s in sys_res if s.system == "ddp_unlimited" and not s.crashed), None)
    for s in sys_res:
        for key, target in sc.targets():
            res = s.target(key)
            res.projected = None
            if target is None or ref is None or s.crashed or not s.system.startswith("ddp") or \
                    is_localsgd(s.system):
                continue
            # A run that completed its steps without reaching the target fell
            # short in accuracy, not in time: nothing to project.
            if not res.lower_bound or s.completed or s.system == "ddp_unlimited" or s.steps == 0:
                continue
            hit = first_reaching(ref.curve, target, sc)
            if hit is not None:
                res.projected = hit[1] * s.elapsed_s / s.steps


def best_powersgd(sys_res, sc, key="tta"):
    """The PowerSGD system (one per rank) that reached target KEY first, else the one with the best accuracy;
    None when the scenario ran no PowerSGD system that finished without crashing."""
    runs = [s for s in sys_res if s.system in POWERSGD_RANKS and not s.crashed]
    if not runs:
        return None
    reached = [s for s in runs if not s.target(key).lower_bound and s.target(key).time is not None]
    if reached:
        return min(reached, key=lambda s: s.target(key).time)
    return sc.best(runs, key=lambda s: s.best_acc)
