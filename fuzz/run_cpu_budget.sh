#!/usr/bin/env bash
# Runs one libFuzzer target (built by `make fuzz` in build-fuzz) until it has
# used CPU_S seconds of CPU time (user + system, read from /proc), or WALL_S
# seconds of wall time, whichever comes first; then interrupts it, which makes
# libFuzzer print its final stats. On a shared machine -max_total_time counts
# wall time, so this is how "N CPU-minutes per target" is measured
# (docs/design/security.md, "Fuzzing"). Prints one summary line.
# Usage: fuzz/run_cpu_budget.sh TARGET CPU_S WALL_S [LOG]
#   e.g. nice -n 19 fuzz/run_cpu_budget.sh wire 600 1800
# FUZZ_UNIT_TIMEOUT_S (default 60): libFuzzer's -timeout, which is wall time.
# A fuzzer at nice 19 beside a build can be starved for 20 s and more: with
# -timeout=20 one such stall was reported as a "timeout" on an input that
# runs in 20 ms (control, 2026-11-26). Re-run any reported timeout alone.
set -euo pipefail
cd "$(dirname "$0")/.."
target="$1"; cpu_s="$2"; wall_s="$3"
dir="${FUZZ_BUILD_DIR:-build-fuzz}/fuzz"
log="${4:-$dir/cpu_budget_${target}.log}"
bin="$dir/frugal_${target}_fuzz"
[[ -x "$bin" ]] || { echo "run_cpu_budget: $bin not built (make fuzz)" >&2; exit 2; }
mkdir -p "$dir/corpus/$target" "$dir/crashes"
"$bin" -max_total_time=$((wall_s + 60)) -timeout="${FUZZ_UNIT_TIMEOUT_S:-60}" -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$dir/crashes/${target}-" "$dir/corpus/$target" "fuzz/corpus/$target" >"$log" 2>&1 &
pid=$!
tck=$(getconf CLK_TCK)
start=$(date +%s)
cpu=0
while kill -0 "$pid" 2>/dev/null; do
  if stat=$(cat "/proc/$pid/stat" 2>/dev/null); then
    # Fields 14 and 15 (utime, stime) counted after the ")" that ends the name.
    read -r -a f <<<"${stat##*) }"
    cpu=$(( (f[11] + f[12]) / tck ))
  fi
  now=$(date +%s)
  if (( cpu >= cpu_s || now - start >= wall_s )); then
    kill -INT "$pid" 2>/dev/null || true
    break
  fi
  sleep 2
done
rc=0; wait "$pid" || rc=$?
wall=$(( $(date +%s) - start ))
execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | awk '{print $2}')
cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -1)
crashes=$(grep -cE '^==[0-9]+==ERROR|SUMMARY: (Address|UndefinedBehavior)Sanitizer|deadly signal|Test unit written' \
  "$log" || true)
# libFuzzer exits 0 at max_total_time, 72 (or 130/0) when interrupted; a crash is another code.
echo "target=$target cpu_s=$cpu wall_s=$wall execs=${execs:-?} ${cov:-cov: ?} crash_lines=$crashes rc=$rc log=$log"
