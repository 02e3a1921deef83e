#!/usr/bin/python3
"""PyTorch DDP baseline for the time-to-accuracy benchmark (issue 5).

One process per rank, Gloo backend. It reproduces a Frugal run exactly except
for the gradient exchange: the same network (docs/models.md; gpt-tiny from
gpt_tiny.py), Fashion-MNIST normalisation or gpt-tiny's text windows and data
order/sharding (docs/data.md), per-worker batch, SGD with momentum or AdamW
(--optimizer), linear warm-up + cosine schedule over epochs*steps_per_epoch
(src/train/lr_schedule.cc), and evaluation cadence (before step t when
t % eval_every == 0, plus once at the end). Rank 0 writes metrics.jsonl with
the same keys Frugal uses (wall_time_s, step, test_accuracy, iter_s, ...).

    --hook none       plain DDP (fp32 ring allreduce through Gloo)
    --hook fp16       DDP + fp16_compress_hook
    --hook powersgd   DDP + PowerSGD hook, rank --powersgd-rank
    --hook localsgd   PyTorch's post-local SGD: post_localSGD_hook + PostLocalSGDOptimizer with a
                      PeriodicModelAverager: after --localsgd-warmup steps of ordinary DDP, each rank
                      steps on its own gradient and the parameters are averaged every
                      --localsgd-period steps (one rank per host, so no intra-host gradient allreduce)

--time-budget S stops training (all ranks agree, via a one-element allreduce
per step) once S seconds of training have elapsed, evaluations not counted
(train_time_s); the run then evaluates and writes a final record with
"stopped_by_budget": true.

Usage (by hand, 2 ranks on loopback):
    python3 ddp.py --rank 0 --world 2 --master 127.0.0.1:29511 --run-dir /tmp/d &
    python3 ddp.py --rank 1 --world 2 --master 127.0.0.1:29511 --run-dir /tmp/d
"""
import argparse
import datetime
import faulthandler
import gzip
import json
import math
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data_order  # noqa: E402
import gpt_tiny  # noqa: E402

MEAN = 0.2860
STD = 0.3530


