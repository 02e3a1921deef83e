#!/usr/bin/env bash
# On one GPU: measure single-GPU GPT iterations, profile
# their operators with `frugal profile`, predict them with
# `frugal plan validate --profile-db` (and the h100 roofline), print MAPE.
#
#   bench/planner/gpu_validate.sh OUTDIR [FRUGAL_BIN] [PYTHON]
#
# Environment: DEVICE (cuda:0; cpu for a dry run), TINY=1 (tiny shapes, to
# test the code path on a CPU), BUDGET_S (140: total seconds; every step runs
# under `timeout` within what is left), MODELS and MICRO_BATCHES (passed to
# gpt_gpu.py), HARDWARE (h100: the built-in for overheads and the roofline).
#
# Writes into OUTDIR (GPU = the device's name, e.g. nvidia-h100-80gb-hbm3):
#   measured_GPU_recompute-{none,full}.csv  measurements (validate format)
#   profile_GPU.csv                         merged `frugal profile` databases
#   profile_GPU_<model>_mb<B>.csv           one per profiled shape
#   validate_GPU_{profile,roofline}_recompute-{none,full}.txt
#   summary_GPU.txt, gpu_validate_GPU.log, nvidia-smi_GPU.txt
# Each step writes its file as it goes; a step that fails or times out is
# reported and the script goes on with what exists.
set -u
set -o pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 OUTDIR [FRUGAL_BIN] [PYTHON]" >&2
  exit 2
fi
OUT=$1
FRUGAL=${2:-build/frugal}
PY=${3:-python3}
DEVICE=${DEVICE:-cuda:0}
TINY=${TINY:-0}
BUDGET_S=${BUDGET_S:-140}
HARDWARE=${HARDWARE:-h100}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT" || exit 2
T0=$SECONDS

left() { echo $((BUDGET_S - (SECONDS - T0))); }
# cap_timeout CAP RESERVE: CAP seconds, or what is left after RESERVE.
cap_timeout() {
  local t=$(( $(left) - $2 ))
  (( t > $1 )) && t=$1
  echo "$t"
}
say() { echo "[gpu_validate +$((SECONDS - T0))s] $*"; }

