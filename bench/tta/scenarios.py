"""The time-to-accuracy scenarios and the systems they compare.

A system name says what runs: `frugal*` are Frugal variants (see
frugal_variant_args), `ddp*` PyTorch DDP with a communication hook, `py_*`
Frugal's Python package inside the same PyTorch script (bench/baselines/ddp.py):
py_hook is DDP with frugal.sparse_hook, py_model the model in
frugal.DistributedModel (a user's DDP script converted),
py_model_local the same with sync="local" (frugal train's default mode).
"""
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Tuple

# The stock DDP systems: bench/baselines/ddp.py's flags for each. PowerSGD at
# ranks 1, 4 (ddp_powersgd) and 8, so the report can name the best rank per
# scenario; PyTorch's post-local SGD averaging every 4 and 16 steps.
POWERSGD_RANKS = {"ddp_powersgd1": 1, "ddp_powersgd": 4, "ddp_powersgd8": 8}
LOCALSGD_PERIODS = {"ddp_localsgd4": 4, "ddp_localsgd16": 16}
DDP_SYSTEMS = {"ddp": ["--hook", "none"], "ddp_fp16": ["--hook", "fp16"], "ddp_unlimited": ["--hook", "none"]}
DDP_SYSTEMS.update({name: ["--hook", "powersgd", "--powersgd-rank", str(r)] for name, r in POWERSGD_RANKS.items()})
DDP_SYSTEMS.update({name: ["--hook", "localsgd", "--localsgd-period", str(p)] for name, p in LOCALSGD_PERIODS.items()})
PY_SYSTEMS = {"py_hook": ["--hook", "frugal"], "py_model": ["--hook", "frugal_model"],
              "py_model_local": ["--hook", "frugal_model_local"]}
# The DDP hook at other densities (py_hook_dX: frugal.hook_state(density=X)).
PY_HOOK_DENSITIES = ["0.1", "0.3"]
PY_SYSTEMS.update({"py_hook_d" + d: ["--hook", "frugal", "--frugal-density", d] for d in PY_HOOK_DENSITIES})
# py_hook_raw: no message deflated (hook_state(deflate=False)).
PY_SYSTEMS["py_hook_raw"] = ["--hook", "frugal", "--frugal-deflate", "off"]
# py_hook_sharded: hook_state(exchange="sharded"), the reduce-scatter and all-gather that frugal train's local
# mode uses on one cluster (half the flat all-gather's bytes at 4 workers).
PY_SYSTEMS["py_hook_sharded"] = ["--hook", "frugal", "--frugal-exchange", "sharded"]
DDP_SYSTEMS.update(PY_SYSTEMS)
STOCK_SYSTEMS = ["ddp_powersgd1", "ddp_powersgd", "ddp_powersgd8", "ddp_localsgd4", "ddp_localsgd16"]
SWEEP_DENSITIES = ["0.0025", "0.005", "0.02", "0.04"]
# Frugal's local-update mode (--sync local): an outer step over the
# error-fed exchange every FRUGAL_LOCAL_STEPS steps (as ddp_localsgd16).
# frugal_local sends sparse rounds at FRUGAL_LOCAL_DENSITY, frugal_local_dX at
# density X; frugal_local_sharded sends whole int4 rounds (density 1) over the
# sharded exchange (--exchange sharded: a reduce-scatter and an all-gather of
# re-compressed shards, half the flat all-gather's bytes at 4 workers);
# frugal_local_auto is `--sync local --local-steps 16` with nothing else, the
# engine's local defaults.
FRUGAL_LOCAL_STEPS = 16
FRUGAL_LOCAL_DENSITY = "0.48"
# frugal_site: `--sync site`, one replica per cluster (its members average
# gradients every step) with the local mode's rounds between clusters;
# frugal_site32 the same with rounds twice as long (half the bytes on the
# slow link per step).
SITE_VARIANTS = {"frugal_site": 16, "frugal_site32": 32}
# frugal_warmup: density from 25% down to the default over this many steps.
FRUGAL_WARMUP_STEPS = 150
ALL_SYSTEMS = ["frugal", "frugal_step", "frugal_warmup", "frugal_flat", "frugal_adapt", "frugal_local",
               "frugal_local_sharded", "frugal_local_auto", "frugal_slow", "frugal_slow_balanced"] + list(SITE_VARIANTS) + \
    ["frugal_d" + d for d in SWEEP_DENSITIES] + ["ddp", "ddp_fp16", "ddp_powersgd", "ddp_unlimited"] + \
    [s for s in STOCK_SYSTEMS if s != "ddp_powersgd"] + list(PY_SYSTEMS)
