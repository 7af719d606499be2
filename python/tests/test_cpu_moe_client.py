"""CPU tests of xstage.replace_moe_experts (run in CI where diffusers or
transformers is installed; each test skips without the package it needs):
the swap of transformers' Qwen3-MoE and Mixtral experts and of diffusers'
HiDream MoE feed-forward, with xstage.reference.MoETorch standing in for
xstage.MoE (which needs a GPU), against the original block and an fp32
reference of it; the default swap's xstage.MoE buffers (W13 interleaved, down
projections shared); every refusal's message; bench/moe_client.py --selftest."""
import argparse
import importlib.util
import pathlib

import pytest
import torch
from torch import nn

import xstage
from xstage.reference import MoETorch

BF16 = torch.bfloat16
ROOT = pathlib.Path(__file__).resolve().parents[2]


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def qwen3_block(E=8, k=4, H=128, I=64, dtype=BF16):
    transformers = pytest.importorskip("transformers")
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock
    config = transformers.Qwen3MoeConfig(hidden_size=H, moe_intermediate_size=I, num_experts=E,
                                         num_experts_per_tok=k, norm_topk_prob=True)
    config._experts_implementation = "eager"
    torch.manual_seed(0)
    block = Qwen3MoeSparseMoeBlock(config)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, 0.05)
    return block.to(dtype).eval()


def mixtral_block(E=8, k=2, H=128, I=128, dtype=BF16):
    transformers = pytest.importorskip("transformers")
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    config = transformers.MixtralConfig(hidden_size=H, intermediate_size=I, num_local_experts=E,
                                        num_experts_per_tok=k, router_jitter_noise=0.0)
    config._experts_implementation = "eager"
    torch.manual_seed(0)
    block = MixtralSparseMoeBlock(config)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, 0.05)
    return block.to(dtype).eval()


def hidream_ff(dim=128, dtype=BF16):
    pytest.importorskip("diffusers")
    from diffusers.models.transformers.transformer_hidream_image import MOEFeedForwardSwiGLU
    torch.manual_seed(0)
    ff = MOEFeedForwardSwiGLU(dim=dim, hidden_dim=4 * dim, num_routed_experts=4, num_activated_experts=2)
    return nn.ModuleDict({"ff_i": ff}).to(dtype).eval()


def experts_fp32(experts, x, ids, weights):
    """A transformers experts module in fp32 by its own eager loop (the undecorated forward)."""
    import copy
    m32 = copy.deepcopy(experts).float()
    return type(experts).forward.__wrapped__(m32, x.float(), ids, weights.float())


@pytest.mark.parametrize("make", [qwen3_block, mixtral_block], ids=["qwen3", "mixtral"])
def test_transformers_block_swapped_matches_the_original(make):
    block = make()
    x = torch.randn(1, 53, block.gate.hidden_dim).to(BF16)
    gate = block.gate
    with torch.no_grad():
        want = block(x)
        _, weights, ids = block.gate(x.view(-1, x.shape[-1]))
        original = block.experts
        ref = experts_fp32(original, x.view(-1, x.shape[-1]), ids, weights).view(x.shape)
        replaced = xstage.replace_moe_experts(block, make_experts=MoETorch)
        got = block(x)
    assert replaced == {"experts": original}
    assert block.gate is gate and isinstance(block.experts, MoETorch)
    assert block.experts.w13.data_ptr() == original.gate_up_proj.data_ptr()  # MoETorch keeps them as given
    bar = max(2 * rel(want, ref), 2.0 ** -8)
    assert rel(got, ref) <= bar, (rel(got, ref), rel(want, ref))
    assert rel(want, ref) < 2e-2  # the reference is the block's own computation


@pytest.mark.parametrize("make", [qwen3_block, mixtral_block], ids=["qwen3", "mixtral"])
def test_default_swap_makes_an_moe_holding_the_models_weights(make):
    block = make()
    original = block.experts
    replaced = xstage.replace_moe_experts(block, tokens_max=4096)
    moe = block.experts
    assert replaced == {"experts": original} and isinstance(moe, xstage.MoE)
    assert moe.tokens_max == 4096 and moe.check_ids is False
    assert torch.equal(moe.w13, xstage.moe_interleave_w13(original.gate_up_proj.detach()))
    assert moe.w2.data_ptr() == original.down_proj.data_ptr()  # shared, not copied
    assert "experts" not in dict(block.named_parameters()) and block.gate.weight is not None


