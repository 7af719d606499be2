"""A model's routed experts replaced by xstage.MoE (docs/design/python.md,
"A model's experts swapped"): the model's router (gate, softmax, top-k,
normalisation) and shared experts stay the model's own modules; only the
computation of the routed experts changes.

    replaced = xstage.replace_moe_experts(model)   # in place; {name: the module taken out}

Two families are known:

- diffusers' HiDreamImageTransformer2DModel: each MOEFeedForwardSwiGLU (the
  feed-forward of every block's image stream) becomes a HiDreamMoE holding
  the block's own MoEGate and shared expert and an xstage.MoE over the routed
  experts (each a SwiGLU of w1 (gate), w3 (up) and w2 (down), nn.Linear
  without bias).
- transformers 5's experts modules (classes decorated with
  @use_experts_implementation, e.g. Qwen3MoeExperts inside
  Qwen3MoeSparseMoeBlock, MixtralExperts inside MixtralSparseMoeBlock): the
  module itself is replaced by an xstage.MoE, which has its call signature
  (hidden_states [T, H], top_k_index [T, k], top_k_weights [T, k]) -> [T, H];
  the sparse block around it (its router included) is untouched. Accepted
  when the layout is the interface's default: gate_up_proj [E, 2I, H] with the
  gate rows first (is_concatenated), down_proj [E, H, I] (not transposed), no
  bias, the default gate (act_fn(gate) * up) and act_fn SiLU; anything else is
  refused with the reason.

Weights: xstage.MoE keeps W13 interleaved (moe_interleave_w13), so gate and up
are copied once, at the swap. down_proj (transformers) is shared, not copied,
when it is bf16 and contiguous (MoE keeps it as it is); diffusers' per-expert
down projections are stacked into one [E, H, I] tensor, a copy. The modules
taken out are returned and otherwise no longer referenced by the model: drop
the returned dict and their memory is freed (with the shared down_proj kept
alive by the MoE). The swapped model's state_dict names the experts' buffers
w13 and w2: swap after loading the weights.

Inference only (xstage.MoE has no backward); HiDream's MOEFeedForwardSwiGLU
in training mode takes another path (repeat_interleave, auxiliary loss) that
the swap does not reproduce: HiDreamMoE always computes the inference path.
"""
import torch
import torch.nn.functional as F
from torch import nn

OP = "xstage.replace_moe_experts"
HIDREAM_MOE = "MOEFeedForwardSwiGLU"  # diffusers/models/transformers/transformer_hidream_image.py


class HiDreamMoE(nn.Module):
    """diffusers' MOEFeedForwardSwiGLU with its routed experts computed by
    `experts` (an xstage.MoE, or anything called as experts(x [T, H],
    topk_ids [T, k], topk_weights [T, k]) -> [T, H]). gate and shared_experts
    are the original block's modules (the same objects): forward(x [B, S, H])
    = experts(x, *gate(x)[:2]) + shared_experts(x), as the block's inference
    path computes it."""

    def __init__(self, gate, shared_experts, experts):
        super().__init__()
        self.gate, self.shared_experts, self.experts = gate, shared_experts, experts

    def forward(self, x):
        topk_ids, topk_weights, _ = self.gate(x)  # [B S, k] int64, [B S, k] in the gate's dtype
        y = self.experts(x.reshape(-1, x.shape[-1]), topk_ids, topk_weights).view(x.shape)
        return y + self.shared_experts(x)


def _linear_weight(name, lin):
    if not isinstance(lin, nn.Linear):
        raise ValueError(f"{OP}: {name}: expected an nn.Linear, got {type(lin).__name__}")
    if lin.bias is not None:
        raise ValueError(f"{OP}: {name}: expected an nn.Linear without bias (xstage.MoE has none), got one with")
    return lin.weight


