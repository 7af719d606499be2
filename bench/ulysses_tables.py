#!/usr/bin/env python3
"""The Markdown tables of docs/RESULTS.md section 4 from `xstage ulysses -o` reports.

Per report: each variant's best configuration per S, the speed-up, the fused residual against the prediction (with
the model bar: 20% of the measured residual or 2 points of attention-only time, whichever is larger), and in how
many rounds coupled's paired residual was above fused's. Then the store paths side by side: each path's paired
residual (flags at exit, the better tile order) where the report has `residual_paired`, else its median time over
the attention-only median.

  python3 bench/ulysses_tables.py results/h200/ulysses/ulysses-host.json results/h200/ulysses/ulysses-device.json
"""
import json
import sys

STORES = ["vector16", "bulk", "paced", "paced-bulk", "paced-warp"]


def ms(us):
    return f"{us / 1000:.3f} ms" if us < 1000 else f"{us / 1000:.2f} ms" if us < 100000 else f"{us / 1000:.1f} ms"


def summary_table(report):
    out = ["| S | attention-only | sequential | fused (best configuration) | coupled | fused over sequential | "
           "fused residual | predicted | coupled residual | coupled above fused in |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    inside = 0
    for s in report["summary"]:
        fr, pr = 100 * s["residual_fused"], 100 * s["predicted_residual"]
        off = abs(fr - pr)
        ok = off <= max(0.2 * abs(fr), 2.0)
        inside += ok
        f, c = s.get("residual_fused_rounds", []), s.get("residual_coupled_rounds", [])
        above = sum(1 for x, y in zip(f, c) if y > x)
        out.append(f"| {s['S']} | {ms(s['attention_only_us'])} | {ms(s['sequential_us'])} | {ms(s['fused_us'])} "
                   f"({s['fused_config']}) | {ms(s['coupled_us'])} | {s['speedup_fused_over_sequential']:.2f}x | "
                   f"{fr:.1f}% | {pr:.1f}%{'' if ok else f' (miss: {off:.2f} points off)'} | "
                   f"{100 * s['residual_coupled']:.1f}% | {above}/{len(f)} rounds |")
    out.append(f"\nWithin the model bar: {inside} of {len(report['summary'])} points.")
    return "\n".join(out)


def store_cells(report, S):
    rows = [r for r in report["rows"] if r["S"] == S]
    att = next(r["time_us"] for r in rows if r["variant"] == "attention-only")
    cells = []
    for st in STORES:
        mine = [r for r in rows if r["variant"] == "fused" and r["store"] == st and r["flags"] == "at-exit"]
        if not mine:
            cells.append("-")
        elif all("residual_paired" in r for r in mine):
            cells.append(f"{100 * min(r['residual_paired'] for r in mine):.1f}%")
        else:
            cells.append(f"{100 * (min(r['time_us'] for r in mine) / att - 1):.1f}% (medians)")
    return cells


def main(paths):
    reports = [json.load(open(p)) for p in paths]
    for p, r in zip(paths, reports):
        print(f"{p} (commit {r.get('commit', '?')}):\n\n{summary_table(r)}\n")
    names = [r["rows"][0]["placement"] for r in reports]
    print("| S | " + " | ".join(f"{n}: {s}" if i == 0 else s for n in names for i, s in enumerate(STORES)) + " |")
    print("| --- " * (1 + len(STORES) * len(reports)) + "|")
    for S in sorted({s["S"] for s in reports[0]["summary"]}):
        print(f"| {S} | " + " | ".join(c for r in reports for c in store_cells(r, S)) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
