#!/usr/bin/env python3
"""Paired A/B of two builds of xstage in one run: did a change lose speed?

  gemm  the section-7 GEMM table's cells (bench/moe_vs_torch.py's uniform shapes), our grouped GEMMs from two
        libxstage_moe.so side by side in one process: new, old and old again (the A/A that states the
        protocol's noise), each a CUDA graph, replays interleaved round by round, medians per call.
  cli   whole commands of two `xstage` binaries, alternated process by process (A B A B ...), each writing its
        JSON record; a metric is pulled from each record (--metric, below) and compared.

Each side is whatever the build gives: the heuristic's tile, split and store on both sides, so a change to the
heuristic shows here as well. Ratios are old / new time (> 1: the new build is faster).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def gemm_ab(a, save):
    import torch
    import moe_vs_torch as m

    new, old = m.Ours(a.new), m.Ours(a.old)
    rows = [int(r) for r in a.rows.split(",")]
    models = a.models.split(",") if a.models else None
    out = []
    t_end = time.time() + a.budget_s
    for name, hidden, inter, El, P, rpe in m.uniform_shapes(rows, models):
        if time.time() > t_end:
            print("budget spent: stopping", flush=True)
            break
        x, w13, w13i, w2, offs, h, y = m.uniform_problem(hidden, inter, El, rpe, a.seed)
        h2, y2 = torch.empty_like(h), torch.empty_like(y)
        rtot = x.shape[0]
        for kind, gemm in ((0, "L1+SwiGLU"), (1, "L2")):
            n = 2 * inter if kind == 0 else hidden
            inp, w, o, o2 = (x, w13i, h, h2) if kind == 0 else (h, w2, y, y2)
            new.gemm(kind, inp, w, o, offs, None, n)
            old.gemm(kind, inp, w, o2, offs, None, n)
            torch.cuda.synchronize()
            same = bool(torch.equal(o, o2))  # the same tile, split and order give the same bits
            f = 2.0 * rtot * inp.shape[1] * n
            fns = {"new": lambda: new.gemm(kind, inp, w, o, offs, None, n),
                   "old": lambda: old.gemm(kind, inp, w, o2, offs, None, n),
                   "old_again": lambda: old.gemm(kind, inp, w, o2, offs, None, n)}
            t = m.compare(fns, f / (990.0 * 0.6e9), a.rounds)
            r = dict(model=name, P=P, experts=El, rows_per_expert=rpe, gemm=gemm, flop=f,
                     tile_new=new.tile_name(kind, rtot, El, n, inp.shape[1]),
                     tile_old=old.tile_name(kind, rtot, El, n, inp.shape[1]), bit_equal=same,
                     new=t["new"], old=t["old"], old_again=t["old_again"],
                     old_over_new=t["old"]["median_ms"] / t["new"]["median_ms"],
                     aa=t["old"]["median_ms"] / t["old_again"]["median_ms"])
            out.append(r)
            print(f"{name:16s} P={P} E={El:3d} m={rpe:5d} {gemm:9s} {r['tile_new']:10s} old/new x{r['old_over_new']:.3f}"
                  f"  A/A x{r['aa']:.3f}  bits {'equal' if same else 'DIFFER'}  clk {t['new']['sm_clock_mhz_during']}",
                  flush=True)
        save(out)  # what is done so far survives a call that runs out of time
        del x, w13, w13i, w2, h, y, h2, y2
        torch.cuda.empty_cache()
    return out


def pick(record, path):
    """A value by a dotted path: 'configs.0.ms.fused/model-guided' or 'summary.S=4096.fused_us'."""
    v = record
    for key in path.split("."):
        if isinstance(v, list):
            if "=" in key:
                k, want = key.split("=", 1)
                v = next(e for e in v if str(e.get(k)) == want)
            else:
                v = v[int(key)]
        else:
            v = v[key]
    return statistics.median(v) if isinstance(v, list) else v


def cli_ab(a):
    out = {"new": [], "old": []}
    for rnd in range(a.rounds):
        for side, exe in (("new", a.new), ("old", a.old)) if rnd % 2 == 0 else (("old", a.old), ("new", a.new)):
            path = f"{a.out}.{side}.{rnd}.json"
            cmd = [exe] + a.args.split() + ["-o", path]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                print(f"{side} failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
                sys.exit(1)
            rec = json.load(open(path))
            out[side].append({k: pick(rec, k) for k in a.metric})
    res = {}
    for k in a.metric:
        n = [r[k] for r in out["new"]]
        o = [r[k] for r in out["old"]]
        res[k] = dict(new=n, old=o, new_median=statistics.median(n), old_median=statistics.median(o),
                      old_over_new=statistics.median(o) / statistics.median(n),
                      # the noise: each side's spread over its own runs, (max - min) / median
                      spread_new=(max(n) - min(n)) / statistics.median(n),
                      spread_old=(max(o) - min(o)) / statistics.median(o))
        print(f"{a.label:28s} {k:40s} old/new x{res[k]['old_over_new']:.3f}  spread new {res[k]['spread_new']:.3f}"
              f" old {res[k]['spread_old']:.3f}", flush=True)
    return dict(label=a.label, args=a.args, rounds=a.rounds, metrics=res)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    g = sub.add_parser("gemm")
    g.add_argument("--new", required=True, help="the new build's libxstage_moe.so")
    g.add_argument("--old", required=True, help="the old build's libxstage_moe.so")
    g.add_argument("--rows", default="64,128,256,512,1024,4096")
    g.add_argument("--models", default="")
    g.add_argument("--rounds", type=int, default=7)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--budget-s", type=float, default=1e9, help="stop starting new shapes after this long")
    c = sub.add_parser("cli")
    c.add_argument("--new", required=True, help="the new build's xstage")
    c.add_argument("--old", required=True, help="the old build's xstage")
    c.add_argument("--args", required=True, help="the command's arguments, the same for both")
    c.add_argument("--metric", action="append", required=True, help="a dotted path into the JSON record")
    c.add_argument("--rounds", type=int, default=4, help="processes a side, alternating")
    c.add_argument("--label", default="")
    for p in (g, c):
        p.add_argument("--out", required=True, help="the JSON file of the comparison")
        p.add_argument("--commit-new", default="unknown")
        p.add_argument("--commit-old", default="unknown")
    a = ap.parse_args()
    meta = dict(what=a.what, commit=a.commit_new, commit_new=a.commit_new, commit_old=a.commit_old,
                command=" ".join(sys.argv), date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    def save(res):
        json.dump(dict(meta, results=res), open(a.out, "w"), indent=1)

    save(gemm_ab(a, save) if a.what == "gemm" else cli_ab(a))


if __name__ == "__main__":
    main()
