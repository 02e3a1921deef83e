"""frugal.sparse_hook: a DDP communication hook over Frugal's transport."""

import weakref

import torch

from . import _C
from ._world import default_timeout_s, init


# world -> how many hook states it has: each gets its own message space on
# the world's transport (every rank makes its hook states in the same order).
_hook_states_of_world = weakref.WeakKeyDictionary()


class HookState:
    """State of ``frugal.sparse_hook`` for one DDP model: per-bucket error
    feedback residuals and sparsifier state, and the Frugal world the
    buckets are exchanged over. Make it with ``frugal.hook_state(...)``."""

    def __init__(self, engine, world):
        self._engine = engine
        self.world = world

    def stats(self):
        """Calls, values and bytes sent, seconds spent (cumulative)."""
        return self._engine.stats()


def hook_state(process_group=None, *, density=0.03, sparsifier="block", value_encoding="int4", exchange="auto",
               dgc_momentum=0.0, timeout_s=None, world=None):
    """State for ``ddp.register_comm_hook(state, frugal.sparse_hook)``.

    Each DDP gradient bucket is added to its error-feedback residual,
    sparsified to ``density`` (``sparsifier``: 'block', 'topk' or 'randomk'),
    sent with ``value_encoding`` ('int4', 'int8', 'fp16', 'bf16' or 'fp32') over Frugal's
    transport (``world``, default ``frugal.init()``), merged, and the mean is
    handed back to DDP. With density=1 and value_encoding='fp32' it computes
    what DDP's own all-reduce computes.

    ``process_group`` (default: torch.distributed's default group, when it
    is initialised) must have the same ranks as Frugal's world.
    """
    world = world if world is not None else init()
    if timeout_s is None:
        timeout_s = default_timeout_s()
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        group_rank = torch.distributed.get_rank(process_group)
        group_size = torch.distributed.get_world_size(process_group)
        if (group_rank, group_size) != (world.rank, world.world_size):
            raise ValueError(f"DDP's process group is rank {group_rank} of {group_size} but Frugal's world is rank "
                             f"{world.rank} of {world.world_size}: start both from the same launcher "
                             f"(frugal run sets RANK/WORLD_SIZE for torch.distributed too)")
    instance = _hook_states_of_world.get(world, 0)
    if instance >= 256:
        raise ValueError("at most 256 hook states per Frugal world")
    engine = _C.CompressedAllReduce(world, density=density, sparsifier=sparsifier, value_encoding=value_encoding,
                                    exchange=exchange, dgc_momentum=dgc_momentum, timeout_s=timeout_s,
                                    instance=instance)
    _hook_states_of_world[world] = instance + 1
    return HookState(engine, world)


def _bucket_tensor(bucket):
    # torch >= 1.10 names it buffer(); older releases get_tensor().
    return bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()


def sparse_hook(state, bucket):
    """DDP communication hook: the bucket's sparse, error-fed mean over the
    world, as an already completed future (the exchange runs in the hook)."""
    if not isinstance(state, HookState):
        raise TypeError("frugal.sparse_hook needs the state from frugal.hook_state(), got "
                        f"{type(state).__name__}")
    tensor = _bucket_tensor(bucket)
    state._engine.run(bucket.index(), tensor)
    future = torch.futures.Future()
    future.set_result(tensor)
    return future
