"""How frugal.DistributedModel's replicas stay in step: one class per way
of synchronising, behind one interface, built by one factory (create) from
the resolved sync mode, as the engine's SyncStrategy
(include/frugal/engine/sync_strategy.h) is for frugal train's workers.
The model calls the strategy and never asks which one it is.

Each class is a thin layer over the engine's objects (frugal._C.Replica,
frugal._C.LocalSync); what it adds is what stays in Python: the user's
torch optimizer, stepped or read at the points of the iteration the
engine's own loop would.

Per iteration t: begin_iteration(t, check), the forwards (before_forward()
at the first), the backwards, sync_gradients(t) once, end_step(t, scaler);
finish(t) once the run is over. A new way of synchronising is one new class
and one line in _STRATEGIES.
"""

import abc

import torch

from . import _C, _optim


class _Strategy(abc.ABC):
    """The interface, and what every strategy shares: the Replica (the
    bucket layout, rank 0's initial broadcast, the buffers' averaging), the
    lr and the density."""

    name = ""
    elastic = False  # frugal run --elastic can train it (Note [Elastic scripts] in _model.py)
    # Where a snapshot of iteration t waits for nothing in flight (Note
    # [State at rest] in sync_strategy.h): after settle(t), before
    # begin_iteration(t) (True), or after begin_iteration(t).
    saves_before_begin = False
    # Whether each rank's torch optimizer state is its own (the local
    # mode's inner steps): a joiner of an elastic job then starts it fresh,
    # with the job's hyperparameters (Note [A joiner's own optimizer] in
    # _model.py).
    optimizer_state_is_own = False

    def __init__(self, world, params, options, *, user_opt, total_steps, broadcast, groups=(), group_of=()):
        del total_steps  # the local modes' (their outer step)
        self.replica = _C.Replica(world, params, options, broadcast_initial=broadcast, groups=list(groups),
                                  group_of=list(group_of))
        self._engine = self.replica  # what the counters, memory and checkpoint sections are of
        self._options = options
        self._user_opt = user_opt
        self.lr = float(options["lr"])
        self.density = options.resolved_density()

    @staticmethod
    @abc.abstractmethod
    def adopt_optimizer(options, user_opt, params):
        """Sets in `options` what the user's torch optimizer decides for this
        strategy; returns (groups, group_of) for the constructor."""

    @abc.abstractmethod
    def begin_iteration(self, t, check):
        """The parameters forward t uses are in the module; with check the
        ranks compare checksums."""

    def settle(self, t):
        """Where saves_before_begin: takes what is due before iteration t
        without starting t's own work; begin_iteration(t) follows."""
        del t

    @abc.abstractmethod
    def end_step(self, t, scaler):
        """After the backwards of iteration t (and sync_gradients): the
        user's optimizer step where it takes one, and the engine's end of t."""

    @abc.abstractmethod
    def finish(self, t):
        """Drains what is in flight; returns the replicas' common checksum."""

    @abc.abstractmethod
    def set_lr(self, t, lr):
        """The learning rate from iteration t on."""

    @abc.abstractmethod
    def set_density(self, t, density):
        """The density from iteration t on."""

    @abc.abstractmethod
    def state_dict(self, t):
        """The engine's state as "_frugal.*" tensors (DistributedModel.state_dict)."""

    @abc.abstractmethod
    def check_state(self, state_dict):
        """ValueError for a state dict without this strategy's state."""

    @abc.abstractmethod
    def load_state(self, state_dict, residuals):
        """Restores state_dict's engine state; returns the iteration that runs next."""

    def before_forward(self):
        """At the first forward of an iteration."""

    def sync_gradients(self, t):
        """After the last backward of iteration t, before the user's optimizer
        may read the gradients."""

    def average_buffers(self, t, buffers):
        self.replica.average_buffers(t, buffers)

    def with_synced_parameters(self, fn):
        return fn()

    def check_density(self, density):
        """Raises ValueError where set_density cannot change the density."""

    def stats(self):
        return self._engine.stats()

    def host_memory(self):
        return self._engine.host_memory()

    def pipeline_stats(self):
        return self._engine.pipeline_stats()

    def save_sections(self, rank0):
        """This rank's state as a checkpoint's sections (frugal.save)."""
        return self._engine.save_sections(rank0)

    def restore_sections(self, shared, mine, residuals, what):
        self._engine.restore_sections(shared, mine, residuals, what)

    def elastic_state(self):
        """The engine object an elastic session snapshots and restores
        (REQUIRES: elastic)."""
        raise RuntimeError(f"sync={self.name!r} is not elastic")


