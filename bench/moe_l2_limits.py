#!/usr/bin/env python3
"""What limits the MoE L2 cells under the 1.1x bar: ours (the library's automatic choice, or a forced tile),
torch._grouped_mm, cuBLAS batched (torch.bmm) and cuBLAS dense (all rows against one expert's weights: the same
FLOPs without expert boundaries) on the same tensors, two ways.

`run` + `report`: how close each runs to the tensor cores' peak at the clock it ran at, from Nsight Compute's
cycle counts.

The fraction is FLOP / (elapsed SM cycles x SMs x 4096), 4096 being the dense bf16 FLOP an H100/H200 SM
issues a cycle. Counting cycles, not seconds, takes the power cap's clock out: the bar "1.1x torch" becomes a
fraction of peak to reach at any clock. Each kernel runs under an NVTX range named after its cell and side, and
ncu names the kernel after that range.

    ncu --nvtx --print-nvtx-rename kernel --clock-control none --metrics \
        gpu__time_duration.sum,sm__cycles_elapsed.avg,sm__cycles_active.avg --csv --page raw \
        python3 bench/moe_l2_limits.py run --lib build/libxstage_moe.so > ncu.csv
    python3 bench/moe_l2_limits.py report ncu.csv [--json out.json]

`power`: time a call under the card's power cap, by how long each side runs at a stretch. Each side's calls in a
CUDA graph of about --graph-ms, replayed back to back for at least --window seconds a round (CUDA events; the SM
clock and the power sampled every 5 ms meanwhile), sides in turn over --rounds rounds: time a call, watts, mean
clock (medians) and torch's time over each side's round by round. Under the cap a kernel that does its work in
fewer cycles draws more power and, given long enough alone, a lower clock: time then follows energy, not cycles.
Short windows (the speed table's 2 ms alternation) leave each side the clock the previous one set.

    python3 bench/moe_l2_limits.py power --lib build/libxstage_moe.so [--window 0.4 --graph-ms 20] --json power.json
"""
import argparse
import csv
import io
import json
import statistics
import sys

# The L2 cells under the 1.1x bar (docs/RESULTS.md section 7) and one that passes, for comparison:
# name, hidden (N), inter (K), local experts, rows an expert.
CELLS = [
    ("deepseek-v3 P2 256", 7168, 2048, 128, 256),
    ("deepseek-v3 P8 256", 7168, 2048, 32, 256),
    ("qwen3-235b P2 256", 4096, 1536, 64, 256),
    ("mixtral P2 256", 4096, 14336, 4, 256),
    ("mixtral P2 128", 4096, 14336, 4, 128),
    ("qwen3-30b P2 256", 2048, 768, 64, 256),
]
SIDES = ("ours", "torch", "bmm", "dense")
TENSOR_FLOP_PER_SM_CYCLE = 4096


def cell_flop(hidden, inter, experts, rows):
    """L2's FLOP: every expert's rows x inter times inter x hidden."""
    return 2.0 * experts * rows * inter * hidden


def cells(lib, tiles):
    """(name, FLOP, {side: a call}) of every cell, its tensors live while the caller uses it."""
    import torch
    sys.path.insert(0, "bench")
    from moe_vs_torch import TILES, Ours, torch_l2, uniform_problem
    ours = Ours(lib)
    for name, hidden, inter, El, m in CELLS:
        x, w13, w13i, w2, offs, h, y = uniform_problem(hidden, inter, El, m, 7)
        h.normal_()
        hb = h.view(El, m, inter)
        fns = {"ours": lambda: ours.gemm(1, h, w2, y, offs, None, hidden),
               "torch": lambda: torch_l2(h, w2, offs),
               "bmm": lambda: torch.bmm(hb, w2.transpose(-2, -1)),
               "dense": lambda: torch.matmul(h, w2[0].T)}
        for t in tiles:
            fns["ours " + t] = lambda t=t: ours.gemm(1, h, w2, y, offs, None, hidden, TILES.index(t), 1)
        yield name, cell_flop(hidden, inter, El, m), fns
        del x, w13, w13i, w2, h, y, hb, fns
        torch.cuda.empty_cache()


def run(a):
    import torch
    for name, _, fns in cells(a.lib, [t for t in a.tiles.split(",") if t]):
        for f in fns.values():  # warm-up, outside any range: handles, module loads
            f()
        torch.cuda.synchronize()
        for _ in range(a.calls):
            for side, f in fns.items():
                torch.cuda.nvtx.range_push(f"{name}|{side}")
                f()
                torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()


