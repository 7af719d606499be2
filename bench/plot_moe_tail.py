#!/usr/bin/env python3
"""The tail-split study's summary and plot (bench/moe_tail_study.py's JSON): whole tiles' time over each split
side's (> 1: the split side is faster), by k-blocks, for GEMMs whose tail the side splits and for those it
leaves whole (the split kernel's whole tiles against the plain kernel's), and the noise: the automatic side where
the rule's cap is 1 runs the plain kernel, as "whole" does (the same kernel twice), and torch's A/A.

    python3 bench/plot_moe_tail.py tail-study.json [more.json] --out tail-split.png > summary.txt
"""
import argparse
import json
import math

BANDS = ((1, 15), (16, 31), (32, 47), (48, 63), (64, 10**6))
SIDES = ("auto", "cap2", "cap4", "cap8")


def gm(v):
    return math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")


def rows_of(rec):
    rows = []
    for c in rec["cells"]:
        for g in ("L1+SwiGLU", "L2"):
            if g not in c:
                continue
            d = c[g]
            t = d["times_ms"]
            for side in SIDES:
                if side in t:
                    rows.append(dict(gemm=g, kb=d["k_blocks"], side=side, splits=d["layout"][side][1],
                                     ratio=t["whole"] / t[side], auto_cap=d["auto_cap"],
                                     aa=t["torch"] / t["torch2"], waves=d["tiles"] / d["grid"]))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json", nargs="+")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    runs = []
    for path in a.json:
        rec = json.load(open(path))
        rows = rows_of(rec)
        runs.append((rec, rows))
        same = [r["ratio"] for r in rows if r["side"] == "auto" and r["auto_cap"] == 1]
        aa = sorted({(r["gemm"], r["kb"], r["waves"], r["aa"]) for r in rows}, key=lambda x: x[3])
        aas = [x[3] for x in aa]
        print(f"{path}: {rec['tool']} at {rec['commit']}, {rec['date']}, {rec['device']}, {len(rec['cells'])} cells")
        print(f"  noise: plain kernel against itself (auto where its cap is 1) n={len(same)} geomean {gm(same):.3f} "
              f"({min(same):.3f}-{max(same):.3f}); torch A/A 5/50/95% {aas[len(aas) // 20]:.3f} / "
              f"{aas[len(aas) // 2]:.3f} / {aas[-1 - len(aas) // 20]:.3f} over {len(aas)} GEMMs")
        print("  k-blocks   side   split: n  whole/side geomean (min-max)   not split: n  geomean")
        for lo, hi in BANDS:
            for side in SIDES:
                s = [r for r in rows if r["side"] == side and lo <= r["kb"] <= hi and not
                     (side == "auto" and r["auto_cap"] == 1)]
                sp = [r["ratio"] for r in s if r["splits"] > 1]
                ns = [r["ratio"] for r in s if r["splits"] == 1]
                if sp or ns:
                    rng = f"({min(sp):.3f}-{max(sp):.3f})" if sp else ""
                    print(f"  {lo:3d}-{min(hi, 999):<4d} {side:6s} {len(sp):8d}  {gm(sp):.3f} {rng:15s} "
                          f"{len(ns):12d}  {gm(ns):.3f}")
    if a.out:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
        for ax, g in zip(axes, ("L1+SwiGLU", "L2")):
            for i, (rec, rows) in enumerate(runs):
                s = [r for r in rows if r["gemm"] == g and r["side"] == "auto" and r["auto_cap"] > 1]
                sp = [r for r in s if r["splits"] > 1]
                ns = [r for r in s if r["splits"] == 1]
                ax.scatter([r["kb"] for r in sp], [r["ratio"] for r in sp], s=14, marker="o" if i == 0 else "^",
                           label=f"tail split, run {i + 1} ({rec['commit'][:7]})")
                ax.scatter([r["kb"] for r in ns], [r["ratio"] for r in ns], s=18, marker="x",
                           label=f"split kernel, nothing split, run {i + 1}")
            ax.axhline(1.0, color="k", lw=0.8)
            ax.axvline(64, color="grey", lw=0.8, ls="--")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("k-blocks (K / 64)")
            ax.set_title(f"{g}: whole tiles' time / the sqrt-cap side's")
        axes[0].set_ylabel("> 1: the tail split is faster")
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
