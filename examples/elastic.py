"""The quick start's loop as an elastic job (docs/guide/python.md, "Elastic
scripts"): under `frugal run --elastic` a worker may be killed, leave on
SIGTERM or join, and the others go on. The loop runs on model.iteration (a
world that lost a worker rolls back to its last snapshot and trains those
steps again) until model.left, and shards each step's batch by model.rank
and model.world_size.

  frugal run --elastic --workers 3 --min-workers 2 -- python3 examples/elastic.py --die-at 60

--die-at N: the worker of rank 2 kills itself (SIGKILL) at step N, to show
the run going on without it. --steps (default 300), --sleep-s (seconds per
step, to give a joiner time to arrive).
"""

import argparse
import os
import signal
import time

import torch

import frugal

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--die-at", type=int, default=-1)
parser.add_argument("--sleep-s", type=float, default=0.0)
args = parser.parse_args()

world = frugal.init()
net = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=100, gamma=0.5)


def changed(model):
    print(f"generation {model.generation}: rank {model.rank} of {model.world_size}, from step {model.iteration}",
          flush=True)


# scheduler=: its state travels with the snapshots, as the optimizer's does
model = frugal.DistributedModel(net, optimizer=opt, scheduler=sched, on_world_change=changed)
g = torch.Generator().manual_seed(0)
x = torch.randn(8192, 20, generator=g)
y = (x[:, 0] * x[:, 1] > 0).long()
first_rank = model.rank
while model.iteration < args.steps and not model.left:
    t = model.iteration
    if t == args.die_at and first_rank == 2 and model.generation == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    batch = torch.arange(96 * t, 96 * (t + 1)) % len(x)
    mine = batch[model.rank::model.world_size]  # this worker's share of the step's batch
    loss = torch.nn.functional.cross_entropy(model(x[mine]), y[mine])
    loss.backward()
    model.step()
    opt.zero_grad()
    sched.step()
    if model.rank == 0 and t % 100 == 99:
        print(f"step {t + 1}: loss {loss.item():.3f} ({model.world_size} workers)", flush=True)
    time.sleep(args.sleep_s)
checksum = model.finish()  # None for a worker that left
print("left the job" if model.left else f"done: {model.iteration} steps, checksum {checksum:016x}", flush=True)