def load_idx(path):
    """Reads an idx file (plain or .gz) into a numpy array, validating sizes."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 8:
        raise ValueError("%s: not an idx file of unsigned bytes" % path)
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    off = 4 + 4 * ndim
    count = int(np.prod(dims))
    if len(raw) - off != count:
        raise ValueError("%s: payload is %d bytes, header says %d" % (path, len(raw) - off, count))
    return np.frombuffer(raw, dtype=np.uint8, offset=off).reshape(dims)


def find(data_dir, stem):
    for name in (stem, stem + ".gz"):
        p = os.path.join(data_dir, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError("%s: neither %s nor %s.gz exists" % (data_dir, stem, stem))


def load_fashion_mnist(data_dir):
    def images(stem):
        x = load_idx(find(data_dir, stem)).astype(np.float32)
        x = (x / 255.0 - MEAN) / STD
        return torch.from_numpy(x).reshape(-1, 1, 28, 28)

    def labels(stem):
        return torch.from_numpy(load_idx(find(data_dir, stem)).astype(np.int64))

    return (images("train-images-idx3-ubyte"), labels("train-labels-idx1-ubyte"),
            images("t10k-images-idx3-ubyte"), labels("t10k-labels-idx1-ubyte"))


def build_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                             nn.Linear(2048, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 10))
    if name == "gpt-tiny":
        return gpt_tiny.GptTiny()
    raise ValueError("model %r is not supported by the baseline (mlp, cnn, gpt-tiny)" % name)


EXPECTED_PARAMS = {"mlp": 5824522, "cnn": 1630090, "gpt-tiny": gpt_tiny.EXPECTED_PARAMS}


def lr_at(step, base_lr, warmup, total):
    """Linear warm-up then cosine to 0, exactly src/train/lr_schedule.cc."""
    if step < warmup:
        return base_lr * (step + 1) / warmup
    span = max(1, total - warmup)
    t = min(1.0, (step - warmup) / span)
    return 0.5 * base_lr * (1.0 + math.cos(math.pi * t))


@torch.no_grad()
def evaluate(model, x, y, rank=0, world=1, group=None, batch=1000):
    """The evaluation record's fields: test_accuracy, and for text (uint8 windows) val_loss and bits_per_char,
    as Frugal's train::EvaluateModel. With world > 1 every rank evaluates its contiguous share of the test set
    and the sums are all-reduced over group (every rank must call it), as Frugal's sharded evaluation."""
    lo, hi = x.shape[0] * rank // world, x.shape[0] * (rank + 1) // world
    x, y = x[lo:hi], y[lo:hi]
    text = x.dtype == torch.uint8
    if text:
        correct, loss, count = gpt_tiny.evaluate_lm_sums(model, x, y)
    else:
        model.eval()
        correct, loss, count = 0, 0.0, x.shape[0]
        for i in range(0, x.shape[0], batch):
            correct += (model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item()
        model.train()
    if world > 1:
        sums = torch.tensor([correct, loss, count], dtype=torch.float64)
        dist.all_reduce(sums, group=group)
        correct, loss, count = sums[0].item(), sums[1].item(), sums[2].item()
    if text:
        return {"test_accuracy": correct / count, "val_loss": loss / count,
                "bits_per_char": loss / count / math.log(2)}
    return {"test_accuracy": correct / count}


def tx_bytes(ifname):
    """Bytes this host has sent on ifname (the namespace's own counter)."""
    if not ifname or ifname == "lo":  # loopback is shared by every rank: not per-host
        return None
    try:
        with open("/sys/class/net/%s/statistics/tx_bytes" % ifname) as f:
            return int(f.read())
    except OSError:
        return None


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--master", required=True, help="HOST:PORT of rank 0's TCP store")
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn", "gpt-tiny"])
    ap.add_argument("--hook", default="none", choices=["none", "fp16", "powersgd", "localsgd"])
    ap.add_argument("--powersgd-rank", type=int, default=4)
    ap.add_argument("--localsgd-period", type=int, default=4, help="--hook localsgd: steps between averagings")
    ap.add_argument("--localsgd-warmup", type=int, default=0,
                    help="--hook localsgd: steps of ordinary DDP (gradient allreduce) before local SGD starts")
    ap.add_argument("--single-bucket", action="store_true",
                    help="one DDP gradient bucket for the whole model (default: DDP's 1 MB first bucket + 25 MB)")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--text-file", default=gpt_tiny.BIBLE_KJV_PATH, help="gpt-tiny's corpus (as frugal --text-file)")
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "adamw"])
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=64, help="per worker")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--warmup-steps", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=0, help="0 = at the start of every epoch after the first")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--time-budget", type=float, default=0, help="seconds of training; 0 = none")
    ap.add_argument("--run-dir", required=True, help="rank 0 writes RUN_DIR/metrics.jsonl")
    ap.add_argument("--timeout-s", type=float, default=300)
    return ap.parse_args()


def init_distributed(args):
    host, port = args.master.rsplit(":", 1)
    store = dist.TCPStore(host, int(port), args.world, args.rank == 0,
                          timeout=datetime.timedelta(seconds=args.timeout_s))
    dist.init_process_group("gloo", store=store, rank=args.rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=args.timeout_s))


def build_ddp(args):
    """The model wrapped in DDP (which broadcasts rank 0's parameters), with the --hook registered."""
    torch.manual_seed(args.seed)
    model = build_model(args.model)
    nparams = sum(p.numel() for p in model.parameters())
    if nparams != EXPECTED_PARAMS[args.model]:
        raise SystemExit("model %s has %d parameters, docs/models.md says %d" %
                         (args.model, nparams, EXPECTED_PARAMS[args.model]))
    ddp_kwargs = {}
    if args.single_bucket:
        # One hook call per step. PowerSGD over Gloo in torch 1.13 crashes or hangs with several buckets
        # (collectives issued from future callbacks of different buckets pair up differently on
        # different ranks); DDP documents dist._DEFAULT_FIRST_BUCKET_BYTES as the knob for the first bucket.
        model_mb = nparams * 4 / 2**20 + 1
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(model_mb * 2**20)
        ddp_kwargs["bucket_cap_mb"] = model_mb
    ddp = nn.parallel.DistributedDataParallel(model, **ddp_kwargs)
    if args.hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif args.hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd_rank,
                                            start_powerSGD_iter=2, use_error_feedback=True, warm_start=True,
                                            random_seed=args.seed)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    elif args.hook == "localsgd":
        from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook
        # Every rank is its own host here: post_local_gradient_allreduce=False skips the intra-host
        # subgroup allreduce (its default subgroup is one per machine's CUDA devices, none on CPU).
        state = post_localSGD_hook.PostLocalSGDState(process_group=None, subgroup=None,
                                                     start_localSGD_iter=args.localsgd_warmup,
                                                     post_local_gradient_allreduce=False)
        ddp.register_comm_hook(state, post_localSGD_hook.post_localSGD_hook)
    return ddp


