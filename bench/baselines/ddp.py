#!/usr/bin/python3
"""PyTorch DDP baseline for the time-to-accuracy benchmark and the GPU comparison.

One process per rank, Gloo backend by default. It reproduces a Frugal run exactly except
for the gradient exchange: the same network (docs/design/models.md: mlp, cnn, resnet18; gpt-tiny from
gpt_tiny.py), Fashion-MNIST normalisation or gpt-tiny's text windows and data
order/sharding (docs/design/data.md), per-worker batch, SGD with momentum or AdamW
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
    --hook frugal     DDP + frugal.sparse_hook at --frugal-density: an existing DDP script converted
                      with one line (docs/guide/python.md)
    --hook frugal_model  no DDP: the model in frugal.DistributedModel (Frugal's whole pipeline), its
                      step() for the optimizer's; both need build/python on PYTHONPATH
    --hook frugal_model_local  the same with DistributedModel(sync="local"), frugal train's default
                      mode (local steps, a synced fragment every 4); evaluations on the synced parameters

--time-budget S stops training (all ranks agree, via a one-element allreduce
per step) once S seconds of training have elapsed, evaluations not counted
(train_time_s); the run then evaluates and writes a final record with
"stopped_by_budget": true.

--device cuda puts the model, the whole data set and the batches on one GPU (--gpu, default LOCAL_RANK or
rank modulo the GPUs seen). --backend gloo (the default) all-reduces CUDA tensors through Gloo, the only
choice for several ranks on one GPU; --backend nccl needs one GPU per rank and says so before NCCL does
("Duplicate GPU detected"). Nothing in a step synchronizes with the GPU: the loss is summed on the device
and read at log time, step_s comes from CUDA events, and rank 0 synchronizes only at its measurement points
(start, log records, evaluations, end). Note [GPU timing] says what the figures mean.

--compute-only runs no process group and no DDP: one process times plain PyTorch steps of the same model,
batch and data (the "compute" to hold Frugal's compute against). Several of them started together measure
the compute of ranks sharing one GPU.

At the end rank 0 (or the --compute-only process) prints one line of JSON on stdout, {"summary": "ddp.py",
...}: model, device, backend, workers, batch, steps, median iteration seconds, compute seconds, accuracy.

Usage (by hand, 2 ranks on loopback):
    python3 ddp.py --rank 0 --world 2 --master 127.0.0.1:29511 --run-dir /tmp/d &
    python3 ddp.py --rank 1 --world 2 --master 127.0.0.1:29511 --run-dir /tmp/d
    python3 ddp.py --compute-only --device cuda --model resnet18 --max-steps 50
    bench/baselines/ddp_gpu_test.sh    (the GPU comparison, every case in one go)

Note [GPU timing]
  iter_s_median (summary line): rank 0 synchronizes with the GPU at every log record, so each
  --log-every window is the wall time of its steps, queued work included; the median is taken over the
  windows without an evaluation, leaving out the first one (CUDA and cuDNN warm-up, DDP's first-iteration
  bucket rebuild) when at least 3 remain. step_s: the GPU time between events recorded before zero_grad and
  after optimizer.step on the current stream, so it includes waiting for DDP's all-reduce. compute_s
  (--compute-only): the median of batch gather + forward + backward with a synchronize on both sides, as
  Frugal's compute_s (its ComputeStep also reads the loss); step_s there adds optimizer.step.
"""
import argparse
import datetime
import faulthandler
import gzip
import json
import math
import os
import signal
import socket
import statistics
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


class BasicBlock(nn.Module):
    """ResNet basic block, as src/models/model.cc (same module names, so state dicts line up)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.shortcut(x) if self.shortcut is not None else x))


class ResNet18(nn.Module):
    """Frugal's resnet18 (docs/design/models.md): 3x3 stride-1 stem, no max-pool, 1x28x28 input."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 64, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        cin = 64
        for stage, width in enumerate((64, 128, 256, 512)):
            blocks = []
            for b in range(2):
                blocks.append(BasicBlock(cin, width, 2 if stage > 0 and b == 0 else 1))
                cin = width
            self.add_module("layer%d" % (stage + 1), nn.Sequential(*blocks))
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def build_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                             nn.Linear(2048, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 10))
    if name == "resnet18":
        return ResNet18()
    if name == "gpt-tiny":
        return gpt_tiny.GptTiny()
    raise ValueError("model %r is not supported by the baseline (%s)" % (name, ", ".join(MODELS)))


