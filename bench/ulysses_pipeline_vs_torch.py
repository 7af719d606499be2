#!/usr/bin/env python3
"""Our pipelined and fused Ulysses attention against the pipeline a PyTorch
user writes, in one run, alternating.

The torch pipeline (what the issue's 30 lines do, tuned as hard as ours):
P emulated ranks' head-sharded Q, K, V on one GPU ([P, S, H/P, D] bf16);
cuDNN SDPA one chunk (heads x query rows) at a time on the compute stream,
each chunk's output moved into the Ulysses output layout on the device and
copied to the destination (pinned host memory for --placement host, device
memory for device) on a second stream while the next chunk computes; the
whole pipeline captured once and replayed as one CUDA graph. The destination
is one buffer [S, P, H/P, D] (the P sequence shards back to back, as a user
on one GPU would lay it), so a chunk of every head is one contiguous copy and
a chunk of some heads one 2-D copy (cudaMemcpy2DAsync through ctypes: torch's
copy_ has no strided device-to-host path). Chunk counts: the same pairs as
`xstage ulysses` sweeps (head chunks 1, 2, 4, ... and H/P by row chunks 1, 2,
4, ..., at most --max-chunks in all, row starts on 128-row tiles); the best
per S, and of how many, is reported. Every configuration is checked against
one unchunked SDPA (relative error of the whole output).

The run alternates processes: `xstage ulysses` (attention-only, fused and the
pipelined sweep; its own paired rounds) for every S, then the torch sweep for
every S, --alternations times. Each side's two alternations give its A/A
spread. nvidia-smi samples the SM clock every 100 ms for the whole run.

    python3 bench/ulysses_pipeline_vs_torch.py --xstage build-dev/xstage --placement host \\
        --seq 4096,8192,16384,32768 --out pipeline-host.json [--xstage-args "--row-chunks 16,32 --chunks 1"]
"""
import argparse
import ctypes
import datetime
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

from moe_vs_torch import sm_clock  # bench/, beside this script

BLOCK_M = 128  # row chunks start on the attention tile's rows, as ours do


