"""An own training script for a run across sites (docs/guide/two-sites.md).

    frugal run --workers 2 --coordinator tcp://10.0.0.1:29500 --cluster siteA \
        --key site-a.key --authorized-keys authorized_keys -- python3 examples/two_sites.py

It uses both worlds a script may want: torch.distributed (gloo, from the
RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT that frugal run sets), here to
agree on a seed, and Frugal's (the model's compressed rounds, and
frugal.all_reduce for the evaluation), which is topology-aware (--cluster)
and encrypted (--key).
"""

import argparse
import sys

import torch
import torch.distributed as dist

import frugal


def make_data(n, seed, d_in=16):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_in, generator=g)
    return x, (x[:, 0] * x[:, 1] > 0).long()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=64)
    args = p.parse_args()

    dist.init_process_group("gloo")  # env://, as under torchrun
    world = frugal.init()            # the same ranks: FRUGAL_RANK is RANK
    assert (world.rank, world.world_size) == (dist.get_rank(), dist.get_world_size())
    seed = torch.tensor([1234 if world.rank == 0 else 0])
    dist.broadcast(seed, src=0)      # any torch.distributed collective works alongside

    device = frugal.device()         # cuda:LOCAL_RANK when there is a GPU, else the CPU
    torch.manual_seed(int(seed))
    net = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2)).to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    model = frugal.DistributedModel(net, optimizer=opt, total_steps=args.steps)
    x, y = (t.to(device) for t in make_data(1024, seed=world.rank))
    for step in range(args.steps):
        i = step % 32 * 32
        loss = torch.nn.functional.cross_entropy(model(x[i:i + 32]), y[i:i + 32])
        loss.backward()
        model.step()
        opt.zero_grad()
    model.finish()  # every rank ends on the same parameters

    xt, yt = (t.to(device) for t in make_data(512, seed=10_000 + world.rank))
    with torch.no_grad():
        correct = (net(xt).argmax(1) == yt).float().mean().item()
    accuracy = frugal.all_reduce(correct)  # the mean over every rank, over Frugal's transport
    # One write per line: the ranks of a host share its output.
    sys.stdout.write(f"rank {world.rank} of {world.world_size} (cluster {world.cluster}): {args.steps} steps, "
                     f"test accuracy {100 * accuracy:.1f}% (mean over ranks)\n")
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