def test_hidream_feed_forward_swapped_matches_the_original():
    holder = hidream_ff()
    ff = holder["ff_i"]
    x = torch.randn(2, 37, 128).to(BF16)
    with torch.no_grad():
        want = ff(x)
        ids, weights, _ = ff.gate(x)
        import copy
        ff32 = copy.deepcopy(ff).float()
        ref = (ff32.moe_infer(x.float().view(-1, 128), ids.view(-1), weights.float().view(-1, 1)).view(x.shape)
               + ff32.shared_experts(x.float()))
        shared_only = ff.shared_experts(x)
        replaced = xstage.replace_moe_experts(holder, make_experts=MoETorch)
        new = holder["ff_i"]
        got = new(x)
    assert replaced == {"ff_i": ff} and isinstance(new, xstage.HiDreamMoE)
    assert new.gate is ff.gate and new.shared_experts is ff.shared_experts
    w13 = torch.stack([torch.cat([e.w1.weight, e.w3.weight]) for e in ff.experts])
    assert torch.equal(new.experts.w13, w13)
    assert torch.equal(new.experts.w2, torch.stack([e.w2.weight for e in ff.experts]))
    bar = max(2 * rel(want, ref), 2.0 ** -8)
    assert rel(got, ref) <= bar, (rel(got, ref), rel(want, ref))
    assert rel(got, shared_only) > 0.1  # the routed experts do contribute


def test_hidream_default_swap_interleaves_w13():
    holder = hidream_ff()
    ff = holder["ff_i"]
    xstage.replace_moe_experts(holder)
    moe = holder["ff_i"].experts
    assert isinstance(moe, xstage.MoE) and moe.num_experts == 4
    w13 = torch.stack([torch.cat([e.w1.weight, e.w3.weight]) for e in ff.experts]).detach()
    assert torch.equal(moe.w13, xstage.moe_interleave_w13(w13))
    assert torch.equal(moe.w2, torch.stack([e.w2.weight for e in ff.experts]))


def test_hidream_whole_model_swap_names_every_moe_layer():
    pytest.importorskip("diffusers")
    from diffusers import HiDreamImageTransformer2DModel
    torch.manual_seed(0)
    model = HiDreamImageTransformer2DModel(
        patch_size=2, in_channels=4, out_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=64,
        num_attention_heads=2, caption_channels=[64, 64], text_emb_dim=32, num_routed_experts=4,
        num_activated_experts=2, axes_dims_rope=(32, 16, 16), max_resolution=(16, 16), llama_layers=[0, 1]
    ).to(BF16).eval()
    g = torch.Generator().manual_seed(1)
    inputs = dict(hidden_states=torch.randn(1, 4, 16, 16, generator=g).to(BF16), timesteps=torch.tensor([500.0]),
                  encoder_hidden_states_t5=torch.randn(1, 8, 64, generator=g).to(BF16),
                  encoder_hidden_states_llama3=torch.randn(2, 1, 8, 64, generator=g).to(BF16),
                  pooled_embeds=torch.randn(1, 32, generator=g).to(BF16))
    with torch.no_grad():
        want = model(**inputs).sample
        replaced = xstage.replace_moe_experts(model, make_experts=MoETorch)
        got = model(**inputs).sample
    assert list(replaced) == ["double_stream_blocks.0.block.ff_i", "single_stream_blocks.0.block.ff_i"]
    assert rel(got, want) < 1e-2


# --- refusals ----------------------------------------------------------------------------------
def test_refuses_what_it_cannot_swap():
    op = "xstage.replace_moe_experts"
    with pytest.raises(TypeError, match=rf"{op}: model: expected a torch.nn.Module, got int"):
        xstage.replace_moe_experts(3)
    with pytest.raises(ValueError, match=rf"{op}: model \(Linear\): no MoE experts found: expected diffusers'"):
        xstage.replace_moe_experts(nn.Linear(4, 4))
    block = qwen3_block()
    with pytest.raises(ValueError, match=rf"{op}: model \(Qwen3MoeExperts\) is itself the MoE layer: expected the "
                                         "model or block that holds it"):
        xstage.replace_moe_experts(block.experts)
    with pytest.raises(TypeError, match=rf"{op}: make_experts: expected None or a callable"):
        xstage.replace_moe_experts(block, make_experts=3)
    with pytest.raises(TypeError, match=rf"{op}: make_experts returned function for experts: expected an nn.Module"):
        xstage.replace_moe_experts(block, make_experts=lambda w13, w2: (lambda x, i, w: x))


