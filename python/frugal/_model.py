"""frugal.DistributedModel: a user's nn.Module trained by Frugal's pipeline."""

import json
import math
import os
import sys
import time
import traceback
import warnings
import weakref

import torch

from . import _C, _optim, _state_pack, _sync
from . import _world as _world_module
from ._world import default_timeout_s, init
from ._world import device as _device

# module -> the replicas whose autograd hooks sit on its parameters. A
# replica must live as long as its hooks can fire (the engine does not remove
# them), and the module must stay picklable, hence a weak-keyed side table
# rather than an attribute.
_replicas_of_module = weakref.WeakKeyDictionary()


def options():
    """DistributedModel's engine keywords, from the engine's field list (the
    flags of frugal train of the same names): one dict per keyword with
    key, type ('bool', 'int', 'float' or 'str'), default, help, group (the
    flag's help section), range (e.g. 'in (0, 1]'; None: any) and choices
    (the values of a str keyword that takes a fixed set; None: any)."""
    if not hasattr(_C, "options"):
        raise NotImplementedError("this build of frugal has no DistributedModel (the engine's Replica was missing "
                                  "when it was built)")
    return _C.options()


def _keys_of(group):
    return tuple(o["key"] for o in _C.options() if o["group"] == group) if hasattr(_C, "options") else ()


# The optimizer's settings (a torch optimizer's param_groups hold them) and
# the local modes' keywords, by their help section in the field list.
_OPTIMIZER_KEYS = tuple(k for k in _keys_of("Optimizer") if k != "optimizer")
_LOCAL_KEYS = tuple(k for k in _keys_of("Local updates") if k != "sync")


# A script's snapshot sections that are the rank's own: rank 0 does not send
# them to a joiner (ElasticSession.restore; Note [A joiner's own optimizer]).
_OWN_PREFIX = "own."


class _PhaseClock:
    """Seconds between laps, into a dict under the laps' names."""

    def __init__(self, out):
        self._out = out
        self._last = time.perf_counter()

    def lap(self, name):
        now = time.perf_counter()
        self._out[name] = round(now - self._last, 4)
        self._last = now


