"""Python paths vs the CLI on the same model and settings: the zoo's mlp
(784-2048-2048-10, docs/design/models.md) on synthetic 1x28x28 data, trained with
frugal.DistributedModel, or (--ddp-hook) with plain DDP (gloo) and
frugal.sparse_hook, overlapped with backward or not (--overlap); prints the
median iteration time of rank 0.

    PYTHONPATH=build/python build/frugal run --workers 2 -- \
        /usr/bin/python3 python/bench/mlp_iteration.py --steps 200
    PYTHONPATH=build/python build/frugal run --workers 2 -- \
        /usr/bin/python3 python/bench/mlp_iteration.py --ddp-hook --overlap 0 --density 0.03
    build/frugal train --sync step --workers 2 --model mlp --dataset synthetic --max-steps 200 \
        --batch-size 64 --density 0.01 --staleness 0 --eval-every 0 --log-every 10

Same defaults as `frugal train` had when this was written: sgd, lr 0.1,
momentum 0.9, density 0.01, block sparsifier, staleness 0, bucket 4 MB.
"""

import argparse
import json
import statistics
import time

import torch

import frugal


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--density", type=float, default=0.01)
    p.add_argument("--staleness", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--ddp-hook", action="store_true", help="DDP + frugal.sparse_hook instead of DistributedModel")
    p.add_argument("--overlap", type=int, choices=(0, 1), default=1, help="--ddp-hook: the hook's overlap")
    p.add_argument("--deflate", choices=("on", "off"), default="on", help="--ddp-hook: the hook's deflate")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    return p.parse_args()


class HookedDdp:
    """Plain DDP with frugal.sparse_hook and torch's SGD, with DistributedModel's step/finish/stats."""

    def __init__(self, net, args):
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        dist.init_process_group("gloo")
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.ddp = DDP(net)
        self.state = frugal.hook_state(density=args.density, overlap=bool(args.overlap), deflate=args.deflate == "on")
        self.ddp.register_comm_hook(self.state, frugal.sparse_hook)
        self.opt = torch.optim.SGD(self.ddp.parameters(), lr=args.lr, momentum=args.momentum)

    def __call__(self, x):
        self.opt.zero_grad()
        return self.ddp(x)

    def step(self):
        self.opt.step()

    def finish(self):
        torch.distributed.destroy_process_group()

    def stats(self):
        return dict(self.state.stats(), overlap=self.state.overlap)


def main():
    args = parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 2048), torch.nn.ReLU(),
                              torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10))
    if args.ddp_hook:
        model = HookedDdp(net, args)
        rank, world_size = model.rank, model.world_size
    else:
        world = frugal.init()
        rank, world_size = world.rank, world.world_size
        model = frugal.DistributedModel(net, sync="step", optimizer="sgd", lr=args.lr, momentum=args.momentum,
                                        density=args.density, staleness=args.staleness)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(1024, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (1024,), generator=g)
    loss_fn = torch.nn.CrossEntropyLoss()
    times = []
    for step in range(args.steps):
        start = time.perf_counter()
        i = (step * args.batch_size) % (len(x) - args.batch_size)
        loss = loss_fn(model(x[i:i + args.batch_size]), y[i:i + args.batch_size])
        loss.backward()
        model.step()
        times.append(time.perf_counter() - start)
    stats = model.stats()
    model.finish()
    steps = max(1, args.steps)
    result = dict(rank=rank, world=world_size, median_iteration_s=statistics.median(times[args.warmup:]),
                  mean_iteration_s=statistics.mean(times[args.warmup:]), loss=loss.item())
    if args.ddp_hook:
        result.update(overlap=stats["overlap"], hook_calls=stats["calls"])
    else:
        result.update({k: stats[k] / steps for k in ("wait_s", "sparsify_s", "exchange_s", "optimizer_s")})
    if rank == 0:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
