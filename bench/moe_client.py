#!/usr/bin/env python3
"""Real clients of xstage.MoE (issue 40, "A real client"): models whose routed
experts xstage.replace_moe_experts swaps for xstage.MoE, at full width with
random weights from their configs (no download) and reduced depth, on one GPU:

  hidream   diffusers' HiDreamImageTransformer2DModel as HiDream-I1 (hidden 2560,
            4 routed experts of 6912, top 2 by a bf16 softmax, unnormalised, and
            a shared expert); 2 double-stream + 2 single-stream blocks; a
            1024^2 image: 4096 image tokens (+ 384 text tokens in single blocks)
  qwen3     transformers' Qwen3MoeModel as Qwen3-30B-A3B (hidden 2048, 128
            experts of 768, top 8, fp32 softmax, renormalised); 2 layers, 4096 tokens
  mixtral   transformers' MixtralModel as Mixtral-8x7B (hidden 4096, 8 experts
            of 14336, top 2, fp32 softmax, renormalised); 2 layers, 4096 tokens

Variants of one model (one set of weights; the MoE layers switched by
set_submodule between steps):
  original  the model as built (HiDream: diffusers' moe_infer, a loop over the
            experts with a host sync; transformers: its default experts
            implementation, grouped_mm, recorded in the JSON)
  torch     the swap with xstage.reference.MoETorch: the torch MoE users write
            (argsort, index_select, torch._grouped_mm, SwiGLU, index_add_)
  xstage    the swap with xstage.MoE (replace_moe_experts' default)

Checks, before timing:
- every MoE layer on the input it got in the original model's step, against
  an fp32 reference computed by the model's own code (the original module
  copied to fp32, fed the bf16 router's choice, so all sides route alike):
  xstage's relative L2 error <= max(2 x the original's, 2^-8). Both sides
  round the SwiGLU output and their result to bf16 (8 significant bits) and
  the original also sums the k expert outputs in bf16, so neither is exact;
  twice the model's own error is the repo's bar for a bf16 kernel (the
  attention tests use it against torch's SDPA), and 2^-8, one bf16 ulp
  relative, keeps a lucky original from setting a bar below one rounding.
- the model's output: xstage against original within max(3 x floor, 1e-2),
  floor = max(torch against original, 1e-3) (as bench/dit_ulysses.py: two
  torch implementations of the same layer show how far bf16 rounding alone
  moves the output; in later blocks a routing decision near a tie can flip).
- xstage: every MoE layer gives the same bits twice; no routing error recorded.

Times: one forward step of the model (and one call of its first MoE layer on
its captured input), the variants interleaved round after round with the
order rotated every round, CUDA events, >= 7 rounds after warm-up, the SM
clock read right after each step is launched (moe_vs_torch.sm_clock_now).

    PYTHONPATH=python XSTAGE_LIBRARY=build-dev/libxstage_torch.so \\
        python3 bench/moe_client.py --out moe-client.json [--models hidream,qwen3,mixtral]
    python3 bench/moe_client.py --selftest   # CPU: the swap's mapping, xstage.reference.MoETorch standing in
"""
import argparse
import copy
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import xstage  # noqa: E402
from xstage.reference import MoETorch  # noqa: E402

BF16 = torch.bfloat16
VARIANTS = ("original", "torch", "xstage")
MIN_ROUNDS = 7


