"""frugal.init(): joining the world that ``frugal run`` (or torchrun) set up."""

import os
import signal
import threading
import warnings

import torch

from . import _C

_default_world = None
_session = None  # the elastic job's membership (frugal run --elastic); None otherwise

def _env_int(env, name, default=None):
    value = env.get(name)
    if value is None or value == "":
        if default is None:
            raise ValueError(f"{name} is not set")
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer") from None


def _env_float(env, name, default):
    value = env.get(name)
    if value is None or value == "":
        return default
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a number") from None


def _env_flag(env, name):
    value = (env.get(name) or "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise ValueError(f"{name}={env.get(name)!r} is not one of 1, 0, true, false")


def _security(env, key, authorized_keys, insecure):
    """The key= / authorized_keys= / insecure= keywords, else what frugal run
    passed (FRUGAL_KEY, FRUGAL_AUTHORIZED_KEYS, FRUGAL_INSECURE), as keywords
    of _C.join_world; resolved and checked there, as the CLI does."""
    explicit = key is not None or authorized_keys is not None or insecure is not None
    if explicit:
        key, authorized_keys, insecure = key or "", authorized_keys or "", bool(insecure)
    else:
        key = env.get("FRUGAL_KEY") or ""
        authorized_keys = env.get("FRUGAL_AUTHORIZED_KEYS") or ""
        insecure = _env_flag(env, "FRUGAL_INSECURE")
    for name, value in (("key", key), ("authorized_keys", authorized_keys)):
        if not isinstance(value, (str, os.PathLike)):
            raise TypeError(f"{name} must be a path (str or os.PathLike), got {type(value).__name__}")
    return dict(key_file=os.fspath(key), authorized_keys_file=os.fspath(authorized_keys), insecure=insecure)


def _cluster(env, cluster, multi_host):
    """The cluster name: the ``cluster=`` keyword, else FRUGAL_CLUSTER (what
    ``frugal run --cluster`` sets), else ``"local"``: with ``multi_host`` (a
    torchrun world off loopback) that means one flat exchange over every
    host, which is said with a warning, never silently."""
    if cluster is None:
        cluster = env.get("FRUGAL_CLUSTER") or None
    if cluster is None:
        if multi_host:
            warnings.warn("frugal.init: no cluster name (FRUGAL_CLUSTER or frugal.init(cluster=...)); every rank is "
                          "in cluster 'local', so the exchange is flat across hosts. Set FRUGAL_CLUSTER=<site> on "
                          "each host for the topology-aware one", RuntimeWarning, stacklevel=3)
        cluster = "local"
    if not isinstance(cluster, str) or not cluster:
        raise ValueError(f"cluster must be a non-empty string, got {cluster!r}")
    return cluster


def _join_frugal(env, timeout_s, security, cluster):
    # Starting Python and importing torch can take long on a busy machine:
    # the rendezvous has its own, longer bound.
    world = _C.join_world(
        env["FRUGAL_COORDINATOR"],
        rank=_env_int(env, "FRUGAL_RANK", -1),
        cluster=_cluster(env, cluster, False),
        listen=env.get("FRUGAL_LISTEN") or "tcp://127.0.0.1:*",
        advertise_host=env.get("FRUGAL_ADVERTISE_HOST", ""),
        timeout_s=_env_float(env, "FRUGAL_RENDEZVOUS_TIMEOUT_S", max(timeout_s, 120.0)),
        **security,
    )
    expected = env.get("FRUGAL_WORLD_SIZE")
    if expected and int(expected) != world.world_size:
        raise RuntimeError(f"FRUGAL_WORLD_SIZE={expected} but the coordinator formed a world of {world.world_size}")
    return world


def _join_elastic(env, timeout_s, security, cluster):
    """frugal run --elastic: registers with the job's membership coordinator
    (engine::ElasticSession, the protocol of frugal worker --elastic) and
    returns the first generation's world; SIGTERM then asks this worker to
    leave at its model's next check gate."""
    global _session
    session = _C.ElasticSession(
        env["FRUGAL_COORDINATOR"],
        cluster=_cluster(env, cluster, False),
        listen=env.get("FRUGAL_LISTEN") or "tcp://127.0.0.1:*",
        advertise_host=env.get("FRUGAL_ADVERTISE_HOST", ""),
        join=_env_flag(env, "FRUGAL_JOIN"),
        max_world=_env_int(env, "FRUGAL_MAX_WORKERS", 0),
        timeout_s=_env_float(env, "FRUGAL_RENDEZVOUS_TIMEOUT_S", max(timeout_s, 120.0)),
        heartbeat_timeout_s=_env_float(env, "FRUGAL_HEARTBEAT_TIMEOUT_S", 2.0),
        link_grace_s=_env_float(env, "FRUGAL_LINK_GRACE_S", 30.0),
        **security,
    )
    world = session.register()
    _session = session
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: session.request_leave())
    return world


