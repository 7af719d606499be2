#!/usr/bin/env python3
"""Tables and a plot of bench/ulysses_pipeline_vs_torch.py runs: per path and S,
our attention-only, fused and best pipelined time, torch's best pipeline, and
torch's time over ours per alternation (> 1: ours faster), with each side's A/A.

    python3 bench/plot_pipeline_vs_torch.py RUN.json [RUN.json ...] --out docs/img/pipeline-vs-torch-h200.png
Prints a Markdown table (one row per path and S) to stdout.
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def rows_of(run):
    out = []
    for S in run["seqs"]:
        k = str(S)
        alts = run["alternations"]
        ours = [a["xstage"]["per_s"][k] for a in alts]
        theirs = [a["torch"]["per_s"][k] for a in alts]
        best = ours[0]
        out.append(dict(
            placement=run["placement"], S=S, commit=run["commit"],
            att=[o["attention_only_us"] for o in ours], fused=[o["fused_us"] for o in ours],
            pipe=[o["pipelined_us"] for o in ours], torch=[t["best_us"] for t in theirs],
            pipe_cfg=f"{best['pipelined_a2a']} {best['pipelined_chunks']}x{best['pipelined_row_chunks']}",
            pipe_of=best["pipelined_configs"], torch_cfg=theirs[0]["best"], torch_of=theirs[0]["best_of"],
            over_pipe=[t / p for t, p in zip([t["best_us"] for t in theirs], [o["pipelined_us"] for o in ours])],
            over_fused=[t / f for t, f in zip([t["best_us"] for t in theirs], [o["fused_us"] for o in ours])],
            aa_torch=theirs[1]["best_us"] / theirs[0]["best_us"] if len(theirs) > 1 else None,
            clock=[c for t in theirs for c in t["sm_clock_mhz"] if c]))
    return out


def ms(v):
    return " / ".join(f"{x / 1e3:.3f}" for x in v)


def ratios(v):
    return ", ".join(f"{x:.3f}" for x in v)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rows = []
    for f in a.runs:
        with open(f) as fh:
            rows += rows_of(json.load(fh))
    rows.sort(key=lambda r: (r["placement"], r["S"]))
    print("| path | S | attention-only (ms) | fused (ms) | pipelined (ms, best of N) | torch pipeline (ms, best of N) | "
          "torch / pipelined | torch / fused | A/A torch | SM clock (MHz) | commit |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        clk = f"{min(r['clock'])}-{max(r['clock'])}" if r["clock"] else "-"
        print(f"| {r['placement']} | {r['S']} | {ms(r['att'])} | {ms(r['fused'])} | {ms(r['pipe'])} ({r['pipe_cfg']}, "
              f"of {r['pipe_of']}) | {ms(r['torch'])} ({r['torch_cfg']}, of {r['torch_of']}) | {ratios(r['over_pipe'])} "
              f"| {ratios(r['over_fused'])} | {r['aa_torch']:.3f} | {clk} | {r['commit']} |")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, placement in zip(axes, ["host", "device"]):
        sel = [r for r in rows if r["placement"] == placement]
        for key, label, marker in [("over_pipe", "torch pipeline / our pipelined", "o"),
                                   ("over_fused", "torch pipeline / our fused", "s")]:
            xs = [r["S"] for r in sel for _ in r[key]]
            ys = [y for r in sel for y in r[key]]
            ax.plot(xs, ys, marker, label=label, alpha=0.8)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("S (tokens)")
        ax.set_title(f"{placement} buffers, 8 emulated ranks, H = 24, D = 128")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("torch time / ours (> 1: ours faster)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
