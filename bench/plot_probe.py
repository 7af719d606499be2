#!/usr/bin/env python3
"""Issue time against gap, measured by `xstage probe`, with the Burst-Gap model
and both counterfactuals (predicted by `xstage predict` from the fitted profile).

usage: bench/plot_probe.py --xstage build/xstage --out docs/img results/h200/probe/probe-host.csv ...
"""
import argparse, csv, json, os, subprocess
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np


def read_rows(path):
    with open(path) as f:
        return list(csv.DictReader(l for l in f if not l.startswith("#")))


def predict(xstage, profile, K, V, G, bursts):
    out = subprocess.run([xstage, "predict", "--profile", profile, "--K", str(K), "--V", repr(float(V)), "--G", repr(float(G)),
                          "--bursts", str(bursts), "--csv"], check=True, capture_output=True, text=True).stdout
    return next(csv.DictReader(out.splitlines()))


def plot(path, xstage, out_dir):
    rows = [r for r in read_rows(path) if r["stat"] == "run" and r["set"] in ("train", "holdout")]
    transport = rows[0]["transport"]
    profile = os.path.join(os.path.dirname(path), f"profile-{transport}.json")
    K = max(int(r["K"]) for r in rows)
    bursts = int(rows[0]["bursts"])
    vols = sorted({float(r["V_bytes"]) for r in rows if int(r["K"]) == K})
    vols = [v for i, v in enumerate(vols) if i % 2 == 0] if len(vols) > 5 else vols
    fig, ax = plt.subplots(figsize=(8, 5.5))
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(vols)))
    gmin = min(float(r["gap_ns"]) for r in rows if float(r["gap_ns"]) > 0)
    gmax = max(float(r["gap_ns"]) for r in rows)
    for V, c in zip(vols, colors):
        pts = sorted((max(float(r["gap_ns"]), gmin / 2), float(r["issue_ns"]), r["set"]) for r in rows
                     if int(r["K"]) == K and float(r["V_bytes"]) == V)
        for s, m in (("train", "o"), ("holdout", "s")):
            xs = [p[0] / 1e3 for p in pts if p[2] == s]
            ys = [p[1] / 1e3 for p in pts if p[2] == s]
            ax.plot(xs, ys, m, color=c, mfc="none" if s == "holdout" else c, ms=5)
        grid = np.geomspace(gmin / 2, gmax, 48)
        pr = [predict(xstage, profile, K, V, g, bursts) for g in grid]
        ax.plot(grid / 1e3, [float(p["run_mean_t_iss_ns"]) / 1e3 for p in pr], "-", color=c,
                label=f"V = {V / 2**20:.3g} MiB")
        ax.plot(grid / 1e3, [float(p["t_iss_ns"]) / 1e3 for p in pr], "--", color=c, lw=0.8)
        ax.plot(grid / 1e3, [float(p["completion_coupled_ns"]) / 1e3 for p in pr], ":", color=c, lw=0.8)
        ax.plot(grid / 1e3, [float(p["unbounded_async_ns"]) / 1e3 for p in pr], "-.", color=c, lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("gap G between bursts [us] (G = 0 drawn at the left edge)")
    ax.set_ylabel("issue time per burst [us]")
    ax.set_title(f"X-Stage probe, {transport} transport, K = {K} producers (H200)\n"
                 "filled: training, open: held out; solid: Burst-Gap over the run, dashed: steady state,\n"
                 "dotted: completion-coupled, dash-dot: unbounded-asynchronous", fontsize=9)
    ax.legend(fontsize=8, loc="lower left")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    out = os.path.join(out_dir, f"probe-{transport}.png")
    fig.savefig(out, dpi=110)
    print("wrote", out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--xstage", default="build/xstage")
    ap.add_argument("--out", default="docs/img")
    ap.add_argument("csvs", nargs="+")
    a = ap.parse_args()
    for p in a.csvs:
        plot(p, a.xstage, a.out)


if __name__ == "__main__":
    main()
