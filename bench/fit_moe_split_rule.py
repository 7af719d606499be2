#!/usr/bin/env python3
"""Fits the few-tile cost model of the grouped GEMMs' tile and split-K rule (src/runtime/moe/moe_tiles.cpp) to a
split study (bench/moe_split_study.py: every tile and split forced on the development grid's few-tile cells) and
says how well the fitted rule chooses, fitted on every cell and leaving each cell out in turn.

The model sees what the host sees (rows_total / E, E, N, K, SMs; not the per-expert counts). For a tile bm x bn
and s splits: items = E * ceil(m / bm) * ceil(N / bn) * s work items, kb = ceil(ceil(K / 64) / s) k-blocks each,
w = ceil(items / SMs) waves, and a time, in microseconds, linear in seven coefficients:

    c0 w                                   a work item's fixed cost (prologue, scheduling)
  + c1 w kb                                a k-block's fixed cost (barriers, issue)
  + c2 w kb (bm + bn) / 256 * busy         a k-block's operand loads, busy = min(items, SMs) / SMs: a CTA's load
                                           rate falls as more CTAs share the memory system
  + c3 w kb bm bn / 32768                  a k-block's tensor-core work
  + c4 [s > 1]                             split-K's fixed cost (the partials' round trip, the last CTA's sum)
  + c5 [s > 1] items bm bn / 32768 / SMs   the partials' bytes a SM
  + c6 w bm bn / 32768                     the epilogue

fitted by least squares on relative error over every forced (tile, splits) of every cell and GEMM, splits up to 4
(6 and 8 were the best in 1 of the 94 cell-GEMMs, and the model chose them where they were slow).

The rule takes the candidate (every tile built for the GEMM, 1 to 4 splits) of the least expected cost: 1 - w of
its cost at the mean rows plus w of it at skewed counts, modelled as one more m-block an expert than the mean gives
(E ceil(m / bm) + E - 1 m-blocks). The host knows the mean only, and a split that fills one wave at the mean
spills into a second where the counts are skewed: by the mean alone (w = 0) the model split a Zipf-skewed cell of
16 experts 4 ways (0.85x torch). w = 0.3 gave the highest geomean of the picks' measured speed on the study (0,
0.3 and 0.5: 1.583, 1.588, 1.579) and on the study with the table's few-tile cells (1.567, 1.570, 1.561); the
script prints the choices' quality at 0, 0.3 and 0.5. (A hard limit of one wave at the skewed count, also tried,
refused the 2 splits that make Mixtral P = 2 L2 at 64 uniform rows 1.37-1.38x torch.)

The study's cells are those where either GEMM has few tiles; 78 of their 94 cell-GEMMs are few-tile under the
library's rule (the other 16 take the wide rule there, and their data enter the fit too).

    python3 bench/fit_moe_split_rule.py results/h200/moe/split-study/split-study.json
"""
import argparse
import json
import math
from collections import defaultdict

import numpy as np

TILES = {"m128n256": (128, 256), "m128n128": (128, 128), "m64n256": (64, 256), "m64n80": (64, 80)}
MAX_SPLITS = 4


def features(m_blocks, N, K, bm, bn, s, sms):
    items = m_blocks * math.ceil(N / bn) * s
    kb = math.ceil(math.ceil(K / 64) / s)
    w = math.ceil(items / sms)
    split = 1.0 if s > 1 else 0.0
    busy = min(items, sms) / sms
    return [w, w * kb, w * kb * (bm + bn) / 256 * busy, w * kb * bm * bn / 32768, split,
            split * items * bm * bn / 32768 / sms, w * bm * bn / 32768]


def samples(study):
    sms = study.get("sms", 132)
    X, skewed, y, key = [], [], [], []
    for ci, c in enumerate(study["cells"]):
        m = c["counts_total"] / c["experts"]
        for g in ("L1+SwiGLU", "L2"):
            N, K = (2 * c["inter"], c["hidden"]) if g == "L1+SwiGLU" else (c["hidden"], c["inter"])
            for name, ms in c[g]["times_ms"].items():
                if name == "torch":
                    continue
                tile, s = name.split("/k")
                if int(s) > MAX_SPLITS:
                    continue
                bm, bn = TILES[tile]
                E = c["experts"]
                X.append(features(E * math.ceil(m / bm), N, K, bm, bn, int(s), sms))
                skewed.append(features(E * math.ceil(m / bm) + E - 1, N, K, bm, bn, int(s), sms))
                y.append(ms * 1e3)
                key.append((ci, g, name))
    return np.array(X), np.array(skewed), np.array(y), key


