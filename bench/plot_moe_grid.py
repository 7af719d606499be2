#!/usr/bin/env python3
"""Issue 39's grid as pictures and a table: our MoE GEMMs over torch._grouped_mm per cell (bench/moe_grid.py's JSON,
one or several parts of one run; or a whole run followed by a later run's re-measured cells: a cell in a later file
replaces the same cell of an earlier one, and the commits of every file are named).

One panel per GEMM (L1 + SwiGLU, L2): torch / ours against mean rows per expert (log), coloured by K (hidden for
L1, intermediate for L2), circles for uniform counts and triangles for Zipf(1); grey crosses: cuBLAS batched over
torch where the cell has it; the issue's bars as lines (0.97 from 64 rows, 1.0 from 512). The A/A band (torch
against itself) is shaded from its 5th to 95th percentile. Printed: per GEMM the geometric mean, the cells under
each bar, the A/A spread, and the worst cells.

usage: bench/plot_moe_grid.py --out docs/img/moe-grid-h200.png results/h200/moe/grid/<run>/moe-grid-*.json
"""
import argparse
import json
import math

GEMMS = ("L1+SwiGLU", "L2")


def cell_key(c):
    return (c["source"], c["hidden"], c["inter"], c["experts"], c["rows_per_expert"], c["routing"])


def load(paths):
    by_key, meta, commits, dates, seed = {}, None, [], [], None
    for p in paths:
        rec = json.load(open(p))
        meta = meta or {k: rec.get(k) for k in ("commit", "device", "date", "command", "protocol")}
        s = (rec.get("grid") or {}).get("seed")
        if seed is not None and s is not None and s != seed:
            raise SystemExit(f"{p}: grid seed {s}, not {seed}: its cells are other draws, not the same cells")
        seed = s if s is not None else seed
        for v, seen in ((rec.get("commit"), commits), (str(rec.get("date", ""))[:10], dates)):
            if v not in seen:
                seen.append(v)
        for c in rec["cells"]:
            by_key[cell_key(c)] = c  # a later file's measurement of the cell replaces an earlier one
    meta["commit"], meta["date"] = " + ".join(str(c) for c in commits), " + ".join(dates)
    return with_ratios(list(by_key.values())), meta


def k_of(cell, gemm):
    return cell["hidden"] if gemm == "L1+SwiGLU" else cell["inter"]


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))]


def torch_over(r, side):
    """torch / side, torch the faster of its two graphs (as bench/moe_grid.py now writes "speedup"), recomputed
    from the times so that files written before read the same way."""
    t = r["times"]
    return min(t["torch"]["median_ms"], t["torch_again"]["median_ms"]) / t[side]["median_ms"]


def with_ratios(cells):
    for c in cells:
        for g in GEMMS:
            r = c.get(g)
            if r and "times" in r:
                if "ours" in r["times"]:
                    r["speedup"] = torch_over(r, "ours")
                if "cublas_bmm" in r["times"]:
                    r["cublas_bmm_over_torch"] = torch_over(r, "cublas_bmm")
    return cells


def summarise(cells):
    out = {}
    for g in GEMMS:
        rs = [(c, c[g]) for c in cells if g in c]
        sp = [(c, r["speedup"]) for c, r in rs if "speedup" in r]
        aa = [r["aa"] for _, r in rs]
        out[g] = dict(
            cells=len(rs), refused=sum("refused" in r for _, r in rs),
            geomean=math.exp(sum(math.log(s) for _, s in sp) / len(sp)) if sp else None,
            under_097_from_64=[(c, s) for c, s in sp if c["rows_per_expert"] >= 64 and s < 0.97],
            under_100_from_512=[(c, s) for c, s in sp if c["rows_per_expert"] >= 512 and s < 1.0],
            aa=(percentile(aa, 0.05), percentile(aa, 0.5), percentile(aa, 0.95)) if aa else None,
            worst=sorted(sp, key=lambda x: x[1])[:8])
    return out


def name(c):
    return (f"H={c['hidden']} I={c['inter']} E={c['experts']} m={c['rows_per_expert']} {c['routing']}"
            f" ({c['source']})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="", help="the picture (PNG); without it only the table is printed")
    ap.add_argument("json", nargs="+")
    a = ap.parse_args()
    cells, meta = load(a.json)
    s = summarise(cells)
    print(f"commit {meta['commit']}, {meta['device']}, {meta['date']}: {len(cells)} cells")
    for g in GEMMS:
        v = s[g]
        if v["geomean"] is None:
            continue
        print(f"{g}: {v['cells']} cells ({v['refused']} refused), geomean torch/ours {v['geomean']:.3f}; "
              f"A/A 5/50/95% {v['aa'][0]:.3f} / {v['aa'][1]:.3f} / {v['aa'][2]:.3f}; "
              f"under 0.97 from 64 rows: {len(v['under_097_from_64'])}; under 1.0 from 512 rows: "
              f"{len(v['under_100_from_512'])}")
        for c, sp in v["worst"]:
            print(f"   {sp:.3f}  {name(c)}  tile {c[g].get('tile')}  A/A {c[g]['aa']:.3f}")
    if not a.out:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    ks = sorted({k_of(c, g) for c in cells for g in GEMMS})
    cmap = plt.get_cmap("viridis")
    norm = matplotlib.colors.LogNorm(vmin=min(ks), vmax=max(ks))
    for ax, g in zip(axes, GEMMS):
        v = s[g]
        if v["aa"]:
            ax.axhspan(v["aa"][0], v["aa"][2], color="0.85", zorder=0, label="torch A/A, 5-95%")
        for routing, marker in (("uniform", "o"), ("zipf", "^")):
            pts = [(c["rows_per_expert"], c[g]["speedup"], k_of(c, g)) for c in cells
                   if g in c and "speedup" in c[g] and c["routing"] == routing]
            if pts:
                x, y, k = zip(*pts)
                sc = ax.scatter([xi * (1.06 if marker == "^" else 0.94) for xi in x], y, c=k, cmap=cmap, norm=norm,
                                marker=marker, s=22, edgecolors="none", label=f"ours, {routing} counts")
        cb = [(c["rows_per_expert"], c[g]["cublas_bmm_over_torch"]) for c in cells
              if g in c and "cublas_bmm_over_torch" in c[g]]
        if cb:
            ax.scatter(*zip(*cb), marker="x", color="0.5", s=14, label="cuBLAS batched")
        ax.hlines(0.97, 64, 4096 * 1.2, colors="tab:red", linestyles="dashed", linewidth=1)
        ax.hlines(1.0, 512, 4096 * 1.2, colors="tab:red", linewidth=1, label="issue 39's bars")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("mean rows per expert")
        ax.set_title(f"{g}: geomean {v['geomean']:.2f}x" if v["geomean"] else g)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("torch._grouped_mm time / ours (or cuBLAS)")
    axes[1].legend(loc="lower right", fontsize=8)
    fig.colorbar(sc, ax=axes, label="K (hidden for L1, intermediate for L2)")
    fig.suptitle(f"MoE GEMMs over torch, issue 39's grid: {meta['device']}, commit {meta['commit']}", fontsize=10)
    fig.savefig(a.out, dpi=120, bbox_inches="tight")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
