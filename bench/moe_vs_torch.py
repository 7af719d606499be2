#!/usr/bin/env python3
"""MoE expert GEMMs side by side on the GPU: xstage's grouped GEMMs (L1 with
its SwiGLU epilogue, L2) against torch._grouped_mm (plus torch's SwiGLU for
L1) and cuBLAS (torch.matmul) on one dense expert, bf16, on the model shapes of
issue 19 with the local experts of expert parallelism over P = 2 and 8.

Our kernels run in this process through build/libxstage_moe.so (ctypes) on
torch's tensors and stream, so both sides see the same data. Each side's calls
are captured in a CUDA graph (no launch gaps for either) and the replays of
ours and torch's alternate, round after round; the SM clock is read before
and after every shape (pynvml, else nvidia-smi).

Phase 1 (--check): correctness against an fp32 reference on fresh random data,
uneven rows per expert with empty experts, every model shape, routing weights
on and off. Phase 2: the speed sweep; with --ceilings also cuBLAS batched
(torch.bmm) and dense (every row against one expert's weights) on each whole
problem: what a user with equal rows per expert could call instead, and a
GEMM of the same FLOPs without expert boundaries. Every timing carries the SM
clock read while its replay ran.

    python3 bench/moe_vs_torch.py --lib build/libxstage_moe.so --out moe-gemm.json [--check] [--quick]
Prints a table last.
"""
import argparse
import ctypes
import datetime
import json
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from moe_models import MODELS, RANKS, ROWS  # noqa: E402  (name, hidden, inter, experts, top-k)


class Ours:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        f = self.lib.xstage_moe_gemm
        f.restype = ctypes.c_int
        f.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 5 + [ctypes.c_int] * 8 + [ctypes.c_void_p,
                                                                                      ctypes.c_char_p, ctypes.c_int]
        self.lib.xstage_moe_pick_tile.restype = ctypes.c_int
        self.lib.xstage_moe_pick_tile.argtypes = [ctypes.c_int] * 7  # kind, out_store, rows, E, N, K, sms
        self.lib.xstage_moe_pick_splits.restype = ctypes.c_int
        self.lib.xstage_moe_pick_splits.argtypes = [ctypes.c_int] * 6  # rows, E, N, K, tile, sms
        self.lib.xstage_moe_pick_tail_splits.restype = ctypes.c_int
        self.lib.xstage_moe_pick_tail_splits.argtypes = [ctypes.c_int] * 6  # rows, E, N, K, tile, sms
        self.err = ctypes.create_string_buffer(512)
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.store = -1  # the output store of "ours": -1 auto (--out-store)

    def gemm(self, kind, a, b, c, offs, w, N, tile=-1, splits=0, store=None, tail_splits=0):
        rc = self.lib.xstage_moe_gemm(kind, a.data_ptr(), b.data_ptr(), c.data_ptr(), offs.data_ptr(),
                                      None if w is None else w.data_ptr(), a.shape[0], a.shape[1], N, offs.numel(),
                                      tile, splits, tail_splits, self.store if store is None else store,
                                      torch.cuda.current_stream().cuda_stream, self.err, 512)
        if rc != 0:
            raise RuntimeError(self.err.value.decode())

    def plan(self, kind, rows, E, N, K, store=None):
        """The heuristic's (tile id, splits) for GEMM `kind` (0 L1, 1 L2) and the output store."""
        t = self.lib.xstage_moe_pick_tile(kind, self.store if store is None else store, rows, E, N, K, self.sms)
        return t, self.lib.xstage_moe_pick_splits(rows, E, N, K, t, self.sms)

    def tail_cap(self, rows, E, N, K, tile):
        """The heuristic's tail-split cap for that tile (1: none; the kernel splits only a short last wave)."""
        return self.lib.xstage_moe_pick_tail_splits(rows, E, N, K, tile, self.sms)

    def tile_name(self, kind, rows, E, N, K):
        t, s = self.plan(kind, rows, E, N, K)
        tail = self.tail_cap(rows, E, N, K, t) if s == 1 else 1
        return TILES[t] + (f"/k{s}" if s > 1 else "") + (f"/t{tail}" if tail > 1 else "")


