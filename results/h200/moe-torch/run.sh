#!/usr/bin/env bash
# One GPU call that checks and measures what issues 39 and 40 added on 2026-12-02 (one H200): the grouped
# GEMMs' tail shapes (issue 39), the one-GPU MoE layer `xstage.MoE` (issue 40), then issue 39's grid with
# the time left. From the repository root of a clone of the commit under test:
#   OUT=... MOE_GRID_S=<seconds> results/h200/moe-torch/run.sh
# Everything lands in $OUT/r (device.sh's layout) and $OUT/results.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/xstage-out}
R=$OUT/r
mkdir -p "$R/moe-torch"
step() {  # name, timeout seconds, command...: the log in r/<name>.log, the exit status in the summary
  local name=$1 limit=$2 t0=$SECONDS; shift 2
  timeout "$limit" "$@" >"$R/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0)) s" | tee -a "$R/moe-torch/steps.txt"
}
# README's build, the GPU tests of the new code, the MoE GEMM sanitizers (tail cases included).
OUT=$OUT scripts/device.sh build tests:MoeGemm,MoeLocalLayer sanitize:moe
cp "$OUT/summary.txt" "$R/moe-torch/device-summary-1.txt"
# The local layer's kernels (route, scatter, combine) under the sanitizers, through its GoogleTest.
for tool in memcheck racecheck synccheck; do
  step "san-$tool-local-layer" 120 compute-sanitizer --tool "$tool" --error-exitcode 9 build-dev/xstage_gpu_tests \
    --gtest_filter='*MoeLocalLayer*' --gtest_brief=1
done
# The Python package from the build tree: the MoE tests (CPU and GPU), then the layer against torch.
export PYTHONPATH=$PWD/python XSTAGE_LIBRARY=$PWD/build-dev/libxstage_torch.so XSTAGE_REQUIRE_GPU=1
step pytest-moe 240 python3 -m pytest -q -p no:cacheprovider python/tests/test_gpu_moe.py \
  python/tests/test_gpu_moe_layer.py python/tests/test_cpu_moe_layer.py python/tests/test_cpu.py
step moe-layer-torch 300 python3 bench/moe_layer_torch.py --out "$R/moe-torch/moe-layer-torch.json"
# Issue 39's grid with what is left of the budget: the section-7 table's cells (160 on) first.
MOE_GRID_FIRST=${MOE_GRID_FIRST:-160} MOE_GRID_S=${MOE_GRID_S:-120} OUT=$OUT scripts/device.sh bench:moe-grid
cat "$R/moe-torch/steps.txt"
