"""Asks Frugal's planner about the GPT of model.py before training it: the
iteration time, the round's time on the link, device and host memory, and
the local steps that hide the link (frugal.plan profiles the model here).

    PYTHONPATH=build/python /usr/bin/python3 examples/lm/plan.py --size 25m --batch-size 4 --sites 2 2 --link-mbps 100
    ... examples/lm/plan.py --size gpt2 --batch-size 1 --seq-len 128 --hardware rtx3090 --sites 4 4
    ... examples/lm/plan.py --size 25m --batch-size 4 --job-prior 4     # + the line for a cluster job file
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F

import frugal

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as lm  # noqa: E402  (examples/lm/model.py)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=sorted(lm.SIZES), default="25m")
    p.add_argument("--vocab-size", type=int, default=8192, help="embedding rows (default 8192, prepare.py's)")
    p.add_argument("--batch-size", type=int, default=4, help="sequences per worker per step")
    p.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default: the model's context)")
    p.add_argument("--hardware", default=None,
                   help="a built-in name or TOML file (default: this machine, with the measured step time)")
    p.add_argument("--sites", type=int, nargs="+", default=[2], help="workers per site (default: one site of 2)")
    p.add_argument("--link-mbps", type=float, default=100.0, help="the link between sites (Mbit/s)")
    p.add_argument("--intra-gbps", type=float, default=10.0, help="inside a site (Gbit/s)")
    p.add_argument("--local-steps", type=int, default=16)
    p.add_argument("--workers-per-host", type=int, default=1)
    p.add_argument("--job-prior", type=int, default=0, metavar="MAX_WORKERS",
                   help="also print the cluster job file line with the predicted samples/s at 1..MAX_WORKERS "
                        "workers on one node (planned_samples_per_s)")
    args = p.parse_args(argv)
    if args.batch_size < 1 or (args.seq_len is not None and args.seq_len < 1):
        p.error("--batch-size and --seq-len must be >= 1")
    if not 0 <= args.job_prior <= 1024:
        p.error("--job-prior must be from 1 to 1024 (0: none)")

    torch.manual_seed(0)
    net = lm.build(args.size, vocab_size=args.vocab_size)
    seq = args.seq_len or lm.SIZES[args.size]["context"]
    tokens = torch.randint(0, args.vocab_size, (args.batch_size, seq + 1))

    def loss_fn(logits):
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))
    # The recipe's optimizer: AdamW over the two groups (no decay on norms and biases).
    plan = frugal.plan(net, tokens[:, :-1], loss_fn=loss_fn,
                       optimizer=lambda copy: torch.optim.AdamW(lm.parameter_groups(copy, 0.1), lr=1e-3),
                       hardware=args.hardware, sites=args.sites, link_mbps=args.link_mbps,
                       intra_gbps=args.intra_gbps, local_steps=args.local_steps,
                       workers_per_host=args.workers_per_host, repeats=3, warmup=1)
    print(f"{args.size}, {args.batch_size} x {seq} tokens per worker, sites {args.sites}, "
          f"{args.link_mbps:g} Mbit/s between them")
    print(plan)
    if args.job_prior:
        print(plan.job_prior(args.job_prior))


if __name__ == "__main__":
    main()
