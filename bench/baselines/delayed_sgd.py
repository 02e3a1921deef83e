#!/usr/bin/python3
"""Delayed SGD in plain PyTorch: what staleness 1 costs without Frugal.

One process trains on the global batch (4 x 64) with the model, data order,
learning-rate schedule and momentum of bench/baselines/ddp.py. With
--delay 1 the gradient of step t is taken at the parameters before step
t-1's update (Frugal's --staleness 1); --predict 1 adds weight prediction:
the forward runs at those parameters minus the part of the pending update
already known, lr(t-1) * momentum * m(t-2). Prints the test accuracy every
175 steps and at the end.

  OMP_NUM_THREADS=1 /usr/bin/python3 bench/baselines/delayed_sgd.py --delay 1 --predict 1
"""
import argparse
import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import data_order  # noqa: E402
import ddp  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delay", type=int, choices=[0, 1], default=0, help="steps of gradient delay")
    ap.add_argument("--predict", type=int, choices=[0, 1], default=0, help="weight prediction (with --delay 1)")
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--global-batch", type=int, default=256)
    ap.add_argument("--warmup-steps", type=int, default=100)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    return ap.parse_args()


def main():
    a = parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    xtr, ytr, xte, yte = ddp.load_fashion_mnist(a.data_dir)
    model = ddp.build_model(a.model)
    stale = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    n = xtr.shape[0]
    per_epoch = n // a.global_batch
    total = a.epochs * per_epoch
    loss_fn = torch.nn.CrossEntropyLoss()
    previous = None  # parameters before the last update
    momentum_before = None  # momentum buffers before the last update
    step = 0
    for epoch in range(a.epochs):
        order = data_order.epoch_order(n, a.seed, epoch)
        for s in range(per_epoch):
            idx = torch.from_numpy(order[s * a.global_batch:(s + 1) * a.global_batch])
            source = model
            if a.delay == 1:
                current = [p.detach().clone() for p in model.parameters()]
                with torch.no_grad():
                    for p, q in zip(stale.parameters(), previous if previous is not None else current):
                        p.copy_(q)
                    if a.predict and previous is not None:
                        lr_last = ddp.lr_at(step - 1, a.lr, a.warmup_steps, total)
                        for p, m in zip(stale.parameters(), momentum_before):
                            if m is not None:
                                p.add_(m, alpha=-lr_last * a.momentum)
                previous = current
                source = stale
            source.zero_grad()
            loss_fn(source(xtr[idx]), ytr[idx]).backward()
            if source is not model:
                for p, q in zip(model.parameters(), source.parameters()):
                    p.grad = q.grad.clone()
            for g in opt.param_groups:
                g["lr"] = ddp.lr_at(step, a.lr, a.warmup_steps, total)
            momentum_before = [opt.state[p]["momentum_buffer"].clone() if "momentum_buffer" in opt.state[p] else None
                               for p in model.parameters()]
            opt.step()
            step += 1
            if step % 175 == 0:
                print("step %d test accuracy %.4f" % (step, ddp.evaluate(model, xte, yte)["test_accuracy"]), flush=True)
    print("final delay %d predict %d test accuracy %.4f" % (a.delay, a.predict,
                                                            ddp.evaluate(model, xte, yte)["test_accuracy"]))


if __name__ == "__main__":
    main()
