#!/usr/bin/env bash
# One GPU call that checks and measures what issues 38-40 added on 2026-12-02 (one H200): the grouped GEMMs'
# tail shapes (issue 39), FP8 on the GEMM mainloop (issue 38), the one-GPU MoE layer `xstage.MoE` and its real
# clients (issue 40); then, with the time left, issue 39's grid (the section-7 table's cells) and split study.
# Steps run in that order, each bounded by what is left of DEADLINE_S, and the results are packed after
# each, so a call cut short still returns what it measured. From the repository root of a clone of the commit
# under test, with the diffusers wheels in .whl/ (bench/moe_client.py):
#   OUT=... DEADLINE_S=560 results/h200/moe-torch/run.sh
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
DEADLINE_S=${DEADLINE_S:-560} TOPIC=moe-torch . scripts/runbook_steps.sh
# README's build and the GPU tests of the new code and of the fused layer whose launch sequence moved
# (device.sh writes r/build.log, r/tests-*.log, r/env.txt).
OUT=$OUT scripts/device.sh build tests:${RUN_TESTS:-MoeGemm,MoeLocalLayer,GemmFp8,MoeLayer,FusedLayer} >"$R/moe-torch/device-1.log" 2>&1
cp "$OUT/summary.txt" "$R/moe-torch/device-summary-1.txt"
echo "device.sh build tests: $SECONDS s" >>"$R/moe-torch/steps.txt"
pack
# The Python package from the build tree: the MoE ops and the layer, CPU and GPU.
export PYTHONPATH=$PWD/python XSTAGE_LIBRARY=$PWD/build-dev/libxstage_torch.so XSTAGE_REQUIRE_GPU=1
step pytest-moe 150 python3 -m pytest -q -p no:cacheprovider python/tests/test_gpu_moe.py \
  python/tests/test_gpu_moe_layer.py python/tests/test_cpu_moe_layer.py
# Issue 40's one-GPU bar: the layer against the torch MoE users write.
step moe-layer-torch 150 python3 bench/moe_layer_torch.py --out "$R/moe-torch/moe-layer-torch.json"
# Sanitizers: the grouped GEMMs (tail cases included), the fused layer, the local layer's route/scatter/combine,
# the FP8 mainloop, the rank entry point.
step sanitize-moe 150 env OUT="$OUT" scripts/device.sh sanitize:moe,moe-layer
for tool in memcheck racecheck synccheck; do
  step "san-$tool-local-fp8" 60 compute-sanitizer --tool "$tool" --error-exitcode 9 build-dev/xstage_gpu_tests \
    --gtest_filter='*MoeLocalLayer*:GemmFp8.*' --gtest_brief=1
done
step san-memcheck-rank 60 compute-sanitizer --tool memcheck --error-exitcode 9 build-dev/xstage_gpu_tests \
  --gtest_filter='MoeLayerRank.*' --gtest_brief=1
# The real clients: diffusers' HiDream and transformers' Qwen3-MoE / Mixtral with their experts swapped.
python3 -m pip install -q --no-index --no-deps --target /tmp/moe-deps .whl/*.whl >"$R/moe-deps.log" 2>&1
step moe-client 150 env PYTHONPATH="$PWD/python:/tmp/moe-deps" python3 bench/moe_client.py --commit "$commit" \
  --out "$R/moe-torch/moe-client.json"
# Issue 39's grid (the section-7 table's cells, 160 on) and the split study, with what is left.
mkdir -p "$R/moe-grid"
grid_s=$(( ($(left) - 30) * 2 / 3 ))
step moe-grid $((grid_s + 40)) python3 bench/moe_grid.py --lib build-dev/libxstage_moe.so --commit "$commit" \
  --first 160 --budget-s "$grid_s" --out "$R/moe-grid/moe-grid-160.json"
step moe-split $(( $(left) - 5 )) python3 bench/moe_split_study.py --lib build-dev/libxstage_moe.so \
  --commit "$commit" --budget-s $(( $(left) - 40 )) --out "$R/moe-grid/split-study.json"
cat "$R/moe-torch/steps.txt"
pack
