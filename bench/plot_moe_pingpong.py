#!/usr/bin/env python3
"""The short-K study's plot and summary (bench/moe_pingpong_study.py's JSON): the rule's time over the forced
ping-pong tile's and over the cooperative 128 x 128 tile's, against K, per GEMM; the geometric means by K band.

    python3 bench/plot_moe_pingpong.py pingpong-study.json --out pingpong.png > summary.txt
"""
import argparse
import json
import math

BANDS = ((0, 256), (257, 512), (513, 1024), (1025, 1536), (1537, 2048))


def gm(v):
    return math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    rec = json.load(open(a.json))
    rows = []
    for c in rec["cells"]:
        for g in ("L1+SwiGLU", "L2"):
            if g in c:
                d = c[g]
                t = d["times_ms"]
                rows.append(dict(gemm=g, K=d["K"], rule=d["rule"], pp=t["rule"] / t["pp"], coop=t["rule"] / t["coop"],
                                 pp_coop=t["coop"] / t["pp"], aa=t["torch"] / t["torch2"],
                                 err=d["rel_err_fp32"]["pp"], routing=c["routing"]))
    aa = sorted(r["aa"] for r in rows)
    print(f"{rec['tool']} at {rec['commit']}, {rec['date']}, {rec['device']}: {len(rows)} cell-GEMMs of "
          f"{len(rec['cells'])} cells, of {rec['protocol']['cells_eligible']} eligible (shuffled, cut by the time "
          "budget)")
    print(f"A/A torch / torch 5/50/95%: {aa[len(aa) // 20]:.3f} / {aa[len(aa) // 2]:.3f} / "
          f"{aa[-1 - len(aa) // 20]:.3f}; ping-pong rel. error vs fp32 at most {max(r['err'] for r in rows):.1e}")
    print("gemm       K band     n  rule/pp geomean (min-max)  rule/coop128  coop128/pp")
    for g in ("L1+SwiGLU", "L2"):
        for lo, hi in BANDS:
            s = [r for r in rows if r["gemm"] == g and lo <= r["K"] <= hi]
            if s:
                print(f"{g:9s} {lo:5d}-{hi:<5d} {len(s):3d}  {gm([r['pp'] for r in s]):.3f} "
                      f"({min(r['pp'] for r in s):.3f}-{max(r['pp'] for r in s):.3f})        "
                      f"{gm([r['coop'] for r in s]):.3f}         {gm([r['pp_coop'] for r in s]):.3f}")
    win = sorted((r for r in rows if r["pp"] > 1.05), key=lambda r: -r["pp"])
    print(f"cells where ping-pong beats the rule by > 5%: {len(win)} of {len(rows)}: " +
          ", ".join(f"{r['gemm']} K={r['K']} {r['routing']} {r['pp']:.3f}" for r in win))
    if a.out:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
        for ax, g in zip(axes, ("L1+SwiGLU", "L2")):
            s = [r for r in rows if r["gemm"] == g]
            ax.scatter([r["K"] for r in s], [r["pp"] for r in s], s=14, label="ping-pong 128 x 128 (m128n128pp)")
            ax.scatter([r["K"] for r in s], [r["coop"] for r in s], s=14, marker="x",
                       label="cooperative 128 x 128 (m128n128)")
            ax.axhline(1.0, color="k", lw=0.8)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("K")
            ax.set_title(f"{g}: the rule's time / the forced tile's")
        axes[0].set_ylabel("> 1: the forced tile is faster")
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
