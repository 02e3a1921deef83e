"""Python path vs the CLI on the same model and settings: the zoo's mlp
(784-2048-2048-10, docs/models.md) on synthetic 1x28x28 data, trained with
frugal.DistributedModel; prints the median iteration time of this rank.

    PYTHONPATH=build/python build/frugal run --workers 2 -- \
        /usr/bin/python3 python/bench/mlp_iteration.py --steps 200
    build/frugal train --workers 2 --model mlp --dataset synthetic --max-steps 200 \
        --batch-size 64 --density 0.01 --staleness 0 --eval-every 0 --log-every 10

Same defaults as `frugal train`: sgd, lr 0.1, momentum 0.9, density 0.01,
block sparsifier, fp16 values, staleness 0, bucket 4 MB.
"""

import argparse
import json
import statistics
import time

import torch

import frugal


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--density", type=float, default=0.01)
    p.add_argument("--staleness", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    args = p.parse_args()

    world = frugal.init()
    torch.manual_seed(world.rank)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 2048), torch.nn.ReLU(),
                              torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10))
    model = frugal.DistributedModel(net, optimizer="sgd", lr=args.lr, momentum=args.momentum, density=args.density,
                                    staleness=args.staleness)
    g = torch.Generator().manual_seed(world.rank)
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
    model.finish()
    s = model.stats()
    steps = max(1, args.steps)
    result = dict(rank=world.rank, world=world.world_size, median_iteration_s=statistics.median(times[args.warmup:]),
                  mean_iteration_s=statistics.mean(times[args.warmup:]), wait_s=s["wait_s"] / steps,
                  sparsify_s=s["sparsify_s"] / steps, exchange_s=s["exchange_s"] / steps,
                  optimizer_s=s["optimizer_s"] / steps, loss=loss.item())
    if world.rank == 0:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