MODELS = ["mlp", "cnn", "resnet18", "gpt-tiny"]
EXPECTED_PARAMS = {"mlp": 5824522, "cnn": 1630090, "resnet18": 11172810, "gpt-tiny": gpt_tiny.EXPECTED_PARAMS}


def checked_model(args):
    """The model of --model, seeded, on the CPU; its parameter count checked against docs/design/models.md."""
    torch.manual_seed(args.seed)
    model = build_model(args.model)
    nparams = sum(p.numel() for p in model.parameters())
    if nparams != EXPECTED_PARAMS[args.model]:
        raise SystemExit("model %s has %d parameters, docs/design/models.md says %d" %
                         (args.model, nparams, EXPECTED_PARAMS[args.model]))
    return model, nparams


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


@torch.no_grad()
def average_buffers(model, world, group):
    """Averages the floating-point buffers (batch-norm running statistics) over the ranks, as Frugal does
    before every evaluation (docs/design/models.md); every rank must call it. DDP's broadcast_buffers keeps them
    close, but each rank's last forward has moved its own copy."""
    bufs = [b for b in model.buffers() if b.is_floating_point()]
    if world <= 1 or not bufs:
        return
    flat = torch.cat([b.detach().reshape(-1).cpu() for b in bufs])
    dist.all_reduce(flat, group=group)
    flat /= world
    offset = 0
    for b in bufs:
        b.copy_(flat[offset:offset + b.numel()].view_as(b))
        offset += b.numel()


def synchronize(device):
    """Waits for the queued GPU work (a measurement point); nothing on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class StepTimer:
    """Sums the time of timed spans without synchronizing inside them: on CUDA an event pair per span on the
    current stream, read by take() after the caller has synchronized; on the CPU perf_counter."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.spans = []
        self.cpu_s = 0.0

    def start(self):
        if not self.cuda:
            return time.perf_counter()
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def stop(self, begin):
        if not self.cuda:
            self.cpu_s += time.perf_counter() - begin
            return
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        self.spans.append((begin, e))

    def take(self):
        """Seconds in the spans stopped since the last take()."""
        s = self.cpu_s + sum(a.elapsed_time(b) for a, b in self.spans) / 1000.0
        self.spans, self.cpu_s = [], 0.0
        return s


def median_window(windows):
    """(median seconds per step, windows used) over (steps, seconds) windows, the first left out when 3 or
    more remain (Note [GPU timing]); the median is None when there are none."""
    if len(windows) >= 3:
        windows = windows[1:]
    return (statistics.median(s / n for n, s in windows) if windows else None), len(windows)


