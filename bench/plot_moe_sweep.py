#!/usr/bin/env python3
"""The fused MoE layer's sweep (issue 23) from its JSON record (`xstage moe -o`, or the merged
moe-sweep.json of bench/moe_sweep.sh), and, from `xstage moe --trace FILE`, one fused run per
schedule tile by tile.

Writes into --out:
  moe-schedulers.png  per configuration, the per-round ratios interleaved / expert-wave and
                      model-guided / the better of the two (median, bar: the rounds' range);
  moe-floor.png       per configuration, the best fused schedule and the unfused baseline over the
                      floor max(compute-only experts phase, bytes_floor / R);
  moe-summary.json    the same numbers, and per path the geometric means the issue's bars name;
  with --trace:
  moe-store-issue.png per schedule, when L2 tiles start storing (their epilogue), a histogram over
                      the run, and how long each tile's stores take to issue;
  moe-timeline.png    per schedule, per SM: L1 tiles, L2 mainloops, L2 store issue, idle.
Ratios are per round (both runs of a ratio in one round), then the median over rounds.

usage: bench/plot_moe_sweep.py results/h200/moe-sweep/moe-sweep.json --out docs/img/moe \\
           [--trace results/h200/moe-layer/trace-quick.csv] [--tokens 4096]
"""
import argparse
import csv
import json
import math
import os
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

SCHEDULES = ["expert-wave", "interleaved", "model-guided"]


