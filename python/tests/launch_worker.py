"""One rank of test_launcher. argv: OUT_DIR MODE
  env:  reports its environment and the world frugal.init() joined;
  plain: as env, but joins without keys whatever frugal run passed;
  kill: exchanges buckets; rank 1 kills itself (SIGKILL) at call 5, the
        others report the exception they get;
  reduce: frugal.all_reduce of metrics and a barrier, reported."""

import os
import signal
import sys
import time

import torch

import frugal
from worker_common import write_result

mode = sys.argv[2]
# plain: joins without keys whatever frugal run passed (a rank that lacks them).
world = frugal.init(key="", authorized_keys="") if mode == "plain" else frugal.init()
if mode in ("env", "plain"):
    keys = ["FRUGAL_COORDINATOR", "FRUGAL_RANK", "FRUGAL_WORLD_SIZE", "FRUGAL_CLUSTER", "RANK", "WORLD_SIZE",
            "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "FRUGAL_KEY",
            "FRUGAL_AUTHORIZED_KEYS", "FRUGAL_INSECURE", "FRUGAL_LISTEN", "FRUGAL_ADVERTISE_HOST", "FRUGAL_LINK_GRACE_S"]
    write_result(world.rank, env={k: os.environ.get(k) for k in keys}, joined_rank=world.rank,
                 world_size=world.world_size, cluster=world.cluster)
elif mode == "reduce":
    frugal.barrier()
    mean = frugal.all_reduce([float(world.rank), 1.0])
    total = frugal.all_reduce(torch.full((2, 2), world.rank + 1.0), op="sum")
    scalar = frugal.all_reduce(0.1 * (world.rank + 1))
    try:
        frugal.all_reduce([1.0] * (world.rank + 1))  # as many values on every rank, or an error
        uneven = None
    except ValueError as e:
        uneven = str(e)
    write_result(world.rank, mean=mean, total=total.tolist(), scalar=scalar, uneven=uneven)
elif mode == "kill":
    engine = frugal._C.CompressedAllReduce(world, density=1.0, timeout_s=float(os.environ["FRUGAL_TIMEOUT_S"]))
    t0 = time.time()
    try:
        for call in range(1000):
            if world.rank == 1 and call == 5:
                os.kill(os.getpid(), signal.SIGKILL)
            engine.run(0, torch.ones(1000))
        write_result(world.rank, error=None)
    except Exception as e:  # noqa: BLE001 (the test inspects it)
        write_result(world.rank, error=type(e).__name__, message=str(e), seconds=time.time() - t0)
        sys.exit(1)
