"""Ours (the automatic output store) and torch.bmm (cuBLAS) on two MoE L2 cells at 256 rows an expert, three
calls each, for Nsight Compute (results/h200/moe/ceilings/README.md has the ncu command):
    ncu -k regex:"nvjet|grouped_gemm" --launch-count 12 --section SpeedOfLight ... \
        python3 bench/ncu_moe_l2_cells.py build/libxstage_moe.so"""
import sys
import torch
sys.path.insert(0, "bench")
from moe_vs_torch import Ours, uniform_problem

ours = Ours(sys.argv[1])
for name, hidden, inter, El, m in (("qwen3-30b P2", 2048, 768, 64, 256), ("deepseek-v3 P2", 7168, 2048, 128, 256)):
    x, w13, w13i, w2, offs, h, y = uniform_problem(hidden, inter, El, m, 7)
    h.normal_()
    hb = h.view(El, m, inter)
    for _ in range(3):
        ours.gemm(1, h, w2, y, offs, None, hidden)
        torch.bmm(hb, w2.transpose(-2, -1))
    torch.cuda.synchronize()
    print(name, "done", flush=True)
