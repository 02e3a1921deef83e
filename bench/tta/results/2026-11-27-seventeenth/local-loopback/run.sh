#!/bin/bash
# Convergence of the local mode (engine defaults: H 16 -> 4 overlapped
# fragments, outer steps 4 steps late) on loopback, per step. Outer steps land
# at fixed steps, so these runs are deterministic: accuracy per step is the
# same as on the 10 Mbit/s testbed, and time is not compared here.
# Usage: run.sh NAME [worker flags...]
cd "$(dirname "$0")/../../../../.."
out=bench/tta/results/2026-11-27-seventeenth/local-loopback
name=$1; shift
mkdir -p /tmp/loopexp17
OMP_NUM_THREADS=1 timeout 1200 build/frugal train --workers 4 --model mlp --sync local --local-steps 16 --density 0.48 \
  --adapt off --epochs 3 --eval-every 25 --runs-dir /tmp/loopexp17 --run-name $name "$@" > /tmp/loopexp17/$name.log 2>&1
cp /tmp/loopexp17/$name.log $out/
{ echo "$name ($*): $(grep -E '^done' /tmp/loopexp17/$name.log)"
  grep "^eval " /tmp/loopexp17/$name.log | awk '{print $3, $8}' | tr '\n' ' '; echo; } >> $out/summary.txt