def elastic_session():
    """The elastic job's membership session of this process (None outside
    ``frugal run --elastic``); DistributedModel uses it."""
    return _session


def _set_world(world):
    """A new generation's world becomes the default (frugal.all_reduce, ...)."""
    global _default_world
    _default_world = world


def _join_torchrun(env, timeout_s, security, cluster):
    # torchrun gives RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT. torch's own
    # store (init_process_group) may own MASTER_PORT, so Frugal's rendezvous
    # uses MASTER_PORT + FRUGAL_PORT_OFFSET (default 1), served by rank 0.
    rank = _env_int(env, "RANK")
    world_size = _env_int(env, "WORLD_SIZE")
    port = _env_int(env, "MASTER_PORT") + _env_int(env, "FRUGAL_PORT_OFFSET", 1)
    host = env["MASTER_ADDR"]
    loopback = host in ("127.0.0.1", "localhost", "::1")
    # Off loopback the listener takes every interface and advertises this
    # host's address on the route to MASTER_ADDR (comm::AdvertisedEndpoint),
    # unless FRUGAL_ADVERTISE_HOST names one.
    listen = "tcp://127.0.0.1:*" if loopback else "tcp://0.0.0.0:*"
    advertise = "" if loopback else env.get("FRUGAL_ADVERTISE_HOST", "")
    serve_address = f"tcp://{'127.0.0.1' if loopback else '0.0.0.0'}:{port}"
    world = _C.join_world(
        f"tcp://{host}:{port}",
        rank=rank,
        cluster=_cluster(env, cluster, not loopback),
        listen=listen,
        advertise_host=advertise,
        timeout_s=_env_float(env, "FRUGAL_RENDEZVOUS_TIMEOUT_S", max(timeout_s, 120.0)),
        serve_world=world_size if rank == 0 else 0,
        serve_address=serve_address,
        **security,
    )
    if world.world_size != world_size:
        raise RuntimeError(f"WORLD_SIZE={world_size} but the rendezvous formed a world of {world.world_size}")
    return world


