#!/usr/bin/python3
"""Plots JCT CDFs from per-job result CSVs written by `frugal cluster simulate`.

Usage: plot_jct_cdf.py --out build/cdf.png build/fifo.csv build/afs-p.csv ...
The policy name of each curve is the file name without extension (a
`frugal-jct-` prefix, used for temporary files, is dropped).
"""
import argparse
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_jcts(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or "jct" not in rows[0]:
        sys.exit(f"{path}: not a per-job result file (no 'jct' column)")
    return sorted(float(r["jct"]) for r in rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="PNG to write")
    parser.add_argument("--title", default="Job completion time CDF")
    parser.add_argument("csvs", nargs="+")
    args = parser.parse_args()

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for path in args.csvs:
        jcts = read_jcts(path)
        name = os.path.splitext(os.path.basename(path))[0].replace("frugal-jct-", "")
        n = len(jcts)
        ys = [(i + 1) / n for i in range(n)]
        mean = sum(jcts) / n
        ax.step(jcts, ys, where="post", label=f"{name} (avg {mean:,.0f} s)")
    ax.set_xscale("log")
    ax.set_xlabel("JCT (s, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(args.title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()
