"""Replays a live workload (bench/cluster/live.py) in the simulator.

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
    every placement change, first start included);
  - each job's tail: seconds from its last step to its `finished` event
    (the final evaluation on the test set, which the workers share, and
    the exit) times the workers it had: the workload's `tail_gpu_s`
    column. The simulator holds the job's GPUs through that work after its
    last step, as the live server does (Note [Held jobs]). Measured on the
    testbed: cnn 48-59 s on one worker, 14-22 s on four.
With several models in a workload, rates are pooled per model (a "group").
Then it runs `frugal cluster simulate` on them with the live run's policy,
the live cluster's nodes (one agent, or one per testbed host) of `slots` GPUs
and rounds every 2 s (live.py's --round-s),
and, on the same trace, the other policies in COMPARED (the machine's load
differs between live runs; the simulated policies share one table).

Standalone, `bench/cluster/replay.py --frugal build/frugal results.json`
re-simulates the runs stored in a live.py --out file.
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


def measured_rates(details, events, group_of):
    """{group: {workers: steps/s}} pooled over the jobs of each group (jobs
    of one model), and the per-size evidence {group: {workers: (steps, s)}}."""
    changes = {}
    for e in events:
        if e["kind"] in PLACEMENT_EVENTS:
            changes.setdefault(e["job_id"], []).append(e["time"])
    evidence = {}
    for job_id, samples in details.items():
        samples = sorted(samples, key=lambda s: s["time"])
        ev = evidence.setdefault(group_of[job_id], {})
        for a, b in zip(samples, samples[1:]):
            if a["workers"] != b["workers"] or b["step"] <= a["step"] or b["time"] <= a["time"]:
                continue
            if any(a["time"] < t <= b["time"] for t in changes.get(job_id, [])):
                continue
            steps, secs = ev.get(a["workers"], (0, 0.0))
            ev[a["workers"]] = (steps + b["step"] - a["step"], secs + b["time"] - a["time"])
    return rates_of(evidence), evidence


def rates_of(evidence):
    return {g: {w: ev[w][0] / ev[w][1] for w in sorted(ev)} for g, ev in evidence.items() if ev}


def start_overheads(details, events, rates, group_of):
    """Per job: seconds from its first `start` event to training, net of the
    steps its first record reports."""
    out = {}
    for e in sorted(events, key=lambda e: e["time"]):
        if e["kind"] != "start" or e["job_id"] in out:
            continue
        after = sorted((s for s in details.get(e["job_id"], []) if s["time"] > e["time"]), key=lambda s: s["time"])
        group = rates.get(group_of.get(e["job_id"]), {})
        if not after or after[0]["workers"] not in group:
            continue
        first = after[0]
        out[e["job_id"]] = first["time"] - e["time"] - first["step"] / group[first["workers"]]
    return out


def tails(jobs, details, events, rates, group_of):
    """{job name: slot-seconds from its last step to its `finished` event
    (seconds x its workers then)}, for the jobs that finished. A last
    record short of max_steps has its missing steps taken off at the
    measured rate."""
    finished = {e["job_id"]: e["time"] for e in events if e["kind"] == "finished"}
    out = {}
    for j in jobs:
        samples = details.get(j["id"], [])
        if j["id"] not in finished or not samples:
            continue
        last = max(samples, key=lambda s: s["time"])
        rate = rates.get(group_of[j["id"]], {}).get(last["workers"])
        missing = max(0, j["max_steps"] - last["step"]) / rate if rate else 0.0
        out[j["name"]] = max(0.0, finished[j["id"]] - last["time"] - missing) * last["workers"]
    return out


def write_trace(root, jobs, rates, group_of, max_workers, tail_of):
    """One application per job (its own max_steps) with its group's rates. A
    count the group never ran at is left out: the table model scales linearly
    below the first count it has and stays flat above the last. TAIL_OF:
    job name -> its tail_gpu_s (0 if absent)."""
    t0 = min(j["submit_time"] for j in jobs)
    workload = os.path.join(root, "live_workload.csv")
    table = os.path.join(root, "live_table.csv")
    ordered = sorted(jobs, key=lambda j: j["submit_time"])
    with open(workload, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "time", "application", "num_replicas", "batch_size", "tail_gpu_s"])
        for j in ordered:
            w.writerow([j["name"], f"{j['submit_time'] - t0:.3f}", f"live-{j['name']}", max_workers, UNIT,
                        f"{tail_of.get(j['name'], 0.0):.3f}"])
    with open(table, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["application", "total_samples", "num_gpus", "samples_per_s"])
        for j in ordered:
            for n, r in rates[group_of[j["id"]]].items():
                w.writerow([f"live-{j['name']}", j["max_steps"] * UNIT, n, f"{r * UNIT:.6f}"])
    return workload, table


def shape(args):
    """(nodes, slots per node) of the live cluster: one agent, or one per
    testbed host (live.py --testbed)."""
    return max(1, getattr(args, "testbed", 0) or 0), args.slots


def simulate(frugal, root, policy, cluster, round_s, realloc_cost, workload, table, tiresias_threshold=None):
    """CLUSTER: (nodes, slots per node)."""
    out = os.path.join(root, f"sim_{policy}.csv")
    cmd = [frugal, "cluster", "simulate", "--workload", workload, "--table", table, "--policy", policy,
           "--nodes", str(cluster[0]), "--gpus-per-node", str(cluster[1]), "--interval", str(round_s),
           "--realloc-cost", f"{max(0.0, realloc_cost):.3f}", "--out", out]
    if tiresias_threshold is not None:
        cmd += ["--tiresias-threshold", str(tiresias_threshold)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    with open(out) as f:
        rows = list(csv.DictReader(f))
    jcts = {r["name"]: float(r["jct"]) for r in rows}
    return {"command": " ".join(cmd), "jct_s": jcts, "avg_jct_s": sum(jcts.values()) / len(jcts)}


def replay(frugal, root, policy, args, jobs, details, events, group_of):
    """The simulator's prediction for the live run (None without rates).
    `group_of`: job id -> the group whose rates it shares (its model)."""
    rates, evidence = measured_rates(details, events, group_of)
    if any(group_of[j["id"]] not in rates for j in jobs):
        return None
    overheads = start_overheads(details, events, rates, group_of)
    realloc = sum(overheads.values()) / len(overheads) if overheads else 0.0
    tail_of = tails(jobs, details, events, rates, group_of)
    cluster = shape(args)
    workload, table = write_trace(root, jobs, rates, group_of, cluster[0] * cluster[1], tail_of)
    result = {"steps_per_s": {g: {str(w): r for w, r in rs.items()} for g, rs in rates.items()},
              "evidence_steps_seconds": {g: {str(w): v for w, v in ev.items()} for g, ev in evidence.items()},
              "start_overhead_s": {str(k): v for k, v in overheads.items()}, "realloc_cost_s": realloc,
              "tail_gpu_s": tail_of,
              "workload_csv": open(workload).read(), "table_csv": open(table).read()}
    tt = args.tiresias_threshold
    result["sim"] = simulate(frugal, root, policy, cluster, 2, realloc, workload, table, tt)
    result["sim_no_realloc"] = simulate(frugal, root, policy, cluster, 2, 0.0, workload, table, tt)
    # Every compared policy on this run's table: a control for the machine's
    # load, which differs between live runs.
    result["sim_by_policy"] = {p: simulate(frugal, root, p, cluster, 2, realloc, workload, table, tt)["avg_jct_s"]
                               for p in COMPARED}
    return result


def common_table(frugal, root, runs, jobs_of_first, group_of, args):
    """Every compared policy on one table pooled over all the runs of a set
    (each run only measures the sizes its policy chose: tiresias runs every
    job at its largest size), with the runs' mean start overhead, on the
    first run's submit times, each job with its mean tail over the runs."""
    evidence = {}
    tail_sums = {}
    for r in runs:
        for name, t in (r["replay"] or {}).get("tail_gpu_s", {}).items():
            tail_sums.setdefault(name, []).append(t)
        for g, ev in (r["replay"] or {}).get("evidence_steps_seconds", {}).items():
            for w, (steps, secs) in ev.items():
                old = evidence.setdefault(g, {}).get(int(w), (0, 0.0))
                evidence[g][int(w)] = (old[0] + steps, old[1] + secs)
    rates = rates_of(evidence)
    costs = [r["replay"]["realloc_cost_s"] for r in runs if r["replay"]]
    if not costs or any(group_of[j["id"]] not in rates for j in jobs_of_first):
        return None
    realloc = sum(costs) / len(costs)
    tail_of = {name: sum(ts) / len(ts) for name, ts in tail_sums.items()}
    cluster = shape(args)
    workload, table = write_trace(root, jobs_of_first, rates, group_of, cluster[0] * cluster[1], tail_of)
    return {"steps_per_s": {g: {str(w): r for w, r in rs.items()} for g, rs in rates.items()},
            "realloc_cost_s": realloc, "tail_gpu_s": tail_of, "table_csv": open(table).read(),
            "avg_jct_s": {p: simulate(frugal, root, p, cluster, 2, realloc, workload, table,
                                      args.tiresias_threshold)["avg_jct_s"] for p in COMPARED}}


def main():
    """Re-simulates the runs of a live.py --out JSON (their stored
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
        slots = int(rp["workload_csv"].splitlines()[1].split(",")[3])  # All of them: a job's max_workers.
        nodes = max(1, r.get("workload", {}).get("testbed") or 1)
        tt = r.get("workload", {}).get("tiresias_threshold")
        sims = {p: simulate(args.frugal, root, p, (nodes, slots // nodes), 2, rp["realloc_cost_s"], workload, table,
                            tt)["avg_jct_s"]
                for p in COMPARED}
        print(f"{r['policy']} ({r['controller']}): live {r['avg_jct_s']:.1f} s; on its table, simulated: "
              + ", ".join(f"{p} {v:.1f} s" for p, v in sims.items()))


if __name__ == "__main__":
    main()
