#!/usr/bin/env bash
# bench/gpu/device_run.sh OUT [BUDGET_S]: the project's GPU
# measurements in one pass on a GPU machine with no apt (docs/guide/gpu.md):
# build Frugal and the Python package against the machine's PyTorch wheel,
# run the Python tests on CUDA, time `frugal train --device cuda` (1 and 4
# workers sharing the GPU, overlapped and synchronous device copies) against
# PyTorch DDP (NCCL, Gloo) and a plain PyTorch step, then the planner's
# profile-based prediction of single-GPU GPT steps.
# Each step runs under its own timeout and is skipped once BUDGET_S (default
# 560) would be passed; every log is packed into OUT/gpu.tgz after each
# step, so whatever ran comes back. ONLY="group ..." runs only those groups
# (probe profile local loop3 tta100 pytest-cuda pypath gpt resnet18 ddp-resnet18 planner cnn
# ddp-cnn more example pytest-rest). Needs .gpu/ (debs, fashion-mnist, bible.data) from
# ../shared/gpu/prepare.sh, as docs/guide/gpu.md says.
set -uo pipefail
out=${1:?usage: device_run.sh OUT [BUDGET_S]}
budget=${2:-560}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
work=/tmp/gpu-run
rm -rf "$work" && mkdir -p "$work/runs" "$out"
py=${PY:-/opt/torch/.venv/bin/python3}
[ -x $py ] || py=$(command -v python3)
build=${BUILD:-/root/fbuild}
device=${DEVICE:-cuda}   # DEVICE=cpu BUILD=build STEPS=3 SKIP_BUILD=1: a dry run on a CPU machine
steps=${STEPS:-234}      # one epoch of Fashion-MNIST at 4 workers x 64
data=$root/.gpu/fashion-mnist

log() { echo "[+${SECONDS}s] $*" | tee -a "$work/steps.log"; }
pack() { tar czf "$out/gpu.tgz.tmp" -C "$work" . && mv "$out/gpu.tgz.tmp" "$out/gpu.tgz"; }
# step NAME LIMIT_S CMD...: runs CMD under a timeout into NAME.log, unless the budget is spent.
step() {
  local name=$1 limit=$2; shift 2
  if (( SECONDS + limit / 2 > budget )); then log "skip $name (budget)"; return 0; fi
  (( SECONDS + limit > budget )) && limit=$(( budget - SECONDS ))
  log "start $name (limit ${limit}s)"
  timeout --kill-after=5 "$limit" "$@" > "$work/$name.log" 2>&1
  local rc=$?
  log "end $name rc=$rc"
  tail -n 6 "$work/$name.log" | sed 's/^/    /' | tee -a "$work/steps.log"
  pack
  return 0
}