def row_chunks(S, n, align=BLOCK_M):
    """Row ranges as xstage's ulysses_row_chunks makes them (k S / n rounded to the tile rows, empty ones dropped)."""
    out, begin = [], 0
    for k in range(1, n + 1):
        exact = S * k // n
        end = S if k == n else min(S, (exact + align // 2) // align * align)
        if end > begin:
            out.append((begin, end))
            begin = end
    return out


def head_chunks(hl, n):
    return [(hl * k // n, hl * (k + 1) // n) for k in range(n)]


def sweep_pairs(hl, S, max_chunks):
    """(head chunks, row chunks) as xstage's ulysses_pipeline_sweep."""
    heads = []
    n = 2
    while n < hl:
        heads.append(n)
        n *= 2
    heads.append(hl)
    if heads[0] != 1:
        heads.insert(0, 1)
    out = []
    for h in heads:
        distinct, r = 0, 1
        while h * r <= max_chunks:
            got = len(row_chunks(S, r))
            if got <= distinct:
                break
            distinct = got
            out.append((h, r))
            r *= 2
    return out


class Cudart:
    """cudaMemcpy2DAsync from the CUDA runtime torch loaded (a copy torch's API does not expose)."""

    def __init__(self):
        self.lib = None
        # The runtime torch already loaded first (RTLD_NOLOAD: only if it is in the process), then any found.
        for name in ["libcudart.so.13", "libcudart.so.12"]:
            try:
                self.lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
                break
            except OSError:
                continue
        cands = []
        for d in [os.path.dirname(torch.__file__) + "/lib"] + [os.path.join(p, "nvidia") for p in sys.path]:
            cands += glob.glob(os.path.join(d, "**", "libcudart.so*"), recursive=True)
        cands += ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
        for c in cands if self.lib is None else []:
            try:
                self.lib = ctypes.CDLL(c)
                break
            except OSError:
                continue
        if self.lib is None:
            raise SystemExit("ulysses_pipeline_vs_torch: no libcudart found for cudaMemcpy2DAsync")
        f = self.lib.cudaMemcpy2DAsync
        f.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                      ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        f.restype = ctypes.c_int

    def copy2d(self, dst, dpitch, src, spitch, width, height, stream):
        rc = self.lib.cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, 4, stream.cuda_stream)
        if rc != 0:
            raise RuntimeError(f"cudaMemcpy2DAsync: error {rc} (width {width}, height {height})")


class TorchPipeline:
    def __init__(self, P, H, D, S, placement, sdpa_backend):
        self.P, self.Hl, self.D, self.S = P, H // P, D, S
        g = torch.Generator(device="cuda").manual_seed(S)
        shape = (P, S, self.Hl, D)
        self.q, self.k, self.v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g)
                                  for _ in range(3))
        self.stage = torch.empty(S, P, self.Hl, D, device="cuda", dtype=torch.bfloat16)
        if placement == "host":
            self.out = torch.empty(S, P, self.Hl, D, dtype=torch.bfloat16, pin_memory=True)
        else:
            self.out = torch.empty(S, P, self.Hl, D, device="cuda", dtype=torch.bfloat16)
        self.copy_stream = torch.cuda.Stream()
        self.cudart = Cudart()
        self.backend = sdpa_backend

    def sdpa(self, rows, heads):
        (a, b), (h0, h1) = rows, heads
        q = self.q[:, a:b, h0:h1].transpose(1, 2)
        k = self.k[:, :, h0:h1].transpose(1, 2)
        v = self.v[:, :, h0:h1].transpose(1, 2)
        from torch.nn.attention import sdpa_kernel
        with sdpa_kernel([self.backend]):
            return F.scaled_dot_product_attention(q, k, v)  # [P, heads, rows, D]

    def send(self, rows, heads):
        (a, b), (h0, h1) = rows, heads
        if h0 == 0 and h1 == self.Hl:  # every head: one contiguous copy
            self.out[a:b].copy_(self.stage[a:b], non_blocking=True)
            return
        e = 2
        pitch = self.Hl * self.D * e
        off = ((a * self.P) * self.Hl + h0) * self.D * e
        self.cudart.copy2d(self.out.data_ptr() + off, pitch, self.stage.data_ptr() + off, pitch,
                           (h1 - h0) * self.D * e, (b - a) * self.P, self.copy_stream)

    def run(self, hc, rc):
        """One pipelined run on the current stream (compute) and the copy stream."""
        compute = torch.cuda.current_stream()
        self.copy_stream.wait_stream(compute)
        for rows in row_chunks(self.S, rc):
            for heads in head_chunks(self.Hl, hc):
                o = self.sdpa(rows, heads)
                (a, b), (h0, h1) = rows, heads
                self.stage[a:b, :, h0:h1].copy_(o.permute(2, 0, 1, 3))
                ev = torch.cuda.Event()
                ev.record(compute)
                with torch.cuda.stream(self.copy_stream):
                    self.copy_stream.wait_event(ev)
                    self.send(rows, heads)
        compute.wait_stream(self.copy_stream)

    def attention_only(self):
        self.sdpa((0, self.S), (0, self.Hl))

    def graph(self, fn):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()  # warm: cuDNN plans, lazy module loading
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        torch.cuda.synchronize()
        return g

    def reference(self):
        o = self.sdpa((0, self.S), (0, self.Hl))
        return o.permute(2, 0, 1, 3).contiguous()

    def rel_err(self, ref):
        got = self.out.to("cuda", non_blocking=False).float()
        return float((got - ref.float()).norm() / ref.float().norm())


def time_one(g):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    g.replay()  # the one before: the timed one starts on a busy GPU, as xstage's paired runs do
    a.record()
    g.replay()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) * 1e3  # us