def device_name(device):
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def print_summary(fields):
    """The final single line of JSON on stdout (other output may precede it)."""
    print(json.dumps(dict({"summary": "ddp.py"}, **fields)), flush=True)


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
    ap.add_argument("--rank", type=int, help="required unless --compute-only")
    ap.add_argument("--world", type=int, help="required unless --compute-only")
    ap.add_argument("--master", help="HOST:PORT of rank 0's TCP store (required unless --compute-only)")
    ap.add_argument("--model", default="mlp", choices=MODELS)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--gpu", type=int, default=-1,
                    help="--device cuda: the GPU index (default: LOCAL_RANK, else rank, modulo the GPUs seen)")
    ap.add_argument("--backend", default="gloo", choices=["gloo", "nccl"],
                    help="DDP's backend; nccl needs --device cuda and one GPU per rank")
    ap.add_argument("--compute-only", action="store_true",
                    help="one process, no DDP: time plain PyTorch steps (--max-steps of them, default 50, after "
                         "--compute-warmup); prints the summary line only")
    ap.add_argument("--compute-warmup", type=int, default=10, help="--compute-only: untimed steps first")
    ap.add_argument("--hook", default="none", choices=["none", "fp16", "powersgd", "localsgd", "frugal", "frugal_model",
                                                           "frugal_model_local"],
                    help="frugal: DDP + frugal.sparse_hook (the one-line conversion); frugal_model: no DDP, the "
                         "model in frugal.DistributedModel (needs the frugal package on PYTHONPATH)")
    ap.add_argument("--frugal-density", type=float, default=None,
                    help="--hook frugal / frugal_model*: fraction of each bucket sent (default: Frugal's, 0.03; "
                         "1 per round with frugal_model_local)")
    ap.add_argument("--frugal-deflate", choices=["on", "off"], default="on",
                    help="--hook frugal: hook_state's deflate")
    ap.add_argument("--frugal-exchange", choices=["auto", "flat", "hierarchical", "sharded"], default="auto",
                    help="--hook frugal: hook_state's exchange")
    ap.add_argument("--frugal-dgc-momentum", type=float, default=0.0,
                    help="--hook frugal: hook_state's dgc_momentum (DGC's momentum correction; pair it with "
                         "--momentum 0)")
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
    ap.add_argument("--eval-limit", type=int, default=0,
                    help="evaluate on the first N test samples (0 = all); for quick checks")
    ap.add_argument("--run-dir", help="rank 0 writes RUN_DIR/metrics.jsonl (required unless --compute-only)")
    ap.add_argument("--timeout-s", type=float, default=300)
    args = ap.parse_args()
    if not args.compute_only:
        missing = [f for f in ("rank", "world", "master", "run_dir") if getattr(args, f) is None]
        if missing:
            ap.error("the following arguments are required (unless --compute-only): " +
                     ", ".join("--" + f.replace("_", "-") for f in missing))
        if args.world < 1 or not 0 <= args.rank < args.world:
            ap.error("--rank %d is not in [0, --world %d)" % (args.rank, args.world))
    if args.backend == "nccl" and args.device != "cuda":
        ap.error("--backend nccl needs --device cuda (NCCL has no CPU tensors; use gloo)")
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: this PyTorch (%s) sees no CUDA GPU" % torch.__version__)
    if args.batch_size < 1:
        ap.error("--batch-size must be positive")
    return args


def pick_device(args):
    """The torch.device of this rank; on CUDA also made the current device (NCCL and Gloo use it)."""
    if args.device == "cpu":
        return torch.device("cpu")
    count = torch.cuda.device_count()
    index = args.gpu if args.gpu >= 0 else int(os.environ.get("LOCAL_RANK", args.rank or 0)) % count
    if index >= count:
        raise SystemExit("--gpu %d: only %d GPU(s) are visible" % (index, count))
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def gpu_identity(device):
    """This host and GPU, the same string for every process that uses the same physical GPU."""
    gpu = "%s#%d" % (os.environ.get("CUDA_VISIBLE_DEVICES", "*"), device.index)
    try:  # the GPU's UUID where this torch has it (2.x: properties.uuid.bytes, 16 small integers)
        raw = torch.cuda.get_device_properties(device).uuid.bytes
        gpu = "uuid " + bytes(b & 0xff for b in raw).hex()
    except (AttributeError, TypeError, ValueError):
        pass
    return "%s %s" % (socket.gethostname(), gpu)


def check_one_rank_per_gpu(store, args, device):
    """NCCL refuses two ranks on one GPU ("Duplicate GPU detected") at its first collective; say it first,
    in words a user can act on. Every rank publishes its GPU through the store and checks the others'."""
    mine = gpu_identity(device)
    store.set("ddp.py/gpu/%d" % args.rank, mine)
    store.wait(["ddp.py/gpu/%d" % r for r in range(args.world)])
    gpus = [store.get("ddp.py/gpu/%d" % r).decode() for r in range(args.world)]
    # Rank 0 holds the store: it leaves only after every rank has read what it needs.
    store.set("ddp.py/gpu-read/%d" % args.rank, "1")
    if args.rank == 0:
        store.wait(["ddp.py/gpu-read/%d" % r for r in range(args.world)])
    for gpu in gpus:  # every rank stops, also one with a GPU of its own
        same = [r for r in range(args.world) if gpus[r] == gpu]
        if len(same) > 1:
            raise SystemExit("--backend nccl: ranks %s share one GPU (%s), and NCCL runs one rank per GPU "
                             "(\"Duplicate GPU detected\"). With several workers on one GPU use --backend gloo "
                             "(Gloo all-reduces the CUDA tensors), or give each rank its own GPU (--gpu, LOCAL_RANK)."
                             % (", ".join(map(str, same)), gpu))


