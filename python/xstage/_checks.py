"""Argument checks shared by the ops' real and fake implementations: a bad
shape, dtype or device is a Python error that says what, where and what was
expected, before anything reaches the library."""
import math

import torch

HEAD_DIMS = (64, 128)


def check_qkv(op, q, k, v):
    """q [B, S_q, H, D], k and v [B, S_kv, H, D], bf16, D in HEAD_DIMS, one device.
    Returns (B, S_q, S_kv, H, D)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.bfloat16:
            raise TypeError(f"{op}: {name}: expected dtype torch.bfloat16, got {t.dtype}")
        if t.dim() != 4:
            raise ValueError(f"{op}: {name}: expected 4 dimensions [B, S, H, D], got shape {tuple(t.shape)}")
    B, S_q, H, D = q.shape
    if D not in HEAD_DIMS:
        raise ValueError(f"{op}: head dim D = {D} (last dimension of q): expected 64 or 128")
    if k.shape != v.shape:
        raise ValueError(f"{op}: k and v: expected one shape [B, S_kv, H, D], got {tuple(k.shape)} and "
                         f"{tuple(v.shape)}")
    if (k.shape[0], k.shape[2], k.shape[3]) != (B, H, D):
        raise ValueError(f"{op}: k: expected [B, S_kv, H, D] with B = {B}, H = {H}, D = {D} as in q "
                         f"{tuple(q.shape)}, got {tuple(k.shape)}")
    S_kv = k.shape[1]
    if min(B, S_q, S_kv, H) < 1:
        raise ValueError(f"{op}: expected non-empty tensors, got q {tuple(q.shape)}, k and v {tuple(k.shape)}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"{op}: q, k, v: expected one device, got {q.device}, {k.device}, {v.device}")
    return B, S_q, S_kv, H, D


def check_cuda(op, t):
    if t.device.type != "cuda":
        raise ValueError(f"{op}: expected CUDA tensors, got a tensor on {t.device}")


def check_one_device(op, names, ts):
    """The MoE layer's tensors: all on one device, a CUDA one (or meta, for fake tensors)."""
    if any(t.device != ts[0].device for t in ts):
        raise ValueError(f"{op}: {', '.join(names)}: expected one device, got {', '.join(str(t.device) for t in ts)}")
    if ts[0].device.type not in ("cuda", "meta"):
        raise ValueError(f"{op}: expected CUDA tensors, got a tensor on {ts[0].device}")


def check_scale(op, scale):
    if scale is not None and not math.isfinite(scale):
        raise ValueError(f"{op}: scale: expected a finite number or None (1/sqrt(D)), got {scale}")


def kernel_strides(t):
    """(b, s, h) element strides the kernels accept for a [B, S, H, D] tensor,
    or None: D stride 1, the others positive multiples of 8 (16-byte rows),
    data 16-byte aligned. A dimension of size 1 takes its contiguous stride,
    whatever torch recorded for it."""
    sizes, strides = t.shape, t.stride()
    if strides[3] != 1 and sizes[3] > 1:
        return None
    contiguous = (sizes[1] * sizes[2] * sizes[3], sizes[2] * sizes[3], sizes[3])
    out = tuple(strides[i] if sizes[i] > 1 else contiguous[i] for i in range(3))
    if any(s <= 0 or s % 8 for s in out) or t.data_ptr() % 16:
        return None
    return out


def kernel_layout(t):
    """(tensor, strides): t itself when the kernels can read it in place, else
    a contiguous copy in new (aligned) memory."""
    st = kernel_strides(t)
    if st is None:
        t = t.clone(memory_format=torch.contiguous_format)
        st = kernel_strides(t)
    return t, st
