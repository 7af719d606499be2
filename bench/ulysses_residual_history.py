#!/usr/bin/env python3
"""Fused residuals of one Ulysses sweep against earlier sweeps of the same kernels.

For each placement and S, the residual fused / attention-only - 1 of every store
path (rotated order, at-exit flags) in each earlier sweep, their range, and the
new sweep's: the check that a change which should not move the kernels did not.

  bench/ulysses_residual_history.py --new results/h200/ulysses/redesign-check/ulysses-quick-{host,device}.json \
      --old results/h200/ulysses/ulysses-{host,device}.json results/h200/ulysses/archive/repeats/ulysses-*-*.json
"""
import argparse
import json

STORES = ["vector16", "bulk", "paced", "paced-bulk", "paced-warp"]


def residuals(d, S):
    ao = [r["time_us"] for r in d["rows"] if r["S"] == S and r["variant"] == "attention-only"]
    out = {}
    for r in d["rows"]:
        if (r["S"] == S and r["variant"] == "fused" and r["order"] == "rotated" and r["flags"] == "at-exit"
                and r["store"] in STORES and ao):
            out[r["store"]] = (r["time_us"] / ao[0] - 1) * 100
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--new", nargs="+", required=True, help="the sweep(s) to check, one per placement")
    ap.add_argument("--old", nargs="+", required=True, help="earlier sweeps")
    a = ap.parse_args()
    new = [json.load(open(f)) for f in a.new]
    old = [(f, json.load(open(f))) for f in a.old]
    for n in new:
        pl = n["rows"][0]["placement"]
        for S in sorted({r["S"] for r in n["rows"]}):
            print(f"\n{pl} S = {S}")
            print(f"{'sweep':34} " + " ".join(f"{s:>12}" for s in STORES))
            seen = {s: [] for s in STORES}
            for f, d in old:
                if d["rows"][0]["placement"] != pl:
                    continue
                o = residuals(d, S)
                if not o:
                    continue
                for s in STORES:
                    if s in o:
                        seen[s].append(o[s])
                print(f"{f.split('/')[-1]:34} " + " ".join(f"{o.get(s, float('nan')):11.1f}%" for s in STORES))
            rng = [f"{min(v):5.1f}..{max(v):5.1f}" if v else f"{'-':>12}" for v in seen.values()]
            print(f"{'earlier range':34} " + " ".join(f"{x:>12}" for x in rng))
            o = residuals(n, S)
            print(f"{'new (' + str(n.get('commit', '?'))[:7] + ')':34} "
                  + " ".join(f"{o.get(s, float('nan')):11.1f}%" for s in STORES))


if __name__ == "__main__":
    main()