def init_distributed(args, device):
    host, port = args.master.rsplit(":", 1)
    store = dist.TCPStore(host, int(port), args.world, args.rank == 0,
                          timeout=datetime.timedelta(seconds=args.timeout_s))
    if args.backend == "nccl":
        check_one_rank_per_gpu(store, args, device)
    dist.init_process_group(args.backend, store=store, rank=args.rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=args.timeout_s))


def join_frugal(args):
    """frugal.init() from this script's --rank/--world/--master, as torchrun's variables: rank 0 serves
    Frugal's rendezvous on the master port + 1. Across network namespaces the harness names each rank's
    address in FRUGAL_ADVERTISE_HOST."""
    import frugal
    host, port = args.master.rsplit(":", 1)
    os.environ.update(RANK=str(args.rank), WORLD_SIZE=str(args.world), MASTER_ADDR=host, MASTER_PORT=port)
    return frugal, frugal.init(timeout_s=args.timeout_s)


class FrugalModel:
    """--hook frugal_model: the user's model in frugal.DistributedModel instead of DDP (error feedback, sparse
    exchange, the sparse optimizer on a master copy); Run calls it like DDP and steps it through FrugalStep."""

    def __init__(self, args, model):
        frugal, _ = join_frugal(args)
        self.module = model
        # frugal_model_local: no total_steps, so the outer step is DiLoCo's, as frugal train picks for runs
        # of 20 rounds or more (every mlp and cnn scenario).
        sync = "local" if args.hook == "frugal_model_local" else "step"
        self.dm = frugal.DistributedModel(model, optimizer=args.optimizer, lr=args.lr, momentum=args.momentum,
                                          weight_decay=args.weight_decay, beta1=args.beta1, beta2=args.beta2,
                                          eps=args.eps, density=args.frugal_density, timeout_s=args.timeout_s,
                                          seed=args.seed, sync=sync)

    def __call__(self, x):
        return self.dm(x)

    def finish(self):
        """The final parameters into the module (replicas compared)."""
        self.dm.finish()


class FrugalStep:
    """The optimizer's face of a FrugalModel: Run sets param_groups[0]["lr"] before each step's forward, which
    zero_grad() passes on (set_lr acts from the next backward), and step() is DistributedModel.step()."""

    def __init__(self, model, lr):
        self.dm = model.dm
        self.param_groups = [{"lr": lr}]
        self.lr = lr

    def zero_grad(self, set_to_none=True):
        if self.param_groups[0]["lr"] != self.lr:
            self.lr = self.param_groups[0]["lr"]
            self.dm.set_lr(self.lr)

    def step(self):
        self.dm.step()


def build_ddp(args, device):
    """The model on DEVICE wrapped in DDP (which broadcasts rank 0's parameters), with the --hook registered;
    for --hook frugal_model a FrugalModel instead."""
    model, nparams = checked_model(args)
    model.to(device)
    if args.hook.startswith("frugal_model"):
        return FrugalModel(args, model)
    ddp_kwargs = {"device_ids": [device.index]} if device.type == "cuda" else {}
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
    elif args.hook == "frugal":
        frugal, _ = join_frugal(args)
        density = 0.03 if args.frugal_density is None else args.frugal_density
        ddp.register_comm_hook(frugal.hook_state(density=density, timeout_s=args.timeout_s,
                                                 dgc_momentum=args.frugal_dgc_momentum,
                                                 deflate=args.frugal_deflate == "on", exchange=args.frugal_exchange),
                               frugal.sparse_hook)
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
    if args.hook.startswith("frugal_model"):
        return FrugalStep(ddp, args.lr)
    opt = make_plain_optimizer(args, ddp.parameters())
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
    loss: object = 0.0  # a device tensor once a step has run: read at log time, not in the step
    eval_s: float = 0.0  # evaluations inside the window


