#!/usr/bin/env python3
"""Ulysses all-to-all bandwidth against size (xstage a2a CSVs), one panel per file.

usage: bench/plot_a2a.py --out docs/img/a2a.png results/h200/a2a/a2a-emulated.csv ...
"""
import argparse, csv
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs/img/a2a.png")
    ap.add_argument("csvs", nargs="+")
    a = ap.parse_args()
    fig, axes = plt.subplots(1, len(a.csvs), figsize=(5.5 * len(a.csvs), 4.5), squeeze=False)
    for ax, path in zip(axes[0], a.csvs):
        with open(path) as f:
            rows = list(csv.DictReader(l for l in f if not l.startswith("#")))
        series = {}
        for r in rows:
            series.setdefault((r["version"], r["direction"]), []).append(
                (float(r["bytes"]), float(r["algbw_GBps"])))
        for (v, d), pts in sorted(series.items()):
            pts.sort()
            style = "k--" if v == "copy-engine-d2h" else "-o"
            ax.plot([p[0] / 2**20 for p in pts], [p[1] for p in pts], style, ms=3, label=f"{v} {d}")
        r0 = rows[0]
        ax.set_title(f"{r0.get('backend', '')} P={r0.get('ranks', '')}, {r0['placement']} buffers\n{path}", fontsize=8)
        ax.set_xscale("log")
        ax.set_xlabel("all-to-all payload, all ranks [MiB]")
        ax.set_ylabel("algbw [GB/s]")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
