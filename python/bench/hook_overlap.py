"""frugal.sparse_hook with and without overlap: plain DDP (gloo) on the zoo's
mlp (784-2048-2048-10) and synthetic 1x28x28 data, the hook at --density,
small DDP buckets so backward has several; prints rank 0's median iteration.

    PYTHONPATH=build/python build/frugal run --workers 2 -- \
        /usr/bin/python3 python/bench/hook_overlap.py --overlap 1
    ... --overlap 0      (the exchange inside the hook)
"""

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import frugal


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--density", type=float, default=0.03)
    p.add_argument("--bucket-mb", type=float, default=4.0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--overlap", type=int, choices=(0, 1), default=1)
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 2048), torch.nn.ReLU(),
                              torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10))
    model = DDP(net, bucket_cap_mb=args.bucket_mb)
    state = frugal.hook_state(density=args.density, overlap=bool(args.overlap))
    model.register_comm_hook(state, frugal.sparse_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(1024, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (1024,), generator=g)
    loss_fn = torch.nn.CrossEntropyLoss()
    times = []
    for step in range(args.steps):
        start = time.perf_counter()
        i = (step * args.batch_size) % (len(x) - args.batch_size)
        opt.zero_grad()
        loss_fn(model(x[i:i + args.batch_size]), y[i:i + args.batch_size]).backward()
        opt.step()
        times.append(time.perf_counter() - start)
    if rank == 0:
        s = state.stats()
        print(json.dumps(dict(overlap=args.overlap, world=dist.get_world_size(), density=args.density,
                              median_iteration_s=statistics.median(times[args.warmup:]),
                              mean_iteration_s=statistics.mean(times[args.warmup:]), hook_calls=s["calls"])))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
