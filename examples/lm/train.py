"""Trains the GPT of examples/lm/model.py on the corpus of prepare.py,
through frugal.DistributedModel, with the usual language-model recipe:
AdamW (no decay on biases, norms and the position table), linear warm-up
then cosine decay, gradients clipped at 1.0, bf16 autocast on CUDA, and a
validation loss on the held-out split every --eval-every steps.

    /usr/bin/python3 examples/lm/prepare.py                                 # once: build/lm/data
    PYTHONPATH=build/python build/frugal run --workers 4 -- \\
        /usr/bin/python3 examples/lm/train.py --size 25m --steps 500 --batch-size 1
    /usr/bin/python3 examples/lm/train.py --size 25m --steps 100           # a world of one
    ... examples/lm/train.py --size gpt2 --device cuda --batch-size 8 --seq-len 1024

Under `frugal run --elastic` (docs/guide/python.md, "Elastic scripts")
workers may be killed, leave on SIGTERM or join while it trains: the loop
runs on model.iteration until model.left, the schedule's state travels
with every snapshot, and after a change each rank draws its windows from
a stream of its new rank, the generation and the restore point.

docs/guide/language-models.md has the rest.
"""

import argparse
import hashlib
import json
import math
import os
import sys
import time

import numpy as np
import torch

import frugal

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import model as lm  # noqa: E402  (examples/lm/model.py)

REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_LR = {"25m": 1e-3, "gpt2": 6e-4}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=sorted(lm.SIZES), default="25m", help="model size (default 25m)")
    p.add_argument("--data", default=os.path.join(REPO, "build", "lm", "data"),
                   help="prepare.py's output folder (default build/lm/data)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=4, help="sequences per worker per step (default 4)")
    p.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default: the model's context)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default 1e-3 for 25m, 6e-4 for gpt2)")
    p.add_argument("--min-lr-ratio", type=float, default=0.1, help="the cosine ends at lr * this (default 0.1)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps (default: 10%% of --steps, at most 200)")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0, help="gradient norm clip (0: none)")
    p.add_argument("--accumulate", type=int, default=1,
                   help="backwards per step: each step's batch in this many micro-batches (default 1)")
    p.add_argument("--device", default="auto",
                   help="auto (cuda:LOCAL_RANK when there is a GPU, else cpu: frugal.device()), cpu, cuda or cuda:N")
    p.add_argument("--sync", choices=["auto", "step", "local"], default="auto",
                   help="Frugal's mode (default auto: local; see the guide for what step mode leaves out)")
    p.add_argument("--density", type=float, default=None, help="Frugal's density (default: the mode's)")
    p.add_argument("--local-steps", type=int, default=None, help="sync='local': steps between rounds (default 16)")
    p.add_argument("--outer-lr", type=float, default=None,
                   help="sync='local': the outer step's lr (default: Frugal's choice from the run's length)")
    p.add_argument("--outer-momentum", type=float, default=None,
                   help="sync='local': the outer step's Nesterov momentum (default 0.9)")
    p.add_argument("--vocab-size", type=int, default=None,
                   help="embedding rows (default: the tokenizer's for 25m, 50257 for gpt2)")
    p.add_argument("--eval-every", type=int, default=100, help="steps between validation losses (0: only at the end)")
    p.add_argument("--eval-batches", type=int, default=20, help="batches of the fixed validation windows")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--run-dir", default=os.environ.get("FRUGAL_RUN_DIR"),
                   help="write metrics.jsonl and the progress line as frugal train does (e.g. runs/lm; default "
                        "$FRUGAL_RUN_DIR, which a cluster job is given)")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="frugal.save every N steps into <run-dir>/checkpoints (0: never)")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in <run-dir>/checkpoints")
    p.add_argument("--summary", default=None,
                   help="write a JSON summary per rank to this path ({rank} is replaced by the rank)")
    p.add_argument("--trace", action="store_true",
                   help="append 'iteration wall_time generation' after every step to <run-dir>/steps-PID.txt "
                        "(bench/chaos/run.py --script lm reads them)")
    args = p.parse_args(argv)
    for name in ("steps", "batch_size", "eval_batches", "log_every"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for name in ("seq_len", "warmup", "local_steps", "vocab_size"):
        v = getattr(args, name)
        if v is not None and v < (0 if name == "warmup" else 1):
            p.error(f"--{name.replace('_', '-')} must be {'>= 0' if name == 'warmup' else '>= 1'}, got {v}")
    if args.eval_every < 0:
        p.error(f"--eval-every must be >= 0, got {args.eval_every}")
    if args.checkpoint_every < 0:
        p.error(f"--checkpoint-every must be >= 0, got {args.checkpoint_every}")
    if (args.checkpoint_every or args.resume) and not args.run_dir:
        p.error("--checkpoint-every and --resume need --run-dir (the checkpoints are in <run-dir>/checkpoints)")
    if args.trace and not args.run_dir:
        p.error("--trace needs --run-dir (the step times go to <run-dir>/steps-PID.txt)")
    for name in ("lr", "weight_decay", "clip", "min_lr_ratio"):
        v = getattr(args, name)
        if v is not None and not (math.isfinite(v) and v >= 0):
            p.error(f"--{name.replace('_', '-')} must be a finite number >= 0, got {v}")
    if args.lr is not None and args.lr == 0:
        p.error("--lr must be > 0")
    if args.min_lr_ratio > 1:
        p.error(f"--min-lr-ratio must be in [0, 1], got {args.min_lr_ratio}")
    if args.density is not None and not 0 < args.density <= 1:
        p.error(f"--density must be in (0, 1], got {args.density}")
    for name in ("local_steps", "outer_lr", "outer_momentum"):
        if getattr(args, name) is not None and args.sync == "step":
            p.error(f"--{name.replace('_', '-')} applies to --sync local or auto")
    if args.outer_lr is not None and not (math.isfinite(args.outer_lr) and args.outer_lr > 0):
        p.error(f"--outer-lr must be a finite number > 0, got {args.outer_lr}")
    if args.outer_momentum is not None and not 0 <= args.outer_momentum < 1:
        p.error(f"--outer-momentum must be in [0, 1), got {args.outer_momentum}")
    if args.device == "auto":
        args.device = str(frugal.device())
    if args.device != "cpu" and not args.device.startswith("cuda"):
        p.error(f"--device must be auto, cpu, cuda or cuda:N, got {args.device!r}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {args.device}: this torch ({torch.__version__}) sees no CUDA device")
    return args


class Corpus:
    """prepare.py's token arrays, memory-mapped."""

    def __init__(self, folder):
        meta_path = os.path.join(folder, "meta.json")
        if not os.path.exists(meta_path):
            raise SystemExit(f"train.py: {meta_path} not found: run /usr/bin/python3 examples/lm/prepare.py "
                             f"--out {folder} first")
        with open(meta_path) as f:
            self.meta = json.load(f)
        self.vocab_size = int(self.meta["vocab_size"])
        self.split = {}
        for name in ("train", "val"):
            path = os.path.join(folder, f"{name}.bin")
            if not os.path.exists(path):
                raise SystemExit(f"train.py: {path} not found: run examples/lm/prepare.py --out {folder} again")
            self.split[name] = np.memmap(path, dtype=np.dtype(self.meta["dtype"]), mode="r")

    def check(self, seq_len):
        for name, tokens in self.split.items():
            if len(tokens) < seq_len + 2:
                raise SystemExit(f"train.py: the {name} split has {len(tokens)} tokens, fewer than --seq-len "
                                 f"{seq_len} + 2: give a smaller --seq-len or a bigger corpus")

    def windows(self, name, starts, seq_len):
        tokens = self.split[name]
        rows = np.stack([tokens[s:s + seq_len + 1].astype(np.int64) for s in starts])
        rows = torch.from_numpy(rows)
        return rows[:, :-1], rows[:, 1:]

    def random_batch(self, rng, batch, seq_len):
        starts = rng.integers(0, len(self.split["train"]) - seq_len - 1, size=batch)
        return self.windows("train", starts, seq_len)

    def val_starts(self, n, seq_len):
        """n fixed windows spread over the validation split, the same in every run."""
        return np.linspace(0, len(self.split["val"]) - seq_len - 1, n).astype(np.int64)


def warmup_cosine(warmup, steps, min_ratio):
    """The lr multiplier of step t: linear from 1/warmup to 1, then a
    cosine down to min_ratio at the last step."""
    def factor(t):
        if t < warmup:
            return (t + 1) / warmup
        progress = min(1.0, (t - warmup) / max(1, steps - warmup))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    return factor


def build_optimizer(net, args, lr):
    """AdamW over the recipe's two groups (no decay on biases, norms and the
    position table); both modes read the groups."""
    groups = lm.parameter_groups(net, args.weight_decay)
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)