def _hidream_weights(name, m):
    """({parameter name: tensor}, (E, 2I, H)) of a MOEFeedForwardSwiGLU's routed experts, after checking them."""
    for attr in ("gate", "experts", "shared_experts"):
        if not isinstance(getattr(m, attr, None), nn.Module):
            raise ValueError(f"{OP}: {name}.{attr}: expected a module (diffusers' {HIDREAM_MOE} has one), got "
                             f"{type(getattr(m, attr, None)).__name__}")
    if not isinstance(m.experts, nn.ModuleList) or len(m.experts) == 0:
        raise ValueError(f"{OP}: {name}.experts: expected a non-empty nn.ModuleList of experts, got "
                         f"{type(m.experts).__name__}")
    k, E = getattr(m.gate, "top_k", None), len(m.experts)
    if not isinstance(k, int) or not 1 <= k <= E:
        raise ValueError(f"{OP}: {name}.gate.top_k = {k!r}: expected an int in 1 .. {E} (the routed experts)")
    params = {}
    for e, ex in enumerate(m.experts):
        for attr in ("w1", "w3", "w2"):  # gate, up, down: forward = w2(silu(w1(x)) * w3(x))
            params[f"{name}.experts.{e}.{attr}.weight"] = _linear_weight(f"{name}.experts.{e}.{attr}",
                                                                         getattr(ex, attr, None))
    g0 = m.experts[0].w1.weight
    I, H = g0.shape
    for pname, p in params.items():
        want = (H, I) if pname.endswith(".w2.weight") else (I, H)
        if tuple(p.shape) != want:
            raise ValueError(f"{OP}: {pname}: expected shape {want} (from {name}.experts.0.w1.weight {(I, H)}), got "
                             f"{tuple(p.shape)}")
    return params, (E, 2 * I, H)


def _hidream_stack(m):
    """(w13 [E, 2I, H], w2 [E, H, I]) of a checked MOEFeedForwardSwiGLU: new tensors (stacked copies)."""
    w13 = torch.stack([torch.cat([ex.w1.weight, ex.w3.weight]) for ex in m.experts])
    return w13, torch.stack([ex.w2.weight for ex in m.experts])


def _is_hidream(m):
    return type(m).__name__ == HIDREAM_MOE and type(m).__module__.startswith("diffusers.")


def _is_transformers_experts(m):
    return (type(m).__module__.startswith("transformers.")
            and isinstance(getattr(m, "gate_up_proj", None), torch.Tensor)
            and isinstance(getattr(m, "down_proj", None), torch.Tensor))


