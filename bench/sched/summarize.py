#!/usr/bin/python3
"""Summarises `frugal cluster simulate --compare` outputs of pollux workloads 1-4.

Prints a markdown table of average JCT per policy and workload next to the
Pollux artifact's published Tiresias / Optimus / Pollux numbers
(reference/published-figures.md), the Tiresias fidelity error, and the goal
ratios (afs-p vs tiresias and optimus, mean over the workloads).
Usage: summarize.py workload-1.txt workload-2.txt workload-3.txt workload-4.txt
"""
import re
import sys

PUBLISHED = {  # workload: (Pollux, Tiresias, Optimus), seconds.
    1: (2089, 2474, 4087),
    2: (3323, 5145, 6914),
    3: (2189, 3876, 3944),
    4: (2721, 3280, 5968),
}


def parse(path):
    rows = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 7 and re.fullmatch(r"[0-9]+", parts[1]):
                rows[parts[0]] = float(parts[1])
    return rows


def main():
    paths = sys.argv[1:]
    results = {}
    for p in paths:
        m = re.search(r"workload-(\d+)", p)
        results[int(m.group(1))] = parse(p)
    workloads = sorted(results)
    policies = list(results[workloads[0]])
    print("| policy | " + " | ".join(f"w{w}" for w in workloads) + " | mean |")
    print("|---" * (len(workloads) + 2) + "|")
    means = {}
    for pol in policies:
        vals = [results[w][pol] for w in workloads]
        means[pol] = sum(vals) / len(vals)
        print(f"| {pol} | " + " | ".join(f"{v:.0f}" for v in vals) + f" | {means[pol]:.0f} |")
    for i, name in enumerate(["Pollux (published)", "Tiresias (published)", "Optimus (published)"]):
        vals = [PUBLISHED[w][i] for w in workloads]
        print(f"| {name} | " + " | ".join(f"{v}" for v in vals) + f" | {sum(vals) / len(vals):.0f} |")
    print()
    print("| workload | tiresias (ours) | tiresias (Pollux sim) | error | optimus (ours) | optimus (Pollux sim) | error |")
    print("|---|---|---|---|---|---|---|")
    for w in workloads:
        t, o = results[w]["tiresias"], results[w]["optimus"]
        pt, po = PUBLISHED[w][1], PUBLISHED[w][2]
        print(f"| {w} | {t:.0f} | {pt} | {100 * (t - pt) / pt:+.1f}% | {o:.0f} | {po} | {100 * (o - po) / po:+.1f}% |")
    print()
    for pol in [p for p in policies if p.startswith("afs")]:
        print(f"- {pol}: mean avg JCT {means[pol]:.0f} s = "
              f"{100 * (means[pol] / means['tiresias'] - 1):+.1f}% vs tiresias, "
              f"{100 * (means[pol] / means['optimus'] - 1):+.1f}% vs optimus, "
              f"{100 * (means[pol] / (sum(PUBLISHED[w][0] for w in workloads) / len(workloads)) - 1):+.1f}% "
              "vs the published Pollux mean")


if __name__ == "__main__":
    main()
