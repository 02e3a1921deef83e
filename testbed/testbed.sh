#!/usr/bin/env bash
# Shaped-network testbed: several "hosts" on this machine as network
# namespaces joined by veth pairs and bridges, links rate-limited with
# `tc ... tbf`. Every name it creates starts with "fgtb-" and every address is
# in 10.77.0.0/16 inside those namespaces; the root namespace is not touched.
#
#   testbed/testbed.sh up flat --hosts 4 --rate 100          # each host link R both ways
#   testbed/testbed.sh up clusters --hosts 2+2 --rate 100    # clusters joined by a WAN of R
#   testbed/testbed.sh up fluctuating --hosts 2+2 [--trace FILE]  # WAN follows a trace
#   testbed/testbed.sh up flat --hosts 4 --rate 0            # same hosts, no limit
#   testbed/testbed.sh info            # host -> namespace, address, interface, cluster
#   testbed/testbed.sh run 0 CMD...    # run CMD inside host 0
#   testbed/testbed.sh set-rate 50     # change the shaped rate now
#   testbed/testbed.sh with flat --hosts 4 --rate 100 -- CMD...   # up, CMD, always down
#   testbed/testbed.sh down            # remove everything fgtb-* (also leftovers)
#
# Layout. flat: namespace fgtb-sw holds bridge br0; host i (namespace fgtb-hI,
# interface eth0, 10.77.1.(I+1)/24) is plugged into it; tbf on eth0 (upload)
# and on the switch-side end (download). clusters/fluctuating: cluster A hosts
# on bridge br0 inside router fgtb-ra (10.77.1.0/24, gateway .254), cluster B
# on br0 inside router fgtb-rb (10.77.2.0/24); the routers are joined by the
# veth "wan" (10.77.0.1 <-> 10.77.0.2) with tbf on both ends. Links inside a
# cluster are not limited.
set -euo pipefail

readonly PREFIX="fgtb-"
readonly STATE_DIR="${FRUGAL_TESTBED_STATE:-/run/frugal-testbed}"
readonly SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"

# Built-in WAN trace, one rate in Mbit/s per second (120 s, then it repeats):
# mean 116.7, min 40, max 247 (three sines of periods 37, 11 and 5 s, clamped).
readonly BUILTIN_TRACE="166 165 153 155 164 155 128 117 144 192 221 217 202 198 194 164 109 66 63 88 103 96 86 93 101 80 40 40 40 40 40 40 53 91 132 141 114 84 83 105 122 125 140 183 231 247 220 183 165 161 145 116 103 125 161 172 146 109 88 75 47 40 40 40 43 72 72 66 74 86 75 42 40 44 94 134 151 165 192 218 211 171 134 132 155 170 168 169 190 211 197 145 90 64 61 54 40 40 59 94 101 71 40 40 40 40 40 40 57 117 153 153 141 144 154 146 121 111 140 190"

die() { echo "testbed: $*" >&2; exit 2; }
log() { [[ -n "${TESTBED_QUIET:-}" ]] || echo "testbed: $*" >&2; }

need_root() {
  if [[ $(id -u) -ne 0 ]]; then
    die "needs root (network namespaces, veth, tc); run as root, e.g. 'sudo $0 $*'"
  fi
  command -v ip >/dev/null || die "'ip' not found (apt-get install iproute2)"
  command -v tc >/dev/null || die "'tc' not found (apt-get install iproute2)"
}

# tbf parameters for a rate in Mbit/s: a burst of ~4 ms of traffic, at least
# 128 KB, and a queue of at most 50 ms. The floor matters: tbf drops every
# packet larger than its burst, and veths carry GSO segments of up to 64 KB;
# with a 32 KB burst, lowering the rate mid-run (set-rate 500 -> 50) stalled
# TCP flows whose large segments could never pass (measured: Frugal workers
# timed out waiting for a message after the switch; fine with 128 KB).
tbf_args() {
  local mbit=$1
  local burst=$(( mbit * 1000000 / 8 / 250 ))
  (( burst < 131072 )) && burst=131072
  echo "rate ${mbit}mbit burst ${burst} latency 50ms"
}