# --- The device's name, for the file names. --------------------------------
GPU_NAME=cpu
if [[ $DEVICE == cuda* ]]; then
  idx=${DEVICE#cuda}; idx=${idx#:}; idx=${idx:-0}
  GPU_NAME=$(timeout 15 nvidia-smi --query-gpu=name --format=csv,noheader -i "$idx" 2>/dev/null | head -n1)
  if [[ -z $GPU_NAME ]]; then
    GPU_NAME=$(timeout 40 "$PY" -c "import torch; print(torch.cuda.get_device_name($idx))" 2>/dev/null | tail -n1)
  fi
  GPU_NAME=${GPU_NAME:-unknown-gpu}
fi
GPU=$(echo "$GPU_NAME" | tr 'A-Z' 'a-z' | sed -e 's/[^a-z0-9.]\+/-/g' -e 's/^-//' -e 's/-$//')
[[ $TINY == 1 ]] && GPU="${GPU}-tiny"
LOG="$OUT/gpu_validate_${GPU}.log"
exec > >(tee -a "$LOG") 2>&1
say "device $DEVICE ($GPU_NAME), frugal $FRUGAL, python $PY, budget ${BUDGET_S}s, tiny=$TINY"
if [[ $DEVICE == cuda* ]]; then
  timeout 15 nvidia-smi > "$OUT/nvidia-smi_${GPU}.txt" 2>&1 || say "nvidia-smi failed"
fi

# --- 1. Measure. -----------------------------------------------------------
MEAS="$OUT/measured_${GPU}"
args=(--out-prefix "$MEAS" --device "$DEVICE" --gpu-name "$GPU_NAME")
if [[ $TINY == 1 ]]; then
  args+=(--tiny --micro-batches "${MICRO_BATCHES:-1,2}")
  VOCAB=512
else
  [[ -n ${MODELS:-} ]] && args+=(--models "$MODELS")
  [[ -n ${MICRO_BATCHES:-} ]] && args+=(--micro-batches "$MICRO_BATCHES")
  VOCAB=51200
fi
# Leave 45 s for the profiles and validation; gpt_gpu.py starts no new
# configuration in its last 12 s, so the kill is the exception.
t=$(cap_timeout 80 45)
say "1/3 measuring (timeout ${t}s)"
timeout -k 5 "$t" "$PY" "$HERE/gpt_gpu.py" "${args[@]}" --budget-s $((t - 12))
rc=$?
(( rc != 0 )) && say "gpt_gpu.py exited with $rc (124: timeout); going on with the rows written"

rows_of() { [[ -f $1 ]] && grep -v '^#' "$1" | grep -c . || echo 0; }

# --- 2. Profile every (model, micro-batch) shape measured. ----------------
# The built-in model with a row's hidden size has its operator keys (layer
# count does not enter a key; every built-in GPT has sequence 2048, vocab 51200).
preset_of() {
  case $1 in
    768) echo gpt-125m ;;
    1024) echo gpt-350m ;;
    2048) echo gpt-1.3b ;;
    *) echo "" ;;
  esac
}
shapes=$(cat "${MEAS}"_recompute-*.csv 2>/dev/null | grep -v '^#' | awk -F, 'NF >= 11 { print $4 "," $3 }' | sort -t, -k1,1n -k2,2n -u)
PROFILES=()
PROFILED=()  # "hidden,mb" pairs with a database
for s in $shapes; do
  hidden=${s%,*}; mb=${s#*,}
  if [[ $TINY == 1 ]]; then
    # No built-in has the tiny shapes, and a built-in GPT takes minutes on a
    # CPU: profile the small MLP to run the code path (its keys match nothing,
    # so validate falls back to the roofline for every operator).
    model=mlp
  else
    model=$(preset_of "$hidden")
    [[ -z $model ]] && { say "no built-in model with hidden $hidden; its rows use the roofline"; continue; }
  fi
  db="$OUT/profile_${GPU}_${model}_mb${mb}.csv"
  if [[ $TINY == 1 && ${#PROFILES[@]} -gt 0 ]]; then PROFILED+=("$s"); continue; fi
  t=$(cap_timeout 30 12)
  if (( t < 5 )); then say "budget spent: not profiling $model mb$mb"; continue; fi
  say "2/3 frugal profile --model $model --micro-batch $mb (timeout ${t}s)"
  if timeout -k 5 "$t" "$FRUGAL" profile --model "$model" --micro-batch "$mb" --device "$DEVICE" --out "$db"; then
    PROFILES+=("$db")
    PROFILED+=("$s")
  else
    say "frugal profile $model mb$mb failed or timed out"
  fi
done
DB="$OUT/profile_${GPU}.csv"
if (( ${#PROFILES[@]} > 0 )); then
  # One database: comment lines of every part, one header, first time per key.
  awk -F, '/^#/ { print; next } /^key,/ { if (!h++) print; next } !seen[$1]++' "${PROFILES[@]}" > "$DB"
  say "profile database $DB: $(grep -vc -e '^#' -e '^key,' "$DB") operator keys"
  if [[ $TINY != 1 ]] && (( $(left) > 25 )); then
    # Every key `plan ops` lists for the profiled shapes should be in the
    # database; a missing one would be costed by the roofline.
    for s in "${PROFILED[@]}"; do
      (( $(left) > 20 )) || break
      timeout 10 "$FRUGAL" plan ops --model "$(preset_of "${s%,*}")" --micro-batch "${s#*,}" 2>/dev/null
    done | awk -F, 'NR == FNR { if ($0 !~ /^#/ && $1 != "key") have[$1] = 1; next }
                    $0 !~ /^#/ && $1 != "key" { want++; if ($1 in have) got++ }
                    END { printf "profile covers %d of %d operator keys of the profiled shapes (plan ops)\n", got, want }' \
          "$DB" - | while read -r line; do say "$line"; done
  fi
else
  say "no profile database"
fi

# --- 3. Validate. ------------------------------------------------------------
SUMMARY="$OUT/summary_${GPU}.txt"
{
  echo "# gpu_validate.sh on $GPU_NAME ($DEVICE), $(date -u +%Y-%m-%dT%H:%M:%SZ), hardware $HARDWARE"
  echo "# kind recompute rows MAPE%"
} > "$SUMMARY"
for mode in none full; do
  f="${MEAS}_recompute-${mode}.csv"
  n=$(rows_of "$f")
  (( n == 0 )) && { say "no $mode rows"; continue; }
  # Rows whose shape has no profile would silently use the roofline: the
  # profile column validates only the profiled shapes.
  pf=$f
  if (( ${#PROFILES[@]} > 0 )); then
    pf="$OUT/measured_${GPU}_recompute-${mode}_profiled.csv"
    awk -F, -v keep="$(IFS=' '; echo "${PROFILED[*]}")" \
      'BEGIN { n = split(keep, k, " "); for (i = 1; i <= n; i++) ok[k[i]] = 1 }
       /^#/ { print; next } ok[$4 "," $3] { print }' "$f" > "$pf"
    np=$(rows_of "$pf")
    if (( np == n )); then rm -f "$pf"; pf=$f; fi
  fi
  for kind in profile roofline; do
    src=$f; extra=()
    if [[ $kind == profile ]]; then
      (( ${#PROFILES[@]} == 0 )) && continue
      src=$pf; extra=(--profile-db "$DB")
    fi
    nk=$(rows_of "$src")
    (( nk == 0 )) && continue
    txt="$OUT/validate_${GPU}_${kind}_recompute-${mode}.txt"
    t=$(cap_timeout 20 0)
    (( t < 3 )) && t=3
    timeout -k 2 "$t" "$FRUGAL" plan validate "$src" --hardware "$HARDWARE" --gpus-per-node 1 \
      --recompute "$mode" --vocab "$VOCAB" "${extra[@]}" > "$txt" 2>&1 || say "validate $kind $mode failed (see $txt)"
    mape=$(sed -n 's/^MAPE: \([0-9.]*\)%$/\1/p' "$txt")
    echo "$kind $mode $nk ${mape:-NA}" >> "$SUMMARY"
  done
done
# Both recompute modes together: the row-weighted mean of the two MAPEs.
for kind in profile roofline; do
  awk -v k="$kind" '$1 == k && $2 != "all" && $4 != "NA" { n += $3; s += $3 * $4 }
    END { if (n > 0) printf "%s all %d %.2f\n", k, n, s / n }' "$SUMMARY" >> "$SUMMARY"
done
say "summary ($SUMMARY):"
cat "$SUMMARY"
for kind in profile roofline; do
  for mode in none full; do
    txt="$OUT/validate_${GPU}_${kind}_recompute-${mode}.txt"
    [[ -f $txt ]] || continue
    echo "--- $kind, recompute $mode ($txt):"
    sed -n '1,/^$/p' "$txt"
  done
done
say "done in $((SECONDS - T0))s"
