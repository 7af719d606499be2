#!/usr/bin/env bash
# Run 6 of issue 39's grid (2026-12-03, one H200, commit 81f65f9: the M5 fix, the split kernel's producer loop in
# uniform registers): the 124 of 214 cells where the rule runs a GEMM with the split kernel (split-K or the tail
# split; bench/moe_grid.py --split-kernel-only), the only cells whose kernel the fix changed, in two device calls
# from the repository root of a clone of that commit. The other 90 cells are run 4's (run4-m2/); run7-plain/
# re-measured 23 of them at 96e9665. Call 1 also ran README's build, the MoE GEMM / local / EP-layer GPU tests and
# the Python MoE GPU tests; call 2 README's build and compute-sanitizer (sanitize/).
#   call 1 (cells 0-88):  MOE_GRID_COUNT=89 MOE_GRID_S=150 MOE_GRID_ARGS=--split-kernel-only scripts/device.sh bench:moe-grid
#   call 2 (cells 89-):   MOE_GRID_FIRST=89 MOE_GRID_S=230 MOE_GRID_ARGS=--split-kernel-only scripts/device.sh bench:moe-grid
#   then here: python3 bench/plot_moe_grid.py --out moe-grid.png moe-grid-0.json moe-grid-89.json > summary.txt
#              python3 bench/plot_moe_grid.py --out moe-grid-final.png ../run4-m2/moe-grid-0.json \
#                ../run4-m2/moe-grid-89.json moe-grid-0.json moe-grid-89.json > summary-final.txt
set -uo pipefail
cd "$(dirname "$0")/../../../../.." || exit 1
case "${1:-}" in
  1) scripts/device.sh build tests:MoeGemm,MoeLocal,MoeLayer
     MOE_GRID_COUNT=89 MOE_GRID_S=150 MOE_GRID_ARGS=--split-kernel-only scripts/device.sh bench:moe-grid ;;
  2) scripts/device.sh build
     MOE_GRID_FIRST=89 MOE_GRID_S=230 MOE_GRID_ARGS=--split-kernel-only scripts/device.sh bench:moe-grid ;;
  *) echo "usage: $0 1|2" >&2; exit 2 ;;
esac