TILES = ["m128n256", "m64n256", "m128n128", "m64n80", "m128n128pp"]
STORES = {"auto": -1, "staged": 0, "bulk": 1, "tma": 2}
TILE_SHAPE = {0: (128, 256), 1: (64, 256), 2: (128, 128), 3: (64, 80), 4: (128, 128)}
NARROW = 3  # m64n80: L2 with the staged store only (include/xstage/moe/moe.hpp)
PINGPONG = 4  # m128n128pp: the staged store only, no split-K


def interleave_w13(w13):
    """[E, 2I, H] gate rows then up rows -> gate/up in groups of 8 (the kernel's layout)."""
    E, two_i, H = w13.shape
    return w13.view(E, 2, two_i // 16, 8, H).permute(0, 2, 1, 3, 4).reshape(E, two_i, H).contiguous()


def sm_clock():
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
    except Exception:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-i", "0"],
                                 capture_output=True, text=True, timeout=10).stdout
            return int(out.strip().splitlines()[0])
        except Exception:
            return None


def torch_l1(x, w13, offs, w):
    gu = torch._grouped_mm(x, w13.transpose(-2, -1), offs=offs)
    gate, up = gu.chunk(2, dim=-1)
    h = F.silu(gate) * up
    return h * w[:, None].to(h.dtype) if w is not None else h


def torch_l2(h, w2, offs):
    return torch._grouped_mm(h, w2.transpose(-2, -1), offs=offs)


