#!/usr/bin/env python3
"""Paired residuals of the fused store paths from A/B runs of several xstage binaries.

Reads ab-<binary>-<placement>-<round>.json (xstage ulysses -o, one per binary,
placement and round, the binaries alternating round by round) and prints, per
placement and store path, each binary's median paired residual with its range
over rounds, and vector16's time over paced-bulk's in the same run (a ratio
that the GPU's clock cancels out of).

  bench/ab_store_paths.py results/h200/ulysses/redesign-check/ab-2
"""
import glob
import json
import os
import statistics as st
import sys


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "."
    res, rel, bins = {}, {}, []
    for f in sorted(glob.glob(os.path.join(folder, "ab-*.json"))):
        _, b, pl, _ = os.path.basename(f)[:-5].split("-")
        if b not in bins:
            bins.append(b)
        t = {}
        for r in json.load(open(f))["rows"]:
            if r["variant"] == "fused":
                res.setdefault((pl, r["store"], b), []).append(r["residual_paired"] * 100)
                t[r["store"]] = r["time_us"]
        if "vector16" in t and "paced-bulk" in t:
            rel.setdefault((pl, b), []).append(t["vector16"] / t["paced-bulk"])
    for pl in ("device", "host"):
        print(pl)
        for s in ("vector16", "bulk", "paced-bulk", "paced-warp"):
            cells = []
            for b in bins:
                v = res.get((pl, s, b))
                if v:
                    cells.append(f"{b} {st.median(v):6.1f}% [{min(v):5.1f}, {max(v):5.1f}]")
            print(f"  {s:11} " + "   ".join(cells))
        print("  vector16 / paced-bulk time: "
              + ", ".join(f"{b} {st.median(rel[(pl, b)]):.4f}" for b in bins if (pl, b) in rel))


if __name__ == "__main__":
    main()
