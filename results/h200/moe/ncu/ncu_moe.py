# One-off: one L2 call of ours (staged) and torch's for ncu, DeepSeek-V3 P=2 and Qwen3-30B P=8 at 256 rows.
import sys, torch
sys.path.insert(0, "bench")
import moe_vs_torch as m
ours = m.Ours(sys.argv[1])
for hidden, inter, El, rows in ((7168, 2048, 128, 256), (2048, 768, 16, 256), (7168, 2048, 128, 4096 if len(sys.argv) > 2 else 0)):
    if rows == 0: continue
    x, w13, w13i, w2, offs, h, y = m.uniform_problem(hidden, inter, El, rows, 1)
    for _ in range(2):
        ours.gemm(1, h, w2, y, offs, None, hidden, store=0)
        m.torch_l2(h, w2, offs)
    torch.cuda.synchronize()
    del x, w13, w13i, w2, h, y
    torch.cuda.empty_cache()