def uneven_counts(E, mean, gen):
    """Counts around `mean` with a quarter of the experts empty (torch's multinomial routing, skewed)."""
    if E == 1:
        return [mean + 37]
    p = torch.rand(E, generator=gen) ** 2
    p[torch.randperm(E, generator=gen)[: max(1, E // 4)]] = 0
    idx = torch.multinomial(p, E * mean, replacement=True, generator=gen)
    return torch.bincount(idx, minlength=E).tolist()


def make_problem(hidden, inter, counts, weights, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    E, rows = len(counts), sum(counts)
    dev = "cuda"
    x = torch.randn(rows, hidden, device=dev, dtype=torch.bfloat16, generator=g)
    w13 = (torch.randn(E, 2 * inter, hidden, device=dev, dtype=torch.bfloat16, generator=g) * hidden ** -0.5)
    w2 = (torch.randn(E, hidden, inter, device=dev, dtype=torch.bfloat16, generator=g) * inter ** -0.5)
    offs = torch.tensor(counts, dtype=torch.int32).cumsum(0).to(torch.int32).to(dev)
    w = torch.rand(rows, device=dev, dtype=torch.float32, generator=g) if weights else None
    return x, w13, interleave_w13(w13), w2, offs, w


def rel(a, b):
    """||a - b|| / ||b|| in float64, a block of rows at a time (whole tensors in float64 can take tens of GB)."""
    num = den = 0.0
    step = max(1, (1 << 26) // max(1, a.shape[-1]))
    for i in range(0, a.shape[0], step):
        x, y = a[i:i + step].double(), b[i:i + step].double()
        num += float(((x - y) ** 2).sum())
        den += float((y ** 2).sum())
    return (num / max(den, 1e-300)) ** 0.5


def check_phase(ours, seed, stores):
    """Ours against an fp32 per-expert reference on uneven counts, weights on and off, each output store."""
    rows = []
    for name, hidden, inter, E, _ in MODELS:
        for P in RANKS:
            if E % P:
                continue
            for weights, store in [(w, st) for w in (False, True) for st in stores]:
                seed += 1
                gen = torch.Generator().manual_seed(seed)
                counts = uneven_counts(E // P, 150, gen)
                x, w13, w13i, w2, offs, w = make_problem(hidden, inter, counts, weights, seed)
                rtot = x.shape[0]
                h = torch.full((rtot, inter), float("nan"), device="cuda", dtype=torch.bfloat16)
                y = torch.full((rtot, hidden), float("nan"), device="cuda", dtype=torch.bfloat16)
                ours.gemm(0, x, w13i, h, offs, w, 2 * inter, store=STORES[store])
                ours.gemm(1, h, w2, y, offs, None, hidden, store=STORES[store])
                torch.cuda.synchronize()
                ref_h, ref_y = torch.empty_like(h, dtype=torch.float32), torch.empty_like(y, dtype=torch.float32)
                begin = 0
                for e, c in enumerate(counts):
                    if c:
                        gu = x[begin:begin + c].float() @ w13[e].float().T
                        hh = F.silu(gu[:, :inter]) * gu[:, inter:]
                        if w is not None:
                            hh = hh * w[begin:begin + c, None]
                        ref_h[begin:begin + c] = hh
                        # L2's reference from our (checked) L1 output: the two errors stay apart.
                        ref_y[begin:begin + c] = h[begin:begin + c].float() @ w2[e].float().T
                    begin += c
                r = dict(model=name, P=P, experts=E // P, weights=weights, out_store=store, counts=counts,
                         empty=sum(c == 0 for c in counts), rel_err_l1=rel(h, ref_h), rel_err_l2=rel(y, ref_y),
                         nan_l1=int(h.isnan().sum()), nan_l2=int(y.isnan().sum()))
                r["pass"] = r["rel_err_l1"] < 1e-2 and r["rel_err_l2"] < 1e-2 and r["nan_l1"] == 0 and r["nan_l2"] == 0
                rows.append(r)
                print(f"check {name:16s} P={P} E={E // P:3d} w={int(weights)} {store:6s} empty={r['empty']:2d} "
                      f"L1 {r['rel_err_l1']:.2e} L2 {r['rel_err_l2']:.2e} nan {r['nan_l1']}/{r['nan_l2']} "
                      f"{'ok' if r['pass'] else 'FAIL'}", flush=True)
                del x, w13, w13i, w2, h, y, ref_h, ref_y
                torch.cuda.empty_cache()
    return rows


def graph_of(fn, reps):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    torch.cuda.synchronize()
    return g


_nvml = []


def sm_clock_now():
    """The SM clock now, by NVML (None without pynvml): read while a replay runs, it is that replay's clock."""
    try:
        if not _nvml:
            import pynvml
            pynvml.nvmlInit()
            _nvml.append((pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)))
        nv, h = _nvml[0]
        return nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
    except Exception:
        return None


def time_graph(g, reps, clock=None):
    """Milliseconds a call, and the SM clock read while the replay ran (the clock swings under the power cap,
    and a kernel that draws more power may run at a lower one). clock: how it is read (default sm_clock_now,
    GPU 0's; a torchrun rank passes its own GPU's)."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    g.replay()
    b.record()
    clk = (clock or sm_clock_now)()
    b.synchronize()
    return a.elapsed_time(b) / reps, clk


def compare(fns, est_ms, rounds):
    """Median per call of each fn; graph replays interleaved round by round."""
    reps = max(1, min(50, int(2.0 / max(est_ms, 1e-3))))
    graphs = {k: graph_of(f, reps) for k, f in fns.items()}
    for g in graphs.values():
        g.replay()
    torch.cuda.synchronize()
    t = {k: [] for k in fns}
    clk = {k: [] for k in fns}
    for _ in range(rounds):
        for k, g in graphs.items():
            ms, c = time_graph(g, reps)
            t[k].append(ms)
            if c is not None:
                clk[k].append(c)
    del graphs
    return {k: dict(median_ms=statistics.median(v), min_ms=min(v), max_ms=max(v), reps=reps, rounds=rounds,
                    sm_clock_mhz_during=statistics.median(clk[k]) if clk[k] else None)
            for k, v in t.items()}


def uniform_shapes(rows_list, models=None):
    """(model, hidden, inter, local experts, P, rows per expert) of every speed cell (of `models`, if given)."""
    for name, hidden, inter, E, _ in MODELS:
        if models and name not in models:
            continue
        for P in RANKS:
            if E % P == 0:
                for m in rows_list:
                    yield name, hidden, inter, E // P, P, m


def uniform_problem(hidden, inter, El, m, seed):
    """m rows for each of El experts, and the L1 and L2 outputs: x, w13, w13i, w2, offs, h, y."""
    x, w13, w13i, w2, offs, _ = make_problem(hidden, inter, [m] * El, False, seed)
    h = torch.empty(x.shape[0], inter, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(x.shape[0], hidden, device="cuda", dtype=torch.bfloat16)
    return x, w13, w13i, w2, offs, h, y


def swiglu(gu):
    gate, up = gu.chunk(2, dim=-1)
    return F.silu(gate) * up


def ceiling_fns(x, w13, h, w2, El, m):
    """cuBLAS on the same uniform problem, the two things a user with equal rows per expert could call instead:
    batched (torch.bmm, one GEMM an expert in one launch) and dense (one GEMM of all rows against expert 0's
    weights: the same FLOPs with no expert boundary, every weight reused by every row: more than any grouped
    GEMM can reuse). L1 adds torch's SwiGLU as torch_l1 does."""
    hidden, inter = x.shape[1], h.shape[1]
    xb, hb = x.view(El, m, hidden), h.view(El, m, inter)
    return ({"bmm": lambda: swiglu(torch.bmm(xb, w13.transpose(-2, -1))),
             "dense": lambda: swiglu(torch.matmul(x, w13[0].T))},
            {"bmm": lambda: torch.bmm(hb, w2.transpose(-2, -1)),
             "dense": lambda: torch.matmul(h, w2[0].T)})


def speed_phase(ours, rows_list, rounds, seed, stores, ceilings=False, models=None):
    """Ours (--out-store), torch, cuBLAS on one expert, and ours with each output store of `stores` forced,
    interleaved in one set of rounds; with `ceilings`, cuBLAS batched and dense on the whole problem too."""
    out = []
    peak = 990.0
    for name, hidden, inter, El, P, m in uniform_shapes(rows_list, models):
        x, w13, w13i, w2, offs, h, y = uniform_problem(hidden, inter, El, m, seed)
        rtot = x.shape[0]
        ours.gemm(0, x, w13i, h, offs, None, 2 * inter)
        torch_h = torch_l1(x, w13, offs, None)
        ours.gemm(1, torch_h, w2, y, offs, None, hidden)
        torch_y = torch_l2(torch_h, w2, offs)
        torch.cuda.synchronize()
        err1, err2 = rel(h, torch_h), rel(y, torch_y)
        f1 = 2.0 * rtot * hidden * 2 * inter
        f2 = 2.0 * rtot * inter * hidden
        x1, wd1 = x[:m], w13[0]
        hd, wd2 = h[:m], w2[0]
        clk0 = sm_clock()
        fn1 = {"ours": lambda: ours.gemm(0, x, w13i, h, offs, None, 2 * inter),
               "torch": lambda: torch_l1(x, w13, offs, None),
               "cublas1": lambda: torch.matmul(x1, wd1.T)}
        fn2 = {"ours": lambda: ours.gemm(1, h, w2, y, offs, None, hidden),
               "torch": lambda: torch_l2(h, w2, offs),
               "cublas1": lambda: torch.matmul(hd, wd2.T)}
        if ceilings:
            c1, c2 = ceiling_fns(x, w13, h, w2, El, m)
            fn1.update(c1)
            fn2.update(c2)
        for st in stores:
            fn1["ours_" + st] = lambda st=st: ours.gemm(0, x, w13i, h, offs, None, 2 * inter, store=STORES[st])
            fn2["ours_" + st] = lambda st=st: ours.gemm(1, h, w2, y, offs, None, hidden, store=STORES[st])
        t1 = compare(fn1, f1 / (peak * 0.6e9), rounds)
        t2 = compare(fn2, f2 / (peak * 0.6e9), rounds)
        clk1 = sm_clock()
        for gemm, t, f, err, n in (("L1+SwiGLU", t1, f1, err1, 2 * inter), ("L2", t2, f2, err2, hidden)):
            fd = f / El
            r = dict(model=name, P=P, experts=El, rows_per_expert=m, gemm=gemm,
                     tile=ours.tile_name(0 if gemm == "L1+SwiGLU" else 1, rtot, El, n,
                                         hidden if gemm == "L1+SwiGLU" else inter), flop=f,
                     ours=t["ours"], torch=t["torch"], cublas_one_expert=t["cublas1"],
                     ours_tflops=f / t["ours"]["median_ms"] / 1e9,
                     torch_tflops=f / t["torch"]["median_ms"] / 1e9,
                     cublas_tflops=fd / t["cublas1"]["median_ms"] / 1e9,
                     speedup=t["torch"]["median_ms"] / t["ours"]["median_ms"],
                     rel_diff_vs_torch=err, sm_clock_mhz=[clk0, clk1])
            if ceilings:
                r["cublas_whole"] = {k: dict(t[k], tflops=f / t[k]["median_ms"] / 1e9,
                                             ours_over=t[k]["median_ms"] / t["ours"]["median_ms"],
                                             torch_over=t[k]["median_ms"] / t["torch"]["median_ms"])
                                     for k in ("bmm", "dense")}
            if stores:
                r["ours_by_store"] = {st: dict(t["ours_" + st], tflops=f / t["ours_" + st]["median_ms"] / 1e9,
                                               speedup=t["torch"]["median_ms"] / t["ours_" + st]["median_ms"])
                                      for st in stores}
            out.append(r)
            print(f"{name:16s} P={P} E={El:3d} m={m:5d} {gemm:9s} {r['tile']:9s} "
                  f"ours {r['ours_tflops']:6.1f} torch {r['torch_tflops']:6.1f} cublas1 {r['cublas_tflops']:6.1f} "
                  f"TFLOP/s  x{r['speedup']:.2f}  diff {err:.1e}  clk {clk0}/{clk1}"
                  + "".join(f"  {st} x{v['speedup']:.2f}" for st, v in r.get("ours_by_store", {}).items())
                  + "".join(f"  {k} {v['tflops']:6.1f}" for k, v in r.get("cublas_whole", {}).items()),
                  flush=True)
        del x, w13, w13i, w2, h, y, torch_h, torch_y
        torch.cuda.empty_cache()
    return out


def sweep_phase(ours, rows_list, rounds, seed, stores, waves=1, models=None, tiles_only=None):
    """Every compiled tile (of `tiles_only`, if given) and split-K factor forced (ours only; torch once per shape
    for the ratio), the data the tile heuristic is fitted from. Splits: 1, and those that keep at most `waves`
    waves of work items on the SMs."""
    out = []
    peak = 990.0
    for name, hidden, inter, El, P, m in uniform_shapes(rows_list, models):
        x, w13, w13i, w2, offs, h, y = uniform_problem(hidden, inter, El, m, seed)
        rtot = x.shape[0]
        ref_h = torch_l1(x, w13, offs, None)
        ref_y = torch_l2(ref_h, w2, offs)
        for gemm, kind, a, b, c, ref, N, K in (("L1+SwiGLU", 0, x, w13i, h, ref_h, 2 * inter, hidden),
                                               ("L2", 1, ref_h, w2, y, ref_y, hidden, inter)):
            f = 2.0 * rtot * K * N
            fns, plans = {}, {}
            fns["torch"] = (lambda a=a: torch_l1(x, w13, offs, None)) if kind == 0 else \
                (lambda a=a: torch_l2(ref_h, w2, offs))
            # The store the forced configurations run with: the first of --compare-stores, else auto.
            heur = ours.plan(kind, rtot, El, N, K, STORES[stores[0]] if stores else STORES["auto"])
            for t, (bm, bn) in TILE_SHAPE.items():
                if N % bn or (tiles_only and TILES[t] not in tiles_only):
                    continue
                tiles = El * -(-m // bm) * (N // bn)
                for sp in (1, 2, 3, 4, 6, 8):
                    if sp > 1 and (tiles * sp > waves * ours.sms or sp > (K + 63) // 64 // 8):
                        continue
                    for st in stores or ["auto"]:
                        if t == NARROW and (kind == 0 or st not in ("auto", "staged")):
                            continue
                        if t == PINGPONG and (sp > 1 or st not in ("auto", "staged")):
                            continue
                        key = f"{TILES[t]}/k{sp}" + (f"/{st}" if stores else "")
                        fns[key] = (lambda t=t, sp=sp, kind=kind, a=a, b=b, c=c, N=N, st=st:
                                    ours.gemm(kind, a, b, c, offs, None, N, t, sp, STORES[st]))
                        plans[key] = (t, sp, st)
            diffs = {}
            for key, (t, sp, st) in plans.items():
                c.fill_(float("nan"))
                ours.gemm(kind, a, b, c, offs, None, N, t, sp, STORES[st])
                torch.cuda.synchronize()
                diffs[key] = rel(c, ref) if not bool(c.isnan().any()) else float("inf")
            clk0 = sm_clock()
            t_ = compare(fns, f / (peak * 0.6e9), rounds)
            clk1 = sm_clock()
            best = min(plans, key=lambda k: t_[k]["median_ms"])
            # The heuristic's tile and splits (with forced stores: beside the first of them).
            hk = f"{TILES[heur[0]]}/k{heur[1]}" + (f"/{stores[0]}" if stores else "")
            r = dict(model=name, P=P, experts=El, rows_per_expert=m, gemm=gemm, flop=f,
                     torch_ms=t_["torch"]["median_ms"], heuristic=hk, best=best, sm_clock_mhz=[clk0, clk1],
                     configs={k: dict(t_[k], tflops=f / t_[k]["median_ms"] / 1e9,
                                      speedup=t_["torch"]["median_ms"] / t_[k]["median_ms"],
                                      rel_diff_vs_torch=diffs[k]) for k in plans})
            out.append(r)
            cells = " ".join(f"{k}:{r['configs'][k]['speedup']:.2f}" for k in plans)
            print(f"sweep {name:16s} P={P} m={m:4d} {gemm:9s} best {best} "
                  f"({r['configs'][best]['speedup']:.2f}x) heur {hk} "
                  f"({r['configs'].get(hk, {}).get('speedup', float('nan')):.2f}x) | {cells} "
                  f"maxdiff {max(diffs.values()):.1e} clk {clk0}/{clk1}", flush=True)
        del x, w13, w13i, w2, h, y, ref_h, ref_y
        torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libxstage_moe.so")
    ap.add_argument("--out", default="moe-gemm.json")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--sweep", action="store_true", help="force every tile and split-K factor (the heuristic's data)")
    ap.add_argument("--sweep-rows", default="64,128,256,512")
    ap.add_argument("--sweep-waves", type=int, default=1,
                    help="split-K factors forced in the sweep: those that keep at most this many waves of work items")
    ap.add_argument("--sweep-tiles", default="", help="comma list of tiles the sweep forces (default: every tile)")
    ap.add_argument("--models", default="", help="comma list of model names (default: every model)")
    ap.add_argument("--rows", default=",".join(map(str, ROWS)))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out-store", default="auto", choices=list(STORES), help="the output store of 'ours'")
    ap.add_argument("--ceilings", action="store_true",
                    help="also time cuBLAS batched (torch.bmm) and dense (all rows, one weight) on each whole problem")
    ap.add_argument("--compare-stores", default="",
                    help="comma list of output stores (staged, bulk, tma) also timed, checked and swept, forced")
    a = ap.parse_args()
    ours = Ours(a.lib)
    ours.store = STORES[a.out_store]
    stores = [st for st in a.compare_stores.split(",") if st]
    for st in stores:
        if st not in STORES:
            ap.error(f"--compare-stores {st}: expected one of {', '.join(STORES)}")
    models = [m for m in a.models.split(",") if m]
    for t in a.sweep_tiles.split(","):
        if t and t not in TILES:
            ap.error(f"--sweep-tiles {t}: expected one of {', '.join(TILES)}")
    res = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               device=torch.cuda.get_device_name(0), torch=torch.__version__, commit=a.commit, seed=a.seed,
               method="CUDA-graph replays of each side, alternating round by round; median per call over rounds")
    if a.check:
        res["check"] = check_phase(ours, a.seed, stores or [a.out_store])
        json.dump(res, open(a.out, "w"), indent=1)
    if a.sweep:
        res["sweep"] = sweep_phase(ours, [int(r) for r in a.sweep_rows.split(",")], a.rounds, a.seed, stores,
                                   a.sweep_waves, models, [t for t in a.sweep_tiles.split(",") if t])
        json.dump(res, open(a.out, "w"), indent=1)
    if not a.no_speed:
        res["speed"] = speed_phase(ours, [int(r) for r in a.rows.split(",")], a.rounds, a.seed, stores, a.ceilings,
                                   models)
    json.dump(res, open(a.out, "w"), indent=1)
    if a.check and not all(r["pass"] for r in res["check"]):
        print("CHECK FAILED", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