def power(a):
    import threading
    import time
    import pynvml
    import torch
    sys.path.insert(0, "bench")
    from moe_vs_torch import graph_of
    pynvml.nvmlInit()
    dev = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())

    def sampled(g, replays):
        """Replays g `replays` times; seconds (CUDA events), mean SM MHz and mean W over them (NVML every 5 ms:
        none for a window shorter than that)."""
        samples, stop = [], threading.Event()

        def poll():
            while not stop.is_set():
                samples.append((pynvml.nvmlDeviceGetClockInfo(dev, pynvml.NVML_CLOCK_SM),
                                pynvml.nvmlDeviceGetPowerUsage(dev) / 1e3))
                time.sleep(0.005)
        torch.cuda.synchronize()
        th = threading.Thread(target=poll)
        ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        th.start()
        ev0.record()
        for _ in range(replays):
            g.replay()
        ev1.record()
        ev1.synchronize()
        stop.set()
        th.join()
        mhz = statistics.mean(c for c, _ in samples) if samples else float("nan")
        watts = statistics.mean(w for _, w in samples) if samples else float("nan")
        return ev0.elapsed_time(ev1) / 1e3, mhz, watts

    out = []
    print(f"{'cell':22s} {'side':12s} {'ms/call':>8s} {'W':>6s} {'MHz':>6s} {'t/torch':>8s}")
    for name, flop, fns in cells(a.lib, [t for t in a.tiles.split(",") if t]):
        graphs, per_replay = {}, {}
        for side, f in fns.items():
            f()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            f()
            torch.cuda.synchronize()
            reps = max(1, min(50, int(a.graph_ms / 1e3 / max(time.perf_counter() - t0, 1e-6))))
            graphs[side] = (graph_of(f, reps), reps)
        for side, (g, reps) in graphs.items():  # the replays a window takes
            g.replay()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            g.replay()
            torch.cuda.synchronize()
            per_replay[side] = max(1, int(a.window / max(time.perf_counter() - t0, 1e-6)))
        res = {side: [] for side in graphs}
        for _ in range(a.rounds):
            for side, (g, reps) in graphs.items():
                s, mhz, w = sampled(g, per_replay[side])
                res[side].append((s / (per_replay[side] * reps), mhz, w))
        med = {side: tuple(statistics.median(v[i] for v in rs) for i in range(3)) for side, rs in res.items()}
        for side, (s, mhz, w) in med.items():
            # Paired: each round's torch time over this side's, the median and the range over rounds.
            paired = [t[0] / v[0] for t, v in zip(res["torch"], res[side])]
            rec = dict(cell=name, side=side, ms_per_call=s * 1e3, watts=w, sm_mhz=mhz, tflops=flop / s / 1e12,
                       time_over_torch=s / med["torch"][0], rounds=a.rounds,
                       torch_over_paired=[statistics.median(paired), min(paired), max(paired)],
                       spread_ms=[min(v[0] for v in res[side]) * 1e3, max(v[0] for v in res[side]) * 1e3])
            out.append(rec)
            print(f"{name:22s} {side:12s} {s * 1e3:8.3f} {w:6.0f} {mhz:6.0f} {rec['time_over_torch']:8.3f}  "
                  f"torch/side by round {paired and statistics.median(paired):.3f} ({min(paired):.3f}-"
                  f"{max(paired):.3f})", flush=True)
        del graphs
    if a.json:
        json.dump(dict(commit=commit_of(a), method="CUDA-graph replays (graph_ms of calls each) back to back, >= window s a side a "
                              "round, sides in turn; CUDA events, NVML clock and power sampled every 5 ms; medians",
                       device=torch.cuda.get_device_name(0), power_limit_w=pynvml.nvmlDeviceGetEnforcedPowerLimit(
                           dev) / 1e3, window_s=a.window, graph_ms=a.graph_ms, cells=out), open(a.json, "w"),
                  indent=1)


def commit_of(a):
    """The commit a result names (tests/cpu/test_results_provenance.cpp): --commit, else the tree's COMMIT file
    (scripts/device.sh's snapshots), else git."""
    if getattr(a, "commit", ""):
        return a.commit
    try:
        with open("COMMIT") as f:
            return f.read().strip()
    except OSError:
        import subprocess
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()