def torch_sweep(args, S, backend):
    tp = TorchPipeline(args.ranks, args.heads, args.head_dim, S, args.placement, backend)
    pairs = sweep_pairs(tp.Hl, S, args.max_chunks)
    if args.torch_pairs:
        pairs = [tuple(int(x) for x in p.split("x")) for p in args.torch_pairs.split(",")]
    ref = tp.reference()
    graphs, checks = {}, {}
    graphs["attention-only"] = tp.graph(tp.attention_only)
    for hc, rc in pairs:
        key = f"{hc}x{rc}"
        graphs[key] = tp.graph(lambda: tp.run(hc, rc))
        tp.out.zero_()
        tp.stage.fill_(float("nan"))  # a send that ran ahead of its SDPA would carry NaN, not the warm-up's values
        graphs[key].replay()
        torch.cuda.synchronize()
        checks[key] = tp.rel_err(ref)
        if not checks[key] <= 1e-2:
            raise SystemExit(f"torch pipeline {key} at S = {S}: relative error {checks[key]:.3g} against unchunked "
                             "SDPA exceeds 1e-2")
    del ref
    once = time_one(graphs["attention-only"]) * (1 + len(pairs))
    rounds = max(args.min_rounds, min(args.max_rounds, int(args.seconds_per_s * 1e6 / max(once * 2, 1))))
    t = {k: [] for k in graphs}
    clk0 = sm_clock()
    for _ in range(rounds):
        for k, g in graphs.items():
            t[k].append(time_one(g))
    clk1 = sm_clock()
    rows = {k: dict(median_us=statistics.median(v), min_us=min(v), max_us=max(v), rounds=len(v),
                    rel_err=checks.get(k)) for k, v in t.items()}
    pipe = {k: r for k, r in rows.items() if k != "attention-only"}
    best = min(pipe, key=lambda k: pipe[k]["median_us"])
    del graphs, tp
    torch.cuda.empty_cache()
    return dict(S=S, sdpa_backend=str(backend).split(".")[-1], configs=rows, best=best,
                best_us=pipe[best]["median_us"], best_of=len(pipe), rounds=rounds, sm_clock_mhz=[clk0, clk1])


