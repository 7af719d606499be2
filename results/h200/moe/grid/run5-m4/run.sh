#!/usr/bin/env bash
# Run 5 of issue 39's grid, first part only (2026-12-03, one H200, commit 12c2407: the M4 rule, the tail split from
# 64 k-blocks), one device call from the repository root of a clone of that commit. It also ran README's build, the
# MoE GEMM and local-layer GPU tests, `xstage report`, the Python MoE GPU tests and cuobjdump of libxstage_moe.so
# (the SASS the M5 fix was found in). Stopped after cells 0-88 (77 measured in the budget): it showed the split
# kernel costing where nothing splits (docs/perf-log.md, M5), and the budget went to run 6 instead.
#   MOE_GRID_S=190 scripts/device.sh bench:moe-grid      (after scripts/device.sh build tests:MoeGemm,MoeLocal report)
#   then here: python3 bench/plot_moe_grid.py --out moe-grid.png moe-grid-0.json > summary.txt
set -uo pipefail
cd "$(dirname "$0")/../../../../.." || exit 1
scripts/device.sh build tests:MoeGemm,MoeLocal report && MOE_GRID_S=190 scripts/device.sh bench:moe-grid