class Run:
    """One rank's training: the loop, the evaluations and (rank 0) metrics.jsonl."""

    def __init__(self, args, ddp, data, device):
        self.args = args
        self.ddp = ddp
        self.device = device
        self.x_train, self.y_train, self.x_test, self.y_test = (t.to(device) for t in data)
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
        self.timer = StepTimer(device)
        self.windows = []  # rank 0: (steps, seconds) of each log window without an evaluation
        self.step_windows = []  # rank 0: (steps, step_s seconds) of the same windows
        # The budget decision travels on its own group so it never interleaves with DDP's collectives.
        self.stop_group = dist.new_group(backend="gloo") if args.time_budget > 0 else None
        # Evaluation sums, batch-norm averages and barriers: Gloo on CPU tensors, apart from DDP's collectives
        # (whatever DDP's backend).
        self.eval_group = dist.new_group(backend="gloo")

    def evaluate(self):
        """Every rank evaluates its share of the test set with the replicas' batch-norm statistics averaged;
        the parameters are equal (DDP), so the sums are the whole test set's."""
        def run():
            average_buffers(self.ddp.module, self.args.world, self.eval_group)
            return evaluate(self.ddp.module, self.x_test, self.y_test, self.args.rank, self.args.world,
                            self.eval_group)
        if self.args.hook == "frugal_model_local":  # the replicas differ between syncs: the common model
            return self.ddp.dm.with_synced_parameters(run)
        return run()

    def barrier(self):
        dist.barrier(group=self.eval_group)

    def write(self, rec):
        self.metrics.write(json.dumps(rec) + "\n")
        self.metrics.flush()

    def elapsed(self):
        return time.perf_counter() - self.t0

    def train_time(self):
        """elapsed() less the evaluations so far (train_time_s, as Frugal's records)."""
        return self.elapsed() - self.eval_s

    def train(self):
        synchronize(self.device)
        self.barrier()
        self.t0 = time.perf_counter()
        self.tx0 = tx_bytes(self.ifname)
        self.window = Window(0.0, self.tx0)
        while self.t < self.total and not self.stopped:
            # On the device once per epoch: a pageable copy per step would wait for the GPU every step.
            order = torch.from_numpy(data_order.epoch_order(self.n, self.args.seed, self.epoch)).to(self.device)
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
            synchronize(self.device)
            rec = {"wall_time_s": self.elapsed(), "train_time_s": self.train_time(), "step": t, "epoch": self.epoch}
            e0 = time.perf_counter()
            rec.update(self.evaluate())  # ends synchronized: it reads its sums
            rec["eval_s"] = time.perf_counter() - e0
            self.eval_s += rec["eval_s"]
            self.window.eval_s += rec["eval_s"]
            if self.lead:
                self.write(rec)
        begin = s * self.global_batch + args.rank * args.batch_size
        idx = order[begin:begin + args.batch_size]
        for g in self.opt.param_groups:
            g["lr"] = lr_at(t, args.lr, args.warmup_steps, self.total)
        c0 = self.timer.start()
        self.opt.zero_grad(set_to_none=True)
        x, y = self.x_train[idx], self.y_train[idx]
        if x.dtype == torch.uint8:  # text windows: byte ids
            x, y = x.long(), y.long()
        loss = F.cross_entropy(self.ddp(x), y)
        loss.backward()  # DDP allreduces gradients during backward
        self.opt.step()
        self.timer.stop(c0)
        self.window.loss = self.window.loss + loss.detach()
        self.window.steps += 1
        self.t += 1
        if self.lead and (self.t % args.log_every == 0 or self.t == self.total):
            self.log_window()

    def log_window(self):
        synchronize(self.device)
        w, now, tx = self.window, self.elapsed(), tx_bytes(self.ifname)
        loss = float(w.loss) / w.steps
        if not math.isfinite(loss):
            raise SystemExit("training diverged: loss %s in steps %d..%d" % (loss, self.t - w.steps, self.t - 1))
        step_s = self.timer.take()
        if w.eval_s == 0:
            self.windows.append((w.steps, now - w.start))
            self.step_windows.append((w.steps, step_s))
        rec = {"wall_time_s": now, "train_time_s": now - self.eval_s, "step": self.t, "epoch": self.epoch,
               "loss": loss,
               "lr": lr_at(self.t - 1, self.args.lr, self.args.warmup_steps, self.total),
               "iter_s": (now - w.start) / w.steps,
               "samples_per_s": w.steps * self.global_batch / max(1e-9, now - w.start),
               "step_s": step_s / w.steps, "workers": self.args.world}
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
        if self.args.hook.startswith("frugal_model"):
            self.ddp.finish()
        synchronize(self.device)
        train_time = self.train_time()
        fields = self.evaluate()
        if not self.lead:
            return
        now = self.elapsed()
        tx = tx_bytes(self.ifname)
        rec = {"wall_time_s": now, "train_time_s": train_time, "step": self.t, "final": True,
               "stopped_by_budget": self.stopped, "total_steps": self.total, "hook": self.args.hook,
               "epochs_completed": self.epoch, "device": self.args.device, "backend": self.args.backend}
        if tx is not None and self.tx0 is not None and self.t > 0:
            rec["bytes_sent_iface_per_step"] = (tx - self.tx0) / self.t
        rec.update(fields)
        self.write(rec)
        self.metrics.close()
        a = self.args
        iter_s, windows = median_window(self.windows)
        print_summary(dict({"mode": "ddp", "model": a.model, "device": a.device, "gpu": device_name(self.device),
                            "torch": torch.__version__, "backend": a.backend, "hook": a.hook, "workers": a.world,
                            "batch_size": a.batch_size, "steps": self.t, "iter_s_median": iter_s,
                            "iter_windows": windows, "step_s_median": median_window(self.step_windows)[0],
                            "compute_s": None, "train_time_s": train_time, "wall_time_s": now,
                            "eval_samples": int(self.x_test.shape[0])}, **fields))