def autocast(device):
    if device.startswith("cuda"):
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def evaluate(net, corpus, starts, args, world):
    """Mean loss over the fixed validation windows; each rank takes every
    world_size-th batch, and the sums are added over the ranks (world: the
    model, whose rank and world size follow an elastic job's changes)."""
    was_training = net.training
    net.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for b in range(world.rank, len(starts) // args.batch_size, world.world_size):
            x, y = corpus.windows("val", starts[b * args.batch_size:(b + 1) * args.batch_size], args.seq_len)
            with autocast(args.device):
                _, loss = net(x.to(args.device), y.to(args.device))
            total += float(loss) * len(x)
            count += len(x)
    net.train(was_training)
    total, count = frugal.all_reduce([total, count], op="sum")
    return total / count


def window_stream(seed, model):
    """This rank's stream of training windows: seeded by the rank in the
    first world; after a membership change by the new rank, the generation
    and the restore point too, so that no two ranks of the new world, nor a
    rolled-back step, draw the windows of another's stream."""
    if model.generation <= 1:
        return np.random.default_rng([seed, model.rank])
    return np.random.default_rng([seed, model.rank, model.generation, model.iteration])


def parameter_digest(net):
    h = hashlib.sha256()
    for p in net.parameters():
        h.update(p.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def main(argv=None):
    args = parse_args(argv)
    frugal.init()
    corpus = Corpus(args.data)
    vocab = args.vocab_size or lm.SIZES[args.size]["vocab_size"] or corpus.vocab_size
    if vocab < corpus.vocab_size:
        raise SystemExit(f"train.py: --vocab-size {vocab} is smaller than the tokenizer's {corpus.vocab_size}")
    context = lm.SIZES[args.size]["context"]
    if args.seq_len is None:
        args.seq_len = context
    if args.seq_len > context:
        raise SystemExit(f"train.py: --seq-len {args.seq_len} is longer than the {args.size} model's context {context}")
    corpus.check(args.seq_len)
    if args.accumulate < 1 or args.batch_size % args.accumulate:
        raise SystemExit(f"train.py: --accumulate {args.accumulate} must be at least 1 and divide --batch-size "
                         f"{args.batch_size}")
    if args.accumulate > 1 and args.sync == "step":
        raise SystemExit("train.py: the step mode takes one backward per step; --accumulate needs --sync local")
    lr = args.lr or DEFAULT_LR[args.size]
    warmup = args.warmup if args.warmup is not None else min(200, args.steps // 10)

    torch.manual_seed(args.seed)  # the same initial model on every rank (rank 0's is broadcast anyway)
    net = lm.build(args.size, vocab_size=vocab).to(args.device)
    sync = args.sync
    if sync == "auto":
        # Frugal's resolver takes the local mode with two or more workers
        # and the step mode in a world of one; the step mode does not clip
        # (the gradients never reach .grad), so the example runs the whole
        # recipe in the local mode on any number of workers.
        sync = "local"
    opt = build_optimizer(net, args, lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(warmup, args.steps, args.min_lr_ratio))
    local = {}
    if sync == "local":
        for name in ("local_steps", "outer_lr", "outer_momentum"):
            if getattr(args, name) is not None:
                local[name] = getattr(args, name)
    changed = []  # on_world_change: the world changed in this step()
    model = frugal.DistributedModel(net, optimizer=opt, scheduler=sched, sync=sync, density=args.density,
                                    run_dir=args.run_dir, log_every=args.log_every, total_steps=args.steps,
                                    on_world_change=changed.append, **local)
    # In the step mode the gradients go to Frugal's pipeline as backward
    # makes them and never reach .grad: there is nothing to clip.
    clip = args.clip if sync == "local" else 0.0

    rng = window_stream(args.seed, model)  # each rank its own stream of windows
    val_starts = corpus.val_starts(args.eval_batches * args.batch_size, args.seq_len)
    if model.rank == 0:
        print(f"{args.size}: {net.num_parameters() / 1e6:.1f} M parameters ({net.num_parameters(False) / 1e6:.1f} M "
              f"in the blocks), vocab {vocab}, {model.world_size} worker(s), sync={sync}, batch {args.batch_size} x "
              f"{args.seq_len} tokens per worker, lr {lr:g}, warm-up {warmup}"
              + ("" if clip else ", no clipping (step mode)"), flush=True)
    history = {"train": [], "val": []}
    base = model.iteration  # the step of history["train"][0]: 0, or where an elastic joiner starts
    if args.resume:  # the model, optimizer, schedule, this rank's window stream and history as saved
        saved = frugal.load(model, scheduler=sched)
        if saved is not None:  # None: an elastic joiner, which took rank 0's state instead
            rng.bit_generator.state, history = saved["rng"], saved["history"]
            base = 0
    trace = None
    if args.trace:
        os.makedirs(args.run_dir, exist_ok=True)
        trace = open(os.path.join(args.run_dir, f"steps-{os.getpid()}.txt"), "a", buffering=1)
    start = last = time.time()
    while model.iteration < args.steps and not model.left:
        step = model.iteration
        x, y = corpus.random_batch(rng, args.batch_size, args.seq_len)
        x, y = x.to(args.device), y.to(args.device)
        loss = 0.0
        for xs, ys in zip(x.chunk(args.accumulate), y.chunk(args.accumulate)):  # gradient accumulation
            with autocast(args.device):
                _, part = model(xs, ys)
            (part / args.accumulate).backward()
            loss = loss + part.detach() / args.accumulate
        if clip:
            torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
        model.step(loss=loss)  # steps opt (local mode) or the pipeline's AdamW (step mode)
        if trace is not None:
            trace.write("%d %.4f %d\n" % (step, time.time(), model.generation))
        opt.zero_grad(set_to_none=True)
        sched.step()
        loss = float(loss)
        if not math.isfinite(loss):
            raise SystemExit(f"train.py: the loss is {loss} at step {step + 1}; try a smaller --lr")
        history["train"].append(loss)
        if changed:  # a new world: the steps from its restore point on are trained again, by new ranks
            changed.clear()
            del history["train"][max(0, model.iteration - base):]
            history["val"] = [(s, v) for s, v in history["val"] if s <= model.iteration]
            rng = window_stream(args.seed, model)
        if model.left or model.iteration != step + 1:
            continue  # left the job, or rolled back
        done = step + 1
        tokens_per_step = args.batch_size * args.seq_len * model.world_size
        if model.rank == 0 and (done % args.log_every == 0 or done == args.steps):
            now = time.time()
            n = args.log_every if done % args.log_every == 0 else done % args.log_every
            print(f"step {done}/{args.steps}: loss {loss:.3f}, lr {opt.param_groups[0]['lr']:.2e}, "
                  f"{(now - last) / n:.2f} s/step, {tokens_per_step * n / (now - last):,.0f} tok/s", flush=True)
            last = now
        if (args.eval_every and done % args.eval_every == 0) or done == args.steps:
            try:
                if done == args.steps:
                    model.finish()  # the last round: every rank ends on the same parameters
                    if model.left:  # an elastic job rolled back past this worker's end: the others finish
                        break
                    val = evaluate(net, corpus, val_starts, args, model)
                else:
                    val = model.with_synced_parameters(lambda: evaluate(net, corpus, val_starts, args, model))
            except frugal.WorldChanged:  # a peer died in the sums: no loss this time (the next step rolls back)
                val = None
            if val is not None:
                history["val"].append((done, val))
                if args.run_dir:
                    model.log(val_loss=val)
                if model.rank == 0:
                    print(f"step {done}: val loss {val:.3f} (ppl {math.exp(min(val, 50)):.1f})", flush=True)
            last = time.time()
        if args.checkpoint_every and done % args.checkpoint_every == 0 and done < args.steps:
            frugal.save(model, scheduler=sched, extra={"rng": rng.bit_generator.state, "history": history})
    elapsed = time.time() - start
    if model.left:
        model.finish()
        print(f"train.py: left the job at step {model.iteration}", flush=True)
        return
    if model.rank == 0:
        final = f"{history['val'][-1][1]:.3f}" if history["val"] and history["val"][-1][0] == args.steps else "none"
        print(f"done: {args.steps} steps in {elapsed:.0f} s, final val loss {final}", flush=True)
    if args.summary:
        summary = dict(rank=model.rank, world_size=model.world_size, sync=sync, size=args.size,
                       parameters=net.num_parameters(), train_loss=history["train"], val_loss=history["val"],
                       seconds=elapsed, parameter_sha256=parameter_digest(net))
        with open(args.summary.replace("{rank}", str(model.rank)), "w") as f:
            json.dump(summary, f)


if __name__ == "__main__":
    main()
