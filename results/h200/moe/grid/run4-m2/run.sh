#!/usr/bin/env bash
# Run 4 of issue 39's grid (2026-12-02, one H200, commit e734f44: the one-wave tile rule of perf-log MoE M2),
# two device calls from the repository root of a clone of that commit. The first also ran README's build,
# the GPU tests left unrun since their changes, `xstage report`, and memcheck on the FP8 GEMM tests.
#   call 1 (cells 0-88):
#     MOE_GRID_S=230 scripts/device.sh build tests:MoeGemm,GemmFp8,Ulysses,MoeLayerRank report bench:moe-grid
#     compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 build-dev/xstage_gpu_tests \
#       --gtest_filter='GemmFp8.*'
#   call 2 (cells 89-213):
#     MOE_GRID_FIRST=89 MOE_GRID_S=380 scripts/device.sh build bench:moe-grid
#   then here: python3 bench/plot_moe_grid.py --out moe-grid.png moe-grid-0.json moe-grid-89.json > summary.txt
set -uo pipefail
cd "$(dirname "$0")/../../../../.." || exit 1
case "${1:-}" in
  1) MOE_GRID_S=230 scripts/device.sh build tests:MoeGemm,GemmFp8,Ulysses,MoeLayerRank report bench:moe-grid
     compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 build-dev/xstage_gpu_tests \
       --gtest_filter='GemmFp8.*' >"${OUT:-/tmp/xstage-out}/r/memcheck-gemmfp8.log" 2>&1 ;;
  2) MOE_GRID_FIRST=89 MOE_GRID_S=380 scripts/device.sh build bench:moe-grid ;;
  *) echo "usage: $0 1|2" >&2; exit 2 ;;
esac
