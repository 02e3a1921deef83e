"""frugal.DistributedModel: a user's nn.Module trained by Frugal's pipeline."""

import weakref

import torch

from . import _C
from ._world import init

_OPTION_NAMES = ("optimizer", "lr", "momentum", "dampening", "nesterov", "weight_decay", "beta1", "beta2", "eps",
                 "density", "sparsifier", "value_encoding", "staleness", "bucket_mb", "cpu_threads", "exchange",
                 "dgc_momentum", "timeout_s", "seed")


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
    as DDP does). Every ``check_every`` steps the replicas compare checksums
    of their parameters; a mismatch raises. Call ``finish()`` at the end: it
    drains the pipeline, copies the final parameters in and returns their
    checksum (identical on every rank).

    Keyword arguments (defaults as ``frugal train``):
      optimizer: 'sgd', 'adam' or 'adamw'; lr, momentum, dampening, nesterov,
        weight_decay, beta1, beta2, eps as in torch.optim.
      density: fraction of each bucket sent per step, in (0, 1].
      sparsifier: 'block' (cache-line blocks), 'topk' or 'randomk'.
      value_encoding: 'fp16', 'bf16' or 'fp32' on the wire.
      staleness: 0 or 1. bucket_mb: gradient bucket size.
      cpu_threads: threads of the CPU pipeline. exchange: 'auto', 'flat' or
        'hierarchical'. dgc_momentum: error-feedback momentum correction.
      timeout_s: bound on every network wait. check_every: steps between
        replica checks (0: only in finish()). world: a frugal World
        (default: frugal.init()).
    """

    def __init__(self, module, *, optimizer="sgd", lr=0.01, momentum=0.0, dampening=0.0, nesterov=False,
                 weight_decay=0.0, beta1=0.9, beta2=0.999, eps=1e-8, density=0.01, sparsifier="block",
                 value_encoding="fp16", staleness=0, bucket_mb=4.0, cpu_threads=1, exchange="auto",
                 dgc_momentum=0.0, timeout_s=60.0, seed=1, check_every=100, world=None):
        super().__init__()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"DistributedModel wraps a torch.nn.Module, got {type(module).__name__}")
        if not hasattr(_C, "Replica"):
            raise NotImplementedError("this build of frugal has no DistributedModel (the engine's Replica was "
                                      "missing when it was built); rebuild, or use frugal.sparse_hook with DDP")
        if not (isinstance(check_every, int) and check_every >= 0):
            raise ValueError(f"check_every must be an integer >= 0, got {check_every!r}")
        values = dict(optimizer=optimizer, lr=lr, momentum=momentum, dampening=dampening, nesterov=nesterov,
                      weight_decay=weight_decay, beta1=beta1, beta2=beta2, eps=eps, density=density,
                      sparsifier=sparsifier, value_encoding=value_encoding, staleness=staleness,
                      bucket_mb=bucket_mb, cpu_threads=cpu_threads, exchange=exchange,
                      dgc_momentum=dgc_momentum, timeout_s=timeout_s, seed=seed)
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
        self._replica.begin_iteration(0, False)

    # --- the training step -------------------------------------------------
    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def step(self):
        """Ends iteration t (after ``loss.backward()``) and begins t+1.

        Parameters that got no gradient contribute zeros. Waits until the
        parameters for the next forward are ready and copies them into the
        module; raises if the pipeline failed (a lost peer, a timeout, a
        non-finite gradient).
        """
        self._check_running()
        self._replica.end_backward()
        t = self._replica.iteration + 1
        check = self.check_every > 0 and t % self.check_every == 0
        self._replica.begin_iteration(t, check)

    def finish(self):
        """Drains the pipeline, copies the final parameters into the module and
        compares them across the replicas; returns their checksum (equal on
        every rank). Call it on every rank; the model cannot step afterwards."""
        self._check_running()
        self._replica.finish()
        self._finished = True
        return self._replica.check_replicas(self._replica.iteration + 1)

    @property
    def iteration(self):
        """The iteration whose forward runs next (0 after construction)."""
        return self._replica.iteration

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
        self._check_running()
        self._replica.set_from(self._replica.iteration, self._density, lr / self._options.lr)
        self._lr = float(lr)

    def set_density(self, density):
        """Density from the current iteration on (every rank, same iteration)."""
        if not 0 < density <= 1:
            raise ValueError(f"density must be in (0, 1], got {density}")
        self._check_running()
        scale = self._lr / self._options.lr if self._options.lr > 0 else 1.0
        self._replica.set_from(self._replica.iteration, density, scale)
        self._density = float(density)

    def average_buffers(self):
        """Averages the module's floating-point buffers (batch-norm running
        statistics) over the ranks; call it on every rank before evaluating."""
        self._check_running()
        buffers = [b for b in self.module.buffers() if b.is_floating_point()]
        self._replica.average_buffers(self._replica.iteration, buffers)

    def stats(self):
        """Cumulative seconds and counts of this rank's pipeline."""
        return self._replica.stats()

    # --- checkpoints ------------------------------------------------------------
    def state_dict(self, *args, **kwargs):
        """The wrapped module's state dict (same keys as the module's, so it
        loads into a plain module): the parameters the next forward uses."""
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict=True):
        """Not supported on a running model: the master parameters and the
        optimizer state live in the engine. Load into the module before
        wrapping it (every rank then starts from rank 0's values)."""
        raise NotImplementedError(
            "DistributedModel.load_state_dict: load the checkpoint into the module before wrapping it, "
            "e.g. net.load_state_dict(torch.load(path)); model = frugal.DistributedModel(net, ...)")

    def _check_running(self):
        if self._finished:
            raise RuntimeError("the model has finished (finish() was called); wrap the module again to continue")

    def extra_repr(self):
        o = self._options
        return (f"optimizer={o.optimizer}, lr={self._lr}, density={self._density}, sparsifier={o.sparsifier}, "
                f"staleness={o.staleness}, rank={self._world.rank}/{self._world.world_size}")
