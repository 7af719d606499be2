"""xstage from PyTorch (docs/design/python.md):

    xstage.attention(q, k, v, scale=None)      our Hopper attention, bf16 [B, S, H, D]
    xstage.UlyssesAttention(group)             sequence-parallel attention, the post-attention
                                               all-to-all fused into the attention epilogue
    xstage.grouped_mm_swiglu(x, w13i, offs)    the MoE expert GEMMs, bf16, grouped as in
    xstage.grouped_mm(h, w2, offs)             torch._grouped_mm (L1 with its SwiGLU and
    xstage.moe_experts(x, w13i, w2, offs)      routing weight fused); moe_interleave_w13
    xstage.MoE(w13, w2, group=None)            the MoE layer, an nn.Module (group of P > 1:
                                               expert parallel; moe_ep_sizes its bytes a rank):
    xstage.moe_layer(x, w13i, w2, ids, wts)    routing permutation, L1 + SwiGLU x weight, L2,
    xstage.topk_softmax(logits, k)             combine; the common router
    xstage.replace_moe_experts(model)          a model's routed experts (HiDream-I1, transformers'
                                               Qwen3-MoE, Mixtral, ...) swapped for xstage.MoE

All are torch.library custom ops (torch.ops.xstage.attention,
torch.ops.xstage.ulysses_attention, torch.ops.xstage.moe_l1, moe_l2, moe_experts,
moe_layer and moe_layer_ep) with
fake implementations: torch.compile traces them and CUDA graphs capture them.
"""
import os

# NVLink multicast stays off: nothing here uses it, and on shared machines a
# program that does can take the host's GPUs out of service. Set before torch
# creates NCCL communicators or symmetric memory (a user's own setting wins).
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

from xstage.ops import attention  # noqa: E402
from xstage.ulysses import UlyssesAttention  # noqa: E402
from xstage.moe import grouped_mm, grouped_mm_swiglu, moe_experts, moe_interleave_w13  # noqa: E402
from xstage.moe_local import MoE, moe_layer, moe_routing_error, topk_softmax  # noqa: E402
from xstage.moe_swap import HiDreamMoE, replace_moe_experts  # noqa: E402
from xstage.moe_ep import moe_ep_sizes  # noqa: E402

__version__ = "0.1.0"
__all__ = ["attention", "UlyssesAttention", "grouped_mm_swiglu", "grouped_mm", "moe_experts",
           "moe_interleave_w13", "MoE", "moe_layer", "moe_routing_error", "topk_softmax", "moe_ep_sizes",
           "replace_moe_experts", "HiDreamMoE"]
