#!/usr/bin/env python3
"""The MoE layer sweep's summary tables for docs/RESULTS.md, per path: the
scheduler ratios (whole layer and experts phase, over all configurations and
over the model's contended ones), model-guided against the better of
expert-wave and interleaved, the best fused schedule and the unfused baseline
over the floor, the unfused baseline over the best fused schedule. Ratios are
of per-configuration medians over the paired rounds (one column: the median of
each round's EW / IL, as `xstage moe-predict` names the faster); the spread over
configurations is reported as min .. max.
  usage: bench/moe_sweep_tables.py SWEEP.json [SWEEP.json ...] [--xstage build/xstage]
The contended flag comes from `xstage moe-predict SWEEP --json` (the regime
the model places each configuration in before looking at the times).

A second table splits the emulated PCIe path's combine out. Emulated ranks
keep every combine buffer in host memory, so the combine reads each row back
over PCIe after the kernel; ranks on separate GPUs would read their own
memory. It gives, per host configuration: the layer over the floor and over
a floor that also counts the read-back, the link's two directions at the
rates `xstage duplex` measured (the profile's `duplex`: one R for both
directions overstates a duplex link's time); that duplex floor over the
issue's floor (no schedule of this emulation can go below it); and
an estimate of ranks on separate GPUs, the layer with its combine phase
replaced by the same configuration's on device memory (same sweep, same
schedule; put together from two measurements, not a run), over the floor
and over the duplex floor of the dispatch's and L2's rows."""
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
    emulated = {}  # (shape, tokens, P) -> placement -> the config, for the read-back table
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
            if c["backend"] == "emulated":
                emulated.setdefault(key[:3], {})[c["placement"]] = dict(c, floor_ms=floor, compute_ms=co, R_GBps=r)
            e_r, i_r = c["ms"][need[0]], c["ms"][need[1]]
            # Each round runs every variant in turn: its EW / IL compares times at about one SM clock.
            pairs = [x / y for x, y in zip(e_r, i_r) if x is not None and y is not None and y > 0]
            paired = st.median(pairs) if len(e_r) == len(i_r) and len(pairs) == len(e_r) else ew / il
            rows.setdefault(path_of(c), []).append({
                "ew_il": ew / il, "ew_il_paired": paired, "ew_il_exp": exp(need[0]) / exp(need[1]),
                "mg_best2": mg / min(ew, il), "best_floor": best / floor, "unf_floor": ms["unfused"] / floor,
                "unf_best": ms["unfused"] / best, "contended": contended.get(key, False),
                "ok": (c.get("check") or {}).get("ok")})
    print("| path | configs (checked ok) | EW / IL layer: geomean, max (min) | EW / IL paired rounds: geomean, max | "
          "EW / IL experts phase | "
          "contended: n, EW / IL layer geomean, max | MG within 2% of the better | best fused / floor geomean "
          "(min .. max) | unfused / floor | unfused / best fused geomean (min .. max) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for p, rs in rows.items():
        con = [r for r in rs if r["contended"]]
        f = lambda k, sub=rs: gm([r[k] for r in sub])
        mx = lambda k, sub=rs: max(r[k] for r in sub) if sub else float("nan")
        mn = lambda k, sub=rs: min(r[k] for r in sub) if sub else float("nan")
        within = sum(r["mg_best2"] <= 1.02 for r in rs) / len(rs)
        print(f'| {p} | {len(rs)} ({sum(bool(r["ok"]) for r in rs)}) | {f("ew_il"):.3f}, {mx("ew_il"):.3f} '
              f'({mn("ew_il"):.3f}) | {f("ew_il_paired"):.3f}, {mx("ew_il_paired"):.3f} | '
              f'{f("ew_il_exp"):.3f}, {mx("ew_il_exp"):.3f} | {len(con)}, '
              f'{f("ew_il", con):.3f}, {mx("ew_il", con):.3f} | {within:.0%} | {f("best_floor"):.2f} '
              f'({mn("best_floor"):.2f} .. {mx("best_floor"):.2f}) | {f("unf_floor"):.2f} | '
              f'{f("unf_best"):.2f} ({mn("unf_best"):.2f} .. {mx("unf_best"):.2f}) |')
    readback_table(emulated, a.xstage)


def duplex_rates(xstage, profile):
    """(read alone, store alone, read while storing, store while reading) in GB/s: the profile's duplex and,
    for stores alone, its R."""
    doc = json.loads(subprocess.run([xstage, "profiles", "--show", profile, "--json"], check=True, capture_output=True,
                                    text=True).stdout)
    d = doc["duplex"]
    return d["read_alone_Bps"] / 1e9, doc["R_Bps"] / 1e9, d["read_Bps"] / 1e9, \
        d["store_Bps"] / 1e9


def link_time_s(reads, stores, rates):
    """Least time to read `reads` and store `stores` bytes over a link whose directions run at (read alone,
    store alone, read together, store together): both directions at once until the shorter is done at its
    shared rate, then the rest alone, or one direction after the other where that is faster."""
    ra, sa, rt, stt = (x * 1e9 for x in rates)
    both = min(reads / rt, stores / stt)
    overlapped = both + (reads - both * rt) / ra + (stores - both * stt) / sa
    return min(overlapped, reads / ra + stores / sa)  # one direction at a time, where that is faster


def readback_table(emulated, xstage):
    pairs = [(k, v) for k, v in sorted(emulated.items()) if "host" in v and "device" in v]
    if not pairs:
        return
    try:
        rates = duplex_rates(xstage, pairs[0][1]["host"]["profile"])
    except (subprocess.CalledProcessError, KeyError, json.JSONDecodeError) as e:
        print(f"(no read-back table: the host profile's duplex rates could not be read: {e})", file=sys.stderr)
        return
    print()
    print("| emulated PCIe path | configs | layer / floor | layer / duplex floor with the read-back | duplex floor "
          "with the read-back / floor (no schedule goes below) | estimate / floor | estimate / duplex floor |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    out = {"layer": [], "duplex": [], "bound": [], "swapped": [], "swapped_duplex": []}
    for key, v in pairs:
        h, d = v["host"], v["device"]
        med = lambda c, b, ph: st.median(c["phase_ms"][b][ph])
        total = lambda c, b: st.median(c["ms"][b])
        fused = [b for b in ("fused/expert-wave", "fused/interleaved", "fused/model-guided")]
        b = min(fused, key=lambda x: total(h, x))
        rows_bytes = h["bytes_floor"] / 2  # every row read by the dispatch and stored by L2, once each
        floor_rb = max(h["compute_ms"], link_time_s(2 * rows_bytes, rows_bytes, rates) * 1e3)
        floor_sep = max(h["compute_ms"], link_time_s(rows_bytes, rows_bytes, rates) * 1e3)
        swapped = total(h, b) - med(h, b, "combine") + med(d, b, "combine")
        out["layer"].append(total(h, b) / h["floor_ms"])
        out["duplex"].append(total(h, b) / floor_rb)
        out["bound"].append(floor_rb / h["floor_ms"])
        out["swapped"].append(swapped / h["floor_ms"])
        out["swapped_duplex"].append(swapped / floor_sep)
    cell = lambda k: f'{gm(out[k]):.2f} ({min(out[k]):.2f} .. {max(out[k]):.2f})'
    print(f'| host placement | {len(pairs)} | {cell("layer")} | {cell("duplex")} | {cell("bound")} | '
          f'{cell("swapped")} | {cell("swapped_duplex")} |')
    print(f"(duplex rates of {pairs[0][1]['host']['profile']}, GB/s: read alone {rates[0]:.1f}, store alone "
          f"{rates[1]:.1f}, together read {rates[2]:.1f} + store {rates[3]:.1f}; the best fused schedule of each "
          "configuration by its measured layer; estimate = that layer with its combine phase replaced by the same configuration's and schedule's combine phase on device memory; the duplex floors read and store the dispatch's and L2's rows (and, with the read-back, the combine's) in the link's two directions at those rates)")


if __name__ == "__main__":
    sys.exit(main())
