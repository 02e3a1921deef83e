"""The user's torch.optim optimizer in frugal.DistributedModel: checks, and
its settings read for the step mode's sparse optimizer."""

import math

import torch

# The step mode's engine optimizer of each torch type it can read. Exact
# types: a subclass may change what step() does.
_STEP_KINDS = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adamw"}
# Group keys that change what step() does and the engine has no equivalent for.
_UNSUPPORTED_FLAGS = ("amsgrad", "maximize", "capturable", "differentiable")


def _finite(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_optimizer(opt, module):
    """Raises TypeError for a non-optimizer and ValueError for one over
    other parameters or with a NaN, Inf or negative hyperparameter."""
    if not isinstance(opt, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be 'sgd', 'adam', 'adamw' or a torch.optim.Optimizer over the module's "
                        f"parameters, got {type(opt).__name__}")
    mine = {id(p) for p in module.parameters()}
    for i, group in enumerate(opt.param_groups):
        for p in group["params"]:
            if id(p) not in mine:
                raise ValueError(f"the optimizer's group {i} holds a parameter of shape {tuple(p.shape)} that is not "
                                 f"one of the module's: build the optimizer over this module's parameters")
        check_group(group, i)


def check_group(group, i):
    for key in ("lr", "weight_decay", "momentum", "dampening", "eps"):
        if key in group and group[key] is not None and not (_finite(group[key]) and group[key] >= 0):
            raise ValueError(f"the optimizer's group {i} has {key}={group[key]!r}: it must be a finite number >= 0")
    for beta in group.get("betas", ()):
        if not (_finite(beta) and 0 <= beta < 1):
            raise ValueError(f"the optimizer's group {i} has betas={group['betas']!r}: each must be in [0, 1)")


def base_lr(group):
    """The group's lr before its schedule: a scheduler's initial_lr, else its lr."""
    return float(group.get("initial_lr", group["lr"]))


def step_settings(opt, params):
    """The engine keywords of a torch optimizer for sync='step': one dict
    per parameter group, and each parameter's group (``params`` order). The
    sparse CPU optimizer steps each group by its own settings (lr, weight
    decay, momentum, betas, eps). Raises TypeError for what it cannot run
    (another type, a flag it lacks) and ValueError for groups that miss
    some of the module's parameters."""
    kind = _STEP_KINDS.get(type(opt))
    if kind is None:
        raise TypeError(f"sync='step' runs torch.optim.SGD, Adam or AdamW (read into Frugal's sparse optimizer), "
                        f"not {type(opt).__name__}: use sync='local', where any torch optimizer takes the inner steps")
    group_of_param = {}
    groups = []
    for i, group in enumerate(opt.param_groups):
        flags = [f for f in _UNSUPPORTED_FLAGS if group.get(f)]
        if flags:
            raise TypeError(f"sync='step' does not run {', '.join(flags)}=True (group {i}): use sync='local'")
        for p in group["params"]:
            group_of_param[id(p)] = i
        lr = base_lr(group)
        if i == 0 and not lr > 0:
            raise ValueError(f"sync='step' needs the first group's lr (or its scheduler's initial_lr) > 0 at the "
                             f"start, got {lr}")
        settings = dict(optimizer=kind, lr=lr, weight_decay=float(group.get("weight_decay", 0.0)))
        if kind == "sgd":
            settings.update(momentum=float(group["momentum"]), dampening=float(group["dampening"]),
                            nesterov=bool(group["nesterov"]))
        else:
            settings.update(beta1=float(group["betas"][0]), beta2=float(group["betas"][1]), eps=float(group["eps"]))
        groups.append(settings)
    if set(group_of_param) != {id(p) for p in params}:
        raise ValueError("with sync='step' the optimizer must hold every trainable parameter of the module, and "
                         "only those (Frugal's optimizer steps them all)")
    return groups, [group_of_param[id(p)] for p in params]


def lr_scale(opt):
    """The schedule's factor of this step, lr / initial lr, which sync='step'
    applies to every group alike; ValueError where the groups' factors
    differ (a LambdaLR with one function per group) or a group of initial lr
    0 was given one."""
    scale = None
    for i, group in enumerate(opt.param_groups):
        check_group(group, i)
        base, lr = base_lr(group), float(group["lr"])
        if base == 0:
            if lr != 0:
                raise ValueError(f"the optimizer's group {i} started at lr 0 and now has lr {lr}: with sync='step' "
                                 f"every group follows one schedule factor; use sync='local'")
            continue
        mine = lr / base
        if scale is None:
            scale = mine
        elif not math.isclose(mine, scale, rel_tol=1e-9, abs_tol=1e-15):
            raise ValueError(f"the optimizer's groups follow different schedules (group 0 at {scale:g} of its "
                             f"initial lr, group {i} at {mine:g}): sync='step' scales every group by one factor; "
                             f"use sync='local' for per-group schedules")
    return scale


def fixed_settings(opt):
    """What step_settings read except the lr, per group: it may not change
    in a sync='step' run."""
    keys = ("weight_decay", "momentum", "dampening", "nesterov", "betas", "eps")
    return [{k: (tuple(g[k]) if k == "betas" else g[k]) for k in keys if k in g} for g in opt.param_groups]