class DistributedModel(torch.nn.Module):
    """Wraps ``module`` so that its training step runs through Frugal.

    Per iteration::

        out = model(x)            # forward of the wrapped module
        loss = loss_fn(out, y)
        loss.backward()           # autograd hooks hand each gradient bucket to the CPU pipeline
        model.step()              # waits for the next parameters and copies them into the module

    The gradients never land in ``.grad``: each bucket is error-fed,
    block-sparsified to ``density``, exchanged with the other workers and
    applied by Frugal's CPU sparse optimizer (``optimizer``, ``lr``, ...) to a
    master copy; ``step()`` copies the result back. With ``staleness=1`` the
    forward of iteration t uses the parameters after iteration t-2, so the
    exchange of t-1 overlaps the compute of t.

    With ``sync="local"`` (the default with two or more workers, as in
    ``frugal train``) the workers step alone, DiLoCo-style: ``loss.backward()``
    fills ``.grad`` as usual and ``step()`` takes an inner step of
    ``optimizer`` on this rank's own parameters (on their device). Every
    ``local_steps / local_fragments`` steps one fragment of the model is
    synced: each rank's progress since that fragment's last sync is
    error-fed, compressed (``density``, default 1: whole int4 rounds),
    averaged over the ranks and applied to the synced parameters with an
    outer Nesterov step; by default the exchange runs on a thread while the
    inner steps go on. Between syncs the replicas differ;
    ``with_synced_parameters(fn)`` evaluates the common model.

    All ranks start from rank 0's parameters (a broadcast at construction,
    as DDP does; iteration 0 begins at the first forward). Every ``check_every`` steps the replicas compare checksums
    of their parameters; a mismatch raises. Call ``finish()`` at the end: it
    drains the pipeline, copies the final parameters in and returns their
    checksum (identical on every rank).

    The engine's keywords (``**keywords``) are frugal train's options of
    the same names (``frugal.options()`` lists them with their types,
    defaults, ranges and help; None: the default), e.g. lr, density,
    sparsifier, value_encoding, staleness, bucket_mb, timeout_s (default:
    frugal run --timeout-s, else the option's) and the local modes'
    local_steps, outer_lr, local_fragments. Their defaults are frugal
    train's but lr and momentum (kPythonDefaults in python/src/options.cc).

    Keyword arguments of the model:
      optimizer: 'sgd', 'adam' or 'adamw' with lr, momentum, dampening,
        nesterov, weight_decay, beta1, beta2, eps as in torch.optim; or a
        torch.optim.Optimizer over the module's parameters (its
        param_groups hold those; passing them too raises). With
        sync='local' any optimizer takes the inner steps itself, in
        ``step()``, so its groups, state_dict and lr schedulers work as
        without Frugal; with sync='step' an SGD, Adam or AdamW is read into
        the sparse optimizer group by group (each group's lr, weight decay,
        momentum or betas and eps; its lr at every iteration, so a scheduler
        that scales every group by one factor works).
      total_steps: the run's length (None: unknown), for the local modes'
        outer step (outer_lr 0: DiLoCo's 0.7, or plain averaging when the
        run is shorter than 20 rounds).
      run_dir: a run directory (as frugal train's <runs-dir>/<run-name>,
        e.g. "runs/lm"): rank 0 writes <run_dir>/metrics.jsonl (the CLI's
        schema, through its RunReporter) and config.toml, and prints the
        CLI's progress line on stderr; frugal.save defaults to
        <run_dir>/checkpoints. None (default): no metrics.
      log_every: steps per metrics record (50, as frugal train --log-every).
      quiet: no progress line (the metrics are still written), as --quiet.
      check_every: steps between replica checks (0: only in finish()). world: a frugal World
        (default: frugal.init()).
      device: where the module trains. None (default): where it is;
        "auto": frugal.device(), cuda:LOCAL_RANK where there are GPUs, else
        the CPU; or a torch device. The module moves there before it is
        wrapped (in place: an optimizer built over it keeps its parameters).
    """

    def __init__(self, module, *, optimizer="sgd", check_every=100, world=None, total_steps=None, run_dir=None,
                 log_every=50, quiet=False, device=None, elastic_every=None, on_world_change=None, scheduler=None,
                 **keywords):
        super().__init__()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"DistributedModel wraps a torch.nn.Module, got {type(module).__name__}")
        if not hasattr(_C, "Replica"):
            raise NotImplementedError("this build of frugal has no DistributedModel (the engine's Replica was "
                                      "missing when it was built); rebuild, or use frugal.sparse_hook with DDP")
        if device is not None:
            try:
                target = _device() if device == "auto" else torch.device(device)
            except (RuntimeError, TypeError) as e:
                raise ValueError(f"device must be None, 'auto' or a torch device, got {device!r}") from e
            module.to(target)
        self._check_keywords(check_every, total_steps, run_dir, log_every)
        user_opt = None if isinstance(optimizer, str) else optimizer
        if user_opt is not None:
            _optim.check_optimizer(user_opt, module)
        self._user_opt = user_opt
        self._keywords = self._engine_keywords(optimizer, keywords)
        options = self._make_options(self._keywords.get("sync", "auto"))  # TypeError, ValueError naming the keyword
        if _replicas_of_module.get(module):
            raise ValueError("this module is already wrapped by a DistributedModel (its autograd hooks feed that "
                             "one); wrap a fresh module, e.g. one that loaded the first one's state_dict()")
        params = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        if not params:
            raise ValueError("the module has no parameters that require grad")
        self._world = world if world is not None else init()
        # frugal run --elastic: the job's membership session (Note [Elastic scripts]).
        self._elastic = _world_module.elastic_session() if world is None else None
        self._check_elastic_keywords(elastic_every, on_world_change, scheduler)
        self._resolve_sync(options, [p for _, p in params])
        # Note [Elastic gates] in run_config.cc: 0 takes the resolved mode's.
        self._elastic_every = options.resolved_elastic_every(self._elastic_every)
        self.check_every = check_every
        self.module = module
        self._params = params
        self._options = options
        self._total_steps = total_steps or 0
        # A joiner of a running elastic job receives its state from rank 0
        # instead of the initial broadcast (Note [No broadcast on restore]).
        joining = self._elastic is not None and self._elastic.restore_step >= 0
        self._build_engine(broadcast=not joining)
        self._t = 0  # the iteration whose forward runs next
        self._finished = False
        # Iteration 0 begins at the first forward (or step, state_dict,
        # finish), so that load_state_dict can restore a checkpoint first.
        self._begun = False
        self._in_iteration = False  # between a forward and its step()
        self._gradients_synced = False  # sync_gradients() ran in this iteration
        # elastic: sync_gradients() switched worlds; the step() after it is
        # of the old world's iteration and does nothing
        self._skip_step = False
        self._first_iteration = 0
        self._restored = False  # frugal.load restored a checkpoint
        self.left = False  # elastic: this worker left the job (SIGTERM, a resize, a stop); the loop ends
        self._generation_start = 0
        self._joined = joining  # frugal.load then keeps the job's state (Note [Checkpoints of elastic scripts])
        self._just_switched = False  # the last step() entered a new world; cleared by the next forward
        if joining:
            self._restore_generation(joining=True)
        # Metrics (Note [Python metrics]): opened at the first iteration, so
        # that a run resumed by frugal.load appends to its metrics file.
        self.run_dir = None if run_dir is None else os.fspath(run_dir)
        self._log_every = log_every
        self._quiet = bool(quiet)
        self._reporter = None
        self._forward_started = None  # perf_counter() at this iteration's first forward
        self._samples = 0             # this rank's samples in this iteration's forwards
        self.epoch = 0                # the records' "epoch"; a script may set it

    @staticmethod
    def _check_keywords(check_every, total_steps, run_dir, log_every):
        """The Python package's own keywords (the engine's are the field list's)."""
        if not (isinstance(check_every, int) and check_every >= 0):
            raise ValueError(f"check_every must be an integer >= 0, got {check_every!r}")
        if total_steps is not None and not (isinstance(total_steps, int) and total_steps > 0):
            raise ValueError(f"total_steps must be a positive integer or None, got {total_steps!r}")
        if run_dir is not None and not isinstance(run_dir, (str, os.PathLike)):
            raise TypeError(f"run_dir must be a path or None, got {type(run_dir).__name__}")
        if not (isinstance(log_every, int) and not isinstance(log_every, bool) and log_every >= 1):
            raise ValueError(f"log_every must be an integer >= 1, got {log_every!r}")

    def _engine_keywords(self, optimizer, keywords):
        """The engine keywords given (None: not given, the default). With a
        torch optimizer its param_groups hold the optimizer's settings."""
        given = {k: v for k, v in keywords.items() if v is not None}
        if self._user_opt is not None:
            settings = sorted(k for k in given if k in _OPTIMIZER_KEYS)
            if settings:
                raise TypeError(f"{', '.join(settings)} belong to the optimizer's param_groups when optimizer is a "
                                f"torch.optim.Optimizer; set them there")
        else:
            given["optimizer"] = optimizer
        if "timeout_s" not in given:
            given["timeout_s"] = default_timeout_s()  # frugal run --timeout-s, else the field's default
        # sync='auto' that resolves to the step mode keeps the local modes'
        # keywords for a resume in the local mode (Note [Auto across a resume]).
        local = sorted(k for k in given if k in _LOCAL_KEYS)
        if given.get("sync") == "step" and local:
            raise ValueError(f"{', '.join(local)} apply to sync='local' or 'site' only")
        return given

    def _make_options(self, sync):
        """The engine options of the keywords, in sync mode `sync`."""
        options = _C.RunOptions(self._keywords)
        options.set({"sync": sync})
        return options

    def _resolve_sync(self, options, params):
        """The sync mode for this world (Note [Sync auto]) and the user's
        optimizer; raises ValueError before the replica waits for its peers."""
        self._set_workers(options)
        options.validate()  # ValueError naming the keyword
        self._auto_sync = self._keywords.get("sync", "auto") == "auto"
        self._sync_name = options.resolved_sync()
        self._step_groups, self._group_of = [], []  # sync='step': the torch optimizer's groups, when several
        if self._user_opt is not None:
            self._adopt_optimizer(options, params, self._auto_sync)
        options.set({"sync": self._sync_name})
        if self._user_opt is not None:
            options.validate()  # the settings read from the optimizer
        if self._elastic is not None and not _sync.strategy_class(self._sync_name).elastic:
            raise ValueError(f"frugal run --elastic needs an elastic sync mode, and sync={self._sync_name!r} is not: "
                             f"pass sync='local' (the default with two or more workers) or run without --elastic")

    def _set_workers(self, options):
        options.workers = self._world.world_size  # sync='auto' resolves for it, as frugal train's (Note [Sync auto])
        if self._elastic is not None:
            options.workers = max(2, options.workers)  # a job that may grow: sync='auto' is 'local'

    def _adopt_optimizer(self, options, params, auto):
        """The engine settings of the user's torch optimizer, by the
        strategy's rule (StepSync.adopt_optimizer, LocalSync's). sync='auto'
        that resolved to the step mode (one worker) takes the local mode
        for an optimizer the step mode cannot read, rather than refusing
        what the same script runs with two workers."""
        try:
            adopted = _sync.strategy_class(self._sync_name).adopt_optimizer(options, self._user_opt, params)
        except TypeError:
            if not auto:
                raise
            self._sync_name = "local"
            adopted = _sync.LocalSync.adopt_optimizer(options, self._user_opt, params)
        self._step_groups, self._group_of = adopted

    # --- the training step -------------------------------------------------
    def forward(self, *args, **kwargs):
        self._begin()
        if not self._in_iteration:
            self._sync.before_forward()
            self._forward_started = time.perf_counter()
            self._samples = 0
            self._just_switched = False
        self._in_iteration = True
        if args and isinstance(args[0], torch.Tensor) and args[0].dim() > 0:
            self._samples += int(args[0].shape[0])
        return self.module(*args, **kwargs)

    def _begin(self):
        self._check_running()
        if not self._begun:
            self._t = self._first_iteration
            self._sync.begin_iteration(self._t, False)
            if self._elastic is not None:
                self._generation_start = self._t
                self._elastic_gate()
            self._begun = True
            self._open_reporter()

    # Note [Python metrics]
    # A DistributedModel with run_dir reports through the CLI's RunReporter
    # (frugal._C.RunReporter over train::RunReporter): the same records,
    # window and progress line as frugal train's workers, with the
    # pipeline's counters and the bytes per link class taken by the engine
    # (engine::PipelineRecord). What the CLI's loop knows and a model does
    # not, the script hands over: the loss of each step (step(loss=...)),
    # its own values (log(**values)); the samples are counted from the
    # forwards' first tensor argument. Every rank keeps the window; rank 0
    # alone writes and prints.
    def _open_reporter(self, append=None):
        if self.run_dir is None:
            return
        if append is None:
            append = self._first_iteration > 0
        self._reporter = _C.RunReporter(
            self._world, os.path.join(self.run_dir, "metrics.jsonl"), self._log_every, self._total_steps,
            self._quiet, append)
        if self._reporter.lead:
            with open(os.path.join(self.run_dir, "config.toml"), "w") as f:
                f.write(self._options.plan_toml())
        self._reporter.start(self._pipeline_stats())

    def _pipeline_stats(self):
        return self._sync.pipeline_stats()

    def _report_step(self, steps_done, loss, samples, compute_s):
        if loss is None or not self._reporter.lead:
            loss = math.nan  # only rank 0's is written: the others spare a device sync for .item()
        elif isinstance(loss, torch.Tensor):
            loss = loss.detach().float().item()
        loss = float(loss)
        samples = self._samples if samples is None else samples
        self._reporter.add_step(loss, float(samples * self._world.world_size), compute_s)
        if self._reporter.window_due(steps_done):
            self._reporter.close_window(steps_done, self.epoch, self._sync.lr, self._pipeline_stats(),
                                        self._sync.rounds, self._options["staleness"], "{}")

    def step(self, scaler=None, *, loss=None, samples=None):
        """Ends iteration t (after ``loss.backward()``) and begins t+1.

        With run_dir, ``loss`` (a float or a tensor: this rank's loss of
        the step; rank 0's is the records') and ``samples`` (this rank's
        samples in the step; default: the first dimension of the forwards'
        first tensor argument, summed over the step's forwards) go into the
        metrics window; every ``log_every`` steps rank 0 writes a record.

        Parameters that got no gradient contribute zeros. Waits until the
        parameters for the next forward are ready and copies them into the
        module; raises if the pipeline failed (a lost peer, a timeout, a
        non-finite gradient).

        With sync='local' and a torch optimizer, this steps it
        (``optimizer.step()``, or ``scaler.step(optimizer)`` with a
        ``torch.cuda.amp.GradScaler``, which skips a non-finite step; call
        ``scaler.update()`` after) and then takes the round due, if any.
        Do not call ``optimizer.step()`` yourself as well.
        """
        if self.left:
            return
        self._live_snapshot = None  # the loop stepped its schedulers since (Note [Switching in place])
        if self._skip_step:
            self._skip_step = False
            return
        self._begin()
        compute_s = 0.0 if self._forward_started is None else time.perf_counter() - self._forward_started
        self._forward_started = None
        try:
            self._end_iteration(scaler, loss, samples, compute_s)
        except (ConnectionError, TimeoutError):
            if self._elastic is None:
                raise
            self._recover()

    def _end_iteration(self, scaler, loss, samples, compute_s):
        if not self._gradients_synced:
            self._sync.sync_gradients(self._t)
        self._gradients_synced = False
        self._advance(scaler, loss, samples, compute_s)

    def _recover(self):
        """A wait of an elastic job failed (a peer died): the next world, or
        the error when the membership does not change."""
        self._in_iteration = False
        self._gradients_synced = False
        # The failed wait's frames hold the old world's strategy: cleared, so
        # that its memory and threads are gone before the next world's are
        # built (Note [Switching in place]).
        traceback.clear_frames(sys.exc_info()[2])
        if not self._elastic.await_change():
            raise
        self._switch(failed=True)

    def _advance(self, scaler, loss, samples, compute_s):
        """The end of iteration t and the begin of t+1, and in an elastic job
        its gate, where the strategy's state is at rest (Note [State at
        rest] in sync_strategy.h: before begin_iteration in the local
        modes, whose rounds a snapshot would otherwise wait for)."""
        self._sync.end_step(self._t, scaler)
        if self._elastic is not None:
            self._elastic.report_iteration(self._t)
        self._t += 1
        self._in_iteration = False
        gate_first = self._elastic is not None and self._sync.saves_before_begin
        if gate_first:
            self._sync.settle(self._t)
            if not self._elastic_gate():
                return  # the next world began this iteration, or this worker left
        self._sync.begin_iteration(self._t, self.check_every > 0 and self._t % self.check_every == 0)
        if self._reporter is not None:
            self._report_step(self._t, loss, samples, compute_s)
        if self._elastic is not None and not gate_first:
            self._elastic_gate()

    def log(self, **values):
        """Writes one metrics record now (rank 0; the other ranks' calls do
        nothing): ``{"wall_time_s", "train_time_s", "step", "epoch"}`` and
        ``values`` (numbers, strings, booleans; one-element tensors as
        numbers), e.g. ``model.log(val_loss=v)`` after an evaluation, also
        after finish(). step is the iteration whose forward runs next.
        Needs run_dir."""
        if self._reporter is None and self.run_dir is None:
            raise ValueError("log() writes to <run_dir>/metrics.jsonl: construct the DistributedModel with "
                             "run_dir='runs/NAME'")
        if not self._finished:  # after finish(): a final evaluation's record
            self._begin()
        clean = {}
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                if value.numel() != 1:
                    raise ValueError(f"log({name}=...) takes a number, got a tensor of {value.numel()} elements")
                value = value.item()
            if not isinstance(value, (int, float, str, bool)) and value is not None:
                raise TypeError(f"log({name}=...) takes a number, string or bool, got {type(value).__name__}")
            clean[name] = value
        self._reporter.log(self.iteration, self.epoch, json.dumps(clean))

    def sync_gradients(self):
        """sync='site': replaces the module's gradients by their mean over
        this rank's cluster now, for a script that reads them before
        ``step()`` (``clip_grad_norm_`` then clips the cluster's gradient, as
        in DDP); ``step()`` does it otherwise. Does nothing in the other
        modes. Call it once per iteration, after the last backward."""
        self._live_snapshot = None
        self._begin()
        try:
            self._sync.sync_gradients(self._t)
        except (ConnectionError, TimeoutError):
            if self._elastic is None:
                raise
            # A peer died during the average: the next world restores its
            # restore point, and the script's step() of this iteration
            # (after its clipping) does nothing.
            self._recover()
            self._skip_step = True
            return
        self._gradients_synced = True

    def finish(self):
        """Drains the pipeline, copies the final parameters into the module and
        compares them across the replicas; returns their checksum (equal on
        every rank). Call it on every rank; the model cannot step afterwards.
        In an elastic job a worker that left (``model.left``) returns None; a
        peer dying during it makes the survivors finish again in the next
        world (or, where some of them must train the last steps again, the
        workers already here leave: None)."""
        if self.left:
            self._finished = True
            return None
        self._begin()
        self._finished = True
        self._in_iteration = False
        checksum = self._sync.finish(self._t) if self._elastic is None else self._finish_elastic()
        if self.left:
            return None
        if self._reporter is not None:
            self._reporter.finish()
            self._reporter.log(self.iteration, self.epoch, json.dumps({"final": True}))
        if self._elastic is not None:
            self._elastic.done()
        return checksum

    def with_synced_parameters(self, fn):
        """Returns ``fn()`` run with the replicas' common parameters in the
        module, e.g. an evaluation. With sync='local' that is the model of
        the last syncs (each rank's own progress since is put back after);
        with sync='step' the module always holds them."""
        if self._finished:
            return fn()
        self._begin()
        return _world_module.elastic_collective("with_synced_parameters",
                                                lambda: self._sync.with_synced_parameters(fn))

    @property
    def iteration(self):
        """The iteration whose forward runs next (0 after construction, the
        saved one after load_state_dict)."""
        return self._t if self._begun else self._first_iteration

    @property
    def world(self):
        """The current world (in an elastic job, the current generation's)."""
        return self._world

    @property
    def rank(self):
        """This worker's rank in the current world (it may change with the
        world in an elastic job: shard the data by it)."""
        return self._world.rank if self._world is not None else -1

    @property
    def world_size(self):
        """Workers of the current world (an elastic job's changes)."""
        return self._world.world_size if self._world is not None else 0

    @property
    def generation(self):
        """The membership generation of the current world (0: not elastic)."""
        return self._world.generation if self._world is not None else 0

    # --- elastic jobs (frugal run --elastic) -----------------------------------
    # Note [Elastic scripts]
    # Under frugal run --elastic the model runs the generation protocol of
    # frugal train --elastic (Note [Generation switch] in
    # src/engine/worker_elastic.cc) through the engine's ElasticSession, which
    # frugal.init() registered: every elastic_every steps, at the gate where
    # the strategy's state is at rest (Note [State at rest] in
    # sync_strategy.h), it keeps an in-memory snapshot (the local mode's
    # sections, the buffers, the user's optimizer and schedulers) and agrees
    # with the others whether the membership changes. On a change, or when a
    # wait fails because a peer died (the heartbeat thread aborts the
    # transport), the old world's replica is dropped, the next generation's
    # world registered, a replica built on it without the initial broadcast,
    # and the restore point restored (a joiner's from rank 0). The iterations
    # after the restore point are trained again: the script's loop, driven by
    # model.iteration, takes their batches again.
    #
    # Note [Switching in place]
    # A switch should cost a survivor no more than rebuilding its engine.
    # Memory a process touches for the first time costs far more than a copy
    # into memory it already holds (on the 2-core virtual machine of the
    # benchmarks, whose host takes freed pages back: a fresh 250 MB buffer
    # filled in 2.7-3.0 s, filled again in 0.05 s), and the 25 M language
    # model's AdamW state is 236 MB a worker, so the switch avoids new
    # memory and work it does not need:
    # - a survivor whose optimizer and schedulers still are the restore
    #   point's snapshot keeps them. That is so when the switch comes in the
    #   step() call that took the snapshot: a change agreed at the gate (a
    #   join, a leave), or a peer lost in the round right after it.
    #   _live_snapshot holds the step of that snapshot; every step() and
    #   sync_gradients() call starts by clearing it, since the loop may have
    #   stepped the optimizer or a scheduler in between, and finish() sets
    #   it to its own snapshot of the end;
    # - otherwise their state_dicts are unpacked from views of the snapshot
    #   (ElasticSession.restore returns memoryviews, not copies) straight
    #   into the optimizer's own tensors (_state_pack.unpack(into=...)), so
    #   loading allocates nothing and keeps nothing of the snapshot, whose
    #   memory the next gate reuses;
    # - a failed wait's exception keeps its frames, and they hold the old
    #   world's strategy: _recover clears them, so the old engine's memory
    #   and threads are released before the next one is built, into the
    #   pages the old one freed (Note [Freed memory kept for the next
    #   world] in python/src/elastic.cc);
    # - a worker that leaves at a gate (SIGTERM) takes no snapshot there
    #   before the check, which the others wait for: it is never restored.
    #   Should the check fail (a peer died in it), the leaver stays, and
    #   the coordinator rolls back to a snapshot every survivor holds.
    # The generation record (metrics.jsonl) gives the switch's parts:
    # leave_s, next_s (waiting for the next generation), build_s, restore_s
    # and gate_s.
    #
    # Note [A joiner's own optimizer]
    # In the local mode each rank's torch optimizer steps its own inner
    # parameters, so its per-parameter state (AdamW's moments: 8 bytes per
    # parameter) is the rank's, as the engine's inner state is in frugal
    # train, where a joiner starts at the anchor with fresh inner state
    # (Note [Local mode across worlds]). A snapshot therefore holds the
    # optimizer twice: "own.optimizer", the whole state_dict, which only
    # this worker restores, and "optimizer", the param_groups with an empty
    # state, which rank 0 sends to a joiner: the joiner keeps the job's
    # learning rates and other hyperparameters, and its optimizer builds its
    # state at its first step. For the 25 M language model that leaves out
    # 236 MB of the 360 MB a joiner received, 19 s at 100 Mbit/s. The site mode
    # sends the whole state: a cluster's members step one state.
    #
    # Note [Finishing an elastic script]
    # finish() comes after the loop, so a rollback there cannot replay
    # anything. Each worker therefore snapshots the end state T first (after
    # its loop's last scheduler step) and then runs the final sync; a peer
    # dying in it switches worlds as in step(). Every worker that reached
    # finish() holds T, so when all survivors did, the restore point is T and
    # they finish again in the new world, losing nothing. A survivor that
    # was still training when the peer died holds no snapshot of T: the
    # restore point is older, and a worker already in finish() then leaves
    # the job (model.left, finish() returns None) while the ones still in
    # their loops train the rolled-back steps again and finish. A user
    # collective (frugal.all_reduce) that fails because a peer died raises
    # frugal.WorldChanged instead: its result is missing, and the model
    # enters the next world at its next call.
    def _check_elastic_keywords(self, elastic_every, on_world_change, scheduler):
        if elastic_every is None:
            elastic_every = int(os.environ.get("FRUGAL_ELASTIC_EVERY") or 0)  # 0: the mode's, once it is resolved
        elif not (isinstance(elastic_every, int) and not isinstance(elastic_every, bool) and elastic_every >= 1):
            raise ValueError(f"elastic_every must be an integer >= 1, got {elastic_every!r}")
        if on_world_change is not None and not callable(on_world_change):
            raise TypeError(f"on_world_change must be callable (it is called with the model), got "
                            f"{type(on_world_change).__name__}")
        schedulers = [] if scheduler is None else list(scheduler) if isinstance(scheduler, (list, tuple)) else [scheduler]
        for s in schedulers:
            if not (hasattr(s, "state_dict") and hasattr(s, "load_state_dict")):
                raise TypeError(f"scheduler must be a torch lr scheduler (with state_dict), got {type(s).__name__}")
        self._elastic_every = elastic_every
        self._on_world_change = on_world_change
        self._schedulers = schedulers
        self._pack_buffers = {}  # kept from gate to gate: Note [Packed user state] in _state_pack.py
        # The step of the snapshot that the script's optimizer and schedulers
        # still equal (None: they moved on since); Note [Switching in place].
        self._live_snapshot = None

    def _build_engine(self, broadcast):
        """The sync strategy of the resolved mode on self._world."""
        self._sync = _sync.create(self._sync_name, self._world, self._params, self._options, user_opt=self._user_opt,
                                  total_steps=self._total_steps, broadcast=broadcast, groups=self._step_groups,
                                  group_of=self._group_of)
        # The replica's autograd hooks live on the module's parameters: the
        # module keeps the replica alive so a hook never outlives it.
        _replicas_of_module.setdefault(self.module, []).append(self._sync.replica)

    def _drop_engine(self):
        """The old world's strategy (the local mode's threads use the replica
        and the transport, which outlive it) and world."""
        replicas = _replicas_of_module.get(self.module, [])
        if self._sync is not None and self._sync.replica in replicas:  # None: the last build failed
            replicas.remove(self._sync.replica)
        self._sync = None
        self._reporter = None
        self._world = None

    def _user_sections(self):
        out = {"elastic_every": str(self._elastic_every).encode()}  # every worker must gate at the same steps
        states = [(f"scheduler{i}", s.state_dict()) for i, s in enumerate(self._schedulers)]
        if self._user_opt is not None:
            state = self._user_opt.state_dict()
            if _sync.strategy_class(self._sync_name).optimizer_state_is_own:
                # Note [A joiner's own optimizer]: the rank's own state, and
                # the hyperparameters a joiner takes
                states += [(_OWN_PREFIX + "optimizer", state),
                           ("optimizer", {"state": {}, "param_groups": state["param_groups"]})]
            else:
                states.append(("optimizer", state))
        for name, state in states:  # Note [Packed user state] in _state_pack.py
            out[name], self._pack_buffers[name] = _state_pack.pack(state, self._pack_buffers.get(name))
        return out

    def _load_user_sections(self, sections):
        theirs = bytes(sections.get("elastic_every", b"")).decode()
        if theirs != str(self._elastic_every):
            raise ValueError(f"this worker checks membership every {self._elastic_every} steps and the job every "
                             f"{theirs}: give the joiner the job's --elastic-every")
        objects = ([("optimizer", self._user_opt)] if self._user_opt is not None else []) + \
            [(f"scheduler{i}", s) for i, s in enumerate(self._schedulers)]
        for name, obj in objects:
            if _OWN_PREFIX + name in sections:  # this worker's own snapshot (Note [A joiner's own optimizer])
                name = _OWN_PREFIX + name
            if name not in sections:
                raise ValueError(f"the restored state has no '{name}' section: every worker of an elastic job "
                                 f"must pass the same optimizer and schedulers")
            # into the current tensors: no new memory (Note [Switching in place])
            obj.load_state_dict(_state_pack.unpack(sections[name], into=obj.state_dict()))

    def _restore_generation(self, joining=False):
        # A survivor whose optimizer and schedulers are still those of the
        # restore point's snapshot keeps them (Note [Switching in place]).
        keep_user = not joining and self._live_snapshot is not None and \
            self._live_snapshot == self._elastic.restore_step
        step, user, _ = self._elastic.restore(self._world, self._sync.elastic_state(), list(self.module.buffers()),
                                              user_state=not keep_user)
        if not keep_user:
            self._load_user_sections(user)
        self._live_snapshot = None if joining else step
        if joining:
            # The snapshot of step t is taken inside step() of iteration t-1,
            # before the loop's scheduler.step() of that iteration; the
            # survivors restore it there and their loop then takes that call.
            # A joiner restores it before its loop, so it takes it here.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # "scheduler.step() before optimizer.step()"
                for s in self._schedulers:
                    s.step()
        self._first_iteration = step
        self._t = step

    def _elastic_gate(self):
        """The check gate of iteration self._t (Note [Elastic scripts]);
        False when the world changed there or this worker left."""
        t = self._t
        if t > self._generation_start and t % self._elastic_every == 0:
            # A worker leaving here (SIGTERM) checks first: its snapshot would
            # never be restored, and the others wait for its check
            # (Note [Switching in place]).
            leaving = self._elastic.leaving
            if not leaving:
                self._snapshot(t)
            decision = self._elastic.check(self._world, t)
            if decision == "switch":
                self._switch(failed=False)
                return False
            if decision == "stop":
                self._leave_job()
                return False
            if leaving:  # the leave was refused: this worker goes on, and needs the snapshot
                self._snapshot(t)
        elif t == self._generation_start and not self._elastic.has_snapshot(t):
            self._snapshot(t)  # the start of a generation can be rolled back to
        return True

    def _snapshot(self, t):
        """The elastic session's snapshot of the state after t-1, which the
        script's optimizer and schedulers equal until its next call."""
        self._elastic.snapshot(self._sync.elastic_state(), t, list(self.module.buffers()), self._user_sections())
        self._live_snapshot = t

    def _finish_elastic(self):
        """finish() of an elastic job (Note [Finishing an elastic script]):
        the final sync, started over in the next world when a peer dies in
        it; None when this worker left instead."""
        end = self._t
        while True:
            try:
                # After the loop's last scheduler.step(): restoring it needs
                # no call of the loop (replaces the gate's snapshot of end).
                self._snapshot(end)
                return self._sync.finish(end)
            except (ConnectionError, TimeoutError):
                self._recover()
            if self.left:
                return None
            self._just_switched = False
            if self._t < end:
                # Rolled back past the end of this worker's loop: it
                # withdraws (the others' waits on it fail now), and they
                # train the rolled-back steps again and finish.
                self._leave_job(withdraw=True)
                return None

    def _leave_job(self, withdraw=False):
        """This worker leaves the job: at a gate that agreed on it, or, with
        withdraw, at once as a death (the coordinator drops it now)."""
        if withdraw:
            self._elastic.withdraw()
        self._elastic.leave_world(withdraw)
        self._drop_engine()
        self.left = True
        if not withdraw:
            self._elastic.done()

    def _switch(self, failed):
        """Leaves this generation's world and enters the next (or leaves the
        job); a peer dying meanwhile starts over with the one after."""
        left_world = time.perf_counter()
        reached = self._t
        while True:
            phases = {}  # seconds of each part of the switch, in the generation record
            clock = _PhaseClock(phases)
            leaving = not failed and self._elastic.leaving
            self._elastic.leave_world(failed)
            self._drop_engine()
            clock.lap("leave_s")
            world = None if leaving else self._elastic.next()
            clock.lap("next_s")
            if world is None:
                self.left = True
                self._elastic.done()
                return
            try:
                self._world = world
                _world_module._set_world(world)
                self._build_engine(broadcast=False)
                clock.lap("build_s")
                self._restore_generation()
                clock.lap("restore_s")
                self._sync.begin_iteration(self._t, False)
                self._generation_start = self._t
                self._elastic_gate()
                clock.lap("gate_s")
                break
            except (ConnectionError, TimeoutError):
                if not self._elastic.await_change():
                    raise
                failed = True
        self._just_switched = True
        self._open_reporter(append=True)
        self._record(event="generation", generation=self._world.generation, workers=self._world.world_size,
                     step=self._t, rolled_back=reached - self._t, switch_s=time.perf_counter() - left_world,
                     **phases)
        if self._on_world_change is not None:
            self._on_world_change(self)

    # --- settings that may change during training ---------------------------
    def set_lr(self, lr):
        """Learning rate of the updates from the current iteration on (the
        next backward and step); every rank must call it at the same
        iteration."""
        if self._user_opt is not None:
            raise ValueError("the lr of a torch optimizer is in its param_groups: set it there, or step a "
                             "torch.optim.lr_scheduler; the model reads it at every step")
        if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr >= 0):
            raise ValueError(f"lr must be a finite number >= 0, got {lr}")
        self._begin()
        self._sync.set_lr(self._t, float(lr))

    def set_density(self, density):
        """Density from the current iteration on (every rank, same iteration)."""
        if not 0 < density <= 1:
            raise ValueError(f"density must be in (0, 1], got {density}")
        self._sync.check_density(density)
        self._begin()
        self._sync.set_density(self._t, float(density))

    def average_buffers(self):
        """Averages the module's floating-point buffers (batch-norm running
        statistics) over the ranks; call it on every rank before evaluating."""
        self._begin()
        buffers = [b for b in self.module.buffers() if b.is_floating_point()]
        _world_module.elastic_collective("average_buffers",
                                         lambda: self._sync.average_buffers(self.iteration, buffers))

    def stats(self):
        """Cumulative seconds and counts of this rank's pipeline (sync='local':
        of its rounds, with their count under 'rounds')."""
        return self._sync.stats()

    def host_memory(self):
        """Host bytes this rank's engine holds, by buffer: masters, gradient
        slots, residuals and optimizer state in the step mode; anchor, inner
        parameters (master), round base, pseudo-gradient (sending), host
        gradients, inner and outer optimizer state and residuals in the
        local modes. Transient buffers (a round's messages) are not in it."""
        return self._sync.host_memory()

    # --- checkpoints ------------------------------------------------------------
    def state_dict(self, *args, **kwargs):
        """The module's state dict (its keys, no "module." prefix: the
        parameters the next forward uses, and the buffers) plus this rank's
        Frugal state under "_frugal.*": the master parameters, error-feedback
        residuals, sparsifier and optimizer state and the iteration. Take it
        between step() and the next forward, or after finish(); each rank
        saves its own. ``model.module.state_dict()`` is the plain-module
        part alone."""
        if args or kwargs:  # called as a submodule of a bigger model: the plain part
            return self.module.state_dict(*args, **kwargs)
        if self._in_iteration:
            raise RuntimeError("state_dict() is taken between step() and the next forward (or after finish()), "
                               "not in the middle of an iteration")
        if not self._finished:
            self._begin()
        engine = self._sync.state_dict(self.iteration)  # waits for the updates or rounds in flight
        state = self.module.state_dict()
        state.update(engine)
        return state

    def load_state_dict(self, state_dict, strict=True, residuals=True):
        """Restores a ``state_dict()`` of the same model (same parameters,
        bucket_mb and optimizer) before the first forward: the module's
        state and the engine's, so training continues where it stopped
        (bit-exactly with the same world size and each rank's own file).
        ``residuals=False`` drops the error-feedback residuals and
        sparsifier state, e.g. when every rank loads rank 0's file or the
        world size changed."""
        if self._begun:
            raise RuntimeError("load_state_dict must come before the first forward, step() or state_dict() of this "
                               "DistributedModel: the engine restores its state only before the run starts")
        self._sync.check_state(state_dict)
        plain = {k: v for k, v in state_dict.items() if not k.startswith("_frugal.")}
        result = self.module.load_state_dict(plain, strict=strict)
        self._first_iteration = self._sync.load_state(state_dict, residuals)
        return result

    # --- frugal.save / frugal.load (_checkpoint.py) ----------------------------
    def _checkpoint_sections(self):
        """This rank's file of a checkpoint at self.iteration: the engine's
        sections of the mode (engine::SaveStepState / SaveLocalState, as
        frugal train's workers write), "meta", and on rank 0 "buffers" and
        "config"."""
        if self._in_iteration:
            raise RuntimeError("frugal.save is called between step() and the next forward, not in the middle of "
                               "an iteration")
        self._check_running()
        self._begin()
        rank0 = self._world.rank == 0
        sections = self._sync.save_sections(rank0)  # waits for the updates or rounds in flight
        sections["meta"] = _C.encode_meta(self.iteration, self._world.world_size, self._world.rank)
        sections["buffers"] = _C.save_buffers(list(self.module.buffers())) if rank0 else b""
        if rank0:
            sections["config"] = self._options.plan_toml().encode()
        return sections

    def _restore_checkpoint(self, shared, mine, residuals, what):
        if self._begun or self._restored:
            raise RuntimeError("frugal.load comes once, before the first forward, step() or frugal.save of this "
                               "DistributedModel: the engine restores its state only before the run starts")
        meta = _C.parse_meta(shared, what)
        for name in ("buffers", "meta"):
            if name not in shared:
                raise ValueError(f"{what} has no '{name}' section")
        saved = "local" if "local_sync" in shared else "step" if "pipeline" in shared else None
        if self._auto_sync and saved is not None and saved != self._sync_name:
            self._switch_sync(saved, what)
        self._sync.restore_sections(shared, mine, residuals, what)
        _C.restore_buffers(shared["buffers"], list(self.module.buffers()), what)
        self._first_iteration = int(meta["step"])
        self._restored = True

    # Note [Auto across a resume]
    # sync='auto' resolves by the world's size (local with two or more
    # workers, step alone), so a run saved by two workers and resumed by one
    # would find the other mode's state. The checkpoint decides instead: the
    # model rebuilds its engine in the saved mode, before anything ran
    # (every rank reads the same rank-0 file, so all switch alike), and the
    # run continues in the mode it was trained in.
    def _switch_sync(self, sync, what):
        self._sync_name = sync
        workers = self._options.workers
        self._options = self._make_options(sync)  # with a torch optimizer: as constructed in that mode
        self._options.workers = workers
        self._step_groups, self._group_of = [], []
        if self._user_opt is not None:
            try:
                self._adopt_optimizer(self._options, [p for _, p in self._params], False)
            except TypeError as e:
                raise ValueError(f"{what} was saved in the step mode, which cannot run this optimizer ({e})") from None
        self._options.validate()
        world = self._world
        self._drop_engine()
        self._world = world
        self._build_engine(broadcast=False)

    def _record(self, **values):
        """A record of rank 0 without the type checks of log() (checkpoint events)."""
        if self._reporter is not None:
            self._reporter.log(self.iteration, self.epoch, json.dumps(values))

    def _check_running(self):
        if self._finished:
            raise RuntimeError("the model has finished (finish() was called); wrap the module again to continue")

    def extra_repr(self):
        o = self._options
        optimizer = o["optimizer"] if self._user_opt is None else type(self._user_opt).__name__
        return (f"sync={self._sync_name}, optimizer={optimizer}, lr={self._sync.lr}, density={self._sync.density}, "
                f"sparsifier={o['sparsifier']}, staleness={o['staleness']}, "
                f"rank={self._world.rank}/{self._world.world_size}")
