#!/usr/bin/env python3
"""Fused Ulysses attention: merges the JSON reports of `xstage ulysses` (one per
placement or backend) into one results file and plots, per report, the four
variants' times against S and the fused kernel's residual over attention-only
next to the Burst-Gap prediction. Where a report holds NCCL's all-to-all, the
sequential variant with it is drawn too.

usage: bench/plot_ulysses.py --merged results/h200/ulysses/ulysses.json --out docs/img/ulysses-h200.png \
           results/h200/ulysses/ulysses-host.json results/h200/ulysses/ulysses-device.json
       bench/plot_ulysses.py --merged results/h200x2/ulysses/ulysses.json --out docs/img/ulysses-h200x2.png \
           results/h200x2/ulysses/ulysses-peer.json results/h200x2/ulysses/ulysses-nccl.json
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

KEEP = ["variant", "placement", "backend", "P", "B", "S", "H", "D", "store", "order", "flags", "a2a", "time_us",
        "predicted_time_us", "iters", "check"]
# Fields of later reports (interleaved rounds, paced slices); kept where present.
KEEP_IF_PRESENT = ["paced_rows", "time_min_us", "time_max_us", "residual_paired"]


def nccl_sequential(report, S):
    """{"sequential_nccl_us": ...} for a report that ran NCCL's all-to-all, else {}."""
    t = [x["time_us"] for x in report["rows"] if x["S"] == S and x["variant"] == "sequential" and x["a2a"] == "nccl"]
    return {"sequential_nccl_us": min(t)} if t else {}


def overhead_axis(ax, unit, title):
    """Axes, labels and legend of an overhead-over-attention-only panel."""
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length S (total)")
    ax.set_ylabel(f"overhead over attention-only ({unit})")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--merged", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("reports", nargs="+")
    a = ap.parse_args()
    reports = [json.load(open(p)) for p in a.reports]
    merged = {
        "tool": "xstage ulysses (merged by bench/plot_ulysses.py)",
        "sources": [{k: r[k] for k in ("device", "driver", "sm_clock_mhz", "date", "commit", "command", "world",
                                        "profile", "timing", "concurrent_tiles", "block_m")}
                    | {"kernel": r.get("kernel", "mma.sync"), "file": p}
                    for p, r in zip(a.reports, reports)],
        "rows": [{k: row[k] for k in KEEP} | {k: row[k] for k in KEEP_IF_PRESENT if k in row}
                 for r in reports for row in r["rows"]],
        "summary": [dict(s, placement=r["rows"][0]["placement"], backend=r["rows"][0]["backend"],
                         **nccl_sequential(r, s["S"])) for r in reports for s in r["summary"]],
    }
    with open(a.merged, "w") as f:
        json.dump(merged, f, indent=2)

    fig, axes = plt.subplots(3, len(reports), figsize=(6 * len(reports), 12), squeeze=False)
    for col, r in enumerate(reports):
        row0 = r["rows"][0]
        pl = row0["placement"]
        S = [s["S"] for s in r["summary"]]
        nccl = [nccl_sequential(r, x).get("sequential_nccl_us") for x in S]
        ax = axes[0][col]
        for key, label, style in [("attention_only_us", "attention-only", "k-o"),
                                  ("sequential_us", "sequential (best all-to-all)", "C3-s"),
                                  ("fused_us", "fused (best)", "C0-o"), ("coupled_us", "coupled", "C1-^"),
                                  ("predicted_fused_us", "fused, predicted", "C0:")]:
            ax.plot(S, [s[key] / 1e3 for s in r["summary"]], style, ms=4, label=label)
        if all(nccl):
            ax.plot(S, [t / 1e3 for t in nccl], "C2-v", ms=4, label="sequential (NCCL all-to-all)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length S (total)")
        ax.set_ylabel("time (ms)")
        kernel = r.get("kernel", "mma.sync")  # reports before the wgmma port name no kernel
        ax.set_title(f"{r['world']}\nP={row0['P']}, H={row0['H']}, D={row0['D']}, {kernel} kernel, {r['device']}",
                     fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3, which="both")
        ax = axes[1][col]
        def quartile(v, q):
            v = sorted(v)
            return v[min(len(v) - 1, int(q * len(v)))]

        def spread(key, scale=100.0, base=None):  # quartiles of the per-round paired residuals, where there are rounds
            if not all(key + "_rounds" in s for s in r["summary"]):
                return None
            b = base or [1.0] * len(r["summary"])
            return [[scale * f * max(0.0, s[key] - quartile(s[key + "_rounds"], 0.25)) for s, f in zip(r["summary"], b)],
                    [scale * f * max(0.0, quartile(s[key + "_rounds"], 0.75) - s[key]) for s, f in zip(r["summary"], b)]]
        ax.errorbar(S, [100 * s["residual_fused"] for s in r["summary"]], yerr=spread("residual_fused"), fmt="C0-o",
                    capsize=2, label="fused: measured (bars: quartiles over rounds)")
        ax.plot(S, [100 * s["predicted_residual"] for s in r["summary"]], "C0:", label="fused: predicted")
        ax.errorbar(S, [100 * s["residual_coupled"] for s in r["summary"]], yerr=spread("residual_coupled"),
                    fmt="C1-^", capsize=2, label="coupled: measured")
        ax.plot(S, [100 * (s["sequential_us"] / s["attention_only_us"] - 1) for s in r["summary"]], "C3-s",
                label="sequential: measured")
        if all(nccl):
            ax.plot(S, [100 * (t / x["attention_only_us"] - 1) for t, x in zip(nccl, r["summary"])], "C2-v",
                    label="sequential with NCCL: measured")
        for s in r["summary"]:
            ax.annotate(f"{s['speedup_fused_over_sequential']:.2f}x", (s["S"], 100 * s["residual_fused"]),
                        textcoords="offset points", xytext=(0, 6), fontsize=7, ha="center")
        overhead_axis(ax, "%", f"{row0['backend']}, {pl} buffers: overhead (labels: fused speed-up over sequential)")
        # The paper's flat-overhead result: the overhead in time, not in share.
        ax = axes[2][col]
        att = [s["attention_only_us"] for s in r["summary"]]
        ax.errorbar(S, [s["residual_fused"] * a / 1e3 for s, a in zip(r["summary"], att)],
                    yerr=spread("residual_fused", 1e-3, att), fmt="C0-o", capsize=2, label="fused: measured")
        ax.plot(S, [s["predicted_residual"] * a / 1e3 for s, a in zip(r["summary"], att)], "C0:", label="fused: predicted")
        ax.errorbar(S, [s["residual_coupled"] * a / 1e3 for s, a in zip(r["summary"], att)],
                    yerr=spread("residual_coupled", 1e-3, att), fmt="C1-^", capsize=2, label="coupled: measured")
        overhead_axis(ax, "ms", f"{row0['backend']}, {pl} buffers: overhead in time")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