class StepSync(_Strategy):
    """sync='step': every iteration's gradients go through the Replica's
    pipeline (sparsify, exchange, the CPU sparse optimizer), which also
    steps the parameters."""

    name = "step"
    elastic = True
    state_keys = ("_frugal.pipeline", "_frugal.parameters")

    def __init__(self, world, params, options, **kwargs):
        super().__init__(world, params, options, **kwargs)
        self._fixed = None if self._user_opt is None else _optim.fixed_settings(self._user_opt)
        self.rounds = -1

    @staticmethod
    def adopt_optimizer(options, user_opt, params):
        """Reads the torch optimizer's groups into `options` (the first) and,
        for several groups, each group's options; returns (groups, group_of).
        TypeError for an optimizer the sparse optimizer cannot run."""
        groups, group_of = _optim.step_settings(user_opt, params)
        options.set(groups[0])
        if len(groups) == 1:
            return [], []  # one group: the run's optimizer settings are every parameter's
        step_groups = []
        for settings in groups:
            group = options.copy()
            group.set(settings)
            group.validate()
            step_groups.append(group)
        return step_groups, group_of

    def begin_iteration(self, t, check):
        self.replica.begin_iteration(t, check)

    def before_forward(self):
        if self._user_opt is not None:
            self._read_lr()

    def _read_lr(self):
        """The torch optimizer's lr as the scheduler left it for this
        iteration, before the backward hands the gradients over."""
        scale = _optim.lr_scale(self._user_opt)
        if _optim.fixed_settings(self._user_opt) != self._fixed:
            raise ValueError("with sync='step' only the optimizer's lr may change during the run (Frugal's sparse "
                             "optimizer read the rest at construction); use sync='local' to change the others")
        lr = float(self._user_opt.param_groups[0]["lr"])
        if lr != self.lr:
            self.replica.set_from(self.replica.iteration, self.density, scale)
            self.lr = lr

    def end_step(self, t, scaler):
        if scaler is not None:
            raise ValueError("step(scaler) applies to sync='local' with a torch optimizer; the step mode's sparse "
                             "optimizer takes float32 gradients and raises on a non-finite one")
        self.replica.end_backward()
        if self._user_opt is not None:
            # Every gradient went to the pipeline, none to .grad, so this step
            # changes nothing; it keeps the optimizer's step count that the
            # lr schedulers check, as in a loop without Frugal.
            self._user_opt.step()

    def finish(self, t):
        self.replica.finish()
        return self.replica.check_replicas(t + 1)

    def set_lr(self, t, lr):
        self.replica.set_from(t, self.density, lr / self._options["lr"])
        self.lr = lr

    def set_density(self, t, density):
        base = self._options["lr"]
        self.replica.set_from(t, density, self.lr / base if base > 0 else 1.0)
        self.density = density

    def state_dict(self, t):
        pipeline, parameters = self.replica.save_state()  # waits for the updates in flight
        return {"_frugal.pipeline": pipeline, "_frugal.parameters": parameters}

    def check_state(self, state_dict):
        if any(k not in state_dict for k in self.state_keys):
            raise ValueError("this state dict has no Frugal state (_frugal.pipeline, _frugal.parameters); a plain "
                             "module checkpoint is loaded into the module before wrapping it: "
                             "net.load_state_dict(sd); model = frugal.DistributedModel(net, ...)")

    def load_state(self, state_dict, residuals):
        self.replica.load_state(state_dict["_frugal.pipeline"], state_dict["_frugal.parameters"], residuals)
        return self.replica.iteration + 1

    def elastic_state(self):
        return self.replica



