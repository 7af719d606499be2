"""Which kernels torch.bmm (cuBLAS) and torch._grouped_mm (CUTLASS) launch on the MoE L2 cells where bmm beats
our grouped GEMM (docs/RESULTS.md section 7), with their times, from torch.profiler: cuBLAS's kernel names carry
its tile, stages and cluster. On the GPU: python3 bench/cublas_kernel_names.py"""
import torch
from torch.profiler import profile, ProfilerActivity

CELLS = [("qwen3-30b L2 P2 256", 64, 256, 2048, 768), ("deepseek-v3 L2 P2 256", 128, 256, 7168, 2048),
         ("hidream L2 P2 512", 2, 512, 2560, 6912), ("hidream L2 P2 128", 2, 128, 2560, 6912),
         ("deepseek-v3 L2 P8 256", 32, 256, 7168, 2048), ("qwen3-235b L2 P2 256", 64, 256, 4096, 1536),
         ("mixtral L2 P2 256", 4, 256, 4096, 14336), ("mixtral L2 P2 128", 4, 128, 4096, 14336)]
for name, E, m, N, K in CELLS:
    h = torch.randn(E, m, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
    offs = (torch.arange(1, E + 1, device="cuda", dtype=torch.int32) * m)
    hf = h.view(E * m, K)
    fns = {"bmm": lambda: torch.bmm(h, w.transpose(-2, -1)),
           "grouped_mm": lambda: torch._grouped_mm(hf, w.transpose(-2, -1), offs=offs)}
    for k, f in fns.items():
        for _ in range(3):
            f()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                f()
            torch.cuda.synchronize()
        for e in prof.key_averages():
            if e.device_type.name == "CUDA" and e.count >= 5:
                us = e.device_time_total / e.count
                print(f"{name:24s} {k:10s} {us:8.1f} us  {2 * E * m * N * K / us / 1e6:6.1f} TFLOP/s  {e.key[:200]}")
