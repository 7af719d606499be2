"""Ours (the automatic tile and output store) and torch.bmm (cuBLAS) on MoE L2 cells of uniform rows, three calls
each, for Nsight Compute (results/h200/moe/ceilings/README.md has the ncu command):
    ncu -k regex:"nvjet|grouped_gemm" --launch-count 12 --section SpeedOfLight ... \\
        python3 bench/ncu_moe_l2_cells.py build/libxstage_moe.so
Cells: name:hidden:inter:local experts:rows an expert, comma-separated (--cells); the default is the two cells of
the ceilings study (256 rows). The short-K question of perf-log (issue 39, after run 4: is the tensor pipe idle in
the tile turnover, and for how long) asks for warp states on K = 256 against 768 and 2048 at 1024 rows:
    ncu -k regex:grouped_gemm --launch-count 9 --section WarpStateStats --section SchedulerStats \\
        --section ComputeWorkloadAnalysis python3 bench/ncu_moe_l2_cells.py build/libxstage_moe.so --no-bmm \\
        --cells k256:4096:256:16:1024,k768:4096:768:16:1024,k2048:4096:2048:16:1024"""
import argparse
import sys

import torch

sys.path.insert(0, "bench")
from moe_vs_torch import Ours, uniform_problem  # noqa: E402

CEILINGS_CELLS = "qwen3-30b-P2:2048:768:64:256,deepseek-v3-P2:7168:2048:128:256"


def cells(text):
    out = []
    for item in text.split(","):
        name, *dims = item.split(":")
        if len(dims) != 4:
            raise SystemExit(f"--cells: {item!r}: expected name:hidden:inter:experts:rows")
        out.append((name, *map(int, dims)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib", help="libxstage_moe.so")
    ap.add_argument("--cells", default=CEILINGS_CELLS, help="name:hidden:inter:experts:rows, comma-separated")
    ap.add_argument("--no-bmm", action="store_true", help="ours only (no torch.bmm calls)")
    a = ap.parse_args()
    ours = Ours(a.lib)
    for name, hidden, inter, El, m in cells(a.cells):
        x, w13, w13i, w2, offs, h, y = uniform_problem(hidden, inter, El, m, 7)
        h.normal_()
        hb = h.view(El, m, inter)
        for _ in range(3):
            ours.gemm(1, h, w2, y, offs, None, hidden)
            if not a.no_bmm:
                torch.bmm(hb, w2.transpose(-2, -1))
        torch.cuda.synchronize()
        print(name, "done", flush=True)


if __name__ == "__main__":
    main()
