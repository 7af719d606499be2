#!/usr/bin/env python3
"""The MoE layer over P ranks from PyTorch (issue 40, "P ranks"): xstage.MoE
with a process group (expert parallel, fused) against what users write:

  torch_a2a     all_to_all_single of the per-expert counts, the splits to the
                host, all_to_all_single of the token rows, torch._grouped_mm +
                SwiGLU + torch._grouped_mm, all_to_all_single back, weighted
                index_add_ (torchtitan's and vLLM's naive expert parallelism);
                eager only: its splits need the host, so no graph captures it;
  torch_a2a_aa  the same again: the A/A of the baseline;
  ours_unfused  the same exchange around our grouped GEMMs (xstage.moe_experts:
                L1 + SwiGLU x weight, L2), eager;
  ours          xstage.MoE(group=...): dispatch and combine by remote stores
                into torch symmetric memory, L1/L2 in one kernel, no host
                sync; a CUDA graph of calls, and eager;
  torch_vdev    (--vdev, a run of its own: it switches torch symmetric memory
                to NVSHMEM) torch.ops.symm_mem.all_to_all_vdev_2d dispatch
                (splits on the device), torch._grouped_mm + SwiGLU, and
                all_to_all_vdev_2d_offset back; a CUDA graph, where the
                installed torch has the op and NVSHMEM.

Every rank holds E/P experts and T tokens; routing uniform at random
(topk_softmax of random logits). Outputs are checked against torch_a2a
(bf16 tolerance) before timing; a side that fails is reported, not timed.

Protocol: windows >= 50 ms (graph sides: a graph of as many calls; eager:
a loop), >= 7 rounds, the order of the sides rotated every round (the same
order on every rank; a barrier between sides), the SM clock read inside
each window (NVML, this rank's GPU); a side's time is the slowest rank's
median. Runbook (2 x H200, docs/RESULTS.md "Not measured"):

    PYTHONPATH=python XSTAGE_LIBRARY=build/libxstage_torch.so \\
      torchrun --nproc-per-node 2 bench/moe_ep_torch.py --out moe-ep-torch.json [--quick] [--vdev]
Writes JSON (device, driver, torch, commit, date, command, every cell) from rank 0 and prints a table.
"""
import argparse
import json
import math
import os
import statistics
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moe_protocol as protocol  # noqa: E402
from moe_protocol import geomean, rel  # noqa: E402
from moe_models import MODELS  # noqa: E402  (name, hidden, inter, experts, top-k)
from moe_vs_torch import graph_of, time_graph  # noqa: E402

import xstage  # noqa: E402

TOKENS = [2048, 4096]
WINDOW_MS = protocol.WINDOW_MS  # --quick shortens it
_nvml = []


def sm_clock_now():
    """This rank's GPU's SM clock by NVML (None without pynvml)."""
    try:
        if not _nvml:
            import pynvml
            pynvml.nvmlInit()
            _nvml.append((pynvml, pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("LOCAL_RANK", "0")))))
        nv, h = _nvml[0]
        return nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
    except Exception:
        return None


