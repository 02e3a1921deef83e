#!/usr/bin/env python3
"""Checkpoints per site over real processes on loopback (ctest `site_checkpoints`).

`frugal train --workers 4 --local-clusters A,A,B,B --checkpoint-dir
<tmp>/sites/{cluster}` writes each cluster's rank files into its own
directory; the test kills the run (SIGKILL of the launcher's process
group) once a step is complete, and checks that:
  - each site's step directory holds only its own cluster's rank files and
    the same COMPLETE manifest, whose sizes and checksums match the files;
  - only the newest --keep-checkpoints complete steps remain in each site;
then resumes twice with the ranks reassigned: the cluster order swapped
(B,B,A,A: rank 0 now in B, its shared part sent from A's worker), then
another world (A,B,B, 3 workers), and checks that each resume exits 0,
starts from the newest complete step, its loss continues from where the
previous run was (not from the untrained loss) and the new checkpoints
follow the new assignment.

Usage: site_checkpoint_test.py --frugal build/frugal
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TIMEOUT_S = 240


def fail(why):
    print(f"FAIL: {why}", file=sys.stderr)
    sys.exit(1)


def manifest(step_dir):
    with open(os.path.join(step_dir, "COMPLETE")) as f:
        lines = f.read().splitlines()
    world = int(lines[0])
    files = []
    for line in lines[1:]:
        word, rank, cluster, name, size, checksum = line.split()
        assert word == "file"
        files.append({"rank": int(rank), "cluster": cluster, "name": name, "size": int(size),
                      "checksum": int(checksum, 16)})
    return world, files


def complete_steps(site_dir):
    if not os.path.isdir(site_dir):
        return []
    steps = [int(d[5:]) for d in os.listdir(site_dir)
             if d.startswith("step-") and os.path.exists(os.path.join(site_dir, d, "COMPLETE"))]
    return sorted(steps)


def check_step(sites, clusters_of_rank, step):
    """Every site's copy of `step` lists every rank's file in its cluster's
    directory, and each file is the one listed."""
    expected = None
    for cluster in sorted(set(clusters_of_rank)):
        step_dir = os.path.join(sites, cluster, f"step-{step}")
        world, files = manifest(step_dir)
        if expected is None:
            expected = (world, files)
        elif (world, files) != expected:
            fail(f"{step_dir}/COMPLETE differs from the other site's")
        if world != len(clusters_of_rank):
            fail(f"{step_dir}: COMPLETE says world {world}, the run had {len(clusters_of_rank)}")
        own = sorted(f for f in os.listdir(step_dir) if f.endswith(".ckpt"))
        mine = sorted(f"rank-{r}.ckpt" for r, c in enumerate(clusters_of_rank) if c == cluster)
        if own != mine:
            fail(f"{step_dir} holds {own}, expected its cluster's {mine}")
    for entry in expected[1]:
        if entry["cluster"] != clusters_of_rank[entry["rank"]]:
            fail(f"step {step}: rank {entry['rank']} listed in cluster {entry['cluster']}")
        path = os.path.join(sites, entry["cluster"], f"step-{step}", entry["name"])
        with open(path, "rb") as f:
            data = f.read()
        if len(data) != entry["size"] or int.from_bytes(data[-8:], "little") != entry["checksum"]:
            fail(f"{path} is not the file its COMPLETE lists")
    return expected[1]


def losses(metrics):
    out = {}
    with open(metrics) as f:
        for line in f:
            r = json.loads(line)
            if "loss" in r and "event" not in r:
                out[r["step"]] = r["loss"]
    return out


def train(frugal, args, log):
    with open(log, "w") as out:
        return subprocess.Popen([frugal, "train", *args], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def wait(proc, log, what):
    try:
        rc = proc.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        fail(f"{what} did not finish within {TIMEOUT_S} s; log {log}")
    if rc != 0:
        with open(log) as f:
            print(f.read()[-4000:], file=sys.stderr)
        fail(f"{what} exited {rc}")
    with open(log) as f:
        return f.read()


def resumed_step(output, sites):
    m = re.search(r"resuming from (\S+)/step-(\d+)", output)
    if not m or not os.path.dirname(m.group(1)) == sites:
        fail(f"no 'resuming from {sites}/<cluster>/step-<t>' in the output:\n{output[-2000:]}")
    return int(m.group(2))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--frugal", required=True)
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    a = p.parse_args()
    frugal = os.path.abspath(a.frugal)
    tmp = tempfile.mkdtemp(prefix="frugal_site_ckpt_")
    runs, sites = os.path.join(tmp, "runs"), os.path.join(tmp, "sites")
    metrics = os.path.join(runs, "r", "metrics.jsonl")
    common = ["--dataset", "synthetic", "--synthetic-train-size", "4000", "--batch-size", "16", "--lr", "0.02",
              "--threads", "1", "--sync", "step", "--log-every", "1", "--runs-dir", runs, "--run-name", "r",
              "--checkpoint-every", "10", "--keep-checkpoints", "2", "--timeout-s", "30"]

    # 1. Two sites, killed once two steps are complete in both.
    first = ["A", "A", "B", "B"]
    proc = train(frugal, [*common, "--workers", "4", "--local-clusters", ",".join(first), "--epochs", "20",
                          "--checkpoint-dir", os.path.join(sites, "{cluster}")], os.path.join(tmp, "first.log"))
    deadline = time.time() + TIMEOUT_S
    while not (len(complete_steps(os.path.join(sites, "A"))) >= 2 and complete_steps(os.path.join(sites, "B"))[-1:]
               == complete_steps(os.path.join(sites, "A"))[-1:]):
        if proc.poll() is not None:
            fail(f"the first run exited {proc.returncode} before two checkpoints; log {tmp}/first.log")
        if time.time() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            fail("no two complete checkpoints in both sites in time")
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = losses(metrics)
    # The kill may fall between rank 0's COMPLETE in A and its copy in B.
    newest = max(set(complete_steps(os.path.join(sites, "A"))) & set(complete_steps(os.path.join(sites, "B"))))
    for c in ("A", "B"):
        if len(complete_steps(os.path.join(sites, c))) > 2:
            fail(f"site {c} keeps {complete_steps(os.path.join(sites, c))}, more than --keep-checkpoints 2")
    check_step(sites, first, newest)
    print(f"first run killed; step {newest} complete in both sites, manifests and checksums agree")

    # 2. The cluster order swapped: rank 0 is now in B, the shared part lives in A.
    swapped = ["B", "B", "A", "A"]
    out = wait(train(frugal, ["--resume", os.path.join(runs, "r"), "--local-clusters", ",".join(swapped),
                              "--max-steps", str(newest + 25)], os.path.join(tmp, "swapped.log")),
               os.path.join(tmp, "swapped.log"), "the swapped resume")
    start = resumed_step(out, sites)
    if start < newest:
        fail(f"resumed from step {start}, but step {newest} was complete")
    after = losses(metrics)
    check_continues(before, after, start)
    step2 = complete_steps(os.path.join(sites, "B"))[-1]
    if step2 <= start:
        fail(f"the swapped run wrote no checkpoint after step {start}")
    check_step(sites, swapped, step2)
    print(f"swapped resume from step {start}: loss continues, step {step2} written with rank 0 in cluster B")

    # 3. Another world: 3 workers, one in A and two in B (one more than B wrote files for).
    third = ["A", "B", "B"]
    out = wait(train(frugal, ["--resume", os.path.join(runs, "r"), "--workers", "3", "--local-clusters",
                              ",".join(third), "--max-steps", str(step2 + 25)], os.path.join(tmp, "third.log")),
               os.path.join(tmp, "third.log"), "the 3-worker resume")
    start3 = resumed_step(out, sites)
    if start3 != step2:
        fail(f"the 3-worker run resumed from step {start3}, expected {step2}")
    check_continues(after, losses(metrics), start3)
    step3 = complete_steps(os.path.join(sites, "A"))[-1]
    if step3 <= start3:
        fail(f"the 3-worker run wrote no checkpoint after step {start3}")
    check_step(sites, third, step3)
    print(f"3-worker resume from step {start3}: loss continues, step {step3} written")
    if not a.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")


def check_continues(before, after, start):
    """The resumed run's first losses are near the previous run's losses
    at the same steps (where it got that far) or just before the
    checkpoint, far from the untrained loss of steps 0-2."""
    mean = lambda d, lo, hi: [d[s] for s in sorted(d) if lo <= s < hi]
    first, old, new = mean(before, 0, 3), mean(before, start - 5, start), mean(after, start, start + 5)
    same = mean(before, start, start + 5)
    if not (first and old and new):
        fail(f"missing loss records around step {start} (before: {sorted(before)[:3]}..., after: {sorted(after)[-3:]})")
    untrained, trained, resumed = sum(first) / len(first), sum(old) / len(old), sum(new) / len(new)
    reference = sum(same) / len(same) if len(same) == len(new) else trained
    print(f"  loss: untrained {untrained:.4f}; steps {start}-{start + 4}: previous run {reference:.4f}, "
          f"resumed {resumed:.4f}")
    if not trained < 0.9 * untrained:
        fail(f"the first run did not learn (loss {untrained:.4f} -> {trained:.4f}); the test shows nothing")
    if abs(resumed - reference) > 0.25 * (untrained - trained):
        fail(f"the resumed loss {resumed:.4f} does not continue from {reference:.4f} (untrained {untrained:.4f})")


if __name__ == "__main__":
    main()