def _transformers_weights(name, m):
    """({parameter name: tensor}, (E, 2I, H)) of a transformers experts module, after checking its layout."""
    cls = type(m).__name__
    want = {"has_gate": True, "has_bias": False, "is_transposed": False, "is_concatenated": True}
    for attr, value in want.items():
        got = getattr(m, attr, "missing")
        if got is not value:
            raise ValueError(f"{OP}: {name} ({cls}): {attr} = {got}: expected {value} (a @use_experts_implementation "
                             "class with gate_up_proj [E, 2I, H] gate rows first, down_proj [E, H, I], no bias)")
    from transformers.integrations import moe as hf_moe
    default_gate = getattr(hf_moe, "_default_apply_gate", None)
    if getattr(type(m), "_apply_gate", None) is not default_gate:
        raise ValueError(f"{OP}: {name} ({cls}): a custom _apply_gate: expected transformers' default "
                         "act_fn(gate) * up (xstage.MoE computes silu(gate) * up)")
    probe = torch.linspace(-8, 8, 257)
    act = getattr(m, "act_fn", None)
    try:
        silu = callable(act) and torch.allclose(act(probe), F.silu(probe), atol=1e-6)
    except Exception:  # an activation that cannot take a CPU fp32 tensor is no SiLU we know
        silu = False
    if not silu:
        raise ValueError(f"{OP}: {name} ({cls}): act_fn = {act!r}: expected SiLU (xstage.MoE computes silu(gate) * up)")
    w13, w2 = m.gate_up_proj, m.down_proj
    for pname, t in (("gate_up_proj", w13), ("down_proj", w2)):
        if type(t.data).__name__ == "DTensor":
            raise ValueError(f"{OP}: {name}.{pname}: a DTensor (tensor or expert parallel plan): expected a plain "
                             "tensor holding every expert (expert parallelism is the second part of issue 40)")
        if t.dim() != 3:
            raise ValueError(f"{OP}: {name}.{pname}: expected a 3-dimensional tensor, got shape {tuple(t.shape)}")
    E, two_i, H = w13.shape
    if two_i % 2 or tuple(w2.shape) != (E, H, two_i // 2):
        raise ValueError(f"{OP}: {name}.down_proj: expected [E, H, I] = {(E, H, two_i // 2)} from gate_up_proj "
                         f"{tuple(w13.shape)}, got {tuple(w2.shape)}")
    return {f"{name}.gate_up_proj": w13, f"{name}.down_proj": w2}, (E, two_i, H)


def replace_moe_experts(model, *, make_experts=None, tokens_max=None, check_ids=False):
    """Replace, in place, the routed experts of every MoE layer of `model` (or
    of `model` itself when it is a sparse block) by an xstage.MoE; the
    model's routers and shared experts stay as they are. Returns {name: the
    module taken out} in the order of model.named_modules(); the model no
    longer references those modules.

    Known layers (see the module docstring): diffusers' MOEFeedForwardSwiGLU
    (HiDream-I1; replaced by a HiDreamMoE) and transformers 5's experts
    modules (Qwen3MoeExperts, MixtralExperts, ...; replaced by the MoE
    itself). make_experts(w13 [E, 2I, H] gate rows then up rows, w2 [E, H, I])
    builds each replacement's experts module; default xstage.MoE(w13, w2,
    tokens_max=tokens_max, check_ids=check_ids), which needs bf16 weights
    (model.to(torch.bfloat16) first) and computes on the GPU. check_ids
    defaults to False here: the ids come from the model's own torch.topk, so
    they are in range and distinct by construction, and reading them would
    synchronise every call (the device still records a bad pair:
    xstage.moe_routing_error()). xstage.reference.MoETorch is the torch MoE
    users write (torch._grouped_mm), also on the CPU."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"{OP}: model: expected a torch.nn.Module, got {type(model).__name__}")
    default = make_experts is None
    if default:
        from xstage.moe_local import MoE

        def make_experts(w13, w2):
            return MoE(w13, w2, tokens_max=tokens_max, check_ids=check_ids)
    elif not callable(make_experts):
        raise TypeError(f"{OP}: make_experts: expected None or a callable (w13, w2) -> module, got "
                        f"{type(make_experts).__name__}")
    found = [(name, m) for name, m in model.named_modules() if _is_hidream(m) or _is_transformers_experts(m)]
    if not found:
        raise ValueError(f"{OP}: model ({type(model).__name__}): no MoE experts found: expected diffusers' "
                         f"{HIDREAM_MOE} (HiDream-I1) or a transformers 5 experts module with gate_up_proj and "
                         "down_proj (Qwen3-MoE, Mixtral, ...)")
    if found[0][0] == "":
        raise ValueError(f"{OP}: model ({type(model).__name__}) is itself the MoE layer: expected the model or block "
                         "that holds it (the swap replaces a submodule in place)")
    outer = [(name, m) for name, m in found if not any(name.startswith(o + ".") for o, _ in found if o != name)]
    # Every layer is checked before any is swapped: a refusal leaves the model as it was.
    for name, m in outer:
        params, (E, two_i, H) = _hidream_weights(name, m) if _is_hidream(m) else _transformers_weights(name, m)
        if default:
            for pname, p in params.items():
                if p.dtype != torch.bfloat16:
                    raise TypeError(f"{OP}: {pname}: expected dtype torch.bfloat16 (xstage.MoE computes in bf16: "
                                    f"call model.to(torch.bfloat16) first), got {p.dtype}")
            from xstage.moe_local import _check_gemms
            _check_gemms(f"{OP}: {name}", 128, H, two_i, E)  # the GEMMs' size rules (meta tensors)
    # Every replacement is built before any is put in place: a failure while building one (out of memory,
    # a make_experts that returns no module) leaves the model as it was, too.
    built = []
    with torch.no_grad():
        for name, m in outer:
            hidream = _is_hidream(m)
            w13, w2 = _hidream_stack(m) if hidream else (m.gate_up_proj, m.down_proj)
            experts = make_experts(w13, w2)
            del w13, w2  # HiDream's stacked copies: MoE keeps its own interleaved W13
            if not isinstance(experts, nn.Module):
                raise TypeError(f"{OP}: make_experts returned {type(experts).__name__} for {name}: expected an "
                                "nn.Module called as (x, topk_ids, topk_weights)")
            new = HiDreamMoE(m.gate, m.shared_experts, experts) if hidream else experts
            new.train(m.training)
            built.append((name, m, new))
    replaced = {}
    for name, m, new in built:
        model.set_submodule(name, new)
        replaced[name] = m
    return replaced
