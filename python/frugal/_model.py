"""frugal.DistributedModel: a user's nn.Module trained by Frugal's pipeline."""

import weakref

import torch

from . import _C
from ._world import default_timeout_s, init

_OPTION_NAMES = ("optimizer", "lr", "momentum", "dampening", "nesterov", "weight_decay", "beta1", "beta2", "eps",
                 "density", "sparsifier", "value_encoding", "staleness", "bucket_mb", "cpu_threads", "exchange",
                 "dgc_momentum", "overlap_device_copies", "timeout_s", "seed")


# module -> the replicas whose autograd hooks sit on its parameters. A
# replica must live as long as its hooks can fire (the engine does not remove
# them), and the module must stay picklable, hence a weak-keyed side table
# rather than an attribute.
_replicas_of_module = weakref.WeakKeyDictionary()


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

    All ranks start from rank 0's parameters (a broadcast at construction,
    as DDP does; iteration 0 begins at the first forward). Every ``check_every`` steps the replicas compare checksums
    of their parameters; a mismatch raises. Call ``finish()`` at the end: it
    drains the pipeline, copies the final parameters in and returns their
    checksum (identical on every rank).

    Keyword arguments (defaults as ``frugal train``):
      optimizer: 'sgd', 'adam' or 'adamw'; lr, momentum, dampening, nesterov,
        weight_decay, beta1, beta2, eps as in torch.optim.
      density: fraction of each bucket sent per step, in (0, 1].
      sparsifier: 'block' (cache-line blocks), 'topk', 'sampled_topk' or 'randomk'.
      value_encoding: 'int4' (default), 'int8', 'fp16', 'bf16' or 'fp32' on the wire;
        rounding errors are fed back like unsent coordinates.
      staleness: 0 or 1. bucket_mb: gradient bucket size.
      cpu_threads: threads of the CPU pipeline; 0 (default) = as frugal train:
        2 on a CPU device, on a GPU the host's cores per local worker (at
        most 4). exchange: 'auto', 'flat' or
        'hierarchical' ('sharded' is for the sparse_hook only). dgc_momentum: error-feedback momentum correction.
        overlap_device_copies: on a GPU, gradients leave and parameters return
        through pinned buffers on a side stream, overlapped with backward
        (False: one synchronous copy per parameter, for comparison).
      timeout_s: bound on every network wait (default: FRUGAL_TIMEOUT_S, set
        by frugal run --timeout-s, or 60). check_every: steps between
        replica checks (0: only in finish()). world: a frugal World
        (default: frugal.init()).
    """

    def __init__(self, module, *, optimizer="sgd", lr=0.01, momentum=0.0, dampening=0.0, nesterov=False,
                 weight_decay=0.0, beta1=0.9, beta2=0.999, eps=1e-8, density=0.03, sparsifier="block",
                 value_encoding="int4", staleness=0, bucket_mb=4.0, cpu_threads=0, exchange="auto",
                 dgc_momentum=0.0, overlap_device_copies=True, timeout_s=None, seed=1, check_every=100, world=None):
        super().__init__()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"DistributedModel wraps a torch.nn.Module, got {type(module).__name__}")
        if not hasattr(_C, "Replica"):
            raise NotImplementedError("this build of frugal has no DistributedModel (the engine's Replica was "
                                      "missing when it was built); rebuild, or use frugal.sparse_hook with DDP")
        if not (isinstance(check_every, int) and check_every >= 0):
            raise ValueError(f"check_every must be an integer >= 0, got {check_every!r}")
        if timeout_s is None:
            timeout_s = default_timeout_s()
        values = dict(optimizer=optimizer, lr=lr, momentum=momentum, dampening=dampening, nesterov=nesterov,
                      weight_decay=weight_decay, beta1=beta1, beta2=beta2, eps=eps, density=density,
                      sparsifier=sparsifier, value_encoding=value_encoding, staleness=staleness,
                      bucket_mb=bucket_mb, cpu_threads=cpu_threads, exchange=exchange,
                      dgc_momentum=dgc_momentum, overlap_device_copies=overlap_device_copies,
                      timeout_s=timeout_s, seed=seed)
        options = _C.ReplicaOptions()
        for name in _OPTION_NAMES:
            try:
                setattr(options, name, values[name])
            except TypeError:
                raise TypeError(f"{name}={values[name]!r} has the wrong type "
                                f"(expected {type(getattr(options, name)).__name__})") from None
        options.validate()  # ValueError naming the keyword, before any network wait
        if _replicas_of_module.get(module):
            raise ValueError("this module is already wrapped by a DistributedModel (its autograd hooks feed that "
                             "one); wrap a fresh module, e.g. one that loaded the first one's state_dict()")
        params = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        if not params:
            raise ValueError("the module has no parameters that require grad")
        self.module = module
        self.check_every = check_every
        self._options = options
        self._world = world if world is not None else init()
        self._replica = _C.Replica(self._world, params, options)
        # The replica's autograd hooks live on the module's parameters: the
        # module keeps the replica alive so a hook never outlives it.
        _replicas_of_module.setdefault(module, []).append(self._replica)
        self._density = float(density)
        self._lr = float(lr)
        self._finished = False
        # Iteration 0 begins at the first forward (or step, state_dict,
        # finish), so that load_state_dict can restore a checkpoint first.
        self._begun = False
        self._in_iteration = False  # between a forward and its step()
        self._first_iteration = 0

    # --- the training step -------------------------------------------------
    def forward(self, *args, **kwargs):
        self._begin()
        self._in_iteration = True
        return self.module(*args, **kwargs)

    def _begin(self):
        self._check_running()
        if not self._begun:
            self._replica.begin_iteration(self._first_iteration, False)
            self._begun = True

    def step(self):
        """Ends iteration t (after ``loss.backward()``) and begins t+1.

        Parameters that got no gradient contribute zeros. Waits until the
        parameters for the next forward are ready and copies them into the
        module; raises if the pipeline failed (a lost peer, a timeout, a
        non-finite gradient).
        """
        self._begin()
        self._replica.end_backward()
        t = self._replica.iteration + 1
        check = self.check_every > 0 and t % self.check_every == 0
        self._replica.begin_iteration(t, check)
        self._in_iteration = False

    def finish(self):
        """Drains the pipeline, copies the final parameters into the module and
        compares them across the replicas; returns their checksum (equal on
        every rank). Call it on every rank; the model cannot step afterwards."""
        self._begin()
        self._replica.finish()
        self._finished = True
        self._in_iteration = False
        return self._replica.check_replicas(self._replica.iteration + 1)

    @property
    def iteration(self):
        """The iteration whose forward runs next (0 after construction, the
        saved one after load_state_dict)."""
        return self._replica.iteration if self._begun else self._first_iteration

    @property
    def world(self):
        return self._world

    # --- settings that may change during training ---------------------------
    def set_lr(self, lr):
        """Learning rate of the updates from the current iteration on (the
        next backward and step); every rank must call it at the same
        iteration."""
        if not lr > 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if self._options.lr == 0:
            raise ValueError("set_lr needs a model constructed with lr > 0")
        self._begin()
        self._replica.set_from(self._replica.iteration, self._density, lr / self._options.lr)
        self._lr = float(lr)

    def set_density(self, density):
        """Density from the current iteration on (every rank, same iteration)."""
        if not 0 < density <= 1:
            raise ValueError(f"density must be in (0, 1], got {density}")
        self._begin()
        scale = self._lr / self._options.lr if self._options.lr > 0 else 1.0
        self._replica.set_from(self._replica.iteration, density, scale)
        self._density = float(density)

    def average_buffers(self):
        """Averages the module's floating-point buffers (batch-norm running
        statistics) over the ranks; call it on every rank before evaluating."""
        self._begin()
        buffers = [b for b in self.module.buffers() if b.is_floating_point()]
        self._replica.average_buffers(self._replica.iteration, buffers)

    def stats(self):
        """Cumulative seconds and counts of this rank's pipeline."""
        return self._replica.stats()

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
        pipeline, parameters = self._replica.save_state()  # waits for the updates in flight
        state = self.module.state_dict()
        state["_frugal.pipeline"] = pipeline
        state["_frugal.parameters"] = parameters
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
        if "_frugal.pipeline" not in state_dict or "_frugal.parameters" not in state_dict:
            raise ValueError("this state dict has no Frugal state (_frugal.pipeline, _frugal.parameters); a plain "
                             "module checkpoint is loaded into the module before wrapping it: "
                             "net.load_state_dict(sd); model = frugal.DistributedModel(net, ...)")
        plain = {k: v for k, v in state_dict.items() if not k.startswith("_frugal.")}
        result = self.module.load_state_dict(plain, strict=strict)
        self._replica.load_state(state_dict["_frugal.pipeline"], state_dict["_frugal.parameters"], residuals)
        self._first_iteration = self._replica.iteration + 1
        return result

    def _check_running(self):
        if self._finished:
            raise RuntimeError("the model has finished (finish() was called); wrap the module again to continue")

    def extra_repr(self):
        o = self._options
        return (f"optimizer={o.optimizer}, lr={self._lr}, density={self._density}, sparsifier={o.sparsifier}, "
                f"staleness={o.staleness}, rank={self._world.rank}/{self._world.world_size}")
