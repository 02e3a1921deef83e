"""Replays a live workload (bench/cluster/live_small.py) in the simulator.

From the live server's records it builds:
  - a workload CSV (`name,time,application,num_replicas,batch_size`): each
    job's submit time, `num_replicas` = its max_workers (what non-elastic
    policies run it at, as the live server does);
  - a throughput table CSV (`application,total_samples,num_gpus,samples_per_s`,
    `frugal cluster simulate --table`): steps/s at each worker count, measured
    from the jobs' step records (pairs of consecutive records at the same size
    with no placement change between them, server receive times), pooled over
    all jobs of the run. Progress is counted in steps: one "sample" is 1/UNIT
    of a step, batch_size = UNIT, total = max_steps * UNIT (the table model
    caps a job at batch_size GPUs, so UNIT keeps that cap out of the way);
  - the start overhead: for each job's first start, seconds from the `start`
    event to its first step record, minus the time those steps take at the
    measured rate. Its mean is the simulator's --realloc-cost (charged on
    every placement change, first start included).
Then it runs `frugal cluster simulate` on them with the live run's policy,
one node of `slots` GPUs and rounds every 2 s (live_small.py's --round-s),
and, on the same trace, the other policies in COMPARED (the machine's load
differs between live runs; the simulated policies share one table).

Standalone, `bench/cluster/replay.py --frugal build/frugal results.json`
re-simulates the runs stored in a live_small.py --out file.
"""

import argparse
import csv
import json
import os
import subprocess
import tempfile

UNIT = 1000
PLACEMENT_EVENTS = ("start", "resize", "preempt")
COMPARED = ("afs-p", "tiresias", "fifo")


def measured_rates(details, events):
    """{workers: steps/s} pooled over all jobs, and the per-size evidence."""
    changes = {}
    for e in events:
        if e["kind"] in PLACEMENT_EVENTS:
            changes.setdefault(e["job_id"], []).append(e["time"])
    steps, secs = {}, {}
    for job_id, samples in details.items():
        samples = sorted(samples, key=lambda s: s["time"])
        for a, b in zip(samples, samples[1:]):
            if a["workers"] != b["workers"] or b["step"] <= a["step"] or b["time"] <= a["time"]:
                continue
            if any(a["time"] < t <= b["time"] for t in changes.get(job_id, [])):
                continue
            steps[a["workers"]] = steps.get(a["workers"], 0) + b["step"] - a["step"]
            secs[a["workers"]] = secs.get(a["workers"], 0) + b["time"] - a["time"]
    return {w: steps[w] / secs[w] for w in sorted(steps)}, {w: (steps[w], secs[w]) for w in steps}


def start_overheads(details, events, rates):
    """Per job: seconds from its first `start` event to training, net of the
    steps its first record reports."""
    out = {}
    for e in sorted(events, key=lambda e: e["time"]):
        if e["kind"] != "start" or e["job_id"] in out:
            continue
        after = sorted((s for s in details.get(e["job_id"], []) if s["time"] > e["time"]), key=lambda s: s["time"])
        if not after or after[0]["workers"] not in rates:
            continue
        first = after[0]
        out[e["job_id"]] = first["time"] - e["time"] - first["step"] / rates[first["workers"]]
    return out


def write_trace(root, jobs, rates, max_steps, max_workers):
    t0 = min(j["submit_time"] for j in jobs)
    workload = os.path.join(root, "live_workload.csv")
    table = os.path.join(root, "live_table.csv")
    with open(workload, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "time", "application", "num_replicas", "batch_size"])
        for j in sorted(jobs, key=lambda j: j["submit_time"]):
            w.writerow([j["name"], f"{j['submit_time'] - t0:.3f}", "live-mlp", max_workers, UNIT])
    with open(table, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["application", "total_samples", "num_gpus", "samples_per_s"])
        for n, r in rates.items():
            w.writerow(["live-mlp", max_steps * UNIT, n, f"{r * UNIT:.6f}"])
    return workload, table


def simulate(frugal, root, policy, slots, round_s, realloc_cost, workload, table):
    out = os.path.join(root, f"sim_{policy}.csv")
    cmd = [frugal, "cluster", "simulate", "--workload", workload, "--table", table, "--policy", policy,
           "--nodes", "1", "--gpus-per-node", str(slots), "--interval", str(round_s),
           "--realloc-cost", f"{max(0.0, realloc_cost):.3f}", "--out", out]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    with open(out) as f:
        rows = list(csv.DictReader(f))
    jcts = {r["name"]: float(r["jct"]) for r in rows}
    return {"command": " ".join(cmd), "jct_s": jcts, "avg_jct_s": sum(jcts.values()) / len(jcts)}


def replay(frugal, root, policy, args, jobs, details, events):
    """The simulator's prediction for the live run (None without rates)."""
    rates, evidence = measured_rates(details, events)
    if not rates:
        return None
    overheads = start_overheads(details, events, rates)
    realloc = sum(overheads.values()) / len(overheads) if overheads else 0.0
    workload, table = write_trace(root, jobs, rates, args.steps, args.slots)
    result = {"steps_per_s": {str(w): r for w, r in rates.items()},
              "evidence_steps_seconds": {str(w): v for w, v in evidence.items()},
              "start_overhead_s": {str(k): v for k, v in overheads.items()}, "realloc_cost_s": realloc,
              "workload_csv": open(workload).read(), "table_csv": open(table).read()}
    result["sim"] = simulate(frugal, root, policy, args.slots, 2, realloc, workload, table)
    result["sim_no_realloc"] = simulate(frugal, root, policy, args.slots, 2, 0.0, workload, table)
    # Every compared policy on this run's table: a control for the machine's
    # load, which differs between live runs.
    result["sim_by_policy"] = {p: simulate(frugal, root, p, args.slots, 2, realloc, workload, table)["avg_jct_s"]
                               for p in COMPARED}
    return result


def main():
    """Re-simulates the runs of a live_small.py --out JSON (their stored
    workload and table) under every policy in COMPARED."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--frugal", required=True)
    ap.add_argument("results")
    args = ap.parse_args()
    for r in json.load(open(args.results)):
        rp = r["replay"]
        if not rp:
            continue
        root = tempfile.mkdtemp(prefix="frugal-replay-")
        workload, table = os.path.join(root, "w.csv"), os.path.join(root, "t.csv")
        open(workload, "w").write(rp["workload_csv"])
        open(table, "w").write(rp["table_csv"])
        slots = int(rp["workload_csv"].splitlines()[1].split(",")[3])
        sims = {p: simulate(args.frugal, root, p, slots, 2, rp["realloc_cost_s"], workload, table)["avg_jct_s"]
                for p in COMPARED}
        print(f"{r['policy']} ({r['controller']}): live {r['avg_jct_s']:.1f} s; on its table, simulated: "
              + ", ".join(f"{p} {v:.1f} s" for p, v in sims.items()))


if __name__ == "__main__":
    main()