# shape NS DEV MBIT: put (or replace) a tbf on DEV's egress; 0 = no limit.
shape() {
  local ns=$1 dev=$2 mbit=$3
  if [[ "$mbit" == 0 ]]; then
    ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null || true
    return
  fi
  # shellcheck disable=SC2046
  ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf $(tbf_args "$mbit")
}

add_ns() {
  ip netns add "$1"
  ip netns exec "$1" ip link set lo up
  echo "$1" >>"$STATE_DIR/namespaces"
}

# add_host IDX CLUSTER SWITCH_NS SUBNET HOSTNUM GATEWAY
add_host() {
  local i=$1 cluster=$2 sw=$3 subnet=$4 num=$5 gw=$6
  local ns="${PREFIX}h$i" port="h$i"
  add_ns "$ns"
  ip link add "${PREFIX}e$i" type veth peer name "${PREFIX}p$i"
  ip link set "${PREFIX}e$i" netns "$ns"
  ip link set "${PREFIX}p$i" netns "$sw"
  ip netns exec "$ns" ip link set "${PREFIX}e$i" name eth0
  ip netns exec "$sw" ip link set "${PREFIX}p$i" name "$port"
  ip netns exec "$ns" ip addr add "$subnet.$num/24" dev eth0
  ip netns exec "$ns" ip link set eth0 up
  ip netns exec "$sw" ip link set "$port" master br0
  ip netns exec "$sw" ip link set "$port" up
  [[ -n "$gw" ]] && ip netns exec "$ns" ip route add default via "$gw"
  echo "$i $ns $subnet.$num eth0 $cluster $sw $port" >>"$STATE_DIR/hosts"
}

add_switch() {
  local ns=$1 addr=${2:-}
  add_ns "$ns"
  ip netns exec "$ns" ip link add br0 type bridge
  ip netns exec "$ns" ip link set br0 up
  [[ -n "$addr" ]] && ip netns exec "$ns" ip addr add "$addr" dev br0
  ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1
}

cmd_down() {
  local quiet=${1:-}
  if [[ -f "$STATE_DIR/trace.pid" ]]; then
    local pid
    pid=$(cat "$STATE_DIR/trace.pid")
    kill "$pid" 2>/dev/null || true
    rm -f "$STATE_DIR/trace.pid"
  fi
  local ns n=0
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${PREFIX}" || true); do
    ip netns pids "$ns" 2>/dev/null | while read -r p; do kill "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
    n=$((n + 1))
  done
  # veth ends that never made it into a namespace (an interrupted `up`).
  for dev in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^${PREFIX}" || true); do
    ip link del "$dev" 2>/dev/null || true
  done
  rm -rf "$STATE_DIR"
  [[ -n "$quiet" ]] || log "down: removed $n namespaces"
}

