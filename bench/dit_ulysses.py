#!/usr/bin/env python3
"""A real client of xstage.UlyssesAttention: diffusers' FluxTransformer2DModel
at full width (24 heads of 128, random weights from its config, no download;
a few blocks) run sequence-parallel, one rank a GPU, with an attention
processor that calls the variant under test:

  sdpa            sequential Ulysses as users run it: all_to_all_single, torch
                  SDPA (its default backend), all_to_all_single
  sdpa-cudnn      the same with SDPA forced to cuDNN attention
  xstage-seq      all_to_all_single, our attention kernel, all_to_all_single
  xstage-fused    xstage.UlyssesAttention: all_to_all_single, then attention
                  with the post-attention all-to-all in its epilogue

Every rank holds its torch.chunk of the image tokens and of the text tokens
(and of their position ids), so every token-wise layer runs on local rows and
only attention exchanges. Checks: each variant's output (gathered) against
sdpa, and sdpa against the same model on one GPU with diffusers' own
processor. Times: one transformer forward ("step") per variant, the variants
interleaved round after round (order rotated each round), each step timed by
CUDA events and taken as the slowest rank's; the SM clock read after every round.

    torchrun --nproc-per-node 2 bench/dit_ulysses.py --out dit-step.json
    python3 bench/dit_ulysses.py --selftest     # CPU: the processor against diffusers' own
    torchrun --nproc-per-node 2 bench/dit_ulysses.py --selftest   # and sequence-parallel over gloo
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

TEXT_TOKENS = 512  # FLUX.1's T5 sequence
LATENT_CHANNELS = 64  # 16 VAE channels x the 2 x 2 patch


def image_tokens(px):
    """Flux: the VAE downsamples 8x, the patches are 2 x 2 latents."""
    return (px // 16) ** 2


class UlyssesFluxProcessor:
    """Flux's joint attention (text and image streams, QK RMS norm, rotary
    embedding) with the attention itself done by attn_fn(q, k, v) on this
    rank's [B, S_local, H, D] rows."""

    def __init__(self, attn_fn):
        self.attn_fn = attn_fn

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, image_rotary_emb=None):
        from diffusers.models.embeddings import apply_rotary_emb

        if attention_mask is not None:
            raise ValueError("UlyssesFluxProcessor: attention masks are not supported")

        def split_heads(x, norm=None):
            x = x.unflatten(-1, (-1, attn.head_dim))
            return norm(x) if norm is not None else x

        q = split_heads(attn.to_q(hidden_states), attn.norm_q)
        k = split_heads(attn.to_k(hidden_states), attn.norm_k)
        v = split_heads(attn.to_v(hidden_states))
        joint = encoder_hidden_states is not None and attn.added_kv_proj_dim is not None
        if joint:  # the text stream goes first, as the position ids do
            e = encoder_hidden_states
            q = torch.cat([split_heads(attn.add_q_proj(e), attn.norm_added_q), q], dim=1)
            k = torch.cat([split_heads(attn.add_k_proj(e), attn.norm_added_k), k], dim=1)
            v = torch.cat([split_heads(attn.add_v_proj(e)), v], dim=1)
        if image_rotary_emb is not None:
            q = apply_rotary_emb(q, image_rotary_emb, sequence_dim=1)
            k = apply_rotary_emb(k, image_rotary_emb, sequence_dim=1)
        o = self.attn_fn(q, k, v).flatten(2, 3).to(q.dtype)
        if not joint:
            return o
        n_text = encoder_hidden_states.shape[1]
        text, image = o[:, :n_text], o[:, n_text:]
        image = attn.to_out[1](attn.to_out[0](image.contiguous()))
        return image, attn.to_add_out(text.contiguous())


def sdpa_bshd(q, k, v):
    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)


def build_model(layers, single_layers, device, dtype, heads=24, head_dim=128, rope=(16, 56, 56),
                joint_dim=4096, pooled_dim=768):
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(0)
    with torch.device(device):
        model = FluxTransformer2DModel(num_layers=layers, num_single_layers=single_layers,
                                       attention_head_dim=head_dim, num_attention_heads=heads,
                                       joint_attention_dim=joint_dim, pooled_projection_dim=pooled_dim,
                                       axes_dims_rope=rope)
    return model.to(dtype).eval()


def make_inputs(n_img, n_txt, side, device, dtype, joint_dim=4096, pooled_dim=768, seed=1):
    g = torch.Generator(device=device).manual_seed(seed)
    ids = torch.zeros(n_img, 3, device=device)
    ids[:, 1] = torch.arange(n_img, device=device) // side
    ids[:, 2] = torch.arange(n_img, device=device) % side
    return dict(
        hidden_states=torch.randn(1, n_img, LATENT_CHANNELS, generator=g, device=device).to(dtype),
        encoder_hidden_states=torch.randn(1, n_txt, joint_dim, generator=g, device=device).to(dtype),
        pooled_projections=torch.randn(1, pooled_dim, generator=g, device=device).to(dtype),
        timestep=torch.full((1,), 0.5, device=device, dtype=dtype),
        img_ids=ids,
        txt_ids=torch.zeros(n_txt, 3, device=device),
    )


