"""An existing PyTorch DDP script with Frugal's compression hook: one line.

    PYTHONPATH=build/python build/frugal run --workers 2 -- \
        /usr/bin/python3 examples/ddp_hook.py --density 0.01

(or torchrun --nproc-per-node 2 examples/ddp_hook.py). Without --density the
script is plain DDP, for comparison. DDP's optimizer and loop are unchanged:
the hook replaces only the dense all-reduce of each gradient bucket by
Frugal's error-fed block-sparse exchange.
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import frugal


def make_data(n, rank, d_in=32, classes=10):
    g = torch.Generator().manual_seed(0)
    teacher = torch.randn(d_in, classes, generator=g)
    g = torch.Generator().manual_seed(1 + rank)
    x = torch.randn(n, d_in, generator=g)
    return x, (x @ teacher).argmax(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--density", type=float, default=None, help="use frugal.sparse_hook at this density")
    args = p.parse_args()

    dist.init_process_group("gloo")  # env:// (frugal run and torchrun both set it up)
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    model = DDP(net)
    if args.density is not None:
        model.register_comm_hook(frugal.hook_state(density=args.density), frugal.sparse_hook)  # <- the change
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = make_data(8192, rank)
    loss_fn = torch.nn.CrossEntropyLoss()
    start = time.time()
    for step in range(args.steps):
        i = (step * 64) % (len(x) - 64)
        opt.zero_grad()
        loss = loss_fn(model(x[i:i + 64]), y[i:i + 64])
        loss.backward()
        opt.step()
    xt, yt = make_data(4096, rank=10_000)
    with torch.no_grad():
        accuracy = (net(xt).argmax(1) == yt).float().mean().item()
    if rank == 0:
        print(f"done: {args.steps} steps, {(time.time() - start) / args.steps * 1e3:.1f} ms/step, "
              f"test accuracy {100 * accuracy:.2f}%, hook density {args.density}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