def report(a):
    text = open(a.csv).read()
    start = text.find('"ID"')
    if start < 0:
        sys.exit(f"{a.csv}: no ncu CSV header")
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    flop = {name: cell_flop(*shape) for name, *shape in CELLS}
    # ncu names each kernel "<range>/<kernel>": a side may launch several kernels a call (torch._grouped_mm a
    # small set-up kernel before its GEMM); each kernel's median over the calls, summed over the side's kernels.
    per_kernel = {}
    for r in rows:
        kname = r.get("Kernel Name", "")
        if "|" not in kname:
            continue  # the units row, or a kernel outside the ranges
        cell, rest = kname.split("|", 1)
        side, _, kernel = rest.partition("/")
        if cell not in flop:
            continue
        try:
            elapsed = float(r["sm__cycles_elapsed.avg"].replace(",", ""))
            active = float(r["sm__cycles_active.avg"].replace(",", ""))
            ns = float(r["gpu__time_duration.sum"].replace(",", ""))
        except (KeyError, ValueError):
            continue
        per_kernel.setdefault((cell, side, kernel), []).append((elapsed, active, ns))
    got = {}
    for (cell, side, kernel), v in per_kernel.items():
        med = tuple(statistics.median(x[i] for x in v) for i in range(3))
        calls, acc = got.get((cell, side), (len(v), (0.0, 0.0, 0.0)))
        got[(cell, side)] = (min(calls, len(v)), tuple(p + q for p, q in zip(acc, med)))
    sms = a.sms
    out = []
    print(f"{'cell':22s} {'side':18s} {'calls':>7s} {'us':>8s} {'MHz':>6s} {'of peak':>8s} {'(active)':>8s}"
          f" {'x torch':>8s}")
    for name, *_ in CELLS:
        tor = got.get((name, "torch"))
        tor_cyc = tor[1][0] if tor else None
        for (cell, side), (calls, (el, ac, ns)) in got.items():
            if cell != name:
                continue
            peak = flop[name] / (el * sms * TENSOR_FLOP_PER_SM_CYCLE)
            peak_active = flop[name] / (ac * sms * TENSOR_FLOP_PER_SM_CYCLE)
            rec = dict(cell=name, side=side, calls=calls, us=ns / 1e3, mhz=el / ns * 1e3,
                       sm_cycles_elapsed=el, sm_cycles_active=ac, frac_of_peak=peak,
                       frac_of_peak_active=peak_active, torch_cycles_over=tor_cyc / el if tor_cyc else None)
            out.append(rec)
            print(f"{name:22s} {side:18s} {calls:7d} {ns / 1e3:8.1f} {rec['mhz']:6.0f} {peak:8.3f} "
                  f"{peak_active:8.3f} {rec['torch_cycles_over'] or float('nan'):8.3f}")
        if tor_cyc:
            # 1.1x torch's time, at torch's clock and at ours (the clock a kernel gets under the power cap).
            need = flop[name] / (tor_cyc / 1.1 * sms * TENSOR_FLOP_PER_SM_CYCLE)
            tor_mhz = tor[1][0] / tor[1][2] * 1e3
            mine = got.get((name, "ours"))
            need_ours = need * tor_mhz / (mine[1][0] / mine[1][2] * 1e3) if mine else float("nan")
            print(f"{name:22s} {'1.1x torch needs':18s} {'':7s} {'':8s} {'':6s} {need:8.3f}   at ours' clock "
                  f"{need_ours:.3f}")
            out.append(dict(cell=name, side="1.1x torch", frac_of_peak=need, frac_of_peak_at_ours_clock=need_ours))
    if a.json:
        json.dump(dict(commit=commit_of(a), method="ncu cycle counts; FLOP / (sm__cycles_elapsed.avg x SMs x 4096)", sms=sms,
                       cells=out), open(a.json, "w"), indent=1)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--lib", default="build/libxstage_moe.so")
    r.add_argument("--calls", type=int, default=3)
    r.add_argument("--tiles", default="", help="comma list of tiles also run forced (moe_vs_torch.TILES names)")
    w = sub.add_parser("power")
    w.add_argument("--lib", default="build/libxstage_moe.so")
    w.add_argument("--rounds", type=int, default=5)
    w.add_argument("--window", type=float, default=0.4, help="seconds of back-to-back replays a side a round")
    w.add_argument("--graph-ms", type=float, default=20, help="milliseconds of calls in one graph replay")
    w.add_argument("--tiles", default="", help="comma list of tiles also run forced (moe_vs_torch.TILES names)")
    w.add_argument("--json", default="")
    w.add_argument("--commit", default="", help="the commit to record (default: COMMIT file, else git)")
    p = sub.add_parser("report")
    p.add_argument("csv")
    p.add_argument("--sms", type=int, default=132)
    p.add_argument("--json", default="")
    p.add_argument("--commit", default="", help="the commit to record (default: COMMIT file, else git)")
    a = ap.parse_args()
    {"run": run, "power": power, "report": report}[a.cmd](a)


if __name__ == "__main__":
    main()
