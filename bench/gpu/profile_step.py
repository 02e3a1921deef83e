"""Where a worker's step goes on a shared GPU: plain PyTorch
against the same model in frugal.DistributedModel, phase by phase.

    frugal run --workers 4 -- PY bench/gpu/profile_step.py --mode plain  --out DIR
    frugal run --workers 4 -- PY bench/gpu/profile_step.py --mode frugal --out DIR

Every process trains ddp.py's model (resnet18 by default) on its own batches
of Fashion-MNIST held on the device, and measures, after --warmup steps:
  1. free: --steps steps with no added synchronisation, timed as a whole
     (the pace a training loop gets; frugal: waiting for updates included);
  2. phases: --steps steps with a device synchronisation after each phase
     (batch, forward, backward, step). The step phase is optimizer.step()
     for plain, DistributedModel.step() for frugal: hand-over of the
     gradients, the wait for the next parameters and their upload;
  3. profile: --profile-steps steps under torch.profiler (CPU and, on a GPU,
     device activity): device time of kernels, of copies to the host and of
     copies to the device, and the top operators by self device time.
The plain processes wait for each other (files in --out) before each part,
so the four share the GPU as Frugal's workers do. Each rank writes
OUT/MODE-rankR.json and prints one summary line; rank 0 also writes the
profiler's table to OUT/profile-MODE-rank0.txt.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "baselines"))
import ddp as baseline  # noqa: E402  (ddp.py's models and data loader)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=["plain", "frugal"], required=True)
    p.add_argument("--model", default="resnet18", choices=baseline.MODELS[:3])
    p.add_argument("--device", default="cuda")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--density", type=float, default=0.03)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--profile-steps", type=int, default=10)
    p.add_argument("--timeout-s", type=float, default=120)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.profile_steps < 0:
        p.error("--steps must be >= 1, --warmup and --profile-steps >= 0")
    return args


class Barrier:
    """All ranks of the launch reach a named point (files in a shared folder); plain processes have no world."""

    def __init__(self, folder, rank, world, timeout_s):
        self.folder, self.rank, self.world, self.timeout_s = folder, rank, world, timeout_s

    def wait(self, name):
        open(os.path.join(self.folder, "%s.%d" % (name, self.rank)), "w").close()
        deadline = time.time() + self.timeout_s
        while not all(os.path.exists(os.path.join(self.folder, "%s.%d" % (name, r))) for r in range(self.world)):
            if time.time() > deadline:
                raise SystemExit("rank %d: the other processes did not reach %r within %.0f s" %
                                 (self.rank, name, self.timeout_s))
            time.sleep(0.005)


class Trainer:
    """One process's training loop, plain or through frugal.DistributedModel."""

    def __init__(self, args, device):
        self.args, self.device = args, device
        torch.manual_seed(1)
        net = baseline.build_model(args.model).to(device).train()
        if args.mode == "frugal":
            import frugal
            self.world = frugal.init(timeout_s=args.timeout_s)
            self.rank, self.size = self.world.rank, self.world.world_size
            self.model = frugal.DistributedModel(net, sync="step", optimizer="sgd", lr=args.lr, momentum=0.9,
                                                 density=args.density, timeout_s=args.timeout_s)
            self.opt = None
        else:
            self.rank = int(os.environ.get("FRUGAL_RANK", os.environ.get("RANK", "0")))
            self.size = int(os.environ.get("FRUGAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
            self.model = net
            self.opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
        x, y, _, _ = baseline.load_fashion_mnist(args.data_dir)
        g = torch.Generator().manual_seed(100 + self.rank)
        self.order = torch.randperm(x.shape[0], generator=g).to(device)
        self.x, self.y = x.to(device), y.to(device)
        self.i = 0

    def step(self, marks=None):
        """One training step; with MARKS, a device sync and a time stamp after each phase."""
        def mark(name):
            if marks is not None:
                baseline.synchronize(self.device)
                marks.append((name, time.perf_counter()))
        mark("start")
        b = self.args.batch_size
        begin = (self.i * b) % (self.x.shape[0] - b)
        idx = self.order[begin:begin + b]
        x, y = self.x[idx], self.y[idx]
        mark("batch")
        if self.opt is not None:
            self.opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.model(x), y)
        mark("forward")
        loss.backward()
        mark("backward")
        if self.opt is not None:
            self.opt.step()
        else:
            self.model.step()
        mark("step")
        self.i += 1
        return loss


def device_totals(prof):
    """Device microseconds of kernels, copies to the host and copies to the device, from torch.profiler's
    events (attribute names differ between torch 1.13 and 2.x)."""
    totals = {"kernels_us": 0.0, "dtoh_us": 0.0, "htod_us": 0.0, "other_copy_us": 0.0}
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = getattr(e, "self_cuda_time_total", 0.0)
        if not us:
            continue
        name = e.key
        if name.startswith("Memcpy DtoH"):
            totals["dtoh_us"] += us
        elif name.startswith("Memcpy HtoD"):
            totals["htod_us"] += us
        elif name.startswith("Memcpy") or name.startswith("Memset"):
            totals["other_copy_us"] += us
        else:
            totals["kernels_us"] += us
    return totals


def profile(trainer, steps, device):
    from torch.profiler import ProfilerActivity, profile as torch_profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    baseline.synchronize(device)
    with torch_profile(activities=activities) as prof:
        for _ in range(steps):
            trainer.step()
        baseline.synchronize(device)
    totals = {k: v / steps for k, v in device_totals(prof).items()}  # per step
    sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    try:
        table = prof.key_averages().table(sort_by=sort, row_limit=30)
    except (AttributeError, KeyError, ValueError):
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30)
    return totals, table