def shard_inputs(inputs, P, rank):
    """Every rank's torch.chunk of the image and text tokens and their ids."""
    def part(t, dim):
        chunks = t.chunk(P, dim=dim)
        return chunks[rank] if rank < len(chunks) else t.narrow(dim, 0, 0)
    out = dict(inputs)
    for name, dim in (("hidden_states", 1), ("encoder_hidden_states", 1), ("img_ids", 0), ("txt_ids", 0)):
        out[name] = part(inputs[name], dim)
    return out


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def selftest():
    """CPU, fp32, a small Flux: the processor (with torch SDPA) against
    diffusers' own processor; under torchrun also the sequence-parallel model
    (gloo, sequential Ulysses on SDPA) against the whole model in one process.
    Exits non-zero on a mismatch."""
    model = build_model(1, 2, "cpu", torch.float32, heads=4, head_dim=64, rope=(8, 28, 28), joint_dim=64,
                        pooled_dim=32)
    inputs = make_inputs(64, 16, 8, "cpu", torch.float32, joint_dim=64, pooled_dim=32)
    with torch.no_grad():
        want = model(**inputs).sample
        model.set_attn_processor(UlyssesFluxProcessor(sdpa_bshd))
        errs = {"processor vs diffusers' FluxAttnProcessor": rel(model(**inputs).sample, want)}
        if "WORLD_SIZE" in os.environ:
            from xstage.reference import ulysses_sdpa
            dist.init_process_group("gloo")
            group, P = dist.group.WORLD, dist.get_world_size()
            model.set_attn_processor(UlyssesFluxProcessor(lambda q, k, v: ulysses_sdpa(q, k, v, group, seq_len=80)))
            got = gather_rows(model(**shard_inputs(inputs, P, dist.get_rank())).sample, group)
            errs[f"sequence-parallel over {P} processes vs one"] = rel(got, want)
            dist.destroy_process_group()
    for what, err in errs.items():
        print(f"selftest: {what}: rel err {err:.2e}")
    sys.exit(0 if all(e < 1e-5 for e in errs.values()) else 1)


def sm_clock(index):
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetClockInfo(pynvml.nvmlDeviceGetHandleByIndex(index), pynvml.NVML_CLOCK_SM)
    except Exception:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-i",
                                  str(index)], capture_output=True, text=True, timeout=10).stdout
            return int(out.strip().splitlines()[0])
        except Exception:
            return None


def variants(group, seq_len):
    import xstage
    from xstage.reference import ulysses_sdpa
    from torch.nn.attention import SDPBackend, sdpa_kernel

    fused = xstage.UlyssesAttention(group)
    seq = xstage.UlyssesAttention(group, fused=False)

    def cudnn(q, k, v):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return ulysses_sdpa(q, k, v, group, seq_len=seq_len)

    return {
        "sdpa": lambda q, k, v: ulysses_sdpa(q, k, v, group, seq_len=seq_len),
        "sdpa-cudnn": cudnn,
        "xstage-seq": lambda q, k, v: seq(q, k, v, seq_len=seq_len),
        "xstage-fused": lambda q, k, v: fused(q, k, v, seq_len=seq_len),
    }, fused


def gather_rows(x, group, dim=1):
    """The ranks' shards of x along dim, concatenated (shards may differ in size)."""
    P = dist.get_world_size(group)
    sizes = [torch.zeros(1, dtype=torch.int64, device=x.device) for _ in range(P)]
    dist.all_gather(sizes, torch.tensor([x.shape[dim]], device=x.device), group=group)
    sizes = [int(s) for s in sizes]
    pad = list(x.shape)
    pad[dim] = max(sizes)
    buf = x.new_zeros(pad)
    buf.narrow(dim, 0, x.shape[dim]).copy_(x)
    parts = [torch.empty_like(buf) for _ in range(P)]
    dist.all_gather(parts, buf, group=group)
    return torch.cat([p.narrow(dim, 0, n) for p, n in zip(parts, sizes)], dim=dim)


