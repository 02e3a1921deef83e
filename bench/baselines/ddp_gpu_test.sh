#!/bin/bash
# The GPU side of bench/baselines/ddp.py, in one go on one CUDA machine:
# PyTorch DDP over NCCL (1 worker), DDP over Gloo with CUDA tensors (1 worker, and 4 workers sharing the
# GPU), plain single-process PyTorch steps (--compute-only, alone and 4 at once on the GPU), and the check
# that NCCL with 2 ranks on one GPU is refused with ddp.py's message. resnet18 and cnn, Fashion-MNIST,
# batch 64 per worker, 1 epoch, as the Frugal runs of the issue.
#
#   bench/baselines/ddp_gpu_test.sh [CASE...]      (default: every case below)
#
# Cases: MODEL-nccl1 MODEL-gloo1 MODEL-gloo4 MODEL-compute MODEL-compute4, MODEL-pymodel4 (the model in
# frugal.DistributedModel, 4 ranks) and MODEL-pyhook4 (DDP over Gloo + frugal.sparse_hook, 4 ranks), both at
# FRUGAL_DENSITY (0.03) with build/python on PYTHONPATH (MODEL: resnet18, cnn, gpt-tiny;
# gpt-tiny is not in the default list: it needs --text-file through EXTRA) and nccl2-refused.
# Environment (defaults): PY (python3), DATA_DIR (/usr/share/datasets/fashion-mnist), OUT_DIR (/tmp/ddp_gpu:
# a folder per case with rankN.log and metrics.jsonl, and summary.jsonl), DEVICE (cuda; cpu is a dry run of
# the script, which skips the NCCL cases), EPOCHS (1), STEPS (0: EPOCHS decide; else --max-steps),
# BATCH (64), COMPUTE_STEPS (100), EXTRA (more ddp.py flags for every case), CASE_TIMEOUT (240 s per process).
#
# Each case prints ddp.py's summary line(s) ({"summary": "ddp.py", ...}), also appended to
# $OUT_DIR/summary.jsonl, or FAILED with the end of its logs. Exit code: the number of failed cases.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
DDP=$HERE/ddp.py
PY=${PY:-python3}
DATA_DIR=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
OUT_DIR=${OUT_DIR:-/tmp/ddp_gpu}
DEVICE=${DEVICE:-cuda}
EPOCHS=${EPOCHS:-1}
STEPS=${STEPS:-0}
BATCH=${BATCH:-64}
COMPUTE_STEPS=${COMPUTE_STEPS:-100}
EXTRA=${EXTRA:-}
CASE_TIMEOUT=${CASE_TIMEOUT:-240}
FRUGAL_DENSITY=${FRUGAL_DENSITY:-0.03}
# One host: the ranks meet on loopback (Gloo and NCCL otherwise pick an interface from the host name).
export GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-lo} NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
PORT=29700
FAILED=0

schedule_flags() {
  if [ "$STEPS" -gt 0 ]; then echo "--epochs $EPOCHS --max-steps $STEPS"; else echo "--epochs $EPOCHS"; fi
}

model_flags() {  # MODEL: gpt-tiny trains with AdamW, as in bench/tta
  echo "--model $1"
  [ "$1" = gpt-tiny ] && echo "--optimizer adamw --lr 0.001 --weight-decay 0.01"
}

report() {  # NAME RC LOG...: prints the summary lines or the failure
  local name=$1 rc=$2 log
  shift 2
  if [ "$rc" -ne 0 ]; then
    echo "== $name: FAILED (exit code $rc)"
    for log in "$@"; do echo "-- $log"; tail -n 8 "$log"; done
    FAILED=$((FAILED + 1))
    return
  fi
  echo "== $name: ok"
  for log in "$@"; do
    grep -h '^{"summary"' "$log" | sed "s/^{/{\"case\": \"$name\", /" | tee -a "$OUT_DIR/summary.jsonl"
  done
}