# Background loop: every second, set both WAN ends to the next trace value.
trace_loop() {
  local file=$1
  local rates=()
  read -r -a rates <<<"$(grep -v '^#' "$file" | tr -s ' \t\n' ' ')"
  (( ${#rates[@]} > 0 )) || exit 1
  local k=0
  while true; do
    local r=${rates[$((k % ${#rates[@]}))]}
    shape "${PREFIX}ra" wan "$r" 2>/dev/null || exit 0
    shape "${PREFIX}rb" wan "$r" 2>/dev/null || exit 0
    echo "$r" >"$STATE_DIR/rate"
    k=$((k + 1))
    sleep 1
  done
}

cmd_up() {
  local topo=${1:-}; shift || true
  [[ "$topo" =~ ^(flat|clusters|fluctuating)$ ]] || die "up: topology must be flat, clusters or fluctuating (got '$topo')"
  local hosts="" rate=100 trace=""
  while (($#)); do
    case $1 in
      --hosts) hosts=$2; shift 2 ;;
      --rate) rate=$2; shift 2 ;;
      --trace) trace=$2; shift 2 ;;
      *) die "up: unknown option '$1'" ;;
    esac
  done
  [[ "$rate" =~ ^[0-9]+$ ]] || die "--rate must be a whole number of Mbit/s (0 = unlimited), got '$rate'"
  need_root up
  cmd_down quiet
  mkdir -p "$STATE_DIR"
  : >"$STATE_DIR/namespaces"; : >"$STATE_DIR/hosts"
  # An `up` that fails half-way removes what it created.
  trap 'cmd_down quiet; echo "testbed: up failed, cleaned up" >&2' ERR
  echo "$topo" >"$STATE_DIR/topology"
  if [[ "$topo" == flat ]]; then
    hosts=${hosts:-4}
    [[ "$hosts" =~ ^[0-9]+$ && "$hosts" -ge 1 && "$hosts" -le 200 ]] || die "flat: --hosts must be 1..200, got '$hosts'"
    add_switch "${PREFIX}sw"
    local i
    for ((i = 0; i < hosts; ++i)); do
      add_host "$i" "c0" "${PREFIX}sw" 10.77.1 $((i + 1)) ""
      shape "${PREFIX}h$i" eth0 "$rate"
      shape "${PREFIX}sw" "h$i" "$rate"
    done
  else
    hosts=${hosts:-2+2}
    [[ "$hosts" =~ ^([0-9]+)\+([0-9]+)$ ]] || die "$topo: --hosts must be A+B, e.g. 2+2, got '$hosts'"
    local na=${BASH_REMATCH[1]} nb=${BASH_REMATCH[2]}
    (( na >= 1 && nb >= 1 && na <= 100 && nb <= 100 )) || die "$topo: each cluster needs 1..100 hosts"
    add_switch "${PREFIX}ra" 10.77.1.254/24
    add_switch "${PREFIX}rb" 10.77.2.254/24
    ip link add "${PREFIX}wa" type veth peer name "${PREFIX}wb"
    ip link set "${PREFIX}wa" netns "${PREFIX}ra"
    ip link set "${PREFIX}wb" netns "${PREFIX}rb"
    ip netns exec "${PREFIX}ra" ip link set "${PREFIX}wa" name wan
    ip netns exec "${PREFIX}rb" ip link set "${PREFIX}wb" name wan
    ip netns exec "${PREFIX}ra" ip addr add 10.77.0.1/30 dev wan
    ip netns exec "${PREFIX}rb" ip addr add 10.77.0.2/30 dev wan
    ip netns exec "${PREFIX}ra" ip link set wan up
    ip netns exec "${PREFIX}rb" ip link set wan up
    ip netns exec "${PREFIX}ra" ip route add 10.77.2.0/24 via 10.77.0.2
    ip netns exec "${PREFIX}rb" ip route add 10.77.1.0/24 via 10.77.0.1
    local i
    for ((i = 0; i < na; ++i)); do add_host "$i" a "${PREFIX}ra" 10.77.1 $((i + 1)) 10.77.1.254; done
    for ((i = 0; i < nb; ++i)); do add_host $((na + i)) b "${PREFIX}rb" 10.77.2 $((i + 1)) 10.77.2.254; done
    if [[ "$topo" == clusters ]]; then
      shape "${PREFIX}ra" wan "$rate"
      shape "${PREFIX}rb" wan "$rate"
    else
      if [[ -z "$trace" ]]; then
        trace="$STATE_DIR/builtin-trace.txt"
        echo "$BUILTIN_TRACE" | tr ' ' '\n' >"$trace"
      fi
      [[ -r "$trace" ]] || die "fluctuating: cannot read trace file '$trace'"
      grep -v '^#' "$trace" | tr -s ' \t' '\n' | grep -v '^$' | grep -qvE '^[0-9]+$' &&
        die "fluctuating: trace '$trace' must hold whole Mbit/s values, one per second"
      local first
      first=$(grep -v '^#' "$trace" | tr -s ' \t' '\n' | grep -v '^$' | head -1)
      shape "${PREFIX}ra" wan "$first"
      shape "${PREFIX}rb" wan "$first"
      cp "$trace" "$STATE_DIR/trace.txt"
      (trace_loop "$STATE_DIR/trace.txt" </dev/null >/dev/null 2>&1 9>&- &
       echo $! >"$STATE_DIR/trace.pid")
      rate=trace
    fi
  fi
  echo "$rate" >"$STATE_DIR/rate"
  trap - ERR
  log "up: $topo, hosts $hosts, rate ${rate} Mbit/s"
}

cmd_info() {
  [[ -f "$STATE_DIR/hosts" ]] || die "no testbed is up (testbed.sh up ...)"
  echo "# topology $(cat "$STATE_DIR/topology") rate_mbit $(cat "$STATE_DIR/rate")"
  echo "# index namespace address interface cluster switch_ns switch_port"
  cat "$STATE_DIR/hosts"
}

cmd_run() {
  local i=${1:-}; shift || true
  [[ "$i" =~ ^[0-9]+$ ]] || die "run: first argument is a host index"
  (($#)) || die "run: missing command"
  need_root run
  ip netns list | awk '{print $1}' | grep -qx "${PREFIX}h$i" || die "run: host $i does not exist (testbed.sh info)"
  exec ip netns exec "${PREFIX}h$i" "$@"
}

cmd_set_rate() {
  local mbit=${1:-}
  [[ "$mbit" =~ ^[0-9]+$ ]] || die "set-rate: rate must be whole Mbit/s"
  need_root set-rate
  [[ -f "$STATE_DIR/topology" ]] || die "no testbed is up"
  local topo
  topo=$(cat "$STATE_DIR/topology")
  if [[ "$topo" == flat ]]; then
    local i ns sw port rest
    while read -r i ns _ _ _ sw port; do
      shape "$ns" eth0 "$mbit"; shape "$sw" "$port" "$mbit"
    done <"$STATE_DIR/hosts"
  else
    shape "${PREFIX}ra" wan "$mbit"; shape "${PREFIX}rb" wan "$mbit"
  fi
  echo "$mbit" >"$STATE_DIR/rate"
}

cmd_with() {
  local args=()
  while (($#)) && [[ "$1" != "--" ]]; do args+=("$1"); shift; done
  [[ "${1:-}" == "--" ]] || die "with: usage: testbed.sh with TOPOLOGY [OPTIONS] -- COMMAND..."
  shift
  (($#)) || die "with: missing command"
  need_root with
  trap 'cmd_down quiet' EXIT
  trap 'exit 130' INT TERM
  cmd_up "${args[@]}"
  "$@"
}

# One testbed at a time: its names are fixed. bench/tta/run.py holds the lock
# itself for a whole benchmark and sets FRUGAL_TESTBED_LOCKED=1.
take_lock() {
  [[ -n "${FRUGAL_TESTBED_LOCKED:-}" ]] && return 0
  command -v flock >/dev/null || return 0
  exec 9>/run/frugal-testbed.lock
  flock -n 9 || die "another testbed run is active (/run/frugal-testbed.lock is held); wait for it to finish"
}

main() {
  local sub=${1:-help}; shift || true
  case $sub in up|down|with|set-rate) [[ $(id -u) -ne 0 ]] || take_lock ;; esac
  case $sub in
    up) cmd_up "$@" ;;
    down) need_root down; cmd_down ;;
    info) cmd_info ;;
    run) cmd_run "$@" ;;
    set-rate) cmd_set_rate "$@" ;;
    with) cmd_with "$@" ;;
    check) need_root check; ip netns add "${PREFIX}probe" && ip netns del "${PREFIX}probe" ;;
    help|-h|--help) sed -n '2,25p' "$SELF" | sed 's/^# \{0,1\}//' ;;
    *) die "unknown command '$sub' (up, down, info, run, set-rate, with, check, help)" ;;
  esac
}

main "$@"