def run_xstage(args, alternation, tmp):
    out = os.path.join(tmp, f"xstage-{alternation}.json")
    cmd = [args.xstage, "ulysses", "--ranks", str(args.ranks), "--heads", str(args.heads), "--head-dim",
           str(args.head_dim), "--placement", args.placement, "--seq", args.seq,
           "--variants", "attention-only,fused,pipelined", "--stores", args.fused_store, "--orders", "rotated",
           "--a2a", "copy-engine,store-kernel", "-o", out] + args.xstage_args.split()
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    with open(out) as f:
        rep = json.load(f)
    per_s = {}
    for s in rep["summary"]:
        per_s[s["S"]] = dict(attention_only_us=s["attention_only_us"], fused_us=s["fused_us"],
                             fused_config=s["fused_config"], pipelined_us=s["pipelined_us"],
                             pipelined_a2a=s["pipelined_a2a"], pipelined_chunks=s["pipelined_chunks"],
                             pipelined_row_chunks=s.get("pipelined_row_chunks"),
                             pipelined_configs=s["pipelined_configs"], pipelined_all=s["pipelined_all"])
    return dict(command=" ".join(cmd), seconds=time.time() - t0, sm_clock_mhz=rep.get("sm_clock_mhz"),
                commit=rep.get("commit"), per_s=per_s)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--xstage", required=True)
    ap.add_argument("--placement", choices=["host", "device"], default="host")
    ap.add_argument("--seq", default="4096,8192,16384,32768")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--heads", type=int, default=24)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--max-chunks", type=int, default=32)
    ap.add_argument("--torch-pairs", default="", help="head x row chunk pairs for torch (2x8,1x32); default the sweep")
    ap.add_argument("--xstage-args", default="", help="more arguments for xstage ulysses (e.g. --row-chunks 16,32)")
    ap.add_argument("--fused-store", default="paced-warp")
    ap.add_argument("--alternations", type=int, default=2)
    ap.add_argument("--min-rounds", type=int, default=5)
    ap.add_argument("--max-rounds", type=int, default=30)
    ap.add_argument("--seconds-per-s", type=float, default=3.0, help="torch timing budget per S and alternation")
    ap.add_argument("--sdpa", choices=["cudnn", "flash"], default="cudnn")
    ap.add_argument("--commit", default=None)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    from torch.nn.attention import SDPBackend
    backend = SDPBackend.CUDNN_ATTENTION if args.sdpa == "cudnn" else SDPBackend.FLASH_ATTENTION
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                           text=True).stdout.strip() or None
    seqs = [int(x) for x in args.seq.split(",")]
    alts = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.alternations):
            ours = run_xstage(args, i, tmp)
            print(f"alternation {i}: xstage {ours['seconds']:.0f} s", flush=True)
            t0 = time.time()
            theirs = {}
            for S in seqs:
                try:
                    theirs[S] = torch_sweep(args, S, backend)
                except RuntimeError as e:  # cuDNN refusing a shape: flash instead, said in the record
                    if backend != SDPBackend.CUDNN_ATTENTION:
                        raise
                    print(f"S = {S}: cuDNN SDPA failed ({e}); flash instead", flush=True)
                    theirs[S] = torch_sweep(args, S, SDPBackend.FLASH_ATTENTION)
                r = theirs[S]
                o = ours["per_s"][S]
                print(f"  S = {S}: ours fused {o['fused_us']:.1f} us, pipelined {o['pipelined_us']:.1f} "
                      f"({o['pipelined_a2a']} {o['pipelined_chunks']}x{o['pipelined_row_chunks']}, best of "
                      f"{o['pipelined_configs']}); torch pipeline {r['best_us']:.1f} ({r['best']}, best of "
                      f"{r['best_of']}, {r['sdpa_backend']}); attention-only ours {o['attention_only_us']:.1f} "
                      f"torch {r['configs']['attention-only']['median_us']:.1f}", flush=True)
            alts.append(dict(xstage=ours, torch=dict(seconds=time.time() - t0, per_s=theirs)))
    # Ratios per alternation (torch time over ours: > 1 means ours is faster), and each side's A/A.
    table = []
    for S in seqs:
        row = dict(S=S)
        for name, key in [("pipelined", "pipelined_us"), ("fused", "fused_us")]:
            row[f"torch_over_{name}"] = [a["torch"]["per_s"][S]["best_us"] / a["xstage"]["per_s"][S][key] for a in alts]
        if len(alts) >= 2:
            row["aa_torch"] = alts[1]["torch"]["per_s"][S]["best_us"] / alts[0]["torch"]["per_s"][S]["best_us"]
            row["aa_ours_pipelined"] = (alts[1]["xstage"]["per_s"][S]["pipelined_us"] /
                                        alts[0]["xstage"]["per_s"][S]["pipelined_us"])
            row["aa_ours_fused"] = alts[1]["xstage"]["per_s"][S]["fused_us"] / alts[0]["xstage"]["per_s"][S]["fused_us"]
        table.append(row)
        print(f"S = {S}: torch/pipelined {', '.join(f'{x:.3f}' for x in row['torch_over_pipelined'])}; "
              f"torch/fused {', '.join(f'{x:.3f}' for x in row['torch_over_fused'])}"
              + (f"; A/A torch {row['aa_torch']:.3f}, ours pipelined {row['aa_ours_pipelined']:.3f}, "
                 f"fused {row['aa_ours_fused']:.3f}" if "aa_torch" in row else ""), flush=True)
    rec = dict(tool="bench/ulysses_pipeline_vs_torch.py", date=datetime.datetime.now(datetime.timezone.utc).isoformat(),
               commit=commit, command=" ".join(sys.argv), device=torch.cuda.get_device_name(0),
               torch=torch.__version__, cudnn=torch.backends.cudnn.version(), placement=args.placement,
               P=args.ranks, H=args.heads, D=args.head_dim, seqs=seqs, alternations=alts, table=table,
               protocol="processes alternate (xstage for every S, then torch for every S); each side's best "
                        "configuration per S by its median over rounds of single-run times, each timed run right "
                        "after another run (xstage: after an attention-only run, paired); ratios are torch's best "
                        "over ours per alternation; A/A: a side's second alternation over its first")
    with open(args.out, "w") as f:
        json.dump(rec, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
