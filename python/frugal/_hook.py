"""frugal.sparse_hook: a DDP communication hook over Frugal's transport."""

import queue
import threading
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

    def __init__(self, engine, world, overlap=True):
        self._engine = engine
        self.world = world
        self.overlap = overlap
        self._jobs = None
        if overlap:
            # One thread per state runs the buckets in the order DDP hands them over (bucket index order, the
            # same on every rank), so the exchange of bucket k overlaps the backward of the buckets after it.
            self._jobs = queue.SimpleQueue()
            thread = threading.Thread(target=_run_buckets, args=(engine, self._jobs), name="frugal-hook",
                                      daemon=True)
            thread.start()
            weakref.finalize(self, _stop_hook_thread, self._jobs, thread)

    def stats(self):
        """Calls, values and bytes sent, seconds spent (cumulative)."""
        return self._engine.stats()


def _stop_hook_thread(jobs, thread):
    """Ends a hook thread: when its state is collected, or at exit (weakref.finalize's atexit). At exit the
    thread must be gone before the interpreter finalizes: a daemon thread that wakes up during finalization
    is ended by pthread_exit, whose forced unwind through native frames aborted the process ("terminate
    called without an active exception", about 1 run in 8 of test_hook under load)."""
    jobs.put(None)
    if thread is not threading.current_thread():
        thread.join(timeout=default_timeout_s())


def _run_buckets(engine, jobs):
    """The hook thread: exchanges (index, tensor, future, stream) jobs in order until it gets None. The engine
    releases the GIL while it works. An error completes that bucket's future with the exception, which DDP
    raises from backward; every later bucket fails at once (the ranks' exchanges no longer match, so waiting
    for them would only run into timeouts)."""
    failed = None
    while True:
        job = jobs.get()
        if job is None:
            return
        index, tensor, future, stream = job
        if failed is not None:
            future.set_exception(RuntimeError(f"frugal.sparse_hook: an earlier bucket's exchange failed ({failed}); "
                                              "this hook state cannot continue: make a new one"))
            continue
        try:
            if stream is None:
                engine.run(index, tensor)
            else:  # the stream backward produced the bucket on, so the copy to the host waits for it
                with torch.cuda.stream(stream):
                    engine.run(index, tensor)
        except Exception as e:  # noqa: BLE001 - handed to the waiting backward
            failed = e
            future.set_exception(e)
            continue
        future.set_result(tensor)


def hook_state(process_group=None, *, density=0.03, sparsifier="block", value_encoding="int4", exchange="auto",
               dgc_momentum=0.0, timeout_s=None, world=None, overlap=True, deflate=True):
    """State for ``ddp.register_comm_hook(state, frugal.sparse_hook)``.

    Each DDP gradient bucket is added to its error-feedback residual,
    sparsified to ``density`` (``sparsifier``: 'block', 'topk' or 'randomk'),
    sent with ``value_encoding`` ('int4', 'int8', 'fp16', 'bf16' or 'fp32') over Frugal's
    transport (``world``, default ``frugal.init()``), merged, and the mean is
    handed back to DDP. With density=1 and value_encoding='fp32' it computes
    what DDP's own all-reduce computes.

    ``process_group`` (default: torch.distributed's default group, when it
    is initialised) must have the same ranks as Frugal's world.

    ``overlap`` (default True): the hook returns at once and a background
    thread exchanges the buckets in order, so the exchange overlaps the rest
    of backward; False runs each exchange inside the hook. The results are
    the same, bit for bit.

    ``deflate`` (default True): zlib on each message's values where that
    saves bytes (lossless). It costs CPU: on a fast link with workers
    sharing cores, False gives shorter steps; on a slow link True does
    (docs/guide/python.md, "The hook's deflate, exchange and density").
    """
    if not isinstance(deflate, bool):
        raise TypeError(f"deflate must be True or False, got {deflate!r}")
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
                                    instance=instance, deflate=deflate)
    _hook_states_of_world[world] = instance + 1
    return HookState(engine, world, overlap=bool(overlap))


def _bucket_tensor(bucket):
    # torch >= 1.10 names it buffer(); older releases get_tensor().
    return bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()


def sparse_hook(state, bucket):
    """DDP communication hook: a future of the bucket's sparse, error-fed mean
    over the world (exchanged by the state's thread, or inside the hook when
    the state was made with ``overlap=False``)."""
    if not isinstance(state, HookState):
        raise TypeError("frugal.sparse_hook needs the state from frugal.hook_state(), got "
                        f"{type(state).__name__}")
    tensor = _bucket_tensor(bucket)
    future = torch.futures.Future()
    if state.overlap:
        stream = torch.cuda.current_stream(tensor.device) if tensor.is_cuda else None
        state._jobs.put((bucket.index(), tensor, future, stream))
        return future
    state._engine.run(bucket.index(), tensor)
    future.set_result(tensor)
    return future
