#!/usr/bin/env python3
"""Offline check behind docs/design/kernels.md "Why block_mass_captured is far from 0.9".

For each weight matrix of the mlp in a FRGD gradient file, compares the L1 mass
of the best 16-value blocks taken along rows (the memory layout `block` sees)
and along columns (the transposed layout) with exact top-k at the same count.

Usage: /usr/bin/python3 bench/kernels/block_layout.py GRAD_FILE [DENSITY] [STEP]
"""
import struct
import sys

import numpy as np

SHAPES = {"fc1.weight": (2048, 784), "fc2.weight": (2048, 2048), "fc3.weight": (10, 2048)}


def read(path):
    data = open(path, "rb").read()
    if data[:4] != b"FRGD":
        raise SystemExit(f"{path}: not a FRGD file")
    _, count = struct.unpack_from("<II", data, 4)
    pos = 12
    for _ in range(count):
        (length,) = struct.unpack_from("<I", data, pos)
        pos += 4
        name = data[pos:pos + length].decode()
        pos += length
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        yield name, np.frombuffer(data, dtype="<f4", count=n, offset=pos)
        pos += 4 * n


def best_blocks_mass(flat, count):
    nb = flat.size // 16
    scores = np.abs(flat[:nb * 16]).reshape(nb, 16).sum(1)
    return np.sort(scores)[::-1][:count // 16].sum()


def main():
    path = sys.argv[1]
    density = float(sys.argv[2]) if len(sys.argv) > 2 else 0.01
    step = sys.argv[3] if len(sys.argv) > 3 else "step300"
    for name, g in read(path):
        s, base = name.split("/", 1)
        if s != step or base not in SHAPES:
            continue
        w = g.reshape(SHAPES[base])
        k = max(16, -(-int(round(density * g.size)) // 16) * 16)
        top = np.sort(np.abs(g))[::-1][:k].sum()
        rows = best_blocks_mass(w.ravel(), k) / top
        cols = best_blocks_mass(np.ascontiguousarray(w.T).ravel(), k) / top
        print(f"{name}: d={density} k={k} row blocks {rows:.3f}, column blocks {cols:.3f}")


if __name__ == "__main__":
    main()