def fit(X, y):
    coef, *_ = np.linalg.lstsq(X / y[:, None], np.ones_like(y), rcond=None)
    return coef


def choices(study, key, y, pred):
    by = defaultdict(list)
    for k, t, p in zip(key, y, pred):
        by[k[:2]].append((k[2], t, p))
    out = []
    for (ci, g), rows in sorted(by.items()):
        c = study["cells"][ci][g]
        best = min(t for _, t, _ in rows)
        name, t, _ = min(rows, key=lambda r: r[2])
        torch_us = c["times_ms"]["torch"] * 1e3
        old = c["times_ms"][c["heuristic"]] * 1e3
        out.append(dict(cell=ci, gemm=g, chosen=name, best_over_chosen=best / t, torch_over_chosen=torch_us / t,
                        torch_over_old=torch_us / old, old=c["heuristic"]))
    return out


def geomean(v):
    return math.exp(sum(math.log(x) for x in v) / len(v))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("studies", nargs="+", help="split-study JSON files (their cells together)")
    ap.add_argument("--skew-weight", type=float, default=0.3)
    args = ap.parse_args()
    study = None
    for path in args.studies:
        rec = json.load(open(path))
        study = study or dict(rec, cells=[])
        study["cells"] += rec["cells"]
    X, skewed, y, key = samples(study)
    coef = fit(X, y)
    pred = X @ coef
    w = args.skew_weight
    expected = ((1 - w) * X + w * skewed) @ coef
    print("coefficients (us):", ", ".join(f"c{i} = {v:.4g}" for i, v in enumerate(coef)))
    print(f"relative error of the fit: median {np.median(abs(pred / y - 1)):.3f}, "
          f"90th percentile {np.percentile(abs(pred / y - 1), 90):.3f}")
    chosen = choices(study, key, y, expected)
    # Leave one cell out: fitted without the cell, choosing for it.
    loo = []
    for ci in sorted({k[0] for k in key}):
        keep = np.array([k[0] != ci for k in key])
        p = ((1 - w) * X + w * skewed) @ fit(X[keep], y[keep])
        loo += [r for r in choices(study, key, y, p) if r["cell"] == ci]
    for name, rows in (("fitted on all", chosen), ("leave one cell out", loo)):
        b = [r["best_over_chosen"] for r in rows]
        t = [r["torch_over_chosen"] for r in rows]
        print(f"{name}: best / chosen geomean {geomean(b):.3f}, min {min(b):.3f}; "
              f"torch / chosen geomean {geomean(t):.3f}, min {min(t):.3f}")
    for other in (0.0, 0.3, 0.5):
        t = [r["torch_over_chosen"] for r in choices(study, key, y, ((1 - other) * X + other * skewed) @ coef)]
        print(f"  skew weight {other}: torch / chosen geomean {geomean(t):.3f}, min {min(t):.3f}")
    old = [r["torch_over_old"] for r in chosen]
    print(f"the rule of the study's commit: torch / chosen geomean {geomean(old):.3f}, min {min(old):.3f}")
    for r in loo:
        if r["torch_over_chosen"] < 1.0 or r["best_over_chosen"] < 0.85:
            c = study["cells"][r["cell"]]
            print(f"  cell {r['cell']} {r['gemm']} H {c['hidden']} I {c['inter']} E {c['experts']} "
                  f"m {c['rows_per_expert']} {c['routing']}: {r['chosen']} {r['torch_over_chosen']:.2f}x torch "
                  f"(best {r['torch_over_chosen'] / r['best_over_chosen']:.2f}x, old {r['old']} "
                  f"{r['torch_over_old']:.2f}x)")


if __name__ == "__main__":
    main()
