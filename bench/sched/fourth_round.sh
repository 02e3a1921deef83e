#!/bin/bash
# Fourth round of scheduler tuning (docs/design/scheduler.md): fit-aware placement in
# afs-goodput-2q. Runs afs-goodput and afs-goodput-2q (AFS / oldest-first long
# queue, fit-aware placement on / off) on
#   train: pollux workloads 1, 2 + synthetic seeds 2-7 (earlier rounds' set),
#   held:  synthetic seeds 20-27 (generated for this round, same generator),
#   w14:   pollux workloads 1-4, and Philly 10k (256 nodes x 4),
# and writes small CSVs (average JCT per workload, JCT breakdown) to OUT.
# Usage: bench/sched/fourth_round.sh [OUT_DIR]   (from the repository root; one
# simulation at a time, a few minutes on 2 cores, Philly most of it)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FRUGAL=${FRUGAL:-$ROOT/build-sched/frugal}
DATA=${DATA:-$ROOT/../shared/data/scheduler}
OUT=${1:-$ROOT/build/bench/sched/fourth-round}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"

for s in 2 3 4 5 6 7 20 21 22 23 24 25 26 27; do
  "$FRUGAL" cluster workload --from "$DATA/philly.csv" --traces "$DATA/pollux-traces" --jobs 160 --gpus 64 \
    --load 1.0 --seed "$s" --out "$WORK/syn-$s.csv" >/dev/null
done
"$FRUGAL" cluster workload --from "$DATA/philly.csv" --traces "$DATA/pollux-traces" --jobs 10000 --gpus 1024 \
  --load 0.9 --seed 1 --out "$WORK/philly-10k.csv" >/dev/null

declare -A VARIANTS=(
  [afs-goodput]="--policy afs-goodput"
  [2q-nofit]="--policy afs-goodput-2q --fit-aware-placement false"
  [2q]="--policy afs-goodput-2q"
  [2q-fifo-nofit]="--policy afs-goodput-2q --long-queue-order fifo --fit-aware-placement false"
  [2q-fifo]="--policy afs-goodput-2q --long-queue-order fifo"
)
echo "set,workload,variant,avg_jct_s,median_s,p99_s,reallocs" >"$OUT/jct.csv"
for v in afs-goodput 2q-nofit 2q 2q-fifo-nofit 2q-fifo; do
  for w in w1 w2 s2 s3 s4 s5 s6 s7 s20 s21 s22 s23 s24 s25 s26 s27 w3 w4 philly; do
    case $w in
      w1 | w2 | w3 | w4) f=$DATA/pollux-workloads/workload-${w#w}.csv; nodes=16 ;;
      philly) f=$WORK/philly-10k.csv; nodes=256 ;;
      *) f=$WORK/syn-${w#s}.csv; nodes=16 ;;
    esac
    case $w in w1 | w2 | s[2-7]) set=train ;; s2?) set=held ;; w3 | w4) set=w34 ;; *) set=philly ;; esac
    # shellcheck disable=SC2086
    "$FRUGAL" cluster simulate --workload "$f" --traces "$DATA/pollux-traces" --nodes $nodes ${VARIANTS[$v]} \
      --out "$WORK/$v-$w.csv" >"$WORK/row.txt"
    avg=$(awk -F, 'NR > 1 { s += $6; n++ } END { printf "%.1f", s / n }' "$WORK/$v-$w.csv")
    awk -v s=$set -v w=$w -v v=$v -v a="$avg" 'NR==2{print s","w","v","a","$3","$4","$7}' "$WORK/row.txt" \
      >>"$OUT/jct.csv"
  done
  /usr/bin/python3 "$ROOT/bench/sched/jct_breakdown.py" "$WORK/$v"-{w1,w2,s2,s3,s4,s5,s6,s7}.csv |
    sed "s/^/$v,/;1s/^$v,/variant,/" >>"$WORK/breakdown.csv"
done
awk 'NR==1 || !/^variant,/' "$WORK/breakdown.csv" >"$OUT/breakdown-train.csv"
echo "wrote $OUT/jct.csv $OUT/breakdown-train.csv"
