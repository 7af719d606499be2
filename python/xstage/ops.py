"""xstage.attention: our Hopper attention forward as a torch custom op
(torch.ops.xstage.attention), with a fake implementation so that
torch.compile traces it and CUDA graphs capture it."""
import math
from typing import Optional

import torch

from xstage import _checks, _lib
from xstage._forward_only import detached

OP = "xstage.attention"
KERNEL_AUTO = 0  # xstage::AttentionKernel::automatic: the default kernel for D


@torch.library.custom_op("xstage::attention", mutates_args=())
def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: Optional[float],
               kernel: int) -> torch.Tensor:
    B, S_q, S_kv, H, D = _checks.check_qkv(OP, q, k, v)
    _checks.check_scale(OP, scale)
    _checks.check_cuda(OP, q)
    q, qs = _checks.kernel_layout(q)
    k, ks = _checks.kernel_layout(k)
    v, vs = _checks.kernel_layout(v)
    o = torch.empty((B, S_q, H, D), dtype=torch.bfloat16, device=q.device)
    strides, keep = _lib.i64_array(qs + ks + vs + tuple(o.stride()[:3]))
    with torch.cuda.device(q.device):
        _lib.call("xstage_attention_forward", q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), B, H, S_q,
                  S_kv, D, strides, math.nan if scale is None else float(scale), kernel,
                  torch.cuda.current_stream(q.device).cuda_stream)
    del keep
    return o


@_attention.register_fake
def _attention_fake(q, k, v, scale, kernel):
    B, S_q, _, H, D = _checks.check_qkv(OP, q, k, v)
    _checks.check_scale(OP, scale)
    return q.new_empty((B, S_q, H, D))


def attention(q, k, v, scale=None):
    """softmax(scale q k^T) v per (batch, head), non-causal: q [B, S_q, H, D],
    k and v [B, S_kv, H, D], bf16 on one CUDA device, D = 64 or 128, any S.
    scale: None for 1/sqrt(D). Returns a new contiguous [B, S_q, H, D] bf16
    tensor. Strided inputs are read in place when their rows are 16-byte
    aligned (else copied first). Forward only (no autograd)."""
    _checks.check_qkv(OP, q, k, v)
    _checks.check_scale(OP, scale)
    return torch.ops.xstage.attention(*detached(OP, q, k, v), None if scale is None else float(scale), KERNEL_AUTO)
