#!/usr/bin/env python3
"""Issue 39's wave-quantisation study: the tail split (the last wave's tiles split their K over the SMs that
would idle; src/device/sched/tail_split.hpp) against the same tile with whole tiles only, on the development
grid's cells with more than one wave of tiles and at most --max-waves (past that the tail is a small part of the
time; bench/moe_grid_cells.py, seed 39), GEMM by GEMM.

Per GEMM, with the rule's tile: torch ("torch", and again as "torch2": the A/A of the protocol), whole tiles
("whole": tail_splits 1), the library's automatic choice ("auto": the rule's cap) and the cap forced to each of
--caps. The layout each cap gives on the cell's actual counts (tiles, grid, splits) is recorded beside, worked out
here as the kernel does. GEMMs whose last wave is full or more than half the grid split nothing at any cap; of
those the study times --control of them (whole against the split-K kernel's whole tiles: what the tail path costs
where it does nothing). Same protocol as bench/moe_grid.py: each side a CUDA graph of calls for one replay of >=
--window-ms, replays in rounds whose order turns by one each round, the median per call, the SM clock read inside
each replay. Every forced cap's output is checked against an fp32 reference on up to four experts.

    python3 bench/moe_tail_study.py --lib build/libxstage_moe.so --out tail-study.json [--budget-s 400]
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
from moe_grid import cell_label, checked_side, study_gemm, study_problems, timed_sides  # noqa: E402


def layout(tiles, grid, cap):
    """sched/tail_split.hpp's tail_split_layout: (first split tile, ways)."""
    if grid < 1 or tiles < grid:
        return tiles, 1
    waves, r = divmod(tiles, grid)
    s = min(grid // r if r else 1, cap)
    return (tiles, 1) if s < 2 else (waves * grid, s)


def launch_tiles(counts, n, tile):
    bm, bn = mt.TILE_SHAPE[tile]
    nb = math.ceil(n / bn)
    tiles = sum(math.ceil(c / bm) for c in counts) * nb
    max_tiles = (sum(counts) // bm + len(counts)) * nb
    return tiles, max_tiles


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libxstage_moe.so")
    ap.add_argument("--seed", type=int, default=39)
    ap.add_argument("--caps", default="2,4,8", help="tail-split caps forced beside the automatic one")
    ap.add_argument("--control", type=int, default=12, help="GEMMs timed where no cap splits (the path's cost)")
    ap.add_argument("--max-waves", type=float, default=16, help="GEMMs of at most this many waves of tiles")
    ap.add_argument("--window-ms", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--budget-s", type=float, default=1e9, help="start no new cell after this long")
    ap.add_argument("--order-seed", type=int, default=1, help="the cells' order (shuffled: a cut run is a sample)")
    ap.add_argument("--skip", type=int, default=0, help="leave out the first SKIP cells of that order (a second call)")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    caps = [int(c) for c in a.caps.split(",")]
    ours = mt.Ours(a.lib)
    g = grid_cells.grid(a.seed, 160, 100 * 2**30)
    cells = []
    controls = 0
    for c in g["cells"]:
        m, E, H, I = c["rows_per_expert"], c["experts"], c["hidden"], c["inter"]
        counts = grid_cells.counts_of(c, a.seed)
        rows = sum(counts)
        gemms = []
        for kind, n, K in ((0, 2 * I, H), (1, H, I)):
            tile, splits = ours.plan(kind, rows, E, n, K)
            if splits > 1 or mt.TILES[tile] == "m128n128pp":
                continue
            tiles, max_tiles = launch_tiles(counts, n, tile)
            grid = min(max_tiles, ours.sms)
            kb = (K + 63) // 64
            splits_at = {cap: layout(tiles, grid, min(cap, kb))[1] for cap in caps + [kb]}
            if tiles > a.max_waves * grid:
                continue
            if max(splits_at.values()) > 1:
                gemms.append((kind, n, K, tile, tiles, grid))
            elif tiles > grid and controls < a.control:
                controls += 1
                gemms.append((kind, n, K, tile, tiles, grid))
        if gemms:
            cells.append((c, gemms))
    random.Random(a.order_seed).shuffle(cells)
    cells = cells[a.skip:]
    rec = dict(tool="bench/moe_tail_study.py", commit=a.commit, command=" ".join(sys.argv),
               date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), device=torch.cuda.get_device_name(0),
               sms=ours.sms, protocol=dict(window_ms=a.window_ms, rounds=a.rounds, caps=caps, control=a.control,
                                           max_waves=a.max_waves, cells_eligible=len(cells) + a.skip, skip=a.skip),
               cells=[])
    print(f"{len(cells)} cells with a GEMM past one wave (skipped {a.skip})", flush=True)
    for c, gemms, pr, cell in study_problems(cells, a.seed, a.budget_s, rec, a.out):
        E, rows = c["experts"], pr["rows"]
        for kind, n, K, tile, tiles, grid in gemms:
            gemm, inp, w, w_ref, t_fn, out_cols = study_gemm(kind, n, pr)
            kb = (K + 63) // 64
            auto_cap = ours.tail_cap(rows, E, n, K, tile)
            fns = {"torch": t_fn, "torch2": t_fn}
            errs, sides = {}, [("whole", 1), ("auto", 0)] + [(f"cap{cp}", cp) for cp in caps if cp <= kb]
            for name, cap in sides:
                fns[name], errs[name] = checked_side(
                    lambda o, kind=kind, inp=inp, w=w, n=n, tile=tile, cap=cap: ours.gemm(
                        kind, inp, w, o, pr["offs"], None, n, tile=tile, splits=0 if cap != 1 else 1,
                        tail_splits=cap), pr, kind, inp, w_ref, out_cols)
            times, clocks = {}, {}
            t = timed_sides(fns, a.window_ms, a.rounds)
            for k, v in t.items():
                times[k] = v["median_ms"]
                clocks[k] = statistics.median(v["sm_clock_mhz"]) if v["sm_clock_mhz"] else None
            lay = {name: layout(tiles, grid, min(cap if cap > 0 else auto_cap, kb)) if cap != 1 else (tiles, 1)
                   for name, cap in sides}
            cell[gemm] = dict(K=K, N=n, k_blocks=kb, tile=mt.TILES[tile], tiles=tiles, grid=grid,
                              waves=tiles / grid, auto_cap=auto_cap, layout=lay, times_ms=times, sm_mhz=clocks,
                              rel_err_fp32=errs, torch_over=dict((k, times["torch"] / times[k]) for k in times))
            best = min((k for k in times if k.startswith("cap")), key=lambda k: times[k], default="auto")
            print(f"{cell_label(c, gemm, K)} {mt.TILES[tile]} tiles {tiles:5d}/{grid} r={tiles % grid:3d} auto t{auto_cap} "
                  f"s={lay['auto'][1]}  whole/auto {times['whole'] / times['auto']:.3f}  "
                  f"best {best} {times['whole'] / times[best]:.3f}  x{times['torch'] / times['auto']:.3f}  "
                  f"A/A {times['torch'] / times['torch2']:.3f}  err {max(errs.values()):.1e}", flush=True)
        del inp, w, w_ref, fns, t_fn  # study_problems frees the tensors
    json.dump(rec, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
