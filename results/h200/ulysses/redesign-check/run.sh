#!/usr/bin/env bash
# The Ulysses quick sweep of this check (formerly the `uquick` stage of scripts/device.sh): every
# variant, store path, order and flag timing at S = 4096 and 32768, 8 emulated ranks, each
# configuration paired with an attention-only run, host and device buffers (UPL picks).
# Kept here, not as a stage: it served this one A/B against the earlier sweeps (README.md).
#   usage, on the GPU machine from the repository root:
#     results/h200/ulysses/redesign-check/run.sh [xstage binary, default build-dev/xstage]
#   writes $OUT/r/ulysses/ulysses-quick-{host,device}.json and $OUT/r/u-quick-*.log
set -euo pipefail
X=${1:-build-dev/xstage}
R=${OUT:-/tmp/xstage-out}/r
mkdir -p "$R/ulysses"
u_all="--variants attention-only,sequential,fused,coupled --stores vector16,bulk,paced,paced-bulk,paced-warp
  --orders linear,rotated --flags lagged,at-exit -n 31 --max-seconds 2"
for pl in ${UPL:-host device}; do
  timeout 200 "$X" ulysses --seq 4096,32768 --placement "$pl" $u_all -o "$R/ulysses/ulysses-quick-$pl.json" \
    >"$R/u-quick-$pl.log" 2>&1
  tail -5 "$R/u-quick-$pl.log"
done