def run_size(model, px, args, group, device):
    P, rank = dist.get_world_size(group), dist.get_rank(group)
    n_img, n_txt = image_tokens(px), TEXT_TOKENS
    full = make_inputs(n_img, n_txt, px // 16, device, torch.bfloat16)
    local = shard_inputs(full, P, rank)
    seq_len = n_img + n_txt
    fns, fused = variants(group, seq_len)
    procs = {name: UlyssesFluxProcessor(fn) for name, fn in fns.items()}
    names = list(procs)

    def step(name):
        model.set_attn_processor(procs[name])
        return model(**local).sample

    outs, unavailable = {}, {}
    with torch.no_grad():
        for name in list(names):
            try:
                outs[name] = gather_rows(step(name), group)
            except RuntimeError as e:  # e.g. no cuDNN attention for a shape: every rank stops at the same point
                unavailable[name] = str(e).splitlines()[0]
                names.remove(name)
        fused.check_timeouts()
        one_gpu = None
        if rank == 0:  # one GPU, the whole sequence, diffusers' own processor
            from diffusers.models.transformers.transformer_flux import FluxAttnProcessor
            model.set_attn_processor(FluxAttnProcessor())
            one_gpu = model(**full).sample
    accuracy = {name: rel(outs[name], outs["sdpa"]) for name in names if name != "sdpa"}
    if rank == 0:
        accuracy["sdpa-vs-one-gpu"] = rel(outs["sdpa"], one_gpu)
        accuracy["xstage-fused-vs-one-gpu"] = rel(outs["xstage-fused"], one_gpu)
    floor = max(accuracy.get("sdpa-cudnn", 0.0), 1e-3)  # two torch backends differ by this much
    ok = all(accuracy[n] <= max(3 * floor, 1e-2) for n in ("xstage-seq", "xstage-fused"))
    fused_equals_seq = bool(torch.equal(outs["xstage-fused"], outs["xstage-seq"]))  # one kernel, two exchanges

    times = {name: [] for name in names}
    clocks = []
    with torch.no_grad():
        for name in names:  # warm-up
            for _ in range(args.warmup):
                step(name)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                dist.barrier(group)
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                step(name)
                end.record()
                torch.cuda.synchronize()
                ms = torch.tensor([start.elapsed_time(end)], device=device)
                dist.all_reduce(ms, op=dist.ReduceOp.MAX, group=group)
                times[name].append(float(ms))
            clocks.append(sm_clock(torch.cuda.current_device()))
        fused.check_timeouts()
    med = {name: statistics.median(t) for name, t in times.items()}
    paired = {name: statistics.median(b / a for a, b in zip(times[name], times["sdpa"])) for name in names}
    return {
        "image_px": px, "image_tokens": n_img, "text_tokens": n_txt, "tokens": seq_len,
        "tokens_per_rank": [len(c) for c in torch.arange(n_img).chunk(P)],
        "accuracy_rel_l2": accuracy, "accuracy_ok": ok, "fused_equals_seq": fused_equals_seq,
        "unavailable": unavailable,
        "step_ms": times, "median_ms": med, "speedup_vs_sdpa_paired_median": paired,
        "sm_clock_mhz_after_round": clocks,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1024,2048", help="image sizes in pixels (square)")
    ap.add_argument("--layers", type=int, default=2, help="double-stream blocks (FLUX.1 has 19)")
    ap.add_argument("--single-layers", type=int, default=4, help="single-stream blocks (FLUX.1 has 38)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--commit", default=None)
    ap.add_argument("--out", default=None, help="results JSON (rank 0 writes it)")
    ap.add_argument("--selftest", action="store_true", help="CPU check of the processor, then exit")
    args = ap.parse_args()
    if args.selftest:
        selftest()

    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", device_id=device)
    group = dist.group.WORLD
    P, rank = dist.get_world_size(), dist.get_rank()
    t0 = time.time()
    model = build_model(args.layers, args.single_layers, device, torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():  # the same weights everywhere, whatever each GPU's RNG did
            dist.broadcast(p, 0, group=group)
    results = []
    for px in (int(s) for s in args.sizes.split(",")):
        res = run_size(model, px, args, group, device)
        results.append(res)
        if rank == 0:
            med, acc = res["median_ms"], res["accuracy_rel_l2"]
            print(f"{px}^2 ({res['tokens']} tokens, P = {P}): " + ", ".join(f"{n} {m:.2f} ms" for n, m in med.items())
                  + f"; fused vs sdpa {res['speedup_vs_sdpa_paired_median']['xstage-fused']:.3f}x (paired median)"
                  + f"; rel err vs sdpa: fused {acc['xstage-fused']:.1e}, cudnn {acc.get('sdpa-cudnn', float('nan')):.1e}"
                  + f" {'ok' if res['accuracy_ok'] else 'MISMATCH'}", flush=True)
    if rank == 0:
        import diffusers
        import xstage
        props = torch.cuda.get_device_properties(device)
        try:
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=10).stdout.split()[0]
        except Exception:
            driver = None
        doc = {
            "bench": "dit_ulysses", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "commit": args.commit, "command": " ".join(sys.argv), "ranks": P,
            "device": props.name, "driver": driver, "torch": torch.__version__, "cuda": torch.version.cuda,
            "diffusers": diffusers.__version__, "xstage": xstage.__version__,
            "model": {"class": "FluxTransformer2DModel", "layers": args.layers, "single_layers": args.single_layers,
                      "heads": 24, "head_dim": 128, "weights": "random (seed 0), from the config"},
            "rounds": args.rounds, "warmup": args.warmup, "seconds": round(time.time() - t0, 1),
            "sizes": results,
        }
        if args.out:
            with open(args.out, "w") as f:
                json.dump(doc, f, indent=1)
    ok = all(r["accuracy_ok"] for r in results)
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