# --- models ------------------------------------------------------------------------------------
def hidream(device, small=False, layers=2, single_layers=2, px=1024, seed=0):
    """HiDream-I1's transformer (its config: 20 heads of 128, T5 and Llama-3 captions of 4096 channels,
    rope axes 64/32/32) with `layers` + `single_layers` blocks; inputs of a px^2 image (16 latent channels,
    8x VAE, 2x2 patches) and 128 T5 + 128 Llama tokens. small: a CPU-sized model of the same structure."""
    from diffusers import HiDreamImageTransformer2DModel

    heads, head_dim, caption, text_emb, rope, latent, txt = 20, 128, 4096, 2048, (64, 32, 32), 16, 128
    if small:
        heads, head_dim, caption, text_emb, rope, latent, txt = 2, 64, 64, 32, (32, 16, 16), 4, 8
    n = layers + single_layers
    torch.manual_seed(seed)
    with torch.device(device):
        model = HiDreamImageTransformer2DModel(
            patch_size=2, in_channels=latent, out_channels=latent, num_layers=layers, num_single_layers=single_layers,
            attention_head_dim=head_dim, num_attention_heads=heads, caption_channels=[caption, caption],
            text_emb_dim=text_emb, num_routed_experts=4, num_activated_experts=2, axes_dims_rope=rope,
            max_resolution=(128, 128), llama_layers=list(range(n)))
    model = model.to(BF16).eval()
    side = px // 8
    g = torch.Generator(device=device).manual_seed(seed + 1)
    rnd = lambda *s: torch.randn(*s, generator=g, device=device).to(BF16)  # noqa: E731
    inputs = dict(hidden_states=rnd(1, latent, side, side), timesteps=torch.tensor([500.0], device=device),
                  encoder_hidden_states_t5=rnd(1, txt, caption), encoder_hidden_states_llama3=rnd(n, 1, txt, caption),
                  pooled_embeds=rnd(1, text_emb))
    info = {"class": "HiDreamImageTransformer2DModel", "as": "HiDream-I1" if not small else "HiDream-I1 (small)",
            "double_stream_blocks": layers, "single_stream_blocks": single_layers, "heads": heads,
            "head_dim": head_dim, "routed_experts": 4, "top_k": 2, "image_px": px,
            "image_tokens": (side // 2) ** 2, "text_tokens": 3 * txt}
    return model, inputs, lambda m: m(**inputs).sample, info


LLMS = {  # name: (config class, model class, full-width config, small config)
    "qwen3": ("Qwen3MoeConfig", "Qwen3MoeModel", "Qwen3-30B-A3B",
              dict(hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768, num_experts=128,
                   num_experts_per_tok=8, norm_topk_prob=True, num_attention_heads=32, num_key_value_heads=4,
                   head_dim=128, vocab_size=151936, rope_theta=1e6, rms_norm_eps=1e-6),
              dict(hidden_size=128, intermediate_size=256, moe_intermediate_size=64, num_experts=8,
                   num_experts_per_tok=4, norm_topk_prob=True, num_attention_heads=4, num_key_value_heads=2,
                   head_dim=32, vocab_size=128)),
    "mixtral": ("MixtralConfig", "MixtralModel", "Mixtral-8x7B",
                dict(hidden_size=4096, intermediate_size=14336, num_local_experts=8, num_experts_per_tok=2,
                     num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, rope_theta=1e6,
                     rms_norm_eps=1e-5, router_jitter_noise=0.0),
                dict(hidden_size=128, intermediate_size=128, num_local_experts=8, num_experts_per_tok=2,
                     num_attention_heads=4, num_key_value_heads=2, vocab_size=128, router_jitter_noise=0.0)),
}


def llm(name, device, small=False, layers=2, tokens=4096, seed=0):
    import transformers

    cfg_cls, model_cls, real, full, tiny = LLMS[name]
    kw = dict(tiny if small else full, num_hidden_layers=layers)
    config = getattr(transformers, cfg_cls)(**kw)
    torch.manual_seed(seed)
    with torch.device(device):
        model = getattr(transformers, model_cls)(config)
    model = model.to(BF16).eval()
    g = torch.Generator(device=device).manual_seed(seed + 1)
    ids = torch.randint(0, config.vocab_size, (1, tokens), generator=g, device=device)
    info = {"class": model_cls, "as": real if not small else f"{real} (small)", "layers": layers, "tokens": tokens,
            "config": kw, "experts_implementation": model.config._experts_implementation,
            "attn_implementation": model.config._attn_implementation}
    return model, {"input_ids": ids}, lambda m: m(input_ids=ids, use_cache=False).last_hidden_state, info


def build(name, device, args, small=False):
    if name == "hidream":
        return hidream(device, small, args.hidream_layers, args.hidream_single_layers, 128 if small else args.px)
    return llm(name, device, small, args.llm_layers, 48 if small else args.tokens)


# --- checks ------------------------------------------------------------------------------------
def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def fp32_reference(orig, args):
    """The MoE layer `orig` (taken out of the model) on its captured input, in fp32 by the model's own code,
    routed as the bf16 router routes (so the reference and both bf16 sides pick the same experts)."""
    m32 = copy.deepcopy(orig).float()
    if type(orig).__name__ == "MOEFeedForwardSwiGLU":  # diffusers' HiDream: gate, moe_infer, shared experts
        (x,) = args
        ids, weights, _ = orig.gate(x)
        x32 = x.float()
        y = m32.moe_infer(x32.reshape(-1, x.shape[-1]), ids.reshape(-1), weights.float().reshape(-1, 1))
        out = y.view(x.shape) + m32.shared_experts(x32)
    else:  # transformers' experts module: its eager loop (the undecorated forward), fp32
        x, ids, weights = args
        out = type(orig).forward.__wrapped__(m32, x.float(), ids, weights.float())
    del m32
    return out


class Variants:
    """One model, its MoE layers switchable between the original modules and the swaps."""

    def __init__(self, model, make):  # make: {variant: make_experts or None (xstage.MoE)}
        self.model, self.mods = model, {}
        for variant, fn in make.items():
            taken = xstage.replace_moe_experts(model, make_experts=fn) if fn is not None else \
                xstage.replace_moe_experts(model)
            self.mods.setdefault("original", taken)
            self.mods[variant] = {n: model.get_submodule(n) for n in taken}
            self.use("original")
        self.names = list(self.mods["original"])

    def use(self, variant):
        for n, m in self.mods[variant].items():
            self.model.set_submodule(n, m)


def capture_inputs(var, step):
    """Runs the original model once; returns its output and each MoE layer's input."""
    got, hooks = {}, []
    for n, m in var.mods["original"].items():
        hooks.append(m.register_forward_pre_hook(lambda mod, a, n=n: got.setdefault(n, tuple(t.clone() for t in a))))
    var.use("original")
    try:
        out = step(var.model)
    finally:
        for h in hooks:
            h.remove()
    return out, got


def check(var, step, sides):
    """Layer and model checks of the variants in `sides` (each against the original); see the docstring."""
    with torch.no_grad():
        outs = {}
        outs["original"], inputs = capture_inputs(var, step)
        for v in sides:
            var.use(v)
            outs[v] = step(var.model)
        layers = {}
        for n in var.names:
            ref = fp32_reference(var.mods["original"][n], inputs[n])
            errs = {v: rel(var.mods[v][n](*inputs[n]), ref) for v in ("original",) + tuple(sides)}
            bar = max(2 * errs["original"], 2.0 ** -8)
            layers[n] = {"rel_l2_vs_fp32": errs, "bar": bar, "ok": all(errs[v] <= bar for v in sides)}
            del ref
    floor = max(rel(outs["torch"], outs["original"]), 1e-3) if "torch" in outs else 1e-3
    model = {"rel_l2_vs_original": {v: rel(outs[v], outs["original"]) for v in sides}, "floor": floor,
             "bar": max(3 * floor, 1e-2)}
    model["ok"] = all(model["rel_l2_vs_original"][v] <= model["bar"] for v in sides)
    finite = all(bool(torch.isfinite(o).all()) for o in outs.values())
    return {"layers": layers, "model": model, "finite": finite,
            "ok": finite and model["ok"] and all(r["ok"] for r in layers.values())}, outs, inputs


# --- timing ------------------------------------------------------------------------------------
def timed_rounds(fns, rounds, warmup):
    """fns: {variant: callable}; one call each a round, order rotated each round; ms and SM clock per call."""
    from moe_vs_torch import sm_clock_now

    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    torch.cuda.synchronize()
    times = {n: [] for n in names}
    clocks = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            fns[name]()
            end.record()
            clocks[name].append(sm_clock_now())  # while the step runs (the host is ahead of the GPU)
            end.synchronize()
            times[name].append(start.elapsed_time(end))
    med = {n: statistics.median(t) for n, t in times.items()}
    speedup = {n: {"ratio_of_medians": med[n] / med["xstage"],
                   "paired_median": statistics.median(a / b for a, b in zip(times[n], times["xstage"]))}
               for n in names if n != "xstage"}
    return {"ms": times, "median_ms": med, "speedup_of_xstage_vs": speedup, "sm_clock_mhz": clocks}


def weight_sharing(var):
    """Bytes the xstage swap holds, and how many of them are the original tensors (shared, not copied)."""
    held = shared = 0
    for n in var.names:
        orig, moe = var.mods["original"][n], var.mods["xstage"][n]
        moe = getattr(moe, "experts", moe)  # HiDreamMoE holds the MoE as .experts
        ptrs = {p.data_ptr() for p in orig.parameters()}
        for b in (moe.w13, moe.w2):
            held += b.numel() * b.element_size()
            shared += b.numel() * b.element_size() if b.data_ptr() in ptrs else 0
    return {"xstage_bytes": held, "shared_with_original_bytes": shared}


def run_model(name, args, device):
    t0 = time.time()
    model, _, step, info = build(name, device, args)
    var = Variants(model, {"torch": MoETorch, "xstage": None})
    res, outs, inputs = check(var, step, ("torch", "xstage"))
    with torch.no_grad():
        res["xstage_same_bits"] = all(bool(torch.equal(var.mods["xstage"][n](*inputs[n]),
                                                       var.mods["xstage"][n](*inputs[n]))) for n in var.names)
        res["routing_error"] = xstage.moe_routing_error()
        res["ok"] = res["ok"] and res["xstage_same_bits"] and res["routing_error"] is None

        def stepper(v):
            def f():
                var.use(v)
                step(model)
            return f

        first = var.names[0]
        layer = {v: (lambda v=v: var.mods[v][first](*inputs[first])) for v in VARIANTS}
        steps = timed_rounds({v: stepper(v) for v in VARIANTS}, args.rounds, args.warmup)
        layer_t = timed_rounds(layer, args.rounds, args.warmup)
    var.use("original")
    doc = {"model": name, **info, "moe_layers": var.names, "weights": weight_sharing(var), **res,
           "step": steps, "first_moe_layer": dict(layer_t, name=first),
           "max_memory_allocated_gib": torch.cuda.max_memory_allocated(device) / 2 ** 30,
           "seconds": round(time.time() - t0, 1)}
    del var, model, outs, inputs
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    return doc


# --- CPU self-test -----------------------------------------------------------------------------
def selftest(args):
    """CPU, small models of the same structure in bf16: the swap with xstage.reference.MoETorch standing in
    for xstage.MoE (which needs a GPU), checked as the GPU run checks xstage; a wrong mapping (gate and up
    exchanged) must fail the layer check; the default swap's xstage.MoE buffers hold the model's weights
    (W13 interleaved; transformers' down_proj the same storage). Exits non-zero on a failure."""
    from xstage import moe_interleave_w13

    def exchanged(w13, w2):
        I = w13.shape[1] // 2
        return MoETorch(torch.cat([w13[:, I:], w13[:, :I]], dim=1), w2)

    failures, ran = [], 0
    for name in args.models.split(","):
        try:
            model, _, step, info = build(name, "cpu", args, small=True)
        except ImportError as e:
            print(f"selftest: {name}: skipped ({e})")
            continue
        ran += 1
        var = Variants(model, {"torch": MoETorch, "wrong": exchanged, "xstage": None})
        res, _, _ = check(var, step, ("torch",))
        wrong, _, _ = check(var, step, ("wrong",))
        for n in var.names:
            errs = res["layers"][n]["rel_l2_vs_fp32"]
            print(f"selftest: {name}: {n}: rel err vs fp32: original {errs['original']:.2e}, torch swap "
                  f"{errs['torch']:.2e} (bar {res['layers'][n]['bar']:.2e}); gate/up exchanged "
                  f"{wrong['layers'][n]['rel_l2_vs_fp32']['wrong']:.2e}")
        print(f"selftest: {name}: model output, torch swap vs original: rel err "
              f"{res['model']['rel_l2_vs_original']['torch']:.2e}")
        if not res["ok"]:
            failures.append(f"{name}: the swap with MoETorch does not match the original")
        if any(r["ok"] for r in wrong["layers"].values()):
            failures.append(f"{name}: the layer check passed a swap with gate and up exchanged")
        w = weight_sharing(var)
        for n in var.names:  # the default swap's buffers
            orig, moe = var.mods["original"][n], var.mods["xstage"][n]
            moe = getattr(moe, "experts", moe)
            plain = var.mods["torch"][n]
            plain = getattr(plain, "experts", plain)
            if not (torch.equal(moe.w13, moe_interleave_w13(plain.w13)) and torch.equal(moe.w2, plain.w2)):
                failures.append(f"{name}: {n}: xstage.MoE's w13/w2 are not the mapped weights")
            if hasattr(orig, "down_proj") and moe.w2.data_ptr() != orig.down_proj.data_ptr():
                failures.append(f"{name}: {n}: xstage.MoE's w2 is a copy of down_proj: expected the same storage")
        print(f"selftest: {name}: xstage swap holds {w['xstage_bytes']} bytes, "
              f"{w['shared_with_original_bytes']} of them the model's own")
    for f in failures:
        print(f"selftest: FAILED: {f}")
    if not ran:
        print("selftest: nothing ran (neither diffusers nor transformers is installed)")
    return 1 if failures else 0


# --- main --------------------------------------------------------------------------------------
def versions():
    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "xstage": xstage.__version__}
    for pkg in ("diffusers", "transformers"):
        try:
            out[pkg] = __import__(pkg).__version__
        except ImportError:
            out[pkg] = None
    return out


def git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip() or None
    except Exception:
        return None


def gpu():
    if not torch.cuda.is_available():
        sys.exit("bench/moe_client.py: no CUDA device: expected one GPU (--selftest runs on the CPU)")
    return torch.device("cuda", torch.cuda.current_device())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="hidream,qwen3,mixtral", help=f"of {', '.join(['hidream'] + list(LLMS))}")
    ap.add_argument("--px", type=int, default=1024, help="HiDream: image side in pixels (a multiple of 16)")
    ap.add_argument("--hidream-layers", type=int, default=2, help="double-stream blocks (HiDream-I1 has 16)")
    ap.add_argument("--hidream-single-layers", type=int, default=2, help="single-stream blocks (HiDream-I1 has 32)")
    ap.add_argument("--tokens", type=int, default=4096, help="LLMs: tokens of the prefill step (batch 1)")
    ap.add_argument("--llm-layers", type=int, default=2, help="LLMs: decoder layers")
    ap.add_argument("--rounds", type=int, default=9, help=f"timed rounds (at least {MIN_ROUNDS})")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--commit", default=None, help="the commit measured (default: git rev-parse HEAD, if any)")
    ap.add_argument("--out", default=None, help="results JSON")
    ap.add_argument("--selftest", action="store_true", help="CPU check of the swap's mapping, then exit")
    args = ap.parse_args()
    known = ["hidream"] + list(LLMS)
    bad = [m for m in args.models.split(",") if m not in known]
    if bad:
        ap.error(f"--models: {', '.join(bad)}: expected names of {', '.join(known)}")
    if args.selftest:
        sys.exit(selftest(args))
    if args.rounds < MIN_ROUNDS:
        ap.error(f"--rounds = {args.rounds}: expected at least {MIN_ROUNDS}")
    if args.px % 16 or args.px < 16:
        ap.error(f"--px = {args.px}: expected a positive multiple of 16 (8x VAE, 2x2 patches)")
    device = gpu()
    t0 = time.time()
    results = []
    for name in args.models.split(","):
        r = run_model(name, args, device)
        results.append(r)
        med, sp = r["step"]["median_ms"], r["step"]["speedup_of_xstage_vs"]
        lay = r["first_moe_layer"]["speedup_of_xstage_vs"]
        print(f"{name} ({r['as']}): step " + ", ".join(f"{v} {med[v]:.2f} ms" for v in VARIANTS)
              + f"; xstage vs original {sp['original']['paired_median']:.3f}x, vs torch "
              f"{sp['torch']['paired_median']:.3f}x (paired medians); one MoE layer: vs original "
              f"{lay['original']['paired_median']:.3f}x, vs torch {lay['torch']['paired_median']:.3f}x; model rel err "
              f"{r['model']['rel_l2_vs_original']['xstage']:.1e} (bar {r['model']['bar']:.1e}) "
              f"{'ok' if r['ok'] else 'MISMATCH'}", flush=True)
    try:
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", str(device.index)]
        driver = subprocess.run(query, capture_output=True, text=True, timeout=10).stdout.split()[0]
    except Exception:
        driver = None
    doc = {"bench": "moe_client", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
           "commit": args.commit or git_commit(), "command": " ".join([sys.executable] + sys.argv),
           "device": torch.cuda.get_device_name(device), "driver": driver, **versions(),
           "rounds": args.rounds, "warmup": args.warmup, "seconds": round(time.time() - t0, 1), "models": results}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
    sys.exit(0 if all(r["ok"] for r in results) else 1)


if __name__ == "__main__":
    main()
