"""An own script as an elastic job, for bench/chaos/run.py --script: the zoo's
mlp (784-2048-2048-10, 5.8 M parameters) on Fashion-MNIST through
frugal.DistributedModel with a torch SGD (momentum 0.9) and a LambdaLR of
frugal train's schedule (linear warm-up, then cosine to 0 over the run),
both passed as the model's optimizer and scheduler so their state travels
with every snapshot.

Each step takes the next --global-batch samples of the epoch's seeded
permutation and splits them by the current world (model.rank,
model.world_size), so the global batch, the steps per epoch and the
schedule do not depend on the membership; the loop runs on
model.iteration, so a rolled-back world trains those steps again. After
finish() rank 0 evaluates the final parameters on the test set and logs
{"final": true, "test_accuracy": ...} to RUN_DIR/metrics.jsonl.

    frugal run --elastic --workers 4 -- python3 bench/chaos/script.py --run-dir build/bench/chaos/s

bench/cluster/live.py --script-jobs submits it as a cluster command job:
--steps instead of --epochs, the run directory from FRUGAL_RUN_DIR, a
checkpoint every --checkpoint-every steps that a restarted job resumes
from (frugal.load).
"""
import argparse
import math
import os
import sys
import time

import torch

import frugal

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "baselines"))
from ddp import load_fashion_mnist  # noqa: E402  (the baselines' reader of the idx files)


def schedule(warmup, total):
    """frugal train's factor of the base lr at a step (src/train/lr_schedule.cc)."""
    def factor(step):
        if step < warmup:
            return (step + 1) / warmup
        t = min(1.0, (step - warmup) / max(1, total - warmup))
        return 0.5 * (1 + math.cos(math.pi * t))
    return factor


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", default=os.environ.get("FRUGAL_RUN_DIR"),
                   help="where metrics.jsonl goes (default: $FRUGAL_RUN_DIR, which a cluster job is given)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps", type=int, help="the run's steps (default: --epochs epochs)")
    p.add_argument("--checkpoint-every", type=int, default=0, help="frugal.save every this many steps (0: never)")
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--global-batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--trace", action="store_true",
                   help="append 'iteration wall_time generation' after every step to RUN_DIR/steps-PID.txt")
    args = p.parse_args(argv)
    if not args.run_dir:
        p.error("--run-dir is required (or FRUGAL_RUN_DIR)")
    x_train, y_train, x_test, y_test = load_fashion_mnist(args.data_dir)
    frugal.init()
    torch.manual_seed(args.seed)  # the broadcast (or a joiner's state) makes every replica equal anyway
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 2048), torch.nn.ReLU(),
                              torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10))
    per_epoch = len(x_train) // args.global_batch
    total = args.steps or args.epochs * per_epoch
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule(args.warmup, total))
    model = frugal.DistributedModel(net, optimizer=opt, scheduler=sched, run_dir=args.run_dir, total_steps=total,
                                    log_every=args.log_every, quiet=True)
    if args.checkpoint_every:
        try:
            frugal.load(model, scheduler=sched)  # a restarted job: the newest complete checkpoint
        except FileNotFoundError:
            pass  # a first start
    loss_fn = torch.nn.CrossEntropyLoss()
    os.makedirs(args.run_dir, exist_ok=True)
    trace = open(os.path.join(args.run_dir, "steps-%d.txt" % os.getpid()), "a", buffering=1) if args.trace else None
    while model.iteration < total and not model.left:
        t = model.iteration
        epoch, i = divmod(t, per_epoch)
        order = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(args.seed * 1000 + epoch))
        mine = order[i * args.global_batch:(i + 1) * args.global_batch][model.rank::model.world_size]
        loss = loss_fn(model(x_train[mine]), y_train[mine])
        loss.backward()
        model.step(loss=loss)
        if trace is not None:
            trace.write("%d %.4f %d\n" % (t, time.time(), model.generation))
        opt.zero_grad(set_to_none=True)
        sched.step()
        if args.checkpoint_every and (t + 1) % args.checkpoint_every == 0 and not model.left:
            frugal.save(model, scheduler=sched)
    model.finish()
    if model.left or model.rank != 0:
        return
    with torch.no_grad():
        correct = sum(int((net(x_test[j:j + 1000]).argmax(1) == y_test[j:j + 1000]).sum())
                      for j in range(0, len(x_test), 1000))
    model.log(final=True, test_accuracy=correct / len(x_test), workers=model.world_size,
              generation=model.generation)


if __name__ == "__main__":
    main()