def init(timeout_s=None, *, key=None, authorized_keys=None, insecure=None, cluster=None):
    """Joins this process's Frugal world and returns it (a ``frugal._C.World``).

    Reads, in this order of preference:

    * ``FRUGAL_COORDINATOR``, ``FRUGAL_RANK``, ``FRUGAL_CLUSTER``, ... as set
      by ``frugal run``;
    * torchrun's ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``
      (rank 0 serves Frugal's rendezvous on MASTER_PORT + 1);
    * neither: a world of one process (no network).

    Under ``frugal run --elastic`` (``FRUGAL_ELASTIC=1``) it registers with
    the job's membership coordinator instead and returns the first
    generation's world (a joiner's: the generation it joins); SIGTERM then
    makes this worker leave the job at its DistributedModel's next check
    gate (docs/guide/python.md, "Elastic scripts").

    Joining waits at most ``FRUGAL_RENDEZVOUS_TIMEOUT_S`` (default: the
    larger of 120 s and ``timeout_s``) for the other processes to start;
    ``timeout_s`` (default: ``FRUGAL_TIMEOUT_S`` or 60 s) is the default bound
    of the network waits of the models and hooks built on this world.
    Calling it again returns the same world.

    Security, as ``frugal worker --key/--authorized-keys/--insecure``
    (docs/design/security.md): ``key`` (this site's key file from ``frugal keys
    generate``) and ``authorized_keys`` (the job's public keys) make every
    connection CurveZMQ; ``insecure=True`` allows plain TCP to a
    non-loopback coordinator. Without these keywords they come from
    ``FRUGAL_KEY``, ``FRUGAL_AUTHORIZED_KEYS`` and ``FRUGAL_INSECURE``
    (what ``frugal run --key ... --authorized-keys ... / --insecure`` sets).
    A non-loopback world without keys or ``insecure`` raises ValueError
    with the CLI's message.

    ``cluster`` names this rank's site for the topology-aware exchange
    (default: ``FRUGAL_CLUSTER``, which ``frugal run --cluster`` sets, else
    ``"local"``; a torchrun world across hosts without one warns that its
    exchange is flat). Off loopback, this rank advertises its address on the
    route to the coordinator (to ``MASTER_ADDR`` under torchrun), or
    ``FRUGAL_ADVERTISE_HOST``; a loopback address towards a remote
    coordinator is refused.

    It also keeps freed heap memory in the process between steps (glibc's
    mmap and trim thresholds; about a third less CPU on mlp with 4 workers on
    2 cores), unless ``FRUGAL_HEAP_RETENTION=0`` or ``GLIBC_TUNABLES`` sets
    malloc options.
    """
    global _default_world
    if _default_world is not None:
        return _default_world
    env = os.environ
    # As the frugal CLI does at start-up: without it every step's large tensors
    # come back as fresh pages (Note [Heap retention] in src/common/allocator.cc).
    _C.retain_heap_between_steps()
    if timeout_s is None:
        timeout_s = _env_float(env, "FRUGAL_TIMEOUT_S", 60.0)
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    security = _security(env, key, authorized_keys, insecure)
    if env.get("FRUGAL_COORDINATOR") and _env_flag(env, "FRUGAL_ELASTIC"):
        world = _join_elastic(env, timeout_s, security, cluster)
    elif env.get("FRUGAL_COORDINATOR"):
        world = _join_frugal(env, timeout_s, security, cluster)
    elif all(env.get(k) for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        world = _join_torchrun(env, timeout_s, security, cluster)
    else:
        world = _C.single_world()
    threads = env.get("FRUGAL_THREADS")
    if threads:
        torch.set_num_threads(_env_int(env, "FRUGAL_THREADS"))
    _default_world = world
    return world


def device(local_rank=None):
    """This process's device: ``cuda:LOCAL_RANK`` (modulo the GPUs there
    are) when CUDA is available, else the CPU. ``local_rank`` defaults to
    ``LOCAL_RANK`` (set by ``frugal run`` and torchrun), else 0. Put the
    model and its batches there: ``net.to(frugal.device())``."""
    if local_rank is None:
        local_rank = _env_int(os.environ, "LOCAL_RANK", 0)
    if isinstance(local_rank, bool) or not isinstance(local_rank, int) or local_rank < 0:
        raise ValueError(f"local_rank must be an integer >= 0, got {local_rank!r}")
    if not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", local_rank % torch.cuda.device_count())


def default_timeout_s():
    """FRUGAL_TIMEOUT_S (set by frugal run --timeout-s), else 60 s."""
    return _env_float(os.environ, "FRUGAL_TIMEOUT_S", 60.0)


def get_world():
    """The world ``init()`` joined (joins it first if needed)."""
    return init()


def is_initialized():
    return _default_world is not None


class WorldChanged(ConnectionError):
    """A collective of an elastic job (``frugal.all_reduce``,
    ``frugal.barrier``) failed because a peer was lost: it has no result.
    DistributedModel enters the next world at its next call; a script
    catches this around its own collectives, e.g. an evaluation's mean."""


def elastic_collective(what, fn):
    """fn(), a collective on the current world; in an elastic job a failure
    because a peer was lost raises WorldChanged (Note [Finishing an elastic
    script] in _model.py)."""
    try:
        return fn()
    except WorldChanged:
        raise
    except (ConnectionError, TimeoutError) as e:
        if _session is None or not _session.await_change():
            raise
        generation = _default_world.generation if _default_world is not None else 0
        raise WorldChanged(f"{what}: a peer of generation {generation} was lost during it ({e}); it has no "
                           "result, and the model enters the next world at its next call") from e


def all_reduce(values, op="mean", timeout_s=None):
    """The sum (``op="sum"``) or mean (``op="mean"``) over every rank of a
    float, a sequence of floats or a tensor (returned as a float64 CPU
    tensor of the same shape), over Frugal's own transport: for metrics such
    as an evaluation's loss, without a second process group. Every rank
    must call it, in the same order relative to its other collectives,
    with as many values; the result has the same bits on every rank."""
    if op not in ("sum", "mean"):
        raise ValueError(f"op must be 'sum' or 'mean', got {op!r}")
    import torch
    if isinstance(values, torch.Tensor):
        flat = values.detach().to("cpu", torch.float64).reshape(-1).tolist()
        shape = values.shape
    elif isinstance(values, (int, float)) and not isinstance(values, bool):
        flat, shape = [float(values)], None
    else:
        try:
            flat = [float(v) for v in values]
        except (TypeError, ValueError):
            raise TypeError("all_reduce takes a float, a sequence of floats or a tensor, "
                            f"got {type(values).__name__}") from None
        shape = len(flat)
    world = init()
    out = elastic_collective("all_reduce", lambda: world.all_reduce_sum(
        flat, default_timeout_s() if timeout_s is None else timeout_s))
    if op == "mean":
        out = [v / world.world_size for v in out]
    if shape is None:
        return out[0]
    if isinstance(shape, int):
        return out
    return torch.tensor(out, dtype=torch.float64).reshape(shape)


def barrier(timeout_s=None):
    """Returns once every rank of the world has called it."""
    world = init()
    elastic_collective("barrier", lambda: world.barrier(default_timeout_s() if timeout_s is None else timeout_s))

