"""A user's own training script, as the installed-package test runs it:
    VENV/bin/frugal run --workers 2 -- VENV/bin/python pip_own_script.py OUT_DIR
Each rank writes OUT_DIR/rank<R>.json with what the test checks."""

import json
import os
import sys

import torch

import frugal


def main():
    out_dir = sys.argv[1]
    world = frugal.init()
    torch.manual_seed(0)  # same initial parameters on every rank
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    model = frugal.DistributedModel(net, optimizer="sgd", lr=0.05, momentum=0.9, density=0.25, sync="step")
    g = torch.Generator().manual_seed(100 + world.rank)  # each rank its own shard
    x = torch.randn(512, 16, generator=g)
    y = x[:, :4].sum(1, keepdim=True)
    losses = []
    for step in range(30):
        i = (step * 32) % (len(x) - 32)
        loss = torch.nn.functional.mse_loss(model(x[i:i + 32]), y[i:i + 32])
        loss.backward()
        model.step()
        losses.append(loss.item())
    checksum = model.finish()
    with torch.no_grad():
        params = torch.cat([p.detach().flatten() for p in net.parameters()])
    result = {
        "rank": world.rank,
        "world_size": world.world_size,
        "frugal_file": os.path.realpath(frugal.__file__),
        "version": frugal.__version__,
        "checksum": checksum,
        "params": params.tolist(),
        "first_loss": losses[0],
        "last_loss": losses[-1],
    }
    with open(os.path.join(out_dir, f"rank{world.rank}.json"), "w") as f:
        json.dump(result, f)
    print(f"rank {world.rank}: loss {losses[0]:.4f} -> {losses[-1]:.4f}, checksum {checksum:016x}", flush=True)


if __name__ == "__main__":
    main()
