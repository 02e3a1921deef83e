"""Host memory of a training step per worker, in bytes per parameter, for
the language models of examples/lm: plain PyTorch, and Frugal's step and
local modes with 1 and 2 workers under `frugal run`.

    PYTHONPATH=build/python nice -n 19 /usr/bin/python3 bench/memory/lm_memory.py
    ... bench/memory/lm_memory.py --sizes 25m --workers 1,2 --modes plain,step,local

Each worker builds the model and its AdamW, reads its resident set (VmRSS),
resets the peak (VmHWM, via /proc/self/clear_refs) and then wraps the model
(not in the plain rows) and trains --steps steps on random tokens. The
figure is (peak - resident after building) / parameters: what training adds
to the model's own copy, AdamW's state, gradients and activations included;
the plain row shows those alone, so Frugal's share is a row minus it.
Per-rank JSON and a table (table.md) go to --out (build/memory/lm).
bench/memory/README.md says what the figures do not separate.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "examples", "lm"))
import model as lm  # noqa: E402

# Shapes of the measured steps: few tokens, so that the activations stay
# small beside the state that grows with the parameters (the plain row
# shows what they and AdamW take), and few steps for a 2-core machine.
# The local rows take rounds of 4 steps in 4 fragments, one fragment every
# step, so after 6 steps every fragment has synced and its exchange state and
# outer momentum exist (DiLoCo's Nesterov step, given explicitly: a run this
# short would otherwise average plainly and hold no momentum).
SHAPES = {"25m": dict(vocab=8192, batch=1, seq=64, steps=6), "gpt2": dict(vocab=50257, batch=1, seq=64, steps=6),
          "gpt2-medium": dict(vocab=50257, batch=1, seq=64, steps=6)}
MODES = ("plain", "step", "local")


def _status_kb(field):
    m = re.search(rf"^{field}:\s+(\d+) kB", open("/proc/self/status").read(), re.M)
    return int(m.group(1)) * 1024


def _reset_peak():
    """VmHWM from now on; False where the kernel refuses (then the peak is since the process started)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def worker(args):
    import frugal
    world = frugal.init()  # the plain rows too: the same allocator settings (frugal.init's heap retention)
    shape = SHAPES[args.size]
    torch.manual_seed(0)
    net = lm.build(args.size, vocab_size=shape["vocab"])
    n = net.num_parameters()
    groups = ([{"params": list(net.parameters()), "weight_decay": 0.0}] if args.mode == "step"
              else lm.parameter_groups(net, 0.1))
    opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95))
    built = _status_kb("VmRSS")
    reset = _reset_peak()
    model = net
    if args.mode != "plain":
        local = (dict(total_steps=shape["steps"], local_steps=4, local_fragments=4, outer_lr=0.7, outer_momentum=0.9)
                 if args.mode == "local" else {})
        model = frugal.DistributedModel(net, optimizer=opt, sync=args.mode, **local)
    wrapped = _status_kb("VmRSS")
    g = torch.Generator().manual_seed(1 + world.rank)
    start = time.time()
    for _ in range(shape["steps"]):
        x = torch.randint(0, shape["vocab"], (shape["batch"], shape["seq"] + 1), generator=g)
        _, loss = model(x[:, :-1], x[:, 1:])
        loss.backward()
        if args.mode != "step":
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        if args.mode == "plain":
            opt.step()
        else:
            model.step()
        opt.zero_grad(set_to_none=True)
    step_s = (time.time() - start) / shape["steps"]
    peak_train = _status_kb("VmHWM")
    held = model.host_memory() if args.mode != "plain" else {}
    if args.mode != "plain":
        model.finish()
    result = dict(size=args.size, mode=args.mode, workers=world.world_size, rank=world.rank, parameters=n, rss_built=built, rss_wrapped=wrapped,
                  peak_train=peak_train, peak_with_finish=_status_kb("VmHWM"), peak_reset=reset, step_s=step_s,
                  host_memory=held, torch=torch.__version__, threads=torch.get_num_threads(), **shape)
    with open(args.result.replace("{rank}", str(result["rank"])), "w") as f:
        json.dump(result, f)


