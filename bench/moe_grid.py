#!/usr/bin/env python3
"""Our MoE expert GEMMs against torch._grouped_mm on issue 39's development grid, one protocol for every cell.

Grid: bench/moe_grid_cells.py (a seeded sample of the issue's sets plus RESULTS section 7's 108 cells).
Per cell and GEMM (L1 + SwiGLU, L2):
  - correctness: ours and torch against an fp32 reference (per expert, float matmuls; at most `--check-experts`
    experts, the largest and a seeded choice of the rest), relative Frobenius error;
  - timing: ours, torch, torch again (the A/A that states the protocol's noise) and, for uniform rows, cuBLAS
    batched (torch.bmm) + torch's SwiGLU, each captured as a CUDA graph of enough calls that one replay lasts
    at least `--window-ms`; replays alternate side by side for `--rounds` rounds, the order turned by one
    side each round; the SM clock is read by NVML while each replay runs; the medians per call are the figures.
  - a cell our library refuses (its message kept) still times torch.
Output: one JSON record (cells as they finish, so a call that runs out of time keeps what it measured) and a
summary line per GEMM: the geometric mean of torch / ours and the cells under the issue's bars.
"""
import argparse
import json
import math
import os
import random
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moe_grid_cells as grid_cells  # noqa: E402
import moe_vs_torch as mt  # noqa: E402


def reference(kind, a, w, offs_list, experts):
    """fp32 outputs of the chosen experts' rows: {expert: tensor}."""
    out, start = {}, 0
    bounds = [0] + offs_list
    for e in experts:
        r0, r1 = bounds[e], bounds[e + 1]
        if r1 == r0:
            continue
        y = a[r0:r1].float() @ w[e].float().T
        if kind == 0:
            gate, up = y.chunk(2, dim=-1)
            y = torch.nn.functional.silu(gate) * up
        out[e] = y
    return out


def rel_on(y, ref, offs_list):
    bounds = [0] + offs_list
    num = den = 0.0
    for e, r in ref.items():
        d = y[bounds[e]:bounds[e + 1]].float() - r
        num += float((d * d).sum())
        den += float((r * r).sum())
    return math.sqrt(num / den) if den > 0 else 0.0


def calls_per_window(fn, window_ms):
    """How many calls make one replay of at least window_ms (from three timed eager calls)."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    a.record()
    for _ in range(3):
        fn()
    b.record()
    b.synchronize()
    est = max(a.elapsed_time(b) / 3, 1e-3)
    return max(1, min(20000, math.ceil(window_ms / est)))


def timed_sides(fns, window_ms, rounds):
    reps = {k: calls_per_window(f, window_ms) for k, f in fns.items()}
    graphs = {k: mt.graph_of(f, reps[k]) for k, f in fns.items()}
    t = {k: [] for k in fns}
    clk = {k: [] for k in fns}
    for g in graphs.values():
        g.replay()
    torch.cuda.synchronize()
    names = list(graphs)
    for i in range(rounds):
        # The order turns by one side every round, so each side runs in each position (a fixed order showed
        # the first side several percent slower than the same graph run second: results/h200/moe/README.md).
        for k in names[i % len(names):] + names[:i % len(names)]:
            g = graphs[k]
            ms, c = mt.time_graph(g, reps[k])
            t[k].append(ms)
            if c is not None:
                clk[k].append(c)
    del graphs
    return {k: dict(median_ms=statistics.median(v), min_ms=min(v), max_ms=max(v), samples_ms=v,
                    calls_a_replay=reps[k], replay_ms=statistics.median(v) * reps[k], rounds=rounds,
                    sm_clock_mhz=clk[k]) for k, v in t.items()}


def study_problems(cells, seed, budget_s, rec, out):
    """The studies' cell loop (bench/moe_*_study.py): for each (cell, gemms) in order until budget_s has passed,
    the cell's problem on the GPU as a dict (counts, x, w13, w13i, w2, offs, h = torch's L1 output, rows,
    offs_list, experts = the largest and up to three seeded others, the ones checked) and the cell's record
    (the caller adds its GEMMs), which goes into rec["cells"] and rec to `out` once the caller is done; the
    problem is emptied before the next one is made: the caller drops its own references to the tensors by
    then (a cell may fill most of the GPU)."""
    t_end = time.time() + budget_s
    for c, gemms in cells:
        if time.time() > t_end:
            print("budget spent: stopping", flush=True)
            return
        counts = grid_cells.counts_of(c, seed)
        x, w13, w13i, w2, offs, _ = mt.make_problem(c["hidden"], c["inter"], counts, False, seed)
        E = c["experts"]
        rng = random.Random(seed)
        by_size = sorted(range(E), key=lambda e: -counts[e])
        p = dict(counts=counts, x=x, w13=w13, w13i=w13i, w2=w2, offs=offs, h=mt.torch_l1(x, w13, offs, None),
                 rows=x.shape[0], offs_list=offs.tolist(),
                 experts=sorted(set(by_size[:1] + rng.sample(range(E), min(3, E)))))
        cell = dict(c, counts_total=p["rows"])
        yield c, gemms, p, cell
        rec["cells"].append(cell)
        json.dump(rec, open(out, "w"), indent=1)
        p.clear()
        del x, w13, w13i, w2, offs
        torch.cuda.empty_cache()


def study_gemm(kind, n, pr):
    """GEMM `kind` (0 L1 + SwiGLU, 1 L2; n its N) of a study_problems cell: its name, input, our weight, the
    reference's weight, torch's call and the output's columns."""
    x, w13, offs, h = pr["x"], pr["w13"], pr["offs"], pr["h"]
    if kind == 0:
        return "L1+SwiGLU", x, pr["w13i"], w13, (lambda: mt.torch_l1(x, w13, offs, None)), n // 2
    return "L2", h, pr["w2"], pr["w2"], (lambda: mt.torch_l2(h, pr["w2"], offs)), n


