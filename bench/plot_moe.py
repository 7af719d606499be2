#!/usr/bin/env python3
"""MoE grouped GEMMs against torch._grouped_mm: TFLOP/s by rows per expert,
one panel per model and ranks, L1+SwiGLU and L2, ours solid and torch dashed,
cuBLAS on one dense expert dotted, and where the run has them (--ceilings)
cuBLAS batched on the whole problem dash-dot (bench/moe_vs_torch.py's JSON).

usage: bench/plot_moe.py --out docs/img/moe-gemm-h200.png results/h200/moe/moe-gemm.json
"""
import argparse
import json

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/img/moe-gemm-h200.png")
    ap.add_argument("json")
    a = ap.parse_args()
    res = json.load(open(a.json))
    rows = res["speed"]
    panels = sorted({(r["model"], r["P"]) for r in rows}, key=lambda k: ([r["model"] for r in rows].index(k[0]), k[1]))
    cols = 3
    nrow = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrow, cols, figsize=(5 * cols, 3.6 * nrow), squeeze=False)
    for ax, (model, P) in zip(axes.flat, panels):
        for gemm, color in (("L1+SwiGLU", "C0"), ("L2", "C1")):
            pts = sorted((r["rows_per_expert"], r) for r in rows if r["model"] == model and r["P"] == P and r["gemm"] == gemm)
            m = [p[0] for p in pts]
            ax.plot(m, [p[1]["ours_tflops"] for p in pts], "-o", color=color, ms=3, label=f"ours {gemm}")
            ax.plot(m, [p[1]["torch_tflops"] for p in pts], "--s", color=color, ms=3, label=f"torch {gemm}")
            ax.plot(m, [p[1]["cublas_tflops"] for p in pts], ":", color=color, label=f"cuBLAS 1 expert {gemm}")
            if all("cublas_whole" in p[1] for p in pts):
                ax.plot(m, [p[1]["cublas_whole"]["bmm"]["tflops"] for p in pts], "-.^", color=color, ms=3,
                        label=f"cuBLAS batched (bmm) {gemm}")
        E = next(r["experts"] for r in rows if r["model"] == model and r["P"] == P)
        ax.set_title(f"{model}, P = {P} ({E} local experts)", fontsize=9)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("rows per expert")
        ax.set_ylabel("TFLOP/s")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    fig.suptitle(f"{res['device']}, torch {res['torch']}, commit {res['commit']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
