#!/usr/bin/env python3
"""Issue 39's short-K study: the ping-pong tile (m128n128pp: each consumer warpgroup on every other 128 x 128 tile
of its CTA, one tile's epilogue beside the other's mainloop) forced beside the library's rule and torch._grouped_mm
on the development grid's cells with many tiles (bench/moe_grid_cells.py, seed 39: the drawn cells and the table's),
GEMM by GEMM where K <= --max-k: the data a short-K rule is derived from.

Per GEMM: torch, the rule's pick ("rule"), m128n128pp forced ("pp"), the cooperative 128 x 128 tile forced ("coop",
which separates the turn-about from the tile shape) and, as the A/A of the protocol, torch a second time; each a
CUDA graph of enough calls for one replay of >= --window-ms, replays in rounds whose order turns by one every round,
the median per call, the SM clock read inside each replay (bench/moe_vs_torch.py). The ping-pong output is checked
against an fp32 reference on up to four experts (bench/moe_grid.py's reference). Cells where the rule's 128 x 256
tiles fill at most one wave (the few-tile and one-wave bands, which have rules of their own) are left out.

    python3 bench/moe_pingpong_study.py --lib build/libxstage_moe.so --out pingpong-study.json [--budget-s 400]
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
from moe_grid import cell_label, checked_side, reference, rel_on, study_gemm, study_problems, timed_sides  # noqa: E402

PP = mt.TILES.index("m128n128pp")
COOP = mt.TILES.index("m128n128")


def timed(fns, window_ms, rounds):
    """Median ms a call and the median SM clock (MHz) of each side (bench/moe_grid.py's protocol)."""
    t = timed_sides(fns, window_ms, rounds)
    return ({k: v["median_ms"] for k, v in t.items()},
            {k: statistics.median(v["sm_clock_mhz"]) if v["sm_clock_mhz"] else None for k, v in t.items()})


def many_tiles(E, m, n, sms):
    """The rule's wide band: 128 x 256 tiles at the mean rows fill more than one wave."""
    return E * math.ceil(m / 128) * math.ceil(n / 256) > sms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libxstage_moe.so")
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--max-k", type=int, default=2048, help="GEMMs with K at most this")
    ap.add_argument("--min-rows", type=int, default=64, help="cells with at least this many mean rows an expert")
    ap.add_argument("--window-ms", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--budget-s", type=float, default=1e9, help="start no new cell after this long")
    ap.add_argument("--order-seed", type=int, default=1, help="the cells' order (shuffled: a cut run is a sample)")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    ours = mt.Ours(a.lib)
    g = grid_cells.grid(a.seed, 160, 100 * 2**30)
    cells = []
    for c in g["cells"]:
        m, E, H, I = c["rows_per_expert"], c["experts"], c["hidden"], c["inter"]
        gemms = [(kind, n, K) for kind, n, K in ((0, 2 * I, H), (1, H, I))
                 if K <= a.max_k and m >= a.min_rows and many_tiles(E, m, n, ours.sms)]
        if gemms:
            cells.append((c, gemms))
    random.Random(a.order_seed).shuffle(cells)
    rec = dict(tool="bench/moe_pingpong_study.py", commit=a.commit, command=" ".join(sys.argv),
               date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), device=torch.cuda.get_device_name(0),
               sms=ours.sms, protocol=dict(window_ms=a.window_ms, rounds=a.rounds, max_k=a.max_k,
                                           min_rows=a.min_rows, cells_eligible=len(cells)), cells=[])
    print(f"{len(cells)} cells with a GEMM of K <= {a.max_k} on more than one wave of 128 x 256 tiles", flush=True)
    for c, gemms, pr, cell in study_problems(cells, a.seed, a.budget_s, rec, a.out):
        E, rows = c["experts"], pr["rows"]
        for kind, n, K in gemms:
            gemm, inp, w, w_ref, t_fn, out_cols = study_gemm(kind, n, pr)
            rule_tile, rule_splits = ours.plan(kind, rows, E, n, K)
            fns = {"torch": t_fn, "torch2": t_fn}
            errs = {}
            for name, tile in (("rule", -1), ("pp", PP), ("coop", COOP)):
                fns[name], errs[name] = checked_side(
                    lambda o, kind=kind, inp=inp, w=w, n=n, tile=tile: ours.gemm(kind, inp, w, o, pr["offs"], None,
                                                                                 n, tile=tile),
                    pr, kind, inp, w_ref, out_cols)
            ref_torch = rel_on(t_fn(), reference(kind, inp, w_ref, pr["offs_list"], pr["experts"]), pr["offs_list"])
            times, clocks = timed(fns, a.window_ms, a.rounds)
            cell[gemm] = dict(K=K, N=n, k_blocks=(K + 63) // 64, rule=f"{mt.TILES[rule_tile]}/k{rule_splits}",
                              times_ms=times, sm_mhz=clocks, rel_err_fp32=errs, torch_rel_err_fp32=ref_torch,
                              torch_over=dict((k, times["torch"] / times[k]) for k in times))
            print(f"{cell_label(c, gemm, K)} rule {cell[gemm]['rule']:12s} x{times['torch'] / times['rule']:.3f}  pp x{times['torch'] / times['pp']:.3f}"
                  f"  coop x{times['torch'] / times['coop']:.3f}  pp/rule {times['rule'] / times['pp']:.3f}  "
                  f"A/A {times['torch'] / times['torch2']:.3f}  err pp {errs['pp']:.1e}", flush=True)
        del inp, w, w_ref, fns, t_fn  # study_problems frees the tensors
    json.dump(rec, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
