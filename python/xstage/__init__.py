"""xstage from PyTorch (docs/design/python.md):

    xstage.attention(q, k, v, scale=None)      our Hopper attention, bf16 [B, S, H, D]
    xstage.UlyssesAttention(group)             sequence-parallel attention, the post-attention
                                               all-to-all fused into the attention epilogue

Both are torch.library custom ops (torch.ops.xstage.attention,
torch.ops.xstage.ulysses_attention) with fake implementations: torch.compile
traces them and CUDA graphs capture them.
"""
import os

# NVLink multicast stays off: nothing here uses it, and on shared machines a
# program that does can take the host's GPUs out of service. Set before torch
# creates NCCL communicators or symmetric memory (a user's own setting wins).
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

from xstage.ops import attention  # noqa: E402
from xstage.ulysses import UlyssesAttention  # noqa: E402

__version__ = "0.1.0"
__all__ = ["attention", "UlyssesAttention"]
