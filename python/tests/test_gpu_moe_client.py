"""xstage.replace_moe_experts on the GPU (skips without a GPU, and without
diffusers or transformers): transformers' Qwen3-MoE and Mixtral sparse blocks
and diffusers' HiDream MoE feed-forward, small but within the GEMMs' size
rules, swapped for xstage.MoE; each block's output against an fp32 run of
its own code with the same routing (error at most max(2 x the original's,
2^-8), bench/moe_client.py's bar), no routing error recorded, the same bits
twice. The full-width models are bench/moe_client.py's."""
import copy

import pytest
import torch

import xstage
from conftest import library_or_skip
from test_cpu_moe_client import BF16, experts_fp32, hidream_ff, mixtral_block, qwen3_block, rel


@pytest.mark.parametrize("make,k", [(qwen3_block, 8), (mixtral_block, 2)], ids=["qwen3", "mixtral"])
def test_transformers_block_with_xstage_moe(cuda, make, k):
    library_or_skip()
    block = make(E=16, k=k, H=256, I=128).to(cuda)
    x = torch.randn(1, 333, 256, device=cuda).to(BF16)
    with torch.no_grad():
        want = block(x)
        _, weights, ids = block.gate(x.view(-1, 256))
        ref = experts_fp32(block.experts, x.view(-1, 256), ids, weights).view(x.shape)
        xstage.replace_moe_experts(block)
        got, again = block(x), block(x)
    assert isinstance(block.experts, xstage.MoE)
    assert rel(got, ref) <= max(2 * rel(want, ref), 2.0 ** -8), (rel(got, ref), rel(want, ref))
    assert torch.equal(got, again)
    assert xstage.moe_routing_error() is None


def test_hidream_feed_forward_with_xstage_moe(cuda):
    library_or_skip()
    holder = hidream_ff(dim=256).to(cuda)
    ff = holder["ff_i"]
    x = torch.randn(1, 333, 256, device=cuda).to(BF16)
    with torch.no_grad():
        want = ff(x)
        ids, weights, _ = ff.gate(x)
        ff32 = copy.deepcopy(ff).float()
        ref = (ff32.moe_infer(x.float().view(-1, 256), ids.view(-1), weights.float().view(-1, 1)).view(x.shape)
               + ff32.shared_experts(x.float()))
        xstage.replace_moe_experts(holder)
        got, again = holder["ff_i"](x), holder["ff_i"](x)
    assert isinstance(holder["ff_i"].experts, xstage.MoE)
    assert rel(got, ref) <= max(2 * rel(want, ref), 2.0 ** -8), (rel(got, ref), rel(want, ref))
    assert torch.equal(got, again)
    assert xstage.moe_routing_error() is None
