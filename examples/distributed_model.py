"""Full Frugal on your own model: frugal.DistributedModel.

    PYTHONPATH=build/python build/frugal run --workers 4 -- \
        /usr/bin/python3 examples/distributed_model.py --steps 300 --density 0.01
    ... examples/distributed_model.py --steps 300 --sync local    # frugal train's default mode

Also runs alone (a world of one) and under torchrun. The model, data, loss and
loop are plain PyTorch; the only changes are the wrapper and model.step()
instead of optimizer.step(). Each worker trains on its own shard of a
synthetic classification task; rank 0 prints progress and the final accuracy.
"""

import argparse
import time

import torch

import frugal


class ResidualMLP(torch.nn.Module):
    """Any nn.Module works; this one is not in Frugal's C++ model zoo."""

    def __init__(self, d_in=32, width=128, classes=10, blocks=2):
        super().__init__()
        self.inp = torch.nn.Linear(d_in, width)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.LayerNorm(width), torch.nn.Linear(width, width), torch.nn.GELU())
            for _ in range(blocks))
        self.out = torch.nn.Linear(width, classes)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = h + block(h)
        return self.out(h)


def make_data(n, rank, d_in=32, classes=10):
    g = torch.Generator().manual_seed(0)  # the task is the same everywhere
    teacher = torch.randn(d_in, classes, generator=g)
    g = torch.Generator().manual_seed(1 + rank)  # the samples are this worker's shard
    x = torch.randn(n, d_in, generator=g)
    return x, (x @ teacher).argmax(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--sync", choices=["step", "local"], default="step",
                   help="step: the gradient pipeline every step; local: local steps, a synced fragment every 4")
    p.add_argument("--density", type=float, default=None, help="default: 0.01 with --sync step, 1 with --sync local")
    p.add_argument("--staleness", type=int, default=0)
    p.add_argument("--device", default="auto",
                   help="auto (cuda:LOCAL_RANK when there is a GPU, else cpu), cpu, cuda or cuda:N "
                        "(several workers may share one GPU)")
    args = p.parse_args()
    if args.device == "auto":
        args.device = frugal.device()

    world = frugal.init()  # FRUGAL_* from frugal run, torchrun's variables, or a world of one
    net = ResidualMLP().to(args.device)
    density = args.density if args.density is not None or args.sync == "local" else 0.01
    local = dict(total_steps=args.steps) if args.sync == "local" else {}
    model = frugal.DistributedModel(net, optimizer="sgd", lr=args.lr, momentum=0.9, density=density,
                                    staleness=args.staleness, sync=args.sync, **local)
    x, y = (t.to(args.device) for t in make_data(8192, world.rank))
    loss_fn = torch.nn.CrossEntropyLoss()
    start = time.time()
    for step in range(args.steps):
        i = (step * args.batch_size) % (len(x) - args.batch_size)
        loss = loss_fn(model(x[i:i + args.batch_size]), y[i:i + args.batch_size])
        loss.backward()
        model.step()
        if world.rank == 0 and (step + 1) % 50 == 0:
            print(f"step {step + 1}: loss {loss.item():.3f}, {(time.time() - start) / (step + 1) * 1e3:.1f} ms/step",
                  flush=True)
    checksum = model.finish()  # final parameters in `net`, identical on every worker
    xt, yt = (t.to(args.device) for t in make_data(4096, rank=10_000))
    with torch.no_grad():
        accuracy = (net(xt).argmax(1) == yt).float().mean().item()
    if world.rank == 0:
        s = model.stats()
        print(f"done: {args.steps} steps, test accuracy {100 * accuracy:.2f}%, replica checksum {checksum:016x}, "
              f"sent {100 * s['sent_values'] / max(1, s['total_values']):.1f}% of the "
              + (f"values of {s['rounds']} fragment syncs" if args.sync == "local" else "gradient values"))
        torch.save(model.state_dict(), "distributed_model.pt")  # loads into a plain ResidualMLP


if __name__ == "__main__":
    main()