def cell_label(c, gemm, K):
    """A study's line prefix for one GEMM of a cell."""
    return (f"H={c['hidden']:5d} I={c['inter']:5d} E={c['experts']:3d} m={c['rows_per_expert']:4d} "
            f"{c['routing']:7s} {gemm:9s} K={K:5d}")


def checked_side(call, pr, kind, inp, w_ref, out_cols):
    """call(o) of ours into a NaN-filled output, once, and its error against the fp32 reference on the cell's
    checked experts: returns (the side's timed call, the error)."""
    o = torch.full((pr["rows"], out_cols), float("nan"), device="cuda", dtype=torch.bfloat16)
    call(o)
    torch.cuda.synchronize()
    err = rel_on(o, reference(kind, inp, w_ref, pr["offs_list"], pr["experts"]), pr["offs_list"])
    return (lambda: call(o)), err


def measure_cell(ours, cell, a):
    counts = grid_cells.counts_of(cell, a.seed)
    H, I, E = cell["hidden"], cell["inter"], cell["experts"]
    x, w13, w13i, w2, offs, _ = mt.make_problem(H, I, counts, False, a.seed)
    rows = x.shape[0]
    offs_list = offs.tolist()
    rng = random.Random(f"{a.seed}:check:{H}:{I}:{E}")
    nonempty = [e for e in range(E) if counts[e] > 0]
    largest = max(range(E), key=lambda e: counts[e])
    rest = [e for e in nonempty if e != largest]
    check = sorted({largest} | set(rng.sample(rest, min(len(rest), a.check_experts - 1))))
    h = torch.empty(rows, I, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(rows, H, device="cuda", dtype=torch.bfloat16)
    out = dict(cell, counts_total=rows, counts_max=max(counts), counts_zero=sum(c == 0 for c in counts))
    torch_h = mt.torch_l1(x, w13, offs, None)
    for kind, gemm in ((0, "L1+SwiGLU"), (1, "L2")):
        inp, w_ours, w_ref, o, n = (x, w13i, w13, h, 2 * I) if kind == 0 else (torch_h, w2, w2, y, H)
        t_fn = (lambda: mt.torch_l1(x, w13, offs, None)) if kind == 0 else (lambda: mt.torch_l2(torch_h, w2, offs))
        r = dict(gemm=gemm, flop=2.0 * rows * inp.shape[1] * n)
        refused = None
        try:
            ours.gemm(kind, inp, w_ours, o, offs, None, n)
            torch.cuda.synchronize()
        except RuntimeError as err:
            refused = str(err)
        ref = reference(kind, inp, w_ref, offs_list, check)
        r["check_experts"] = check
        r["rel_err_torch"] = rel_on(t_fn(), ref, offs_list)
        fns = {"torch": t_fn, "torch_again": t_fn}
        if refused is None:
            r["rel_err_ours"] = rel_on(o, ref, offs_list)
            r["tile"] = ours.tile_name(kind, rows, E, n, inp.shape[1])
            fns["ours"] = lambda: ours.gemm(kind, inp, w_ours, o, offs, None, n)
        else:
            r["refused"] = refused
        if cell["routing"] == "uniform" and not a.no_cublas:
            m = cell["rows_per_expert"]
            ib = inp.view(E, m, inp.shape[1])
            fns["cublas_bmm"] = ((lambda: mt.swiglu(torch.bmm(ib, w13.transpose(-2, -1)))) if kind == 0
                                 else (lambda: torch.bmm(ib, w2.transpose(-2, -1))))
        t = timed_sides(fns, a.window_ms, a.rounds)
        r["times"] = t
        r["aa"] = t["torch"]["median_ms"] / t["torch_again"]["median_ms"]
        # torch's time is the faster of its two graphs: the first was slower by up to 10% in some cells whatever
        # the order (the A/A), and the ratios should not gain from that.
        torch_ms = min(t["torch"]["median_ms"], t["torch_again"]["median_ms"])
        if "ours" in t:
            r["speedup"] = torch_ms / t["ours"]["median_ms"]
        if "cublas_bmm" in t:
            r["cublas_bmm_over_torch"] = torch_ms / t["cublas_bmm"]["median_ms"]
        out[gemm] = r
        print(f"{cell['source']:24s} H={H:5d} I={I:5d} E={E:3d} m={cell['rows_per_expert']:5d} {cell['routing']:7s} "
              f"{gemm:9s} " + (f"x{r['speedup']:.3f} {r['tile']:10s} err {r['rel_err_ours']:.1e}" if "speedup" in r
                               else f"REFUSED ({refused[:60]})")
              + f"  A/A {r['aa']:.3f}  torch err {r['rel_err_torch']:.1e}", flush=True)
    del x, w13, w13i, w2, h, y, torch_h
    torch.cuda.empty_cache()
    return out


def uses_split_kernel(ours, c, seed):
    """Whether the rule runs L1 or L2 of cell c with the split kernel (its labels' /k or /t)."""
    rows, E, H, I = sum(grid_cells.counts_of(c, seed)), c["experts"], c["hidden"], c["inter"]
    return any("/" in ours.tile_name(kind, rows, E, N, K) for kind, N, K in ((0, 2 * I, H), (1, H, I)))


def summary(cells):
    s = {}
    for gemm in ("L1+SwiGLU", "L2"):
        rs = [c[gemm] for c in cells if gemm in c]
        sp = [r["speedup"] for r in rs if "speedup" in r]
        m = [c["rows_per_expert"] for c in cells if gemm in c and "speedup" in c[gemm]]
        s[gemm] = dict(cells=len(rs), refused=sum("refused" in r for r in rs),
                       geomean=math.exp(sum(map(math.log, sp)) / len(sp)) if sp else None,
                       under_097_from_64=sum(1 for v, k in zip(sp, m) if k >= 64 and v < 0.97),
                       under_100_from_512=sum(1 for v, k in zip(sp, m) if k >= 512 and v < 1.0),
                       aa_range=[min(r["aa"] for r in rs), max(r["aa"] for r in rs)] if rs else None)
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libxstage_moe.so")
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--cells", type=int, default=160, help="cells drawn (the table's 108 come on top)")
    ap.add_argument("--max-gib", type=float, default=100.0, help="a drawn cell's problem at most this much memory")
    ap.add_argument("--only", default="", help="drawn, table, or empty for both")
    ap.add_argument("--first", type=int, default=0, help="skip this many cells (a run split over calls)")
    ap.add_argument("--count", type=int, default=0, help="measure at most this many cells (0: all)")
    ap.add_argument("--window-ms", type=float, default=50.0)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--check-experts", type=int, default=4)
    ap.add_argument("--no-cublas", action="store_true")
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--split-kernel-only", action="store_true",
                    help="only cells where the rule runs a GEMM with the split kernel (split-K or the tail split): "
                         "a re-run after a change to that kernel alone")
    only.add_argument("--plain-kernel-only", action="store_true", help="only the other cells (neither GEMM split)")
    ap.add_argument("--budget-s", type=float, default=1e9, help="start no new cell after this long")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    g = grid_cells.grid(a.seed, a.cells, int(a.max_gib * 2**30))
    cells = [c for c in g["cells"] if not a.only or c["source"].startswith(a.only)]
    cells = cells[a.first:a.first + a.count] if a.count else cells[a.first:]
    ours = mt.Ours(a.lib)
    if a.split_kernel_only:
        cells = [c for c in cells if uses_split_kernel(ours, c, a.seed)]
        print(f"{len(cells)} cells run a GEMM with the split kernel", flush=True)
    elif a.plain_kernel_only:
        cells = [c for c in cells if not uses_split_kernel(ours, c, a.seed)]
        print(f"{len(cells)} cells run both GEMMs with the plain kernel", flush=True)
    rec = dict(tool="bench/moe_grid.py", commit=a.commit, command=" ".join(sys.argv),
               date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), device=torch.cuda.get_device_name(0),
               torch=torch.__version__, grid={k: v for k, v in g.items() if k != "cells"},
               protocol=dict(window_ms=a.window_ms, rounds=a.rounds, check_experts=a.check_experts), cells=[])
    t_end = time.time() + a.budget_s
    for c in cells:
        if time.time() > t_end:
            print("budget spent: stopping", flush=True)
            break
        rec["cells"].append(measure_cell(ours, c, a))
        rec["summary"] = summary(rec["cells"])
        json.dump(rec, open(a.out, "w"), indent=1)
    for gemm, v in rec.get("summary", {}).items():
        print(f"{gemm}: {v}")


if __name__ == "__main__":
    main()
