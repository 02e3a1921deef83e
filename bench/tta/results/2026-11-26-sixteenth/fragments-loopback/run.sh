#!/bin/bash
# Convergence of the local mode with Streaming-DiLoCo fragments on loopback
# (accuracy per step; the overlapped rounds apply at fixed steps, so these
# runs are deterministic and timing is not compared). Same command as
# ../../2026-11-26-fifteenth/local-overlap-loopback/run.sh.
cd "$(dirname "$0")/../../../../.."
out=bench/tta/results/2026-11-26-sixteenth/fragments-loopback
run() { name=$1; shift
  OMP_NUM_THREADS=1 timeout 900 build/frugal train --workers 4 --model mlp --sync local --local-steps 16 --density 0.48 \
    --adapt off --epochs 3 --eval-every 117 --runs-dir /tmp/loopexp16 --run-name $name "$@" > /tmp/loopexp16/$name.log 2>&1
  cp /tmp/loopexp16/$name.log $out/
  { echo "$name ($*): $(grep -E '^done' /tmp/loopexp16/$name.log)"
    grep "eval " /tmp/loopexp16/$name.log | awk '{print $3, $8}' | tr '\n' ' '; echo; } | tee -a $out/summary.txt
}
mkdir -p /tmp/loopexp16
for v in "$@"; do
  case $v in
    overlap) run overlap --local-overlap ;;
    frag4) run overlap-frag4 --local-overlap --local-fragments 4 ;;
    delay4) run overlap-delay4 --local-overlap --local-delay 4 ;;
    blocking-frag4) run blocking-frag4 --local-fragments 4 ;;
    frag8) run overlap-frag8 --local-overlap --local-fragments 8 ;;
    frag4-m05) run overlap-frag4-m05 --local-overlap --local-fragments 4 --outer-momentum 0.5 ;;
  esac
done
echo ALLDONE | tee -a $out/summary.txt