def make_optimizer(args, ddp):
    """SGD with momentum, or AdamW (as frugal --optimizer); for --hook localsgd wrapped in PostLocalSGDOptimizer, which averages the
    parameters every --localsgd-period steps after --localsgd-warmup (the hook's start_localSGD_iter)."""
    if args.optimizer == "adamw":
        opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps,
                                weight_decay=args.weight_decay)
    else:
        opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    if args.hook != "localsgd":
        return opt
    from torch.distributed.algorithms.model_averaging import averagers
    from torch.distributed.optim import PostLocalSGDOptimizer
    averager = averagers.PeriodicModelAverager(period=args.localsgd_period, warmup_steps=args.localsgd_warmup)
    return PostLocalSGDOptimizer(optim=opt, averager=averager)


@dataclass
class Window:
    """Rank 0's running totals since its last logged record."""
    start: float
    tx: Optional[int]
    steps: int = 0
    loss: float = 0.0
    compute: float = 0.0


class Run:
    """One rank's training: the loop, the evaluations and (rank 0) metrics.jsonl."""

    def __init__(self, args, ddp, data):
        self.args = args
        self.ddp = ddp
        self.x_train, self.y_train, self.x_test, self.y_test = data
        self.opt = make_optimizer(args, ddp)
        self.n = self.x_train.shape[0]
        self.global_batch = args.batch_size * args.world
        self.steps_per_epoch = self.n // self.global_batch  # drop_last
        self.total = args.epochs * self.steps_per_epoch
        if args.max_steps > 0:
            self.total = min(self.total, args.max_steps)
        self.lead = args.rank == 0
        self.metrics = None
        if self.lead:
            os.makedirs(args.run_dir, exist_ok=True)
            self.metrics = open(os.path.join(args.run_dir, "metrics.jsonl"), "w")
        self.ifname = os.environ.get("GLOO_SOCKET_IFNAME", "")
        self.t, self.epoch, self.stopped = 0, 0, False
        self.eval_s = 0.0  # seconds spent evaluating (every rank takes part)
        self.stop = torch.zeros(1)

    def evaluate(self):
        """Every rank evaluates its share of the test set; the replicas are equal (DDP), so the sums are the
        whole test set's."""
        return evaluate(self.ddp.module, self.x_test, self.y_test, self.args.rank, self.args.world, self.eval_group)

    def write(self, rec):
        self.metrics.write(json.dumps(rec) + "\n")
        self.metrics.flush()

    def elapsed(self):
        return time.perf_counter() - self.t0

    def train_time(self):
        """elapsed() less the evaluations so far (train_time_s, as Frugal's records)."""
        return self.elapsed() - self.eval_s

    def train(self):
        # The budget decision travels on its own group so it never interleaves with DDP's collectives.
        self.stop_group = dist.new_group(backend="gloo") if self.args.time_budget > 0 else None
        self.eval_group = dist.new_group(backend="gloo")  # evaluation sums, apart from DDP's collectives
        dist.barrier()
        self.t0 = time.perf_counter()
        self.tx0 = tx_bytes(self.ifname)
        self.window = Window(0.0, self.tx0)
        while self.t < self.total and not self.stopped:
            order = data_order.epoch_order(self.n, self.args.seed, self.epoch)
            for s in range(self.steps_per_epoch):
                if self.t >= self.total:
                    break
                if self.out_of_budget():
                    self.stopped = True
                    break
                self.step(order, s)
            if not self.stopped:
                self.epoch += 1

    def out_of_budget(self):
        """Whether rank 0 says the time budget is spent (every rank takes part)."""
        if self.args.time_budget <= 0:
            return False
        self.stop[0] = 1.0 if (self.lead and self.train_time() > self.args.time_budget) else 0.0
        dist.all_reduce(self.stop, op=dist.ReduceOp.MAX, group=self.stop_group)
        return self.stop[0] > 0

    def step(self, order, s):
        """Step s of the epoch: an evaluation when it is due, one SGD step, a log record when due."""
        args, t = self.args, self.t
        eval_now = t > 0 and (t % args.eval_every == 0 if args.eval_every > 0 else s == 0)
        if eval_now:
            rec = {"wall_time_s": self.elapsed(), "train_time_s": self.train_time(), "step": t, "epoch": self.epoch}
            e0 = time.perf_counter()
            rec.update(self.evaluate())
            rec["eval_s"] = time.perf_counter() - e0
            self.eval_s += rec["eval_s"]
            if self.lead:
                self.write(rec)
        begin = s * self.global_batch + args.rank * args.batch_size
        idx = torch.from_numpy(order[begin:begin + args.batch_size])
        for g in self.opt.param_groups:
            g["lr"] = lr_at(t, args.lr, args.warmup_steps, self.total)
        c0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        x, y = self.x_train[idx], self.y_train[idx]
        if x.dtype == torch.uint8:  # text windows: byte ids
            x, y = x.long(), y.long()
        loss = F.cross_entropy(self.ddp(x), y)
        loss.backward()  # DDP allreduces gradients during backward
        self.opt.step()
        lv = loss.item()
        if not math.isfinite(lv):
            raise SystemExit("training diverged: loss %s at step %d" % (lv, t))
        self.window.compute += time.perf_counter() - c0
        self.window.loss += lv
        self.window.steps += 1
        self.t += 1
        if self.lead and (self.t % args.log_every == 0 or self.t == self.total):
            self.log_window()

    def log_window(self):
        w, now, tx = self.window, self.elapsed(), tx_bytes(self.ifname)
        rec = {"wall_time_s": now, "train_time_s": now - self.eval_s, "step": self.t, "epoch": self.epoch,
               "loss": w.loss / w.steps,
               "lr": lr_at(self.t - 1, self.args.lr, self.args.warmup_steps, self.total),
               "iter_s": (now - w.start) / w.steps,
               "samples_per_s": w.steps * self.global_batch / max(1e-9, now - w.start),
               "step_s": w.compute / w.steps, "workers": self.args.world}
        if tx is not None and w.tx is not None:
            rec["bytes_sent_iface"] = (tx - w.tx) / w.steps
        self.write(rec)
        self.window = Window(now, tx)

    def finish(self):
        """The final evaluation and record (rank 0). Local SGD first averages the replicas once more (every
        rank takes part), so the final model is the average, as after a sync step of the other systems."""
        if self.args.hook == "localsgd":
            from torch.distributed.algorithms.model_averaging import utils as averaging
            averaging.average_parameters(self.ddp.module.parameters(), dist.group.WORLD)
        train_time = self.train_time()
        fields = self.evaluate()
        if not self.lead:
            return
        now = self.elapsed()
        tx = tx_bytes(self.ifname)
        rec = {"wall_time_s": now, "train_time_s": train_time, "step": self.t, "final": True,
               "stopped_by_budget": self.stopped, "total_steps": self.total, "hook": self.args.hook,
               "epochs_completed": self.epoch}
        if tx is not None and self.tx0 is not None and self.t > 0:
            rec["bytes_sent_iface_per_step"] = (tx - self.tx0) / self.t
        rec.update(fields)
        self.write(rec)
        self.metrics.close()


def main():
    args = parse_args()
    # `kill -USR1` prints every thread's Python stack (the harness does it before killing a hung run).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    torch.set_num_threads(args.threads)
    init_distributed(args)
    data = gpt_tiny.load_text(args.text_file) if args.model == "gpt-tiny" else load_fashion_mnist(args.data_dir)
    run = Run(args, build_ddp(args), data)
    run.train()
    run.finish()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
