#!/usr/bin/env bash
# A check beside run 6 (2026-12-03, one H200, commit 96e9665): the grid's first plain-kernel cells (neither GEMM
# split; 23 of cells 0-88 in a 50 s budget) at the final code, against run 4's measurement of the same cells (the
# final table takes those from run 4). After README's build (scripts/device.sh build), from the repository root:
set -uo pipefail
cd "$(dirname "$0")/../../../../.." || exit 1
python3 bench/moe_grid.py --lib build-dev/libxstage_moe.so --commit "$(git rev-parse --short HEAD)" --count 89 \
  --budget-s 50 --plain-kernel-only --out moe-grid-plain-0.json