def main():
    args = parse_args()
    device = torch.device(args.device)
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    trainer = Trainer(args, device)
    barrier = Barrier(args.out, trainer.rank, trainer.size, args.timeout_s) if args.mode == "plain" else None

    for _ in range(args.warmup):
        trainer.step()
    baseline.synchronize(device)

    if barrier:
        barrier.wait(args.mode + "-free")
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = trainer.step()
    loss_value = loss.item()
    baseline.synchronize(device)
    free_s = (time.perf_counter() - t0) / args.steps

    if barrier:
        barrier.wait(args.mode + "-phases")
    phases = {}
    for _ in range(args.steps):
        marks = []
        trainer.step(marks)
        for (_, a), (name, b) in zip(marks, marks[1:]):
            phases.setdefault(name, []).append(b - a)
    phase_s = {k: statistics.median(v) for k, v in phases.items()}

    totals, table = {}, ""
    if args.profile_steps > 0:
        if barrier:
            barrier.wait(args.mode + "-profile")
        totals, table = profile(trainer, args.profile_steps, device)

    if args.mode == "frugal":
        trainer.model.finish()
    record = {"mode": args.mode, "model": args.model, "rank": trainer.rank, "workers": trainer.size,
              "device": str(device), "torch": torch.__version__, "density": args.density if args.mode == "frugal"
              else None, "batch_size": args.batch_size, "steps": args.steps, "free_step_s": free_s,
              "phase_s": phase_s, "phase_sum_s": sum(phase_s.values()),
              "compute_s": phase_s.get("batch", 0) + phase_s.get("forward", 0) + phase_s.get("backward", 0),
              "profile_per_step_us": totals, "loss": loss_value}
    with open(os.path.join(args.out, "%s-rank%d.json" % (args.mode, trainer.rank)), "w") as f:
        json.dump(record, f, indent=1)
    if trainer.rank == 0 and table:
        with open(os.path.join(args.out, "profile-%s-rank0.txt" % args.mode), "w") as f:
            f.write(table)
    print(json.dumps({"summary": "profile_step", **record}), flush=True)


if __name__ == "__main__":
    main()