def make_plain_optimizer(args, params):
    if args.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps,
                                 weight_decay=args.weight_decay)
    return torch.optim.SGD(params, lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)


def compute_only(args, data, device):
    """Times plain single-process PyTorch steps (no DDP, no process group) of the model on its own batches
    (rank 0's of a one-worker run) and prints the summary line (Note [GPU timing])."""
    model, _ = checked_model(args)
    model.to(device).train()
    opt = make_plain_optimizer(args, model.parameters())
    x_train, y_train = data[0].to(device), data[1].to(device)
    order = torch.from_numpy(data_order.epoch_order(x_train.shape[0], args.seed, 0)).to(device)
    steps = args.max_steps if args.max_steps > 0 else 50
    per_epoch = x_train.shape[0] // args.batch_size
    compute, step = [], []
    for i in range(args.compute_warmup + steps):
        begin = (i % per_epoch) * args.batch_size
        for g in opt.param_groups:  # the run's warm-up, so that the model stays finite as it would
            g["lr"] = lr_at(i, args.lr, args.warmup_steps, args.compute_warmup + steps)
        synchronize(device)
        c0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        idx = order[begin:begin + args.batch_size]
        x, y = x_train[idx], y_train[idx]
        if x.dtype == torch.uint8:
            x, y = x.long(), y.long()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        synchronize(device)
        c1 = time.perf_counter()
        opt.step()
        synchronize(device)
        if i >= args.compute_warmup:
            compute.append(c1 - c0)
            step.append(time.perf_counter() - c0)
    lv = loss.item()  # reported, not checked: a diverged loss does not change what the steps cost
    print_summary({"mode": "compute-only", "model": args.model, "device": args.device, "gpu": device_name(device),
                   "torch": torch.__version__, "backend": None, "workers": 1, "batch_size": args.batch_size,
                   "steps": steps, "warmup_steps": args.compute_warmup, "compute_s": statistics.median(compute),
                   "compute_s_min": min(compute), "step_s_median": statistics.median(step), "iter_s_median": None,
                   "loss": lv, "test_accuracy": None, "pid": os.getpid()})


def main():
    args = parse_args()
    # `kill -USR1` prints every thread's Python stack (the harness does it before killing a hung run).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    torch.set_num_threads(args.threads)
    device = pick_device(args)
    data = gpt_tiny.load_text(args.text_file) if args.model == "gpt-tiny" else load_fashion_mnist(args.data_dir)
    if args.eval_limit > 0:
        data = data[:2] + (data[2][:args.eval_limit], data[3][:args.eval_limit])
    if args.compute_only:
        compute_only(args, data, device)
        return
    init_distributed(args, device)
    run = Run(args, build_ddp(args, device), data, device)
    run.train()
    run.finish()
    run.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