def median(v):
    s = sorted(v)
    return s[len(s) // 2] if s else None


def per_round(a, b, b2=None):
    """a / b per round (b the smaller of b and b2 when b2 is given); [] where one is missing."""
    if a is None or b is None or (b2 is not None and not b2):
        return []
    return [x / (min(y, z) if b2 else y) for x, y, z in zip(a, b, b2 or b)]


def spread(v):
    return (median(v), min(v), max(v)) if v else (None, None, None)


def geomean(v):
    v = [x for x in v if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def shape_name(c):
    """A named shape, or its numbers where the record says "custom"."""
    if c["shape"] != "custom":
        return c["shape"]
    return f"{c['hidden']}/{c['inter']}/{c['experts']}/{c['topk']}"


def label(c):
    return f"{shape_name(c)} T={c['tokens']} P={c['P']}"


def path(c):
    return f"{c['backend']}/{c['placement']}"


def analyse(doc):
    """Per configuration: the ratios (median and range over rounds) and the floor."""
    rows = []
    for c in doc["configs"]:
        ms = c["ms"]
        if ms.get("compute-only") is None and ms.get("fused/interleaved") is None:
            continue  # not benched
        R = c.get("probe_R_GBps") or doc.get("probe", {}).get("R_GBps") or doc.get("profile_R_GBps")
        fused = {s: ms.get(f"fused/{s}") for s in SCHEDULES if ms.get(f"fused/{s}")}
        best = min(fused, key=lambda s: median(fused[s])) if fused else None
        # The floor's compute: compute-only's experts phase (the fused kernel
        # alone), else its whole run.
        co = ((c.get("phase_ms") or {}).get("compute-only") or {}).get("experts") or ms.get("compute-only")
        floor = None
        if co and R:
            floor = max(median(co), c["bytes_floor"] / (R * 1e9) * 1e3)
        r = {
            "config": label(c), "path": path(c), "shape": shape_name(c), "tokens": c["tokens"], "P": c["P"],
            "il_over_ew": spread(per_round(fused.get("interleaved"), fused.get("expert-wave"))),
            "mg_over_best2": spread(per_round(fused.get("model-guided"), fused.get("interleaved"),
                                              fused.get("expert-wave"))),
            "best_fused": best,
            "best_over_floor": median(fused[best]) / floor if best and floor else None,
            "unfused_over_floor": median(ms["unfused"]) / floor if ms.get("unfused") and floor else None,
            "unfused_over_best": spread(per_round(ms.get("unfused"), fused.get(best))) if best else (None,) * 3,
            "floor_ms": floor, "R_GBps": R,
            "bytes_floor": c["bytes_floor"], "compute_only_ms": median(co) if co else None,
            "check_ok": (c.get("check") or {}).get("ok"),
        }
        rows.append(r)
    return rows


def summary(rows):
    out = {}
    for p in sorted({r["path"] for r in rows}):
        rs = [r for r in rows if r["path"] == p]
        il = [r["il_over_ew"][0] for r in rs if r["il_over_ew"][0]]
        # model-guided within 2% of the better of the two
        mg = [r["mg_over_best2"][0] for r in rs if r["mg_over_best2"][0]]
        out[p] = {
            "configurations": len(rs),
            # interleaved over expert-wave as a speed-up: expert-wave time / interleaved time
            "speedup_interleaved_over_expert_wave_geomean": geomean([1 / x for x in il]),
            "speedup_interleaved_over_expert_wave_max": max([1 / x for x in il]) if il else None,
            "model_guided_within_2pct": (sum(x <= 1.02 for x in mg) / len(mg)) if mg else None,
            "best_fused_over_floor_geomean": geomean([r["best_over_floor"] for r in rs]),
            "unfused_over_floor_geomean": geomean([r["unfused_over_floor"] for r in rs]),
            "checked_ok": sum(1 for r in rs if r["check_ok"]), "checked_failed": sum(1 for r in rs if r["check_ok"] is False),
        }
    return out


def bars(ax, rows, key, color, name, offset):
    xs = [i + offset for i in range(len(rows))]
    med = [r[key][0] if isinstance(r[key], tuple) else r[key] for r in rows]
    if isinstance(rows[0][key], tuple):
        lo = [m - r[key][1] if m else 0 for m, r in zip(med, rows)]
        hi = [r[key][2] - m if m else 0 for m, r in zip(med, rows)]
        ax.errorbar(xs, [m or float("nan") for m in med], yerr=[lo, hi], fmt="o", ms=3, color=color, label=name,
                    elinewidth=0.8, capsize=1.5)
    else:
        ax.plot(xs, [m or float("nan") for m in med], "o", ms=3, color=color, label=name)


def plot_configs(rows, out):
    if not rows:
        print("no benched configurations: no sweep plots")
        return
    rows = sorted(rows, key=lambda r: (r["path"] != "emulated/host", r["path"], r["shape"], r["P"], r["tokens"]))
    ratio_figure(rows, out, "moe-schedulers.png", "Fused MoE layer: schedules per configuration",
                 "time ratio (per round, median; bar: range)", 1.02, "tab:red",
                 [("il_over_ew", "tab:blue", "interleaved / expert-wave"),
                  ("mg_over_best2", "tab:red", "model-guided / better of the two")])
    ratio_figure(rows, out, "moe-floor.png", "Fused MoE layer against its floor, unfused beside it",
                 "time / max(compute-only, bytes / R)", 1.15, "tab:green",
                 [("best_over_floor", "tab:green", "best fused / floor"),
                  ("unfused_over_floor", "tab:gray", "unfused / floor")])


def ratio_figure(rows, out, name, title, ylabel, bar_line, bar_color, series):
    """Two ratio series per configuration, a line at 1 and one at the issue's bar."""
    fig, ax = plt.subplots(figsize=(max(8, 0.16 * len(rows)), 4.2))
    for (key, color, label), shift in zip(series, (-0.15, 0.15)):
        bars(ax, rows, key, color, label, shift)
    ax.axhline(1, color="k", lw=0.6)
    ax.axhline(bar_line, color=bar_color, lw=0.5, ls=":")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"{r['path']} {r['config']}" for r in rows], rotation=90, fontsize=5)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, name), dpi=150)
    plt.close(fig)


def read_trace(path, tokens):
    """{schedule: [(gemm, sm, start, epilogue, end)]} of one token count (the largest by default), first rank."""
    rows = defaultdict(list)
    with open(path) as f:
        data = list(csv.DictReader(f))
    if not data:
        return {}, None
    T = tokens or max(int(d["tokens"]) for d in data)
    rank = min(int(d["rank"]) for d in data if int(d["tokens"]) == T)
    for d in data:
        if int(d["tokens"]) == T and int(d["rank"]) == rank:
            rows[d["schedule"]].append((int(d["gemm"]), int(d["sm"]), float(d["start_ns"]), float(d["epilogue_ns"]),
                                        float(d["end_ns"])))
    return rows, T


