#!/bin/bash
# Produces every scheduler figure in docs/design/scheduler.md ("Benchmarks"):
#   1. all policies on pollux-workloads/workload-{1..4} (64 GPUs), with JCT
#      CDF plots, and the fidelity / goal table (summarize.py);
#   2. 10,000 Philly jobs on 1,024 GPUs, all policies, with wall times;
#   3. one scheduling decision with 1,000 active jobs on 1,024 GPUs.
# Usage: bench/sched/run_benchmarks.sh [OUT_DIR]   (from the repository root)
# Environment: FRUGAL (binary, default build-sched/frugal), DATA (default
# ../shared/data/scheduler beside the repository).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FRUGAL=${FRUGAL:-$ROOT/build-sched/frugal}
DATA=${DATA:-$ROOT/../shared/data/scheduler}
OUT=${1:-$ROOT/build/bench/sched}
mkdir -p "$OUT"

for w in 1 2 3 4; do
  echo "== pollux workload-$w (16 nodes x 4 GPUs)"
  "$FRUGAL" cluster simulate --workload "$DATA/pollux-workloads/workload-$w.csv" --traces "$DATA/pollux-traces" \
    --compare --timing --out "$OUT/workload-$w" --plot "$OUT/workload-$w-cdf.png" | tee "$OUT/workload-$w.txt"
done
/usr/bin/python3 "$ROOT/bench/sched/summarize.py" "$OUT"/workload-{1,2,3,4}.txt | tee "$OUT/summary.md"

echo "== Philly: 10,000 jobs on 1,024 GPUs (256 nodes x 4)"
"$FRUGAL" cluster workload --from "$DATA/philly.csv" --traces "$DATA/pollux-traces" --jobs 10000 --gpus 1024 \
  --load 0.9 --seed 1 --out "$OUT/philly-10k.csv"
/usr/bin/time -f "total wall %e s, max RSS %M KB" "$FRUGAL" cluster simulate --workload "$OUT/philly-10k.csv" \
  --traces "$DATA/pollux-traces" --nodes 256 --compare --timing --out "$OUT/philly-10k" \
  --plot "$OUT/philly-10k-cdf.png" 2>&1 | tee "$OUT/philly-10k.txt"

echo "== one decision, 1,000 active jobs, 1,024 GPUs"
"$FRUGAL" cluster bench --workload "$OUT/philly-10k.csv" --traces "$DATA/pollux-traces" --policy all --jobs 1000 \
  --nodes 256 --repetitions 21 | tee "$OUT/decision.txt"
