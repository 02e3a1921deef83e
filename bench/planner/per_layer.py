#!/usr/bin/env python3
"""Exact per-layer times of the single-node A100 calibration set.

Every group of rows that differs only in the global batch satisfies
T = A + n_mb * P exactly (n_mb micro-batches per pipeline), so P (one
micro-batch) and A (the fixed part: optimizer, data-parallel all-reduce) can
be read off, and (P(24 layers) - P(12 layers)) / 12 is the time of one decoder
layer for one micro-batch. Prints the composition residuals, the per-layer
table at pp 1 (tp x micro-batch) and the lower bound that the cells where the
time falls with a larger micro-batch (both on Megatron's fused softmax) put on
any model whose time does not.

  bench/planner/per_layer.py [CSV]   (default src/sim/testdata/vtrain_a100_single_node_h1024.csv)
"""
import collections
import csv
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load(path):
    rows = []
    with open(path) as f:
        for r in list(csv.reader(f))[1:]:
            gpus, batch, mb, _h, heads, layers, _s, tp, dp, pp, ms = r
            rows.append(dict(batch=int(batch), mb=int(mb), layers=int(layers), tp=int(tp), dp=int(dp),
                             pp=int(pp), heads=int(heads), ms=float(ms)))
    return rows


def composition(rows):
    """(A, P) per (tp, dp, pp, mb, layers) and the largest relative residual."""
    groups = collections.defaultdict(list)
    for r in rows:
        groups[(r["tp"], r["dp"], r["pp"], r["mb"], r["layers"])].append((r["batch"] // (r["dp"] * r["mb"]), r["ms"]))
    fits, worst, checked = {}, 0.0, 0
    for key, pts in groups.items():
        pts.sort()
        (n1, t1), (n2, t2) = pts[0], pts[-1]
        if n2 == n1:
            fits[key] = (None, t1)
            continue
        p = (t2 - t1) / (n2 - n1)
        fits[key] = (t1 - n1 * p, p)
        if len(pts) >= 3:
            checked += 1
            worst = max(worst, max(abs(t - (t1 + (n - n1) * p)) / t for n, t in pts))
    return fits, worst, checked


def per_layer(rows, fits):
    """ms per decoder layer and micro-batch at pp 1, by (tp, mb)."""
    out = {}
    for (tp, dp, pp, mb, layers), (a, p) in fits.items():
        if pp != 1 or layers != 24 or (tp, mb) in out:
            continue
        a12, p12 = fits[(tp, dp, pp, mb, 12)]
        if a is not None:
            out[(tp, mb)] = (p - p12) / 12
        else:  # One batch only (mb8): take A from the mb4 rows of the same configuration.
            n = next(r["batch"] // (dp * mb) for r in rows if (r["tp"], r["dp"], r["pp"], r["mb"]) == (tp, dp, pp, mb))
            a24, _ = fits[(tp, dp, pp, 4, 24)]
            a12, _ = fits[(tp, dp, pp, 4, 12)]
            out[(tp, mb)] = ((p - p12) - (a24 - a12)) / (12 * n)
    return out


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "src/sim/testdata/vtrain_a100_single_node_h1024.csv")
    rows = load(path)
    fits, worst, checked = composition(rows)
    print(f"{len(rows)} rows; {checked} groups with >= 3 batch sizes; largest relative residual of A + n_mb x P: {worst:.1e}")
    table = per_layer(rows, fits)
    mbs = sorted({mb for _, mb in table})
    print("ms per layer and micro-batch (pp 1):  " + "  ".join(f"mb{mb:<5}" for mb in mbs))
    for tp in sorted({tp for tp, _ in table}):
        print(f"  tp{tp:<34}" + "  ".join(f"{table[(tp, mb)]:7.3f}" for mb in mbs))
    heads = rows[0]["heads"]
    fused = lambda tp, mb: (mb * heads // tp) % 4 == 0  # Note [Unfused softmax]: other pairs differ in work.
    for tp in sorted({tp for tp, _ in table}):
        for i, lo in enumerate(mbs):
            for hi in mbs[i + 1:]:
                a, b = table[(tp, lo)], table[(tp, hi)]
                if b < a and fused(tp, lo) and fused(tp, hi):  # More work, less time: a monotone model misses one of the two by at least this.
                    print(f"  tp{tp} mb{lo} -> mb{hi}: {a:.3f} -> {b:.3f} ms, bound {100 * (a - b) / (a + b):.1f}%")


if __name__ == "__main__":
    main()