class LocalSync(_Strategy):
    """sync='local': every rank steps alone (the engine's inner steps, or
    the user's torch optimizer in step()), and every local_steps steps the
    ranks sync their progress in compressed outer rounds (engine::LocalSync).
    The replica gives it the bucket layout and averages the buffers, and
    builds no pipeline (Note [Replica without a pipeline] in replica.cc)."""

    name = "local"
    elastic = True
    saves_before_begin = True
    optimizer_state_is_own = True
    state_keys = ("_frugal.local", "_frugal.iteration")

    def __init__(self, world, params, options, *, user_opt, total_steps, broadcast, groups=(), group_of=()):
        super().__init__(world, params, options, user_opt=user_opt, total_steps=0, broadcast=broadcast)
        # Note [Inner steps by the caller]: the user's optimizer takes them.
        self.local = _C.LocalSync(world, self.replica, [p for _, p in params], options, total_steps,
                                  caller_steps=user_opt is not None, broadcast_initial=broadcast)
        self._engine = self.local

    @staticmethod
    def adopt_optimizer(options, user_opt, params):
        """The torch optimizer takes the inner steps itself; options' lr is
        only the reference of the outer annealing (its first group's lr
        before the schedule)."""
        base = _optim.base_lr(user_opt.param_groups[0])
        options.set({"lr": base if base > 0 else 1.0})
        return [], []

    @property
    def rounds(self):
        return self.local.rounds

    def settle(self, t):
        self.local.settle(t)

    def begin_iteration(self, t, check):
        self.local.begin_iteration(t, check)

    def end_step(self, t, scaler):
        if self._user_opt is not None:
            self._step_user_optimizer(t, scaler)
        elif scaler is not None:
            raise ValueError("step(scaler) applies to sync='local' with a torch optimizer; this model's inner "
                             "steps are the engine's")
        self.local.end_backward(t)

    def _step_user_optimizer(self, t, scaler):
        group = self._user_opt.param_groups[0]
        _optim.check_group(group, 0)
        lr = float(group["lr"])
        if scaler is None:
            self._user_opt.step()
        else:
            scaler.step(self._user_opt)
        # The outer annealing reads the schedule's decay at a sync point t
        # as lr_at(t) / lr_at(0): the lr of the last step before t over the
        # base lr the track starts with, hence t + 1.
        self.local.set_lr(t + 1, lr)
        self.lr = lr

    def finish(self, t):
        self.local.finish(t)
        return self.local.check_replicas(t + 1)

    def set_lr(self, t, lr):
        self.local.set_lr(t, lr)
        self.lr = lr

    def check_density(self, density):
        raise ValueError("set_density applies to sync='step'; a sync='local' run keeps its density")

    def set_density(self, t, density):
        self.check_density(density)

    def with_synced_parameters(self, fn):
        return self.local.on_anchor(fn)

    def state_dict(self, t):
        return {"_frugal.local": self.local.save_state(),  # waits for the rounds in flight
                "_frugal.iteration": torch.tensor(t, dtype=torch.int64)}

    def check_state(self, state_dict):
        if any(k not in state_dict for k in self.state_keys):
            raise ValueError("this state dict has no sync='local' state (_frugal.local, _frugal.iteration): "
                             "it was saved by another mode, or is a plain module checkpoint")

    def load_state(self, state_dict, residuals):
        self.local.load_state(state_dict["_frugal.local"], residuals)
        return int(state_dict["_frugal.iteration"])


    def elastic_state(self):
        return self.local


class SiteSync(LocalSync):
    """sync='site': the local mode with one replica per cluster, whose
    members average their gradients every step before the inner step
    (Note [Site replicas] in sync_strategy.cc)."""

    name = "site"
    # A membership change restarts every rank's round at the anchor, so a
    # cluster's members stay equal (Note [Elastic site replicas] in
    # sync_strategy.cc).
    elastic = True
    optimizer_state_is_own = False  # a cluster's members step one optimizer state

    def sync_gradients(self, t):
        self.local.average_gradients(t)


_STRATEGIES = {cls.name: cls for cls in (StepSync, LocalSync, SiteSync)}


def strategy_class(sync):
    """The class of a resolved sync mode ('step', 'local' or 'site')."""
    return _STRATEGIES[sync]


def create(sync, world, params, options, **kwargs):
    """The strategy of a resolved sync mode on `world`; kwargs: user_opt,
    total_steps, broadcast, and for the step mode the parameter groups'
    options (groups) and each parameter's group (group_of)."""
    return strategy_class(sync)(world, params, options, **kwargs)