def run_all(args):
    os.makedirs(args.out, exist_ok=True)
    frugal_bin = args.frugal or os.environ.get("FRUGAL_BINARY") or os.path.join(REPO, "build", "frugal")
    rows = []
    for size in args.sizes.split(","):
        for mode in args.modes.split(","):
            for w in map(int, args.workers.split(",")):
                if mode == "plain" and w != 1:
                    continue
                tag = f"{size}-{mode}-w{w}"
                result = os.path.join(args.out, tag + "-rank{rank}.json")
                cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--size", size, "--mode", mode,
                       "--result", result]
                if mode != "plain":
                    cmd = [frugal_bin, "run", "--workers", str(w), "--timeout-s", "600", "--"] + cmd
                print(f"{tag}: running", flush=True)
                p = subprocess.run(cmd, capture_output=True, text=True)
                if p.returncode != 0:
                    print(f"{tag}: failed (exit {p.returncode})\n{p.stdout[-2000:]}{p.stderr[-4000:]}", file=sys.stderr)
                    continue
                ranks = [json.load(open(result.replace("{rank}", str(r)))) for r in range(w)]
                rows.append(ranks)
                print(f"{tag}: " + format_row(ranks), flush=True)
    table = ["| model | mode | workers | parameters | B/param over the built model (train; with finish) | "
             "after wrapping | s/step |", "|---|---|---|---|---|---|---|"]
    for ranks in rows:
        r0 = ranks[0]
        n = r0["parameters"]
        worst = max(ranks, key=lambda r: r["peak_with_finish"] - r["rss_built"])
        table.append(f"| {r0['size']} | {r0['mode']} | {r0['workers']} | {n / 1e6:.1f} M | "
                     f"{(max(r['peak_train'] - r['rss_built'] for r in ranks)) / n:.1f}; "
                     f"{(worst['peak_with_finish'] - worst['rss_built']) / n:.1f} | "
                     f"{max(r['rss_wrapped'] - r['rss_built'] for r in ranks) / n:.1f} | "
                     f"{max(r['step_s'] for r in ranks):.2f} |")
    table += ["", "The engine's own buffers (DistributedModel.host_memory(), rank 0, bytes per parameter):", ""]
    names = []
    for ranks in rows:
        names += [k for k in ranks[0].get("host_memory", {}) if k not in names]
    table += ["| model | mode | workers | " + " | ".join(names) + " | sum |", "|---" * (len(names) + 4) + "|"]
    for ranks in rows:
        r0 = ranks[0]
        held = r0.get("host_memory", {})
        if not held:
            continue
        n = r0["parameters"]
        cells = [f"{held[k] / n:.1f}" if k in held else "" for k in names]
        table.append(f"| {r0['size']} | {r0['mode']} | {r0['workers']} | " + " | ".join(cells) +
                     f" | {sum(held.values()) / n:.1f} |")
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write("\n".join(table) + "\n")
    print("\n".join(table))
    return 0 if rows else 1


def format_row(ranks):
    n = ranks[0]["parameters"]
    return ", ".join(f"rank {r['rank']}: {(r['peak_train'] - r['rss_built']) / n:.1f} B/param "
                     f"({(r['peak_with_finish'] - r['rss_built']) / n:.1f} with finish), {r['step_s']:.2f} s/step"
                     for r in ranks)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="25m,gpt2")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--workers", default="1,2", help="comma-separated worker counts (default 1,2)")
    p.add_argument("--out", default=os.path.join(REPO, "build", "memory", "lm"))
    p.add_argument("--frugal", default=None, help="the frugal binary (default $FRUGAL_BINARY or build/frugal)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--size", help=argparse.SUPPRESS)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    for s in args.sizes.split(","):
        if s not in SHAPES:
            p.error(f"unknown size {s!r}: {', '.join(SHAPES)}")
    for m in args.modes.split(","):
        if m not in MODES:
            p.error(f"unknown mode {m!r}: {', '.join(MODES)}")
    try:
        workers = [int(w) for w in args.workers.split(",")]
    except ValueError:
        p.error(f"--workers must be comma-separated integers, got {args.workers!r}")
    if not all(1 <= w <= 8 for w in workers):
        p.error(f"--workers must be in [1, 8], got {args.workers}")
    return run_all(args)


if __name__ == "__main__":
    sys.exit(main())
