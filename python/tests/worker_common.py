"""Helpers of the worker scripts the tests start under `frugal run`."""

import json
import os
import sys

import torch


def out_path(rank):
    return os.path.join(sys.argv[1], f"rank{rank}.json")


def write_result(rank, **fields):
    tmp = out_path(rank) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(fields, f)
    os.replace(tmp, out_path(rank))


class TwoTower(torch.nn.Module):
    """A model that is not in Frugal's zoo: two branches with a gate, and a
    parameter that gets no gradient on some steps (the `unused` head)."""

    def __init__(self, d_in=16, hidden=32, classes=4):
        super().__init__()
        self.left = torch.nn.Linear(d_in, hidden)
        self.right = torch.nn.Sequential(torch.nn.Linear(d_in, hidden), torch.nn.Tanh())
        self.gate = torch.nn.Parameter(torch.zeros(hidden))
        self.head = torch.nn.Linear(hidden, classes)
        self.unused = torch.nn.Linear(hidden, classes)

    def forward(self, x, use_unused=False):
        g = torch.sigmoid(self.gate)
        h = torch.relu(self.left(x)) * g + self.right(x) * (1 - g)
        out = self.head(h)
        if use_unused:
            out = out + 0.0 * self.unused(h)
        return out


def blobs(n, rank, d_in=16, classes=4, seed=0):
    """Gaussian blobs, one per class; the class centres are shared by all
    ranks (seed), the samples are each rank's own shard."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, d_in, generator=g) * 2.0
    g = torch.Generator().manual_seed(1000 + rank)
    y = torch.randint(0, classes, (n,), generator=g)
    x = centres[y] + torch.randn(n, d_in, generator=g)
    return x, y