# frugal_slow*: every worker in its own CPU cgroup (bench/harness/cgroups.py):
# HETERO_CORES each, rank SLOW_RANK half of that, so each computes at its own
# fixed speed as on separate devices. (--compute-slowdown sleeps, which on 4
# workers sharing 2 cores frees CPU for the others and hides the slowness.)
SLOW_RANK = 1
HETERO_CORES = 0.45
DEFAULT_BUDGET_S = 300


def frugal_variant_args(system, rank):
    """Extra `frugal worker` flags of a Frugal system variant. `frugal` is the
    default (--sync auto: the local mode with 2 or more workers); the
    step-mode variants name --sync step."""
    if system in SITE_VARIANTS:
        return ["--sync", "site", "--local-steps", str(SITE_VARIANTS[system])]
    if system in LOCAL_VARIANTS or system.startswith("frugal_local_d"):
        return local_variant_args(system)
    step = ["--sync", "step"]
    if system == "frugal_step":  # every step, the controller choosing the density
        return step
    if system == "frugal_flat":
        return step + ["--exchange", "flat"]
    if system == "frugal_adapt":
        return step + ["--adapt", "on"]
    # The fixed-density variants turn the controller (the step mode's default,
    # --adapt auto) off, or it would choose the density they are meant to fix.
    if system == "frugal_warmup":  # DGC's density warm-up (Note [Density warm-up])
        return step + ["--density-warmup-steps", str(FRUGAL_WARMUP_STEPS), "--adapt", "off"]
    if system.startswith("frugal_d"):
        return step + ["--density", system[len("frugal_d"):], "--adapt", "off"]
    if system == "frugal_slow":  # equal batches: the controller would balance them
        return step + ["--adapt", "off"]
    if system == "frugal_slow_balanced":
        return step + ["--adapt", "batch"]
    return []


LOCAL_VARIANTS = ("frugal_local", "frugal_local_sharded", "frugal_local_auto")


def local_variant_args(system):
    """Flags of the --sync local variants."""
    if system == "frugal_local_sharded":
        return local_variant_args("frugal_local_d1") + ["--exchange", "sharded"]
    if system == "frugal_local_auto":
        return ["--sync", "local", "--local-steps", str(FRUGAL_LOCAL_STEPS)]
    density = system[len("frugal_local_d"):] or FRUGAL_LOCAL_DENSITY
    return ["--sync", "local", "--local-steps", str(FRUGAL_LOCAL_STEPS), "--density", density]


def is_fixed_density(system):
    """frugal_dX or frugal_local_dX for any density X in (0, 1], beyond the sweep's."""
    prefix = next((p for p in ("frugal_d", "frugal_local_d") if system.startswith(p)), None)
    if prefix is None:
        return False
    try:
        return 0 < float(system[len(prefix):]) <= 1
    except ValueError:
        return False


def is_frugal(system):
    return system.startswith("frugal")


def is_powersgd(system):
    return system in POWERSGD_RANKS


def is_localsgd(system):
    return system in LOCALSGD_PERIODS


def slow_worker_quotas(system, workers):
    """CPU quotas (cores per rank) of a frugal_slow* system; None for the others."""
    if not system.startswith("frugal_slow"):
        return None
    return [HETERO_CORES / (2 if r == SLOW_RANK else 1) for r in range(workers)]


