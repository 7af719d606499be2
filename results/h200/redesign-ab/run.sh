#!/usr/bin/env bash
# Issue 38's paired A/B: this commit's build against 005c537's (the code before the redesign), in one run on the
# lent H200. Run from a working tree whose .git holds 005c537 and, in .carry/head.bundle, the new commits.
#   usage: run.sh [build-old] build|tests|gemm|layer|ulysses|sanitize ...   (phases in order; $OUT receives
#   the files). The first call (ab-1) ran `build` as build-old + build together.
# 005c537's build needs one change to run at all on this machine's CLI11 2.4: moe-gemm's `--h` option, which
# aborts every command at start-up (issue 37), is renamed in that clone before it is built. No kernel changes.
set -uo pipefail
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/ab-out}
NEW=/tmp/new OLD=/tmp/old
mkdir -p "$OUT"
clock() { nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw --format=csv,noheader; }
for phase in "$@"; do
  echo "== $phase $(date -u +%T) clock: $(clock)"
  case $phase in
    build)  # the new commit, README's build (and, with build-old in the same call, 005c537 beside it)
      git fetch -q -f .carry/head.bundle HEAD:refs/heads/ab-new && git clone -q -b ab-new . $NEW
      { date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
        echo "new $(git -C $NEW rev-parse HEAD)"; } > "$OUT/env.txt"
      (cd $NEW && time scripts/build.sh) > "$OUT/build.log" 2>&1
      echo "new build rc=$?" >> "$OUT/build.log"; wait; tail -n 2 "$OUT/build.log" ;;
    build-old)  # in the background: `build` waits for it
      git clone -q . $OLD && git -C $OLD checkout -q 005c537 && echo "old $(git -C $OLD rev-parse HEAD)" >> "$OUT/env.txt"
      sed -i 's/add_option("--h", a->h_path/add_option("--h-in", a->h_path/' $OLD/src/cli/cmd_moe_gemm.cpp
      (cd $OLD && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_FUZZ_SMOKE=0 >/dev/null &&
        cmake --build build -j 8 --target xstage_cli xstage_moe; echo "old build rc=$?") > "$OUT/build-old.log" 2>&1 & ;;
    tests)  # README's main job and tests, from the new build
      (cd $NEW && build/xstage report) > "$OUT/report.log" 2>&1; echo "report rc=$?" >> "$OUT/report.log"
      (cd $NEW && XSTAGE_REQUIRE_GPU=1 ctest --test-dir build --output-on-failure -j8) > "$OUT/ctest.log" 2>&1
      echo "ctest rc=$?" >> "$OUT/ctest.log"; tail -4 "$OUT/ctest.log" ;;
    gemm)
      (cd $NEW && python3 bench/ab_builds.py gemm --new build/libxstage_moe.so --old $OLD/build/libxstage_moe.so \
        --rows "${AB_ROWS:-64,128,256,512,1024,4096}" --budget-s "${AB_GEMM_S:-400}" --rounds 7 \
        --commit-new "$(git rev-parse --short=12 HEAD)" --commit-old 005c537 --out "$OUT/gemm-ab.json") \
        > "$OUT/gemm-ab.log" 2>&1; tail -3 "$OUT/gemm-ab.log" ;;
    layer)  # the fused MoE layer (model-guided) and the unfused one, 4 shapes x host and device
      for pl in host device; do
        for st in qwen3-30b-a3b:4096 deepseek-v3:1024 mixtral-8x7b:4096 hidream-i1:4096; do
          (cd $NEW && python3 bench/ab_builds.py cli --new build/xstage --old $OLD/build/xstage --rounds "${AB_PROC:-4}" \
            --label "${st%%:*} T=${st##*:} $pl" \
            --args "moe --shape ${st%%:*} --tokens ${st##*:} --placement $pl --schedules model-guided --variants fused,unfused --bench --rounds 5 --json" \
            --metric configs.0.ms.fused/model-guided --metric configs.0.ms.unfused \
            --commit-new "$(git rev-parse --short=12 HEAD)" --commit-old 005c537 \
            --out "$OUT/layer-${st%%:*}-$pl.json") >> "$OUT/layer-ab.log" 2>&1
        done
      done; cat "$OUT/layer-ab.log" | grep old/new ;;
    ulysses)  # fused Ulysses at 4k and 32k, host buffers and device buffers
      for pl in host device; do
        (cd $NEW && python3 bench/ab_builds.py cli --new build/xstage --old $OLD/build/xstage --rounds "${AB_PROC:-4}" \
          --label "ulysses $pl" \
          --args "ulysses --seq 4096,32768 --placement $pl --variants attention-only,fused -n 31 --max-seconds 2 --json" \
          --metric summary.S=4096.fused_us --metric summary.S=32768.fused_us \
          --metric summary.S=4096.attention_only_us --metric summary.S=32768.attention_only_us \
          --commit-new "$(git rev-parse --short=12 HEAD)" --commit-old 005c537 \
          --out "$OUT/ulysses-$pl.json") >> "$OUT/ulysses-ab.log" 2>&1
      done; grep old/new "$OUT/ulysses-ab.log" ;;
    sanitize)  # the kernels this change touched, under compute-sanitizer (memcheck on all, race/sync on three)
      (cd $NEW && for job in "memcheck FusedLayer.*" "memcheck MoeGemmApi.*" "racecheck FusedLayer.*" \
          "synccheck FusedLayer.*" "memcheck Wgmma.*" "racecheck Wgmma.*" "memcheck UlyssesEmulatedKernels.*" \
          "memcheck MoeLayerCommWaits.*" "racecheck MoeGemmApi.*" "synccheck MoeGemmApi.*" "synccheck Wgmma.*"; do
        set -- $job
        echo "-- $1 $2"
        timeout "${AB_SAN_S:-90}" compute-sanitizer --tool "$1" --error-exitcode 9 build/xstage_gpu_tests \
          --gtest_filter="$2" --gtest_brief=1 2>&1 | tail -3
        echo "rc=${PIPESTATUS[0]}"
      done) > "$OUT/sanitize.log" 2>&1; grep -E "^-- |ERROR SUMMARY|^rc=" "$OUT/sanitize.log" ;;
  esac
done
