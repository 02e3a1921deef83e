"""A script the cluster runs as a job (docs/guide/cluster.md, "Own scripts as jobs").

    build/frugal cluster submit examples/cluster_job.toml

The cluster starts each worker under `frugal run --elastic` (or, with
`frugal cluster serve --controller restart`, all of them under `frugal run
--workers N`), with FRUGAL_RUN_DIR naming the job's run directory:
metrics.jsonl there is how the server sees the job's progress and speed,
and the checkpoints there are what a restart resumes from. A resize of an
elastic job is in place: a worker that leaves gets SIGTERM and stops at
its model's next check gate (model.left), a new one joins with the
others' state, and the loop, driven by model.iteration, goes on. Also runs
alone or under `frugal run`:

    PYTHONPATH=build/python FRUGAL_RUN_DIR=build/runs/own build/frugal run --workers 2 -- \
        /usr/bin/python3 examples/cluster_job.py --steps 100
"""

import argparse
import os

import torch

import frugal


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=32, help="samples per worker per step")
    p.add_argument("--checkpoint-every", type=int, default=20)
    args = p.parse_args()
    run_dir = os.environ.get("FRUGAL_RUN_DIR", os.path.join("runs", "cluster_job"))
    os.makedirs(run_dir, exist_ok=True)

    world = frugal.init()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.GELU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    # sync "auto" (the local mode with two or more workers); a job resized to
    # 1 worker resumes in the mode its checkpoint was written in.
    model = frugal.DistributedModel(net, optimizer=opt, total_steps=args.steps, run_dir=run_dir, log_every=10)
    start = 0
    try:
        frugal.load(model)  # after a resize or a restart: the newest complete checkpoint, any world size
        start = model.iteration
    except FileNotFoundError:
        pass  # a first start
    g = torch.Generator().manual_seed(0)
    teacher = torch.randn(32, 10, generator=g)
    g = torch.Generator().manual_seed(1 + world.rank)  # this worker's shard
    x = torch.randn(4096, 32, generator=g)
    y = (x @ teacher).argmax(1)
    loss_fn = torch.nn.CrossEntropyLoss()
    loss = None
    while model.iteration < args.steps and not model.left:
        t = model.iteration  # a world that changes rolls back to its restore point
        i = (t * args.batch_size) % (len(x) - args.batch_size)
        loss = loss_fn(model(x[i:i + args.batch_size]), y[i:i + args.batch_size])
        loss.backward()
        model.step(loss=loss)
        opt.zero_grad()
        if (t + 1) % args.checkpoint_every == 0:
            frugal.save(model)
    model.finish()
    if model.left:
        print(f"left the job at step {model.iteration}")
    elif model.rank == 0 and loss is not None:
        print(f"trained steps {start}..{args.steps}, last on {model.world_size} worker(s); last loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
