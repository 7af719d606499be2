#!/usr/bin/env bash
# One GPU call (2026-12-02, one H200): README's build; the GPU tests left unrun by the last call (the GEMM
# tests on the bf16-rounded reference, FP8 on the mainloop, the MoE layers after the review's fixes); the
# Python MoE tests (the torch.compile fix); sanitizers on the FP8 and tail-shape tests; then issue 39's
# split study with the time left. Steps are bounded by what is left of DEADLINE_S; results are packed after
# each. From the repository root of a clone of the commit under test:
#   OUT=... DEADLINE_S=540 results/h200/moe/split-study/run.sh
set -uo pipefail
cd "$(dirname "$0")/../../../.." || exit 1
DEADLINE_S=${DEADLINE_S:-540} TOPIC=moe-grid . scripts/runbook_steps.sh
OUT=$OUT scripts/device.sh build tests:${RUN_TESTS:-MoeGemm,GemmFp8,MoeLayer,FusedLayer,MoeLocalLayer} \
  >"$R/device-1.log" 2>&1
cp "$OUT/summary.txt" "$R/device-summary-1.txt" 2>/dev/null
echo "device.sh build tests: $SECONDS s" >>"$steps"
pack
export PYTHONPATH=$PWD/python XSTAGE_LIBRARY=$PWD/build-dev/libxstage_torch.so XSTAGE_REQUIRE_GPU=1
step pytest-moe 120 python3 -m pytest -q -p no:cacheprovider python/tests/test_gpu_moe.py \
  python/tests/test_gpu_moe_layer.py python/tests/test_cpu_moe_layer.py
for tool in memcheck racecheck synccheck; do
  step "san-$tool-fp8-tails" 90 compute-sanitizer --tool "$tool" --error-exitcode 9 build-dev/xstage_gpu_tests \
    --gtest_filter='*GemmFp8*:*MoeGemmTails*:MoeGemmApi.*' --gtest_brief=1
done
step moe-split $(( $(left) - 5 )) python3 bench/moe_split_study.py --lib build-dev/libxstage_moe.so \
  --commit "$commit" --budget-s $(( $(left) - 40 )) --out "$R/moe-grid/split-study.json"
cat "$steps"
pack
