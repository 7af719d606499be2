#!/usr/bin/env bash
# The second GPU call of run 3 (2026-12-02, one H200; the first was `MOE_GRID_S=410 scripts/device.sh build
# bench:moe-grid`, cells 0-158): README's build, the grouped GEMMs' GPU tests under the new tile rule, the rest
# of the grid (cells 159 on), the Python MoE tests (the forward-only fix), then the split study's one-wave band
# with the time left. Steps are bounded by what is left of DEADLINE_S; results are packed after each.
#   OUT=... DEADLINE_S=520 results/h200/moe/grid/run3-rule/run.sh
set -uo pipefail
cd "$(dirname "$0")/../../../../.." || exit 1
DEADLINE_S=${DEADLINE_S:-520} TOPIC=moe-grid . scripts/runbook_steps.sh
OUT=$OUT MOE_GRID_FIRST=159 MOE_GRID_S=200 scripts/device.sh build tests:MoeGemm bench:moe-grid >"$R/device-1.log" 2>&1
cp "$OUT/summary.txt" "$R/device-summary-1.txt" 2>/dev/null
echo "device.sh build tests:MoeGemm bench:moe-grid: $SECONDS s" >>"$steps"
pack
export PYTHONPATH=$PWD/python XSTAGE_LIBRARY=$PWD/build-dev/libxstage_torch.so XSTAGE_REQUIRE_GPU=1
step pytest-moe 120 python3 -m pytest -q -p no:cacheprovider python/tests/test_gpu_moe.py \
  python/tests/test_gpu_moe_layer.py python/tests/test_cpu_moe_layer.py
step moe-split-one-wave $(( $(left) - 5 )) python3 bench/moe_split_study.py --lib build-dev/libxstage_moe.so \
  --band one-wave --commit "$commit" --budget-s $(( $(left) - 40 )) --out "$R/moe-grid/split-study-one-wave.json"
cat "$steps"
pack
