#!/bin/bash
# gpt-tiny as the gpt-flat-* scenarios train it (bench/tta/scenarios.py:
# 2 workers, AdamW lr 0.001, 30 warm-up steps, 200 steps), in the local mode
# (H 16, density 0.48, engine defaults otherwise), on loopback: deterministic
# per step, as run.sh. Usage: run_gpt.sh NAME [worker flags...]
cd "$(dirname "$0")/../../../../.."
out=bench/tta/results/2026-11-27-seventeenth/local-loopback
name=gpt-$1; shift
mkdir -p /tmp/loopexp17
OMP_NUM_THREADS=1 timeout 1500 build/frugal train --workers 2 --model gpt-tiny --dataset text --sync local --local-steps 16 \
  --density 0.48 --adapt off --optimizer adamw --lr 0.001 --weight-decay 0.01 --batch-size 8 --warmup-steps 30 \
  --max-steps 200 --epochs 1 --eval-every 50 --runs-dir /tmp/loopexp17 --run-name $name "$@" > /tmp/loopexp17/$name.log 2>&1
cp /tmp/loopexp17/$name.log $out/
{ echo "$name ($*): $(grep -E '^done' /tmp/loopexp17/$name.log)"
  grep val_loss /tmp/loopexp17/$name/metrics.jsonl | /usr/bin/python3 -c '
import json, sys
print(" ".join("%d %.4f" % (r["step"], r["val_loss"]) for r in map(json.loads, sys.stdin)))'; } >> $out/summary.txt