wait_all() {  # PID...: waits for them all; once one fails, ends the others. Sets WAIT_RC to the first failure's code.
  # Polls rather than `wait -n`: bash 5.2 drops a second child that ends with the first from its job table.
  local p code
  local -a left=("$@") rest
  WAIT_RC=0
  while [ ${#left[@]} -gt 0 ]; do
    rest=()
    for p in "${left[@]}"; do
      if kill -0 "$p" 2>/dev/null; then
        rest+=("$p")
        continue
      fi
      wait "$p"
      code=$?
      [ "$code" -ne 0 ] && [ "$WAIT_RC" -eq 0 ] && WAIT_RC=$code
    done
    left=("${rest[@]}")
    if [ ${#left[@]} -gt 0 ]; then
      [ "$WAIT_RC" -ne 0 ] && kill "${left[@]}" 2>/dev/null
      sleep 0.5
    fi
  done
}

ddp_case() {  # NAME WORKERS DDP.PY-FLAGS...
  local name=$1 workers=$2 r
  shift 2
  local dir=$OUT_DIR/$name
  local -a pids=()
  PORT=$((PORT + 1))
  rm -rf "$dir" && mkdir -p "$dir"
  echo "== $name: $workers worker(s): ddp.py $* $(schedule_flags) $EXTRA"
  for ((r = 0; r < workers; r++)); do
    # shellcheck disable=SC2046,SC2086
    timeout -k 5 "$CASE_TIMEOUT" "$PY" "$DDP" --rank "$r" --world "$workers" --master "127.0.0.1:$PORT" \
      --run-dir "$dir" --device "$DEVICE" --data-dir "$DATA_DIR" --batch-size "$BATCH" --timeout-s 60 \
      $(schedule_flags) "$@" $EXTRA >"$dir/rank$r.log" 2>&1 &
    pids+=($!)
  done
  wait_all "${pids[@]}"
  report "$name" "$WAIT_RC" "$dir/rank0.log"
}

compute_case() {  # NAME PROCESSES DDP.PY-FLAGS...: that many --compute-only processes at once
  local name=$1 procs=$2 i
  shift 2
  local dir=$OUT_DIR/$name
  local -a pids=() logs=()
  rm -rf "$dir" && mkdir -p "$dir"
  echo "== $name: $procs process(es) at once: ddp.py --compute-only $* --max-steps $COMPUTE_STEPS $EXTRA"
  for ((i = 0; i < procs; i++)); do
    # shellcheck disable=SC2086
    timeout -k 5 "$CASE_TIMEOUT" "$PY" "$DDP" --compute-only --device "$DEVICE" --data-dir "$DATA_DIR" \
      --batch-size "$BATCH" --max-steps "$COMPUTE_STEPS" "$@" $EXTRA >"$dir/proc$i.log" 2>&1 &
    pids+=($!)
    logs+=("$dir/proc$i.log")
  done
  wait_all "${pids[@]}"
  report "$name" "$WAIT_RC" "${logs[@]}"
}

nccl_refused_case() {  # 2 ranks, NCCL, one GPU: ddp.py must stop both with its own message
  local dir=$OUT_DIR/nccl2-refused
  PORT=$((PORT + 1))
  rm -rf "$dir" && mkdir -p "$dir"
  echo "== nccl2-refused: 2 workers, --backend nccl on one GPU (must fail with ddp.py's message)"
  for r in 0 1; do
    timeout -k 5 120 "$PY" "$DDP" --rank $r --world 2 --master "127.0.0.1:$PORT" --run-dir "$dir" --device cuda \
      --backend nccl --model cnn --data-dir "$DATA_DIR" --max-steps 2 --timeout-s 30 >"$dir/rank$r.log" 2>&1 &
  done
  wait
  if grep -q "share one GPU" "$dir/rank0.log" && grep -q "share one GPU" "$dir/rank1.log"; then
    echo "== nccl2-refused: ok: $(grep -h "share one GPU" "$dir/rank0.log" | cut -c1-160)..."
  else
    echo "== nccl2-refused: FAILED (no refusal message)"
    tail -n 8 "$dir/rank0.log" "$dir/rank1.log"
    FAILED=$((FAILED + 1))
  fi
}

run_case() {
  local c=$1 model=${1%-*} kind=${1##*-}
  if [ "$DEVICE" != cuda ] && [[ "$c" == *nccl* ]]; then
    echo "== $c: skipped (NCCL needs DEVICE=cuda)"
    return
  fi
  # shellcheck disable=SC2046
  case "$kind" in
    nccl1) ddp_case "$c" 1 --backend nccl $(model_flags "$model") ;;
    gloo1) ddp_case "$c" 1 --backend gloo $(model_flags "$model") ;;
    gloo4) ddp_case "$c" 4 --backend gloo $(model_flags "$model") ;;
    compute) compute_case "$c" 1 $(model_flags "$model") ;;
    compute4) compute_case "$c" 4 $(model_flags "$model") ;;
    pymodel4) ddp_case "$c" 4 --hook frugal_model --frugal-density "$FRUGAL_DENSITY" $(model_flags "$model") ;;
    pyhook4) ddp_case "$c" 4 --backend gloo --hook frugal --frugal-density "$FRUGAL_DENSITY" $(model_flags "$model") ;;
    refused) nccl_refused_case ;;
    *) echo "unknown case $c"; FAILED=$((FAILED + 1)) ;;
  esac
}

mkdir -p "$OUT_DIR"
: >"$OUT_DIR/summary.jsonl"
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus",
  [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])'
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,memory.used,memory.total,utilization.gpu --format=csv
CASES=("$@")
[ ${#CASES[@]} -eq 0 ] && CASES=(resnet18-nccl1 resnet18-gloo1 resnet18-gloo4 resnet18-compute resnet18-compute4
                                 cnn-nccl1 cnn-gloo1 cnn-gloo4 cnn-compute cnn-compute4 nccl2-refused)
start=$SECONDS
for c in "${CASES[@]}"; do
  t=$SECONDS
  run_case "$c"
  echo "   ($((SECONDS - t)) s)"
done
"$PY" - "$OUT_DIR/summary.jsonl" <<'EOF'
import json, sys
print("%-20s %-12s %-7s %3s %5s %9s %9s %9s %8s" % ("case", "mode", "backend", "w", "steps", "iter_s", "step_s",
                                                    "compute_s", "accuracy"))
f = lambda v, p: "-" if v is None else p % v
for line in open(sys.argv[1]):
    r = json.loads(line)
    print("%-20s %-12s %-7s %3d %5d %9s %9s %9s %8s" % (r["case"], r["mode"], r.get("backend") or "-", r["workers"],
          r["steps"], f(r.get("iter_s_median"), "%.4f"), f(r.get("step_s_median"), "%.4f"),
          f(r.get("compute_s"), "%.4f"), f(r.get("test_accuracy"), "%.4f")))
EOF
echo "== done in $((SECONDS - start)) s, $FAILED failed; summaries in $OUT_DIR/summary.jsonl"
exit "$FAILED"
