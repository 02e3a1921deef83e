#!/bin/bash
# A/B of bench/cluster/api_load.py under synthetic CPU load (20 busy loops
# on this 2-core machine): /tmp/frugal_old and /tmp/frugal_new, interleaved,
# two rounds, with the kernel's listen-queue overflow count per run
# (docs/guide/cluster.md, "After the listen backlog was raised").
# Usage: bench/cluster/api_load_ab.sh   (build both binaries first)
set -u
cd "$(dirname "$0")/../.."
trap 'kill $(jobs -p) 2>/dev/null' EXIT
for i in $(seq 20); do (while :; do :; done) & done
sleep 5
for round in 1 2; do
  for v in old new; do
    before=$(nstat -az TcpExtListenOverflows | tail -1 | awk '{print $2}')
    res=$(timeout 600 /usr/bin/python3 bench/cluster/api_load.py --frugal /tmp/frugal_$v --agents 100 --jobs 10000 2>&1 | tail -5 | head -4 | tr '\n' ' ')
    after=$(nstat -az TcpExtListenOverflows | tail -1 | awk '{print $2}')
    echo "$v round $round load $(cut -d' ' -f1 /proc/loadavg) overflows $((after-before)): $res"
  done
done
