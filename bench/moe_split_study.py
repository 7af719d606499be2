#!/usr/bin/env python3
"""Issue 39's split-K study: where the grouped GEMMs have few tiles (fewer than half the SMs), every tile shape and
split-K factor forced, beside torch._grouped_mm, on the few-tile cells of the development grid
(bench/moe_grid_cells.py, seed 39): the data a split rule is derived from.

The rule in use (moe_pick_splits: split only when the tiles leave half the SMs idle, each split at least 48
k-blocks of 64, at most 4 splits) came from the tuned model shapes, none of which has few tiles on a long K; the
grid's cells with 1-8 experts of 64-256 rows on K = 2048-7168 lose to torch and to cuBLAS batched there.

Per cell and GEMM: ours with each (tile, splits) for splits in 1, 2, 3, 4, 6, 8 (those <= the k-blocks of 64 and
keeping at most one wave of work items), the heuristic's choice, and torch; each a CUDA graph of enough calls for
one replay of >= --window-ms, replays in rounds whose order turns by one every round, the median per call. Every
forced output is checked against torch's (relative Frobenius error).

    python3 bench/moe_split_study.py --lib build/libxstage_moe.so --out split-study.json [--budget-s 90]
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moe_grid_cells as grid_cells  # noqa: E402
import moe_vs_torch as mt  # noqa: E402
from moe_grid import calls_per_window  # noqa: E402

SPLITS = (1, 2, 3, 4, 6, 8)


def few_tile_cells(seed, sms, band="few", source="drawn"):
    """The drawn cells whose 128 x 256 tiles at the mean rows number fewer than sms / 2 in either GEMM (band
    "few"), or, band "one-wave", those with sms / 2 to sms of them in either GEMM and not fewer in the other: where
    the rule takes the wide tile at one wave, which skewed counts spill into a second."""
    g = grid_cells.grid(seed, 160, 100 * 2**30)
    out = []
    for c in g["cells"]:
        if not c["source"].startswith(source):
            continue
        m, E, H, I = c["rows_per_expert"], c["experts"], c["hidden"], c["inter"]
        tiles = [E * math.ceil(m / 128) * math.ceil(n / 256) for n in (2 * I, H)]
        if band == "few" and min(tiles) < sms // 2:
            out.append(c)
        if band == "one-wave" and min(tiles) >= sms // 2 and any(t <= sms for t in tiles):
            out.append(c)
    return out


def timed(fns, window_ms, rounds):
    reps = {k: calls_per_window(f, window_ms) for k, f in fns.items()}
    graphs = {k: mt.graph_of(f, reps[k]) for k, f in fns.items()}
    names = list(graphs)
    t = {k: [] for k in names}
    for i in range(rounds):
        for k in names[i % len(names):] + names[:i % len(names)]:
            ms, _ = mt.time_graph(graphs[k], reps[k])
            t[k].append(ms)
    return {k: statistics.median(v) for k, v in t.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libxstage_moe.so")
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--window-ms", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--budget-s", type=float, default=1e9)
    ap.add_argument("--band", choices=("few", "one-wave"), default="few")
    ap.add_argument("--source", choices=("drawn", "table"), default="drawn", help="the grid's drawn or table cells")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    ours = mt.Ours(a.lib)
    cells = few_tile_cells(a.seed, ours.sms, a.band, a.source)
    rec = dict(tool="bench/moe_split_study.py", commit=a.commit, command=" ".join(sys.argv),
               date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), device=torch.cuda.get_device_name(0),
               sms=ours.sms, band=a.band, source=a.source, protocol=dict(window_ms=a.window_ms, rounds=a.rounds, splits=SPLITS), cells=[])
    t_end = time.time() + a.budget_s
    for c in cells:
        if time.time() > t_end:
            print("budget spent: stopping", flush=True)
            break
        counts = grid_cells.counts_of(c, a.seed)
        H, I, E = c["hidden"], c["inter"], c["experts"]
        x, w13, w13i, w2, offs, _ = mt.make_problem(H, I, counts, False, a.seed)
        rows = x.shape[0]
        h = mt.torch_l1(x, w13, offs, None)
        cell = dict(c, counts_total=rows)
        for kind, gemm in ((0, "L1+SwiGLU"), (1, "L2")):
            inp, w, n, K = (x, w13i, 2 * I, H) if kind == 0 else (h, w2, H, I)
            t_fn = (lambda: mt.torch_l1(x, w13, offs, None)) if kind == 0 else (lambda: mt.torch_l2(h, w2, offs))
            ref = t_fn().float()
            out_cols = n // 2 if kind == 0 else n
            k_blocks = (K + 63) // 64
            fns, errs = {"torch": t_fn}, {}
            heur_tile, heur_splits = ours.plan(kind, rows, E, n, K)
            for tile, name in enumerate(mt.TILES):
                bm, bn = mt.TILE_SHAPE[tile]
                if (tile == mt.NARROW and kind == 0) or tile == mt.PINGPONG:  # the ping-pong tile: short-K study
                    continue
                tiles = E * math.ceil(rows / E / bm) * math.ceil(n / bn)
                for s in SPLITS:
                    if s > k_blocks or (s > 1 and tiles * s > ours.sms):
                        continue
                    o = torch.empty(rows, out_cols, device="cuda", dtype=torch.bfloat16)
                    f = (lambda kind=kind, inp=inp, w=w, o=o, n=n, tile=tile, s=s:
                         ours.gemm(kind, inp, w, o, offs, None, n, tile=tile, splits=s))
                    try:
                        f()
                        torch.cuda.synchronize()
                    except RuntimeError as err:
                        errs[f"{name}/k{s}"] = f"refused: {err}"
                        continue
                    d = o.float() - ref
                    errs[f"{name}/k{s}"] = float(d.norm() / ref.norm())
                    fns[f"{name}/k{s}"] = f
            times = timed(fns, a.window_ms, a.rounds)
            best = min((k for k in times if k != "torch"), key=lambda k: times[k])
            heur = f"{mt.TILES[heur_tile]}/k{heur_splits}"
            cell[gemm] = dict(times_ms=times, rel_err_vs_torch=errs, heuristic=heur, best=best, k_blocks=k_blocks,
                              torch_over_best=times["torch"] / times[best],
                              torch_over_heuristic=times["torch"] / times[heur] if heur in times else None)
            print(f"H={H:5d} I={I:5d} E={E:3d} m={c['rows_per_expert']:4d} {c['routing']:7s} {gemm:9s} "
                  f"best {best:12s} x{times['torch'] / times[best]:.2f}  heuristic {heur:12s} "
                  + (f"x{times['torch'] / times[heur]:.2f}" if heur in times else "(not timed)"), flush=True)
        rec["cells"].append(cell)
        json.dump(rec, open(a.out, "w"), indent=1)
        del x, w13, w13i, w2, h
        torch.cuda.empty_cache()
    json.dump(rec, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