@dataclass(frozen=True)
class Scenario:
    """One model on one network, and the systems run on it one after the other.
    hosts is testbed.sh's --hosts ("4", or "2+2" for two clusters); budgets
    are seconds of training per system; max_steps (smoke runs, gpt-tiny)
    stops early. metric is the evaluation field the targets are on:
    test_accuracy (higher is better) or val_loss (lower is better; the
    target_acc and second_target fields then hold losses). train_args go to
    every system (Frugal and ddp.py take the same flags for them),
    frugal_args to the Frugal systems only."""
    name: str
    model: str
    topology: str
    rate_mbit: Optional[int]
    target_acc: float
    systems: List[str]
    workers: int = 4
    hosts: str = ""
    epochs: int = 3
    eval_every: int = 25
    budgets: Dict[str, float] = field(default_factory=dict)
    second_target: Optional[float] = None
    max_steps: Optional[int] = None
    metric: str = "test_accuracy"
    train_args: Tuple[str, ...] = ()
    frugal_args: Tuple[str, ...] = ()
    # Targets relative to DDP's own result ("DDP's final accuracy
    # minus 0.3 points, or DDP's final validation loss plus 1%"): (margin of
    # tta, margin of tta2); when ddp_unlimited completed, each target becomes
    # its final loss x (1 + margin), or its final accuracy - margin (points:
    # 0.003 is 0.3 points), else target_acc/second_target stand.
    target_vs_ddp: Optional[Tuple[float, float]] = None
    # Epochs of the Frugal systems when they differ (run.py --frugal-epochs):
    # the targets stay DDP's result after `epochs`, Frugal may train longer.
    frugal_epochs: Optional[int] = None

    def __post_init__(self):
        if not self.hosts:
            w = self.workers
            object.__setattr__(self, "hosts", str(w) if self.topology == "flat" else "%d+%d" % (w // 2, w // 2))

    def budget(self, system):
        """SYSTEM's training seconds; a Frugal variant not listed (frugal_dX) gets Frugal's."""
        fallback = self.budgets.get("frugal", DEFAULT_BUDGET_S) if is_frugal(system) else DEFAULT_BUDGET_S
        return self.budgets.get(system, fallback)

    def targets(self):
        """(key, target value of the metric) of the scenario's targets; the second may be None."""
        return (("tta", self.target_acc), ("tta2", self.second_target))

    @property
    def lower_is_better(self):
        return self.metric.endswith("loss")

    def reaches(self, value, target):
        """Whether a metric VALUE meets TARGET (at or above an accuracy, at or below a loss)."""
        return value <= target if self.lower_is_better else value >= target

    def best(self, items, default=None, key=None):
        """The best of ITEMS (metric values, or KEY of each) for this metric, or DEFAULT when there are none."""
        items = list(items)
        if not items:
            return default
        pick = min if self.lower_is_better else max
        return pick(items, key=key) if key else pick(items)

    def target_label(self, target):
        """A target as the report prints it: "88%", "88.1%" or "val_loss 2.200"."""
        if self.lower_is_better:
            return "%s %.3f" % (self.metric, target)
        return ("%.2f" % (100 * target)).rstrip("0").rstrip(".") + "%"

    def with_(self, **changes):
        return replace(self, **changes)


FLAT_SYSTEMS = ["frugal", "frugal_step", "ddp", "ddp_fp16"] + STOCK_SYSTEMS + ["ddp_unlimited"]
CLUSTER_SYSTEMS = ["frugal", "frugal_step", "frugal_flat"] + list(SITE_VARIANTS) + ["ddp", "ddp_fp16"] + \
    STOCK_SYSTEMS + ["ddp_unlimited"]
# Budgets in seconds of training. Frugal and ddp_unlimited are sized to finish
# their epochs; shaped DDP runs ~3 s/iteration on mlp at 100 Mbit/s, so it
# gets a fixed slice and a lower bound.
FULL_BUDGETS = {"ddp": 300, "ddp_fp16": 300, "ddp_powersgd": 300, "ddp_unlimited": 900}
FULL_BUDGETS.update({name: 900 for name in ALL_SYSTEMS if is_frugal(name)})
# Local SGD sends a full model every 4 or 16 steps: it can finish its epochs.
FULL_BUDGETS.update({"ddp_powersgd1": 300, "ddp_powersgd8": 300, "ddp_localsgd4": 900, "ddp_localsgd16": 900})
# Frugal's Python package trains as long as Frugal.
FULL_BUDGETS.update({name: 900 for name in PY_SYSTEMS})
ADAPT_SYSTEMS = ["frugal", "frugal_adapt"] + ["frugal_d" + d for d in SWEEP_DENSITIES] + ["ddp", "ddp_unlimited"]


# The high target on accuracy: DDP's final accuracy minus 0.3
# points; the second, 3 points below it (the fixed targets stand when
# ddp_unlimited did not complete).
ACCURACY_MARGINS = (0.003, 0.03)


def _full(name, model, topology, rate, target, systems, second_target):
    """The 100 Mbit/s-1 Gbit/s scenarios: the targets follow DDP's final accuracy (minus 0.3 and 3
    points; TARGET and SECOND_TARGET stand when ddp_unlimited did not complete)."""
    return Scenario(name, model, topology, rate, target, systems, budgets=FULL_BUDGETS,
                    second_target=second_target, target_vs_ddp=ACCURACY_MARGINS)


# Below 20 Mbit/s: the synchronous default, the local-update mode and
# every stock alternative. Plain DDP and PowerSGD get short budgets and are
# projected (plain DDP needs ~30 s per mlp step at 10 Mbit/s).
LOW_RATE_SYSTEMS = ["frugal", "frugal_step", "frugal_local", "frugal_local_sharded", "frugal_local_auto", "ddp",
                    "ddp_powersgd1", "ddp_powersgd", "ddp_localsgd16", "ddp_unlimited"]
LOW_RATE_BUDGETS = dict(FULL_BUDGETS, ddp=120, ddp_fp16=120, ddp_powersgd1=600, ddp_powersgd=600)
# gpt-tiny (docs/design/models.md): AdamW, 30 warm-up
# steps then cosine, 8 windows of 128 bytes per worker and step; Frugal reads
# the text split with --dataset text (ddp.py picks it from the model).
GPT_TRAIN_ARGS = ("--optimizer", "adamw", "--lr", "0.001", "--weight-decay", "0.01", "--batch-size", "8",
                  "--warmup-steps", "30")
GPT_STEPS = 200
# Two workers, not four: gpt-tiny's step is ~40x mlp's compute (about 3 s per
# step with four workers on this 2-core machine, 1.5 s with two).
GPT_WORKERS = 2


def _low_rate(name, model, topology, rate, target, second_target):
    return Scenario(name, model, topology, rate, target, LOW_RATE_SYSTEMS, budgets=LOW_RATE_BUDGETS,
                    second_target=second_target, target_vs_ddp=ACCURACY_MARGINS)


def _gpt(name, rate):
    """gpt-tiny for GPT_STEPS steps; targets DDP's final validation loss + 1% and + 5% (the fixed values
    stand only when ddp_unlimited did not complete)."""
    return Scenario(name, "gpt-tiny", "flat", rate, 2.2, LOW_RATE_SYSTEMS, budgets=LOW_RATE_BUDGETS, second_target=2.3,
                    workers=GPT_WORKERS, epochs=1, max_steps=GPT_STEPS, eval_every=50, metric="val_loss",
                    train_args=GPT_TRAIN_ARGS,
                    frugal_args=("--dataset", "text"), target_vs_ddp=(0.01, 0.05))


SCENARIOS = {s.name: s for s in [
    _full("mlp-flat-100", "mlp", "flat", 100, 0.88, FLAT_SYSTEMS, 0.85),
    _full("mlp-flat-500", "mlp", "flat", 500, 0.88, FLAT_SYSTEMS, 0.85),
    _full("cnn-flat-100", "cnn", "flat", 100, 0.90, FLAT_SYSTEMS, 0.87),
    _full("cnn-flat-500", "cnn", "flat", 500, 0.90, FLAT_SYSTEMS, 0.87),
    # At 1 Gbit/s the controller's choice (frugal_adapt) should be
    # within 1.1x of ddp_unlimited's time to the target.
    _full("mlp-flat-1000", "mlp", "flat", 1000, 0.88, FLAT_SYSTEMS + ["frugal_adapt"], 0.85),
    _full("cnn-flat-1000", "cnn", "flat", 1000, 0.90, FLAT_SYSTEMS + ["frugal_adapt"], 0.87),
    _full("mlp-clusters-100", "mlp", "clusters", 100, 0.88, CLUSTER_SYSTEMS, 0.85),
    _full("mlp-fluctuating", "mlp", "fluctuating", None, 0.88, CLUSTER_SYSTEMS, 0.85),
    # The adaptive controller (frugal_adapt) against the default, a
    # fixed-density sweep (best in hindsight) and DDP, on the fluctuating WAN.
    _full("mlp-fluctuating-adapt", "mlp", "fluctuating", None, 0.88, ADAPT_SYSTEMS, 0.85),
    # One worker 2x slower; equal vs speed-proportional batch sizes.
    _full("mlp-hetero-100", "mlp", "flat", 100, 0.88, ["frugal_slow", "frugal_slow_balanced"], 0.85),
    # 10 Mbit/s, where every synchronous scheme is link-bound.
    _low_rate("mlp-flat-10", "mlp", "flat", 10, 0.88, 0.85),
    _low_rate("cnn-flat-10", "cnn", "flat", 10, 0.90, 0.87),
    # two clusters of 2 joined by a 10 Mbit/s WAN
    _low_rate("mlp-clusters-10", "mlp", "clusters", 10, 0.88, 0.85).with_(
        systems=LOW_RATE_SYSTEMS[:5] + list(SITE_VARIANTS) + LOW_RATE_SYSTEMS[5:]),
    # On a GPU machine (run.py --train-args "--device cuda"): four
    # workers sharing one GPU, two epochs; targets DDP's final accuracy and 1
    # point below it. Shaped DDP (~5 s per step) gets a slice and a projection.
    Scenario("resnet18-flat-100", "resnet18", "flat", 100, 0.91, ["frugal", "ddp", "ddp_unlimited"],
             epochs=2, eval_every=39, second_target=0.90, target_vs_ddp=(0.0, 0.01),
             budgets={"frugal": 150, "frugal_local": 150, "ddp": 45, "ddp_unlimited": 150}),
    _gpt("gpt-flat-100", 100),
    _gpt("gpt-flat-10", 10),
]}
QUICK = [Scenario("mlp-flat-100-quick", "mlp", "flat", 100, 0.80, ["frugal", "ddp", "ddp_fp16", "ddp_powersgd",
                                                                   "ddp_unlimited"], epochs=1, eval_every=25,
                  budgets={"frugal": 200, "ddp": 60, "ddp_fp16": 60, "ddp_powersgd": 60, "ddp_unlimited": 200},
                  second_target=0.75)]
# The smoke run covers one system of each stock kind (the ranks and periods
# differ only in a number), to keep the ctest short.
SMOKE = [Scenario("smoke", "mlp", "flat", 1000, 0.5, ["frugal", "ddp", "ddp_powersgd1", "ddp_localsgd4"], workers=2,
                  epochs=1, eval_every=2, budgets={"frugal": 60, "ddp": 60, "ddp_powersgd1": 60, "ddp_localsgd4": 60},
                  second_target=None, max_steps=4)]


class ScenarioError(ValueError):
    """A --scenarios or --systems value names something unknown; the message says what."""


def select(smoke, quick, names, epochs=None, systems="", scens=None):
    """The scenarios a run asked for: SCENS (the grid's part), SMOKE, QUICK,
    or the comma list NAMES ("" or "all": every one), with --epochs and
    --systems applied."""
    if scens is not None:
        scens = list(scens)
    elif smoke:
        scens = list(SMOKE)
    elif quick:
        scens = list(QUICK)
    else:
        wanted = names.split(",") if names and names != "all" else list(SCENARIOS)
        unknown = [n for n in wanted if n not in SCENARIOS]
        if unknown:
            raise ScenarioError("unknown scenario(s) %s (known: %s)" % (", ".join(unknown), ", ".join(SCENARIOS)))
        scens = [SCENARIOS[n] for n in wanted]
    if epochs:
        scens = [s.with_(epochs=epochs) for s in scens]
    if systems:
        wanted = systems.split(",")
        bad = [w for w in wanted if w not in ALL_SYSTEMS and not is_fixed_density(w)]
        if bad:
            raise ScenarioError("unknown system(s) %s" % ", ".join(bad))
        # The systems asked for, in the scenario's order, then any others
        # (e.g. a Frugal variant such as frugal_adapt on a scenario without it).
        scens = [s.with_(systems=[x for x in s.systems if x in wanted] + [x for x in wanted if x not in s.systems])
                 for s in scens]
    return scens
