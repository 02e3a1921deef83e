#!/usr/bin/env python3
"""Turns frugal_kernels_bench's Google Benchmark JSON into kernels.json and a markdown table.

Usage: summarize.py RAW_JSON OUT_JSON OUT_TABLE_MD
Headline figures are taken at n = 10M, d = 1% (density argument 1000 per 100000).
"""
import json
import sys

N, D = 10000000, 1000


def load(path):
    with open(path) as f:
        raw = json.load(f)
    runs = {}
    for b in raw["benchmarks"]:
        # Medians when repeated, plain runs otherwise.
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = b["run_name"] if "run_name" in b else b["name"]
        runs[name] = b
    return raw.get("context", {}), runs


def ms(b):
    # CPU time of the (single-threaded) process: robust to other jobs sharing
    # the machine, and equal to wall time when it is idle.
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ns")]
    return b["cpu_time"] * scale


def find(runs, prefix):
    for name, b in runs.items():
        if name == prefix or name.startswith(prefix + "/"):
            return b
    return None


def main():
    raw_path, out_json, out_md = sys.argv[1:4]
    context, runs = load(raw_path)
    block = find(runs, f"Block/{N}/{D}")
    torch_topk = find(runs, f"TorchTopk/{N}/{D}")
    plain = find(runs, f"PlainSum/{N}")
    sgd = find(runs, f"SparseSgd/{N}/{D}")
    torch_sgd = find(runs, f"TorchSgd/{N}")
    merge = find(runs, "Merge/4/10")
    q_real = find(runs, f"QualityReal/{D}")
    q_syn = find(runs, f"QualitySynthetic/{N}/{D}")
    out = {
        "block_vs_torch_topk_speedup": round(ms(torch_topk) / ms(block), 2),
        "block_bandwidth_fraction": round(ms(plain) / ms(block), 3),
        "sparse_sgd_vs_dense_speedup": round(ms(torch_sgd) / ms(sgd), 2),
        "block_mass_captured": round((q_real or q_syn)["mass_captured"], 4),
        "merge_melems_per_s": round(merge["items_per_second"] / 1e6, 1),
        "block_mass_captured_source": "real (Fashion-MNIST mlp gradients, per tensor)" if q_real else "synthetic",
        "block_mass_captured_synthetic": round(q_syn["mass_captured"], 4),
        "block_mass_captured_equal_bytes": round((q_real or q_syn)["mass_captured_equal_bytes"], 4),
        "block_ms": round(ms(block), 3),
        "torch_topk_ms": round(ms(torch_topk), 3),
        "block_gb_per_s": round(block["bytes_per_second"] / 1e9, 2),
        "plain_sum_gb_per_s": round(plain["bytes_per_second"] / 1e9, 2),
        "sparse_sgd_ms": round(ms(sgd), 4),
        "torch_sgd_ms": round(ms(torch_sgd), 3),
        "merge_ways": 4,
        "n": N,
        "density": D / 100000,
        "threads": 1,
        "simd": context.get("simd", "?"),
    }
    with open(out_json, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")

    lines = ["| n | d | block ms | block GB/s | torch::topk ms | speedup | plain sum GB/s | bw fraction "
             "| sparse SGD ms | torch SGD ms | speedup |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in (1000000, 10000000, 25000000):
        for d in (100, 1000, 10000):
            b, t = find(runs, f"Block/{n}/{d}"), find(runs, f"TorchTopk/{n}/{d}")
            p, s, ts = find(runs, f"PlainSum/{n}"), find(runs, f"SparseSgd/{n}/{d}"), find(runs, f"TorchSgd/{n}")
            if not all((b, t, p, s, ts)):
                continue
            lines.append(f"| {n // 1000000}M | {d / 1000:g}% | {ms(b):.3f} | {b['bytes_per_second'] / 1e9:.1f} "
                         f"| {ms(t):.1f} | {ms(t) / ms(b):.0f}x | {p['bytes_per_second'] / 1e9:.1f} "
                         f"| {ms(p) / ms(b):.2f} | {ms(s):.3f} | {ms(ts):.2f} | {ms(ts) / ms(s):.0f}x |")
    lines += ["", "| benchmark | time (ms) | rate | counters |", "|---|---|---|---|"]
    for name, b in runs.items():
        rate = ""
        if "bytes_per_second" in b:
            rate = f"{b['bytes_per_second'] / 1e9:.2f} GB/s"
        elif "items_per_second" in b:
            rate = f"{b['items_per_second'] / 1e6:.1f} M/s"
        counters = ", ".join(f"{k}={b[k]:.4g}" for k in ("nnz", "out_nnz", "mass_captured",
                                                          "mass_captured_equal_bytes", "worst_tensor") if k in b)
        lines.append(f"| {name} | {ms(b):.3f} | {rate} | {counters} |")
    with open(out_md, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
