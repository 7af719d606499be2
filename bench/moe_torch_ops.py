#!/usr/bin/env python3
"""The MoE expert GEMMs as a PyTorch user calls them: xstage.moe_experts (both
GEMMs, SwiGLU and routing weight fused into L1) against torch._grouped_mm,
F.silu(gate) * up, the weight and torch._grouped_mm again, on the same
tensors, eager and captured in a CUDA graph, the four timed in turn round by
round (median per call over the rounds; SM clock read before and after).
Eager includes each side's Python and launch overhead (ours: the argument
checks, a ctypes call for each launch and, on a shape's first call, one for
the split-K workspace size); "two ops" is moe_experts as the two ops
grouped_mm_swiglu and grouped_mm called in turn, and host_us_per_call the
time a call takes to return.
  usage: bench/moe_torch_ops.py [--out moe-torch-ops.json] [--rounds 9] [--commit C]
"""
import argparse
import datetime
import json
import pathlib
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

import xstage
from moe_vs_torch import sm_clock  # bench/, beside this script

SHAPES = [  # model, hidden, inter, local experts, rows an expert
    ("deepseek-v3 P=8", 7168, 2048, 32, 256),
    ("qwen3-30b-a3b P=8", 2048, 768, 16, 128),
    ("mixtral-8x7b P=2", 4096, 14336, 4, 512),
    ("hidream-i1 P=2", 2560, 6912, 2, 1024),
]


def torch_experts(x, w13, w2, offs, wt):
    I = w2.shape[2]
    gu = torch._grouped_mm(x, w13.transpose(-2, -1), offs=offs)
    h = (F.silu(gu[:, :I]) * gu[:, I:] * wt[:, None]).to(torch.bfloat16)
    return torch._grouped_mm(h, w2.transpose(-2, -1), offs=offs)


def timed(fn, reps):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / reps


def host_us(fn, reps):
    """Host time a call takes to return (what it costs the Python thread, launches enqueued, not run)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / reps * 1e6


def graph_of(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()  # warm-up outside the capture (kernel loading, allocator)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def tree_commit():
    """The commit this tree was exported at (scripts/snapshot.sh writes COMMIT, as scripts/device.sh reads it), else
    git's HEAD; "unknown" only where neither exists, and then the file fails tests/cpu/test_results_provenance.cpp
    until its commit is filled in."""
    root = pathlib.Path(__file__).resolve().parent.parent
    try:
        return (root / "COMMIT").read_text().strip() or "unknown"
    except OSError:
        pass
    try:
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, check=True, capture_output=True,
                              text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        print("moe_torch_ops.py: no COMMIT file and no git here; pass --commit", file=sys.stderr)
        return "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="moe-torch-ops.json")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--commit", default=None,
                    help="the commit of the library run (default: the exported tree's COMMIT file, else git)")
    a = ap.parse_args()
    a.commit = a.commit or tree_commit()
    torch.manual_seed(0)
    rows_out = []
    for name, H, I, E, m in SHAPES:
        x = (torch.randn(E * m, H, device="cuda") * 0.5).to(torch.bfloat16)
        w13 = (torch.randn(E, 2 * I, H, device="cuda") / H ** 0.5).to(torch.bfloat16)
        w2 = (torch.randn(E, H, I, device="cuda") / I ** 0.5).to(torch.bfloat16)
        w13i = xstage.moe_interleave_w13(w13)
        offs = torch.arange(1, E + 1, device="cuda", dtype=torch.int32) * m
        wt = torch.rand(E * m, device="cuda") + 0.1
        ours = lambda: xstage.moe_experts(x, w13i, w2, offs, wt)
        two_ops = lambda: xstage.grouped_mm(xstage.grouped_mm_swiglu(x, w13i, offs, wt), w2, offs)
        ref = lambda: torch_experts(x, w13, w2, offs, wt)
        err = ((ours().float() - ref().float()).norm() / ref().float().norm()).item()
        g_ours, g_ref = graph_of(ours), graph_of(ref)
        fns = {"ours eager": ours, "ours eager, two ops": two_ops, "torch eager": ref, "ours graph": g_ours.replay,
               "torch graph": g_ref.replay}
        for f in fns.values():
            timed(f, 2)
        clk0 = sm_clock()
        t = {k: [] for k in fns}
        for _ in range(a.rounds):
            for k, f in fns.items():
                t[k].append(timed(f, a.reps))
        clk1 = sm_clock()
        med = {k: statistics.median(v) for k, v in t.items()}
        host = {k: statistics.median(host_us(fns[k], a.reps) for _ in range(3))
                for k in ("ours eager", "ours eager, two ops", "torch eager")}
        flop = 2.0 * E * m * H * 2 * I + 2.0 * E * m * I * H
        r = dict(shape=name, hidden=H, inter=I, experts=E, rows_per_expert=m, rel_diff=err, sm_clock_mhz=[clk0, clk1],
                 ms={k: dict(median=med[k], min=min(v), max=max(v)) for k, v in t.items()},
                 host_us_per_call=host,
                 speedup_eager=med["torch eager"] / med["ours eager"],
                 speedup_eager_two_ops=med["torch eager"] / med["ours eager, two ops"],
                 speedup_graph=med["torch graph"] / med["ours graph"],
                 tflops_ours_graph=flop / med["ours graph"] / 1e9)
        rows_out.append(r)
        print(f"{name:18s} rows {E * m:6d}: ours eager {med['ours eager']:.3f} ms, torch eager "
              f"{med['torch eager']:.3f} ms (x{r['speedup_eager']:.2f}; two ops x{r['speedup_eager_two_ops']:.2f}); "
              f"host us a call: ours {host['ours eager']:.0f}, two ops {host['ours eager, two ops']:.0f}, torch "
              f"{host['torch eager']:.0f}; graphs {med['ours graph']:.3f} / "
              f"{med['torch graph']:.3f} ms (x{r['speedup_graph']:.2f}); rel diff {err:.1e}; clk {clk0}/{clk1}",
              flush=True)
        del x, w13, w2, w13i, g_ours, g_ref
        torch.cuda.empty_cache()
    json.dump(dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   device=torch.cuda.get_device_name(0), torch=torch.__version__, commit=a.commit,
                   method=f"median per call over {a.rounds} rounds of {a.reps} calls, the five timed in turn; "
                          "host_us_per_call: the Python call's own time (median of 3 x reps calls, no sync inside)",
                   rows=rows_out), open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