class Naive:
    """all_to_all_single expert parallelism as users write it; experts: a
    function (rows in expert order, offs) -> rows."""

    def __init__(self, group, E, experts):
        self.g, self.P, self.E, self.experts = group, dist.get_world_size(group), E, experts

    def __call__(self, x, ids, wts):
        P, E = self.P, self.E
        E_loc, (T, k), H = E // P, ids.shape, x.shape[1]
        flat = ids.reshape(-1)
        order = flat.argsort(stable=True)  # by global expert: owner-major, then expert
        counts = torch.bincount(flat, minlength=E)
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts, group=self.g)  # [source][local expert]
        send_splits = counts.view(P, E_loc).sum(1).tolist()  # the host sync users have
        recv_splits = recv_counts.view(P, E_loc).sum(1).tolist()
        recv = x.new_empty(sum(recv_splits), H)
        dist.all_to_all_single(recv, x.index_select(0, order // k), recv_splits, send_splits, group=self.g)
        rc = recv_counts.view(P, E_loc)
        expert_of_row = torch.repeat_interleave(torch.arange(E_loc, device=x.device).repeat(P), rc.reshape(-1),
                                                output_size=recv.shape[0])
        perm = expert_of_row.argsort(stable=True)  # source-major -> expert-major
        offs = torch.cumsum(rc.sum(0), 0).to(torch.int32)
        y = self.experts(recv.index_select(0, perm), offs)
        back = torch.empty_like(y)
        back[perm] = y
        ret = x.new_empty(T * k, H)
        dist.all_to_all_single(ret, back, send_splits, recv_splits, group=self.g)
        ret = ret * wts.reshape(-1)[order].to(ret.dtype)[:, None]
        return torch.zeros_like(x).index_add_(0, order // k, ret)


def torch_experts(w13, w2):
    I = w13.shape[1] // 2

    def run(xe, offs):
        gu = torch._grouped_mm(xe, w13.transpose(-2, -1), offs=offs)
        return torch._grouped_mm(F.silu(gu[:, :I]) * gu[:, I:], w2.transpose(-2, -1), offs=offs)
    return run


class Vdev:
    """all_to_all_vdev_2d expert parallelism: splits on the device (no host
    sync), buffers of torch symmetric memory (NVSHMEM) sized once."""
    ALIGN = 16  # each expert's rows start 16-row aligned (grouped_mm's alignment)

    def __init__(self, group, E, H, I, k, T_max, w13, w2):
        import torch.distributed._symmetric_memory as symm_mem
        self.g, self.P, self.E, self.I = group, dist.get_world_size(group), E, I
        self.E_loc = E // self.P
        dev = w13.device
        rows = T_max * k
        cap = self.P * rows + self.E_loc * self.ALIGN
        self.inp = symm_mem.empty(rows, H, dtype=torch.bfloat16, device=dev)
        self.out = symm_mem.empty(cap, H, dtype=torch.bfloat16, device=dev)
        self.y = symm_mem.empty(cap, H, dtype=torch.bfloat16, device=dev)
        self.ret = symm_mem.empty(rows, H, dtype=torch.bfloat16, device=dev)
        n = self.P * self.E_loc
        self.in_splits = symm_mem.empty(n, dtype=torch.int64, device=dev)
        self.out_so = symm_mem.empty(2, n, dtype=torch.int64, device=dev)
        self.back_so = symm_mem.empty(2, n, dtype=torch.int64, device=dev)
        for t in (self.inp, self.out, self.y, self.ret, self.in_splits, self.out_so, self.back_so):
            symm_mem.rendezvous(t, group.group_name)
        self.w13, self.w2 = w13, w2

    def __call__(self, x, ids, wts):
        (T, k), name = ids.shape, self.g.group_name
        flat = ids.reshape(-1)
        order = flat.argsort(stable=True)
        # Counts on the device: bincount reads the ids' range on the host, which graph capture refuses.
        self.in_splits.zero_().scatter_add_(0, flat.long(), torch.ones_like(flat, dtype=torch.int64))
        self.inp[:T * k].copy_(x.index_select(0, order // k))
        torch.ops.symm_mem.all_to_all_vdev_2d(self.inp, self.out, self.in_splits, self.out_so, name,
                                              major_align=self.ALIGN)
        # Expert e's rows end where its last source's split ends (out_so: [splits; offsets], expert-major).
        ends = (self.out_so[0] + self.out_so[1]).view(self.E_loc, self.P)[:, -1].to(torch.int32)
        gu = torch._grouped_mm(self.out, self.w13.transpose(-2, -1), offs=ends)
        I = self.I
        self.y.copy_(torch._grouped_mm(F.silu(gu[:, :I]) * gu[:, I:], self.w2.transpose(-2, -1), offs=ends))
        torch.ops.symm_mem.all_to_all_vdev_2d_offset(self.y, self.ret, self.out_so, self.back_so, name)
        ret = self.ret[:T * k] * wts.reshape(-1)[order].to(torch.bfloat16)[:, None]
        return torch.zeros_like(x).index_add_(0, order // k, ret)


def eager_window(fn, est_ms):
    return protocol.eager_window(fn, est_ms, WINDOW_MS, sm_clock_now)


def graph_window(g, reps):
    return time_graph(g, reps, clock=sm_clock_now)  # this rank's GPU's clock


def slowest(v, group):
    t = torch.tensor([v], dtype=torch.float64, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t.item())


def cell(group, name, H, I, E, k, T, rounds, seed, vdev):
    P, rank = dist.get_world_size(group), dist.get_rank(group)
    g = torch.Generator(device="cuda").manual_seed(seed)  # the experts: the same on every rank
    w13 = (torch.randn(E, 2 * I, H, generator=g, device="cuda") / H ** 0.5).to(torch.bfloat16)
    w2 = (torch.randn(E, H, I, generator=g, device="cuda") / I ** 0.5).to(torch.bfloat16)
    E_loc = E // P
    w13_loc, w2_loc = w13[rank * E_loc:(rank + 1) * E_loc].contiguous(), w2[rank * E_loc:(rank + 1) * E_loc].contiguous()
    g.manual_seed(seed * 1000 + rank)  # the tokens: each rank its own
    x = (torch.randn(T, H, generator=g, device="cuda") * 0.5).to(torch.bfloat16)
    wts, ids = xstage.topk_softmax(torch.randn(T, E, generator=g, device="cuda"), k, renormalize=True)
    baseline = Naive(group, E, torch_experts(w13_loc, w2_loc))
    sides_eager = {"torch_a2a": lambda: baseline(x, ids, wts), "torch_a2a_aa": lambda: baseline(x, ids, wts)}
    sides_graph = {}
    want = baseline(x, ids, wts)
    check = {}
    if vdev:
        v = Vdev(group, E, H, I, k, T, w13_loc, w2_loc)
        sides_graph["torch_vdev"] = lambda: v(x, ids, wts)
    else:
        w13i = xstage.moe_interleave_w13(w13_loc)
        unfused = Naive(group, E, lambda xe, offs: xstage.moe_experts(xe, w13i, w2_loc, offs))
        moe = xstage.MoE(w13, w2, group=group, tokens_max=T, topk=k, check_ids=False)
        sides_eager["ours_unfused"] = lambda: unfused(x, ids, wts)
        sides_eager["ours_eager"] = lambda: moe(x, ids, wts)
        sides_graph["ours"] = lambda: moe(x, ids, wts)
    for s, fn in {**sides_eager, **sides_graph}.items():
        a, b = fn(), fn()
        check[s] = dict(rel_err_vs_torch_a2a=rel(a, want), same_bits=bool(torch.equal(a, b)))
        check[s]["ok"] = slowest(0.0 if check[s]["rel_err_vs_torch_a2a"] < 2e-2 else 1.0, group) == 0
    sides_eager = {s: f for s, f in sides_eager.items() if check[s]["ok"]}
    sides_graph = {s: f for s, f in sides_graph.items() if check[s]["ok"]}
    # Calls a window, from one call's time (graph sides: one replayed call).
    est, reps, graphs = {}, {}, {}
    for s, fn in sides_eager.items():
        est[s] = slowest(min(eager_window(fn, WINDOW_MS)[0] for _ in range(2)), group)
    for s, fn in sides_graph.items():
        one = graph_of(fn, 1)
        one_ms = slowest(min(graph_window(one, 1)[0] for _ in range(3)), group)
        del one
        reps[s] = max(1, math.ceil(1.1 * WINDOW_MS / max(one_ms, 1e-3)))
        graphs[s] = graph_of(fn, reps[s])
    sides = list(sides_eager) + list(graphs)
    ms, clk = {s: [] for s in sides}, {s: [] for s in sides}
    for r in range(rounds):
        for s in sides[r % len(sides):] + sides[:r % len(sides)]:  # rotated, the same order on every rank
            dist.barrier(group=group)
            t, c = graph_window(graphs[s], reps[s]) if s in graphs else eager_window(sides_eager[s], est[s])
            ms[s].append(t)
            if c is not None:
                clk[s].append(c)
    del graphs
    out = dict(model=name, hidden=H, inter=I, experts=E, topk=k, tokens_per_rank=T, P=P, rounds=rounds, reps=reps,
               check=check)
    if not vdev:
        out["sizes"] = moe.sizes()
    for s in sides:
        out[s] = dict(median_ms=slowest(statistics.median(ms[s]), group), rank_ms=ms[s],
                      sm_clock_mhz=statistics.median(clk[s]) if clk[s] else None)
    med = {s: out[s]["median_ms"] for s in sides}
    out["aa_torch"] = med["torch_a2a_aa"] / med["torch_a2a"]
    for s in sides:
        if s.startswith("torch_a2a"):
            continue
        out[f"speedup_{s}"] = med["torch_a2a"] / med[s]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    protocol.add_arguments(ap, "moe-ep-torch.json", "the five of section 7", "2048,4096 a rank")
    ap.add_argument("--vdev", action="store_true", help="the all_to_all_vdev_2d side alone (NVSHMEM backend)")
    a = ap.parse_args()
    global WINDOW_MS
    shapes, tokens, rounds, WINDOW_MS = protocol.choose(a, "moe_ep_torch.py", MODELS, TOKENS)
    if "WORLD_SIZE" not in os.environ:
        sys.exit("moe_ep_torch.py: run under torchrun (torchrun --nproc-per-node 2 bench/moe_ep_torch.py ...)")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    group = dist.group.WORLD
    P, rank = dist.get_world_size(), dist.get_rank()
    if a.vdev:
        import torch.distributed._symmetric_memory as symm_mem
        if not hasattr(torch.ops.symm_mem, "all_to_all_vdev_2d") or not symm_mem.is_nvshmem_available():
            if rank == 0:
                print("moe_ep_torch.py: --vdev: this torch has no all_to_all_vdev_2d with NVSHMEM; nothing to run")
            dist.destroy_process_group()
            return
        symm_mem.set_backend("NVSHMEM")
    cells = []
    for name, H, I, E, k in shapes:
        if E % P:
            continue
        for T in tokens:
            c = cell(group, name, H, I, E, k, T, rounds, a.seed, a.vdev)
            cells.append(c)
            if rank == 0:
                sp = ", ".join(f"{key[8:]} {v:.2f}x" for key, v in c.items() if key.startswith("speedup_"))
                print(f"{name:16s} T={T:5d}/rank P={P} torch_a2a {c['torch_a2a']['median_ms']:.3f} ms; {sp} "
                      f"(A/A {c['aa_torch']:.3f}); checks {json.dumps(c['check'])}", flush=True)
            torch.cuda.empty_cache()
    if rank == 0:
        summary = {}
        for key in sorted({k2 for c in cells for k2 in c if k2.startswith("speedup_")}):
            v = [c[key] for c in cells if key in c]
            summary[key] = dict(geomean=geomean(v), min=min(v))
        summary["aa_torch_range"] = [min(c["aa_torch"] for c in cells), max(c["aa_torch"] for c in cells)]
        doc = dict(protocol.provenance(a, rounds, WINDOW_MS), P=P, vdev=a.vdev, summary=summary, cells=cells)
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"summary: {json.dumps(summary)} -> {a.out}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
