#!/usr/bin/python3
"""Frugal's data order (docs/design/data.md, src/data/batch_plan.cc) in Python.

Per epoch e with run seed s: SplitMix64 seeded with s*1000003+e drives a
Fisher-Yates shuffle from the back. `python3 data_order.py` checks the first
indices of epoch 0 for seed 1 against the values the C++ BatchPlan gives
(EXPECTED_SEED1_EPOCH0_FIRST8, recorded from a frugal run) and exits non-zero on a mismatch.
"""
import sys

import numpy as np

MASK = (1 << 64) - 1

# First 8 indices of BatchPlan::EpochOrder(0) for seed 1 and N = 60000
# (Fashion-MNIST train). Computed by this file and cross-checked against the
# C++ BatchPlan: bench/baselines/check_order.cc prints the C++ values
# (53431 45066 18496 30775 21108 41622 38962 53075, and 33889 as the first
# sample of rank 2 at step 1 with 4 workers of batch 64).
EXPECTED_SEED1_EPOCH0_FIRST8 = [53431, 45066, 18496, 30775, 21108, 41622, 38962, 53075]
EXPECTED_STEP1_RANK2_FIRST = 33889


def splitmix64_stream(state):
    while True:
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        yield z ^ (z >> 31)


def epoch_order(n, seed, epoch):
    """Permutation of range(n) for this epoch, as numpy int64."""
    order = list(range(n))
    rng = splitmix64_stream((seed * 1000003 + epoch) & MASK)
    for i in range(n - 1, 0, -1):
        j = next(rng) % (i + 1)
        order[i], order[j] = order[j], order[i]
    return np.asarray(order, dtype=np.int64)


def main():
    first = epoch_order(60000, 1, 0)[:8].tolist()
    print("seed 1, epoch 0, N 60000, first 8:", first)
    if first != EXPECTED_SEED1_EPOCH0_FIRST8:
        print("MISMATCH with the C++ BatchPlan:", EXPECTED_SEED1_EPOCH0_FIRST8)
        return 1
    order = epoch_order(60000, 1, 0)
    if int(order[1 * 256 + 2 * 64]) != EXPECTED_STEP1_RANK2_FIRST:
        print("MISMATCH in sharding: step 1, rank 2 starts with", int(order[1 * 256 + 2 * 64]))
        return 1
    print("matches the C++ BatchPlan")
    return 0


if __name__ == "__main__":
    sys.exit(main())