build_frugal() {
  if [ ! -d /opt/deps/usr ]; then
    mkdir -p /opt/deps/extra
    for f in .gpu/debs/*.deb; do dpkg -x "$f" /opt/deps; done
    for so in /opt/deps/usr/lib/x86_64-linux-gnu/lib*.so.* /opt/deps/lib/x86_64-linux-gnu/lib*.so.*; do
      [ -e "$so" ] || continue; b=$(basename "$so")
      [[ "$b" =~ \.so\.[0-9]+$ ]] || continue
      ldconfig -p | grep -q "^[[:space:]]*$b " || ln -sf "$so" /opt/deps/extra/"$b"
    done
    rm -f /opt/deps/usr/lib/x86_64-linux-gnu/libz.so
  fi
  local pb
  pb=$($py -c 'import pybind11; print(pybind11.get_cmake_dir())' 2>/dev/null || true)
  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFRUGAL_BUILD_TESTS=OFF -DFRUGAL_BUILD_BENCH=OFF \
    "-DCMAKE_PREFIX_PATH=/opt/deps/usr;$($py -c 'import torch;print(torch.utils.cmake_prefix_path)')" \
    -DFRUGAL_PYTHON=$py ${pb:+-Dpybind11_DIR=$pb} \
    -DZLIB_LIBRARY=/lib/x86_64-linux-gnu/libz.so.1 -DZLIB_INCLUDE_DIR=/usr/include -DCMAKE_POLICY_VERSION_MINIMUM=3.5 &&
  cmake --build $build -j"$(nproc)"
}

export LD_LIBRARY_PATH=/opt/deps/extra${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$PATH:/opt/deps/sbin:/opt/deps/bin PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc; $py -c 'import torch; print(torch.__version__, torch.version.cuda)'; } > "$work/machine.txt" 2>&1
log "machine: $(tr '\n' ' ' < "$work/machine.txt")"
export -f build_frugal; export build py
[ -n "${SKIP_BUILD:-}" ] || step build 240 bash -c build_frugal
if [ ! -x $build/frugal ]; then log "no frugal binary: stop"; pack; exit 1; fi
grep -i "python package" "$work/build.log" 2>/dev/null | head -3 | tee -a "$work/steps.log"

frd() {  # frd NAME ARGS...: frugal train on the GPU, Fashion-MNIST from .gpu, the defaults otherwise
  local name=$1; shift
  step "train-$name" 120 $build/frugal train --device $device --data-dir "$data" --text-file .gpu/bible.data \
    --runs-dir "$work/runs" --run-name "$name" --log-every 50 "$@"
}
fr() { frd "$@" --sync step; }  # the step mode, as measured before --sync auto
ddp() {  # ddp NAME CASE...: bench/baselines/ddp_gpu_test.sh cases, one epoch of 4 x 64 at most
  local name=$1; shift
  step "ddp-$name" "${DDP_LIMIT:-150}" env PY=$py DATA_DIR="$data" OUT_DIR="$work/ddp" DEVICE=$device STEPS=$steps \
    EXTRA="--text-file .gpu/bible.data" bash bench/baselines/ddp_gpu_test.sh "$@"
}
export FRUGAL_BINARY=$build/frugal PYTHONPATH=$build/python OMP_NUM_THREADS=1
pytest() { step "pytest-$1" "$2" $py -m pytest -q -p no:cacheprovider "${@:3}"; }

want() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }  # ONLY="a b": only those groups

# The Python package's smallest run (every GIL release), and on a crash the same under cuda-gdb for
# the native stacks of each rank (gdb-RANK.log).
if want probe; then
  step probe 60 $build/frugal run --workers 2 --timeout-s 20 -- $py -X faulthandler bench/gpu/probe.py $device
  if [ -n "${PROBE_GDB:-}" ] || ! grep -q "rank 0 checksum" "$work/probe.log"; then
    gdb_cmd="cuda-gdb -q -batch -ex 'set pagination off' -ex 'handle SIGPIPE SIGUSR1 SIGUSR2 nostop noprint'"
    gdb_cmd+=" -ex run -ex 'info sharedlibrary' -ex 'thread apply all bt 30' --args $py bench/gpu/probe.py $device"
    step probe-gdb 150 $build/frugal run --workers 2 --timeout-s 90 -- \
      bash -c "$gdb_cmd > $work/gdb-\$FRUGAL_RANK.log 2>&1"
  fi
fi
# Where a worker's compute goes (goal: within 5% of a plain step): four plain PyTorch
# processes against four frugal.DistributedModel workers sharing the GPU, phase by phase (a device sync
# after each) and under torch.profiler (bench/gpu/profile_step.py).
if want profile; then
  for mode in plain frugal; do
    step profile-$mode 90 $build/frugal run --workers 4 --timeout-s 60 -- $py bench/gpu/profile_step.py \
      --mode $mode --device $device --data-dir "$data" --steps ${PROFILE_STEPS:-100} ${PROFILE_ARGS:-} --out "$work/profile/$mode"
  done
fi
# The default density (3%) against DDP over Gloo in the same call, on loopback.
if want loop3; then
  fr resnet18-w4-d3 --workers 4 --model resnet18 --adapt off --density 0.03 --max-steps $steps --eval-every $steps
  ddp resnet18 resnet18-gloo4
fi
# The default with 4 workers (--sync auto: the local mode), its inner steps on the GPU (--local-inner
# auto; Note [Inner steps on the device]) and on the host, against DDP over Gloo, on loopback.
if want local; then
  l18="--workers 4 --model resnet18 --max-steps $steps --eval-every $steps"
  frd resnet18-w4-local $l18
  frd resnet18-w4-local-host $l18 --local-inner host
  ddp resnet18 resnet18-gloo4
fi
# 100 Mbit/s on the testbed (network namespaces and tbf, iproute2 from .gpu/debs): resnet18, four
# workers sharing the GPU, two epochs, Frugal against DDP over Gloo (shaped: a slice, projected) and
# unshaped DDP (bench/tta/run.py, scenario resnet18-flat-100).
if want tta100; then
  step tta100 ${TTA_LIMIT:-300} env FRUGAL_BENCH_PYTHON=$py $py bench/tta/run.py --frugal $build/frugal \
    --scenarios resnet18-flat-100 ${TTA_SYSTEMS:+--systems $TTA_SYSTEMS} --grace-s 60 ${TTA_ARGS:-} \
    --train-args "--device $device --data-dir $data" --out-dir "$work/tta100"
fi
# The overlapped copies move the same bits as the synchronous ones (python/tests/test_cuda.py).
want pytest-cuda && pytest cuda 90 python/tests/test_cuda.py
# The Python path against the CLI on the same settings (goal: within 5%), at the default density 3%:
# frugal train vs the model in frugal.DistributedModel (ddp.py --hook frugal_model) vs DDP + frugal.sparse_hook,
# and 4 plain PyTorch processes stepping at once (the compute a shared GPU gives each worker).
if want pypath; then
  fr resnet18-w4-d3 --workers 4 --model resnet18 --adapt off --density 0.03 --max-steps $steps --eval-every $steps
  DDP_LIMIT=240 COMPUTE_STEPS=${COMPUTE4_STEPS:-800} ddp resnet18-py resnet18-pymodel4 resnet18-pyhook4 resnet18-compute4
fi
# Four workers sharing the GPU, 1% like the first probe: overlapped vs synchronous copies,
# and the CPU pipeline's threads (auto = the cores per worker, at most 4), against DDP over Gloo (4 ranks on the GPU), over NCCL (1 rank), and plain PyTorch steps.
r18="--workers 4 --model resnet18 --adapt off --density 0.01 --max-steps $steps --eval-every $steps"
if want resnet18; then
  fr resnet18-w4-overlap $r18
  fr resnet18-w4-sync $r18 --no-overlap-device-copies
  fr resnet18-w4-overlap-cpu1 $r18 --cpu-threads 1
fi
want ddp-resnet18 && ddp resnet18 resnet18-gloo4 resnet18-nccl1 resnet18-compute
# Planner: single-GPU GPT steps measured, predicted from frugal profile.
want planner && step planner 150 env BUDGET_S=130 DEVICE=${device/cuda/cuda:0} bash bench/planner/gpu_validate.sh "$work/planner" $build/frugal $py
c4="--workers 4 --model cnn --max-steps $steps --eval-every $steps"
want cnn && fr cnn-w4-overlap $c4 --adapt off --density 0.01
want ddp-cnn && ddp cnn cnn-gloo4 cnn-compute
if want more; then
  fr resnet18-w1 --workers 1 --model resnet18 --max-steps $steps --eval-every $steps
  fr gpt-tiny-w4 --workers 4 --model gpt-tiny --dataset text --max-steps $steps --eval-every $steps
  fr cnn-w4-sync $c4 --adapt off --density 0.01 --no-overlap-device-copies
fi
want example && step example 60 $build/frugal run --workers 4 -- $py examples/distributed_model.py --device $device --steps 300
want pytest-rest && pytest rest 150 python/tests/test_api.py python/tests/test_training.py python/tests/test_hook.py \
  python/tests/test_launcher.py
# gpt-tiny: DDP over Gloo, 4 ranks, against Frugal's 4 workers (same steps, AdamW as in bench/tta).
if want gpt; then
  ddp gpt gpt-tiny-gloo4
  fr gpt-tiny-w4 --workers 4 --model gpt-tiny --dataset text --max-steps $steps --eval-every $steps
fi
log "done"
pack
