#!/usr/bin/env bash
# Kernel benchmarks: compress/optim vs LibTorch, one thread.
#
#   bash bench/run_kernels.sh [BUILD_DIR]        (make bench-kernels)
#
# Needs BUILD_DIR/bench/kernels/frugal_kernels_bench (FRUGAL_WITH_TORCH=ON,
# FRUGAL_BUILD_BENCH=ON). Real gradients come from $FRUGAL_GRADS if set, else
# BUILD_DIR/bench/mlp_grads.bin, which is created on first use by
# frugal_dump_grads from Fashion-MNIST ($FRUGAL_FASHION_MNIST, default
# /usr/share/datasets/fashion-mnist). Without them only synthetic data is used.
#
# Writes BUILD_DIR/bench/kernels.json (headline figures at n = 10M, d = 1%),
# kernels_table.md (every benchmark), kernels_raw.json (Google Benchmark) and
# kernels_stderr.log (per-tensor quality lines).
set -euo pipefail

BUILD_DIR=${1:-build}
SRC_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=$BUILD_DIR/bench/kernels/frugal_kernels_bench
DUMP=$BUILD_DIR/bench/kernels/frugal_dump_grads
OUT=$BUILD_DIR/bench
DATA=${FRUGAL_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
GRADS=${FRUGAL_GRADS:-$OUT/mlp_grads.bin}
REPS=${FRUGAL_BENCH_REPETITIONS:-3}

if [[ ! -x $BIN ]]; then
  echo "run_kernels.sh: $BIN not found; configure with -DFRUGAL_WITH_TORCH=ON -DFRUGAL_BUILD_BENCH=ON and build" >&2
  exit 1
fi
mkdir -p "$OUT"

if [[ ! -f $GRADS && -x $DUMP && -f $DATA/train-images-idx3-ubyte.gz ]]; then
  echo "== dumping real gradients (Fashion-MNIST mlp, 300 steps) to $GRADS"
  "$DUMP" --data "$DATA" --out "$GRADS" --steps 300 --dump-every 100
fi
grads_arg=()
if [[ -f $GRADS ]]; then
  grads_arg=(--grads="$GRADS")
else
  echo "run_kernels.sh: no real gradients ($GRADS); synthetic only" >&2
fi

# One thread everywhere: the comparison is per core.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
echo "== running $BIN (${REPS} repetitions, medians reported)"
"$BIN" "${grads_arg[@]}" \
  --benchmark_repetitions="$REPS" --benchmark_report_aggregates_only=true \
  --benchmark_out="$OUT/kernels_raw.json" --benchmark_out_format=json \
  2> "$OUT/kernels_stderr.log"

/usr/bin/python3 "$SRC_DIR/bench/kernels/summarize.py" \
  "$OUT/kernels_raw.json" "$OUT/kernels.json" "$OUT/kernels_table.md"
echo "== $OUT/kernels.json"
cat "$OUT/kernels.json"
