#!/usr/bin/env python3
"""The MoE layer sweep's summary tables for docs/RESULTS.md, per path: the
scheduler ratios (whole layer and experts phase, over all configurations and
over the model's contended ones), model-guided against the better of
expert-wave and interleaved, the best fused schedule and the unfused baseline
over the floor, the unfused baseline over the best fused schedule. Ratios are
of per-configuration medians over the paired rounds; the spread over
configurations is reported as min .. max.
  usage: bench/moe_sweep_tables.py SWEEP.json [SWEEP.json ...] [--xstage build/xstage]
The contended flag comes from `xstage moe-predict SWEEP --json` (the regime
the model places each configuration in before looking at the times)."""
import argparse, json, math, statistics as st, subprocess, sys


def gm(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def path_of(c):
    return f'{c["backend"]}/{c["placement"]}'


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sweeps", nargs="+")
    ap.add_argument("--xstage", default="build/xstage")
    a = ap.parse_args()
    rows = {}
    for f in a.sweeps:
        doc = json.load(open(f))
        pred = json.loads(subprocess.run([a.xstage, "moe-predict", f, "--json"], check=True, capture_output=True,
                                         text=True).stdout)
        # Keyed by the shape's numbers: moe-predict names a custom shape "custom".
        shape_of = lambda c: (c["hidden"], c["inter"], c["experts"], c["topk"])
        contended = {(shape_of(p), p["tokens"], p["P"], p["backend"], p["placement"]): p["regime"]["contended"]
                     for p in pred["configs"]}
        R = (doc.get("probe") or {}).get("R_GBps")
        for c in doc["configs"]:
            ms = {k: st.median(v) for k, v in c["ms"].items() if v}
            ph = c["phase_ms"]
            need = ["fused/expert-wave", "fused/interleaved", "fused/model-guided", "unfused", "compute-only"]
            if any(k not in ms for k in need):
                continue
            ew, il, mg = ms[need[0]], ms[need[1]], ms[need[2]]
            exp = lambda b: st.median(ph[b]["experts"])
            co = exp("compute-only")
            r = c.get("probe_R_GBps") or R
            floor = max(co, c["bytes_floor"] / (r * 1e9) * 1e3)
            best = min(ew, il, mg)
            key = (shape_of(c), c["tokens"], c["P"], c["backend"], c["placement"])
            rows.setdefault(path_of(c), []).append({
                "ew_il": ew / il, "ew_il_exp": exp(need[0]) / exp(need[1]),
                "mg_best2": mg / min(ew, il), "best_floor": best / floor, "unf_floor": ms["unfused"] / floor,
                "unf_best": ms["unfused"] / best, "contended": contended.get(key, False),
                "ok": (c.get("check") or {}).get("ok")})
    print("| path | configs (checked ok) | EW / IL layer: geomean, max (min) | EW / IL experts phase | "
          "contended: n, EW / IL layer geomean, max | MG within 2% of the better | best fused / floor geomean "
          "(min .. max) | unfused / floor | unfused / best fused geomean (min .. max) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for p, rs in rows.items():
        con = [r for r in rs if r["contended"]]
        f = lambda k, sub=rs: gm([r[k] for r in sub])
        mx = lambda k, sub=rs: max(r[k] for r in sub) if sub else float("nan")
        mn = lambda k, sub=rs: min(r[k] for r in sub) if sub else float("nan")
        within = sum(r["mg_best2"] <= 1.02 for r in rs) / len(rs)
        print(f'| {p} | {len(rs)} ({sum(bool(r["ok"]) for r in rs)}) | {f("ew_il"):.3f}, {mx("ew_il"):.3f} '
              f'({mn("ew_il"):.3f}) | {f("ew_il_exp"):.3f}, {mx("ew_il_exp"):.3f} | {len(con)}, '
              f'{f("ew_il", con):.3f}, {mx("ew_il", con):.3f} | {within:.0%} | {f("best_floor"):.2f} '
              f'({mn("best_floor"):.2f} .. {mx("best_floor"):.2f}) | {f("unf_floor"):.2f} | '
              f'{f("unf_best"):.2f} ({mn("unf_best"):.2f} .. {mx("unf_best"):.2f}) |')


if __name__ == "__main__":
    sys.exit(main())
