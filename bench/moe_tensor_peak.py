#!/usr/bin/env python3
"""How close each GEMM of an MoE L2 cell runs to the tensor cores' peak at the clock it ran at, from Nsight
Compute's cycle counts: ours (the library's automatic choice, or a forced tile), torch._grouped_mm, cuBLAS batched
(torch.bmm) and cuBLAS dense (all rows against one expert's weights: the same FLOPs without expert boundaries).

The fraction is FLOP / (elapsed SM cycles x SMs x 4096), 4096 being the dense bf16 FLOP an H100/H200 SM
issues a cycle. Counting cycles, not seconds, takes the power cap's clock out: the bar "1.1x torch" becomes a
fraction of peak to reach at any clock. Each kernel runs under an NVTX range named after its cell and side, and
ncu names the kernel after that range.

    ncu --nvtx --print-nvtx-rename kernel --clock-control none --metrics \
        gpu__time_duration.sum,sm__cycles_elapsed.avg,sm__cycles_active.avg --csv --page raw \
        python3 bench/moe_tensor_peak.py run --lib build/libxstage_moe.so > ncu.csv
    python3 bench/moe_tensor_peak.py report ncu.csv [--json out.json]
"""
import argparse
import csv
import io
import json
import statistics
import sys

# The L2 cells under the 1.1x bar (docs/RESULTS.md section 7) and one that passes, for comparison:
# name, hidden (N), inter (K), local experts, rows an expert.
CELLS = [
    ("deepseek-v3 P2 256", 7168, 2048, 128, 256),
    ("deepseek-v3 P8 256", 7168, 2048, 32, 256),
    ("qwen3-235b P2 256", 4096, 1536, 64, 256),
    ("mixtral P2 256", 4096, 14336, 4, 256),
    ("mixtral P2 128", 4096, 14336, 4, 128),
    ("qwen3-30b P2 256", 2048, 768, 64, 256),
]
SIDES = ("ours", "torch", "bmm", "dense")
TENSOR_FLOP_PER_SM_CYCLE = 4096


def run(a):
    import torch
    sys.path.insert(0, "bench")
    from moe_vs_torch import TILES, Ours, torch_l2, uniform_problem
    ours = Ours(a.lib)
    tiles = [t for t in a.tiles.split(",") if t]
    for name, hidden, inter, El, m in CELLS:
        x, w13, w13i, w2, offs, h, y = uniform_problem(hidden, inter, El, m, 7)
        h.normal_()
        hb = h.view(El, m, inter)
        fns = {"ours": lambda: ours.gemm(1, h, w2, y, offs, None, hidden),
               "torch": lambda: torch_l2(h, w2, offs),
               "bmm": lambda: torch.bmm(hb, w2.transpose(-2, -1)),
               "dense": lambda: torch.matmul(h, w2[0].T)}
        for t in tiles:
            fns["ours " + t] = lambda t=t: ours.gemm(1, h, w2, y, offs, None, hidden, TILES.index(t), 1)
        for f in fns.values():  # warm-up, outside any range: handles, module loads
            f()
        torch.cuda.synchronize()
        for _ in range(a.calls):
            for side, f in fns.items():
                torch.cuda.nvtx.range_push(f"{name}|{side}")
                f()
                torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        del x, w13, w13i, w2, h, y, hb
        torch.cuda.empty_cache()


def report(a):
    text = open(a.csv).read()
    start = text.find('"ID"')
    if start < 0:
        sys.exit(f"{a.csv}: no ncu CSV header")
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    flop = {name: 2.0 * El * m * inter * hidden for name, hidden, inter, El, m in CELLS}
    got = {}
    for r in rows:
        kname = r.get("Kernel Name", "")
        if "|" not in kname:
            continue  # the units row, or a kernel outside the ranges
        cell, side = kname.split("|", 1)
        if cell not in flop:
            continue
        try:
            elapsed = float(r["sm__cycles_elapsed.avg"].replace(",", ""))
            active = float(r["sm__cycles_active.avg"].replace(",", ""))
            ns = float(r["gpu__time_duration.sum"].replace(",", ""))
        except (KeyError, ValueError):
            continue
        got.setdefault((cell, side), []).append((elapsed, active, ns))
    sms = a.sms
    out = []
    print(f"{'cell':22s} {'side':18s} {'kernels':>7s} {'us':>8s} {'MHz':>6s} {'of peak':>8s} {'(active)':>8s}"
          f" {'x torch':>8s}")
    for name, *_ in CELLS:
        tor = got.get((name, "torch"))
        tor_cyc = statistics.median(e for e, _, _ in tor) if tor else None
        for (cell, side), v in got.items():
            if cell != name:
                continue
            el = statistics.median(e for e, _, _ in v)
            ac = statistics.median(x for _, x, _ in v)
            ns = statistics.median(t for _, _, t in v)
            peak = flop[name] / (el * sms * TENSOR_FLOP_PER_SM_CYCLE)
            peak_active = flop[name] / (ac * sms * TENSOR_FLOP_PER_SM_CYCLE)
            rec = dict(cell=name, side=side, kernels=len(v), us=ns / 1e3, mhz=el / ns * 1e3,
                       sm_cycles_elapsed=el, sm_cycles_active=ac, frac_of_peak=peak,
                       frac_of_peak_active=peak_active, torch_cycles_over=tor_cyc / el if tor_cyc else None)
            out.append(rec)
            print(f"{name:22s} {side:18s} {len(v):7d} {ns / 1e3:8.1f} {rec['mhz']:6.0f} {peak:8.3f} "
                  f"{peak_active:8.3f} {rec['torch_cycles_over'] or float('nan'):8.3f}")
        if tor_cyc:
            need = flop[name] / (tor_cyc / 1.1 * sms * TENSOR_FLOP_PER_SM_CYCLE)
            print(f"{name:22s} {'1.1x torch needs':18s} {'':7s} {'':8s} {'':6s} {need:8.3f}")
            out.append(dict(cell=name, side="1.1x torch", frac_of_peak=need))
    if a.json:
        json.dump(dict(method="ncu cycle counts; FLOP / (sm__cycles_elapsed.avg x SMs x 4096)", sms=sms,
                       cells=out), open(a.json, "w"), indent=1)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--lib", default="build/libxstage_moe.so")
    r.add_argument("--calls", type=int, default=3)
    r.add_argument("--tiles", default="", help="comma list of tiles also run forced (moe_vs_torch.TILES names)")
    p = sub.add_parser("report")
    p.add_argument("csv")
    p.add_argument("--sms", type=int, default=132)
    p.add_argument("--json", default="")
    a = ap.parse_args()
    run(a) if a.cmd == "run" else report(a)


if __name__ == "__main__":
    main()
