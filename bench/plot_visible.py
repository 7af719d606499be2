#!/usr/bin/env python3
"""Stage occupancy over time, measured by `xstage visible` (bytes issued minus
bytes seen at the far end), next to the Burst-Gap model's drain at R fed by the
measured issue, the simulator's own run, and the profile's Q. One figure, one
panel per point of the run.

usage: bench/plot_visible.py out/visible/host/visible.json [more.json ...] --out occupancy.png
"""
import argparse, json, math
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt


def series(timeline, key):
    t = [s["t_ns"] * 1e-3 for s in timeline if s[key] is not None]
    y = [s[key] / 2**20 for s in timeline if s[key] is not None]
    return t, y


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", help="visible.json files written by xstage visible -o")
    ap.add_argument("--out", required=True, help="PNG to write")
    a = ap.parse_args()
    points = []
    for path in a.inputs:
        with open(path) as f:
            points += json.load(f)["points"]
    if not points:
        raise SystemExit("plot_visible: no points in " + ", ".join(a.inputs))
    cols = min(2, len(points))
    rows = math.ceil(len(points) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 3.6 * rows), squeeze=False)
    for ax, p in zip(axes.flat, points):
        tl = p["timeline"]
        for key, label, style in (("occupancy_bytes", "measured (issued - visible)", "-"),
                                  ("model_occupancy_bytes", "model: drain at R, measured issue", "--"),
                                  ("sim_occupancy_bytes", "model: simulator", ":")):
            t, y = series(tl, key)
            ax.step(t, y, style, where="post", label=label) if key == "occupancy_bytes" else ax.plot(t, y, style, label=label)
        q = p["profile"]["Q_bytes"] / 2**20
        ax.axhline(q, color="grey", lw=0.8)
        ax.text(0, q, f" Q = {q:.1f} MiB ({p['profile']['name']})", va="bottom", fontsize=7, color="grey")
        err = p["clock"]["error_ns"]
        ax.set_title(f"{p['path']}: K={p['K']}, V={p['V_bytes'] / 2**20:.2f} MiB, G={p['gap_ns'] / 1e3:g} us, "
                     f"clock +-{err / 1e3:.2f} us", fontsize=9)
        ax.set_xlabel("time since the first store (us, GPU 0 clock)")
        ax.set_ylabel("stage occupancy (MiB)")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(points):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(a.out, dpi=130)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