def test_refuses_fp32_weights_for_xstage_but_not_for_the_torch_stand_in():
    block = qwen3_block(dtype=torch.float32)
    with pytest.raises(TypeError, match=r"xstage.replace_moe_experts: experts.gate_up_proj: expected dtype "
                                        r"torch.bfloat16 \(xstage.MoE computes in bf16: call "
                                        r"model.to\(torch.bfloat16\) first\), got torch.float32"):
        xstage.replace_moe_experts(block)
    assert not isinstance(block.experts, xstage.MoE)  # nothing swapped
    model = nn.ModuleDict({"a": qwen3_block(), "b": qwen3_block(dtype=torch.float32)})
    before = {n: m for n, m in model.named_modules()}
    with pytest.raises(TypeError, match=r"b.experts.gate_up_proj: expected dtype torch.bfloat16"):
        xstage.replace_moe_experts(model)
    assert {n: m for n, m in model.named_modules()} == before  # a refusal leaves every layer as it was
    xstage.replace_moe_experts(block, make_experts=MoETorch)
    assert isinstance(block.experts, MoETorch)


def test_refuses_sizes_the_gemms_cannot_take():
    block = qwen3_block(H=88, I=64)  # H a multiple of 8 (L1's K) but not of 16 (L2's N: 16-byte rows)
    with pytest.raises(ValueError, match=r"xstage.replace_moe_experts: experts: .*H = 88 .*multiple of 16"):
        xstage.replace_moe_experts(block)


@pytest.mark.parametrize("what,change,message", [
    ("act_fn", lambda e: setattr(e, "act_fn", nn.GELU()), r"act_fn = GELU\(.*\): expected SiLU"),
    ("has_bias", lambda e: setattr(e, "has_bias", True), r"has_bias = True: expected False"),
    ("is_transposed", lambda e: setattr(e, "is_transposed", True), r"is_transposed = True: expected False"),
    ("is_concatenated", lambda e: setattr(e, "is_concatenated", False), r"is_concatenated = False: expected True"),
    ("_apply_gate", None, r"a custom _apply_gate: expected transformers' default"),
])
def test_refuses_a_transformers_layout_it_does_not_compute(what, change, message, monkeypatch):
    block = qwen3_block()
    if what == "_apply_gate":
        monkeypatch.setattr(type(block.experts), "_apply_gate", lambda self, gu: gu[..., ::2])
    else:
        change(block.experts)
    with pytest.raises(ValueError, match=r"xstage.replace_moe_experts: experts \(Qwen3MoeExperts\): " + message):
        xstage.replace_moe_experts(block, make_experts=MoETorch)


def test_refuses_a_hidream_expert_with_bias():
    holder = hidream_ff()
    holder["ff_i"].experts[2].w3 = nn.Linear(128, holder["ff_i"].experts[2].w3.out_features).to(BF16)
    with pytest.raises(ValueError, match=r"xstage.replace_moe_experts: ff_i.experts.2.w3: expected an nn.Linear "
                                         "without bias"):
        xstage.replace_moe_experts(holder, make_experts=MoETorch)


# --- the benchmark's own CPU check -------------------------------------------------------------
def test_bench_selftest():
    if importlib.util.find_spec("diffusers") is None and importlib.util.find_spec("transformers") is None:
        pytest.skip("neither diffusers nor transformers is installed")
    spec = importlib.util.spec_from_file_location("moe_client", ROOT / "bench" / "moe_client.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    models = [m for m, pkg in (("hidream", "diffusers"), ("qwen3", "transformers"), ("mixtral", "transformers"))
              if importlib.util.find_spec(pkg) is not None]
    args = argparse.Namespace(models=",".join(models), hidream_layers=1, hidream_single_layers=1, llm_layers=2)
    assert bench.selftest(args) == 0