def plot_trace(trace, T, out):
    scheds = [s for s in SCHEDULES if s in trace]
    if not scheds:
        print("trace: no rows")
        return
    fig, axes = plt.subplots(2, len(scheds), figsize=(4.2 * len(scheds), 5.5), squeeze=False)
    t_end = max(t[4] for s in scheds for t in trace[s]) / 1e3
    for i, s in enumerate(scheds):
        l2 = [t for t in trace[s] if t[0] == 2]
        ax = axes[0][i]
        ax.hist([t[3] / 1e3 for t in l2], bins=60, range=(0, t_end), color="tab:red")
        ax.set_title(f"{s}: L2 store issue starts (T = {T})", fontsize=8)
        ax.set_xlabel("time in the run (us)")
        ax.set_ylabel("L2 tiles")
        ax = axes[1][i]
        ax.hist([(t[4] - t[3]) / 1e3 for t in l2], bins=60, color="tab:purple")
        ax.set_title(f"{s}: time to issue a tile's stores", fontsize=8)
        ax.set_xlabel("epilogue end - epilogue start (us)")
        ax.set_ylabel("L2 tiles")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "moe-store-issue.png"), dpi=150)
    plt.close(fig)

    fig, axes = plt.subplots(len(scheds), 1, figsize=(11, 3.2 * len(scheds)), squeeze=False)
    for i, s in enumerate(scheds):
        ax = axes[i][0]
        spans = defaultdict(lambda: defaultdict(list))  # kind -> sm -> [(start, width)]
        for g, sm, a, e, b in trace[s]:
            if g == 1:
                spans["L1"][sm].append((a / 1e3, (b - a) / 1e3))
            else:
                spans["L2 mainloop"][sm].append((a / 1e3, (e - a) / 1e3))
                spans["L2 store issue"][sm].append((e / 1e3, (b - e) / 1e3))
        colors = {"L1": "tab:blue", "L2 mainloop": "tab:orange", "L2 store issue": "tab:red"}
        for kind, per_sm in spans.items():
            for sm, xs in per_sm.items():
                ax.broken_barh(xs, (sm - 0.4, 0.8), facecolors=colors[kind], linewidth=0,
                               label=kind if sm == min(per_sm) else None)
        busy = defaultdict(float)
        for g, sm, a, e, b in trace[s]:
            busy[sm] += (b - a) / 1e3
        run = max(t[4] for t in trace[s]) / 1e3
        idle = 1 - sum(busy.values()) / (len(busy) * run) if busy else 0
        ax.set_title(f"{s}, T = {T}: per-SM tiles (white: idle or waiting, {100 * idle:.0f}% of SM time)", fontsize=8)
        ax.set_xlabel("time in the run (us)")
        ax.set_ylabel("SM")
        ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "moe-timeline.png"), dpi=150)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("record", help="sweep JSON: xstage moe -o, or bench/moe_sweep.sh's moe-sweep.json")
    ap.add_argument("--out", required=True, help="folder for the plots and moe-summary.json")
    ap.add_argument("--trace", help="xstage moe --trace CSV")
    ap.add_argument("--tokens", type=int, help="the trace's token count to draw (default: the largest)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    with open(a.record) as f:
        doc = json.load(f)
    rows = analyse(doc)
    plot_configs(rows, a.out)
    s = summary(rows)
    with open(os.path.join(a.out, "moe-summary.json"), "w") as f:
        json.dump({"record": a.record, "commit": doc.get("commit"), "paths": s, "configs": rows}, f, indent=1)
    for p, v in s.items():
        print(f"{p}: {v['configurations']} configurations; interleaved over expert-wave geomean "
              f"{v['speedup_interleaved_over_expert_wave_geomean']}, max {v['speedup_interleaved_over_expert_wave_max']}; "
              f"model-guided within 2%: {v['model_guided_within_2pct']}; best fused / floor geomean "
              f"{v['best_fused_over_floor_geomean']}; unfused / floor {v['unfused_over_floor_geomean']}")
    if a.trace:
        trace, T = read_trace(a.trace, a.tokens)
        plot_trace(trace, T, a.out)


if __name__ == "__main__":
    main()
