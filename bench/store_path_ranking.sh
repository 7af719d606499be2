#!/usr/bin/env bash
# The per-store-path model against every committed Ulysses sweep (CPU only):
# `xstage ulysses-predict --store-paths` with the calibration and probe each
# sweep's path needs. docs/model.md, section 8, quotes its output.
# Usage: bench/store_path_ranking.sh [xstage binary] [--json|--csv]
set -euo pipefail
cd "$(dirname "$0")/.."
X=${1:-build/xstage}
fmt=${2:-}
u=results/h200/ulysses
echo "== 1 x H200, host and device buffers (own cost: the device rows of the same sweep), $u/ulysses.json"
$X ulysses-predict $u/ulysses.json --store-paths --bulk-probe results/h200/probe/probe-host.csv $fmt
echo "== 1 x H200, pipelined sweep, host buffers (own cost: its device sweep)"
$X ulysses-predict $u/pipelined/ulysses-pipelined-host.json --store-paths \
  --own-cost $u/pipelined/ulysses-pipelined-device.json --bulk-probe results/h200/probe/probe-host.csv $fmt
for b in peer nccl; do
  echo "== 2 x H200, $b (no calibration at that commit: X-Stage alone)"
  $X ulysses-predict results/h200x2/ulysses/ulysses-$b.json --store-paths \
    --bulk-probe results/h200x2/probe/probe-peer.csv $fmt
done
