#!/bin/bash
# Convergence of the local mode's variants on loopback (accuracy per step; timing not compared).
cd /work/main
run() { name=$1; shift
  OMP_NUM_THREADS=1 timeout 900 build/frugal train --workers 4 --model mlp --sync local --local-steps 16 --density 0.48 \
    --adapt off --epochs 3 --eval-every 117 --runs-dir /tmp/loopexp --run-name $name "$@" > /tmp/loopexp/$name.log 2>&1
  echo "$name: $(grep -E '^done' /tmp/loopexp/$name.log)"; grep "eval " /tmp/loopexp/$name.log | awk '{print $3, $NF, $(NF-2)}' | tr '\n' ' '; echo
}
mkdir -p /tmp/loopexp
run blocking --no-local-overlap
run overlap
run overlap-m05 --outer-momentum 0.5
run overlap-lr1-m0 --outer-lr 1.0 --outer-momentum 0
echo ALLDONE
