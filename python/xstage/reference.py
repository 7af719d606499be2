"""Sequential Ulysses as users run it today: the pre-attention all_to_all_single,
torch's scaled_dot_product_attention, the post-attention all_to_all_single.
The baseline of the tests and of bench/dit_ulysses.py (same all-to-alls as
xstage.UlyssesAttention, so only attention and the post-attention exchange differ).
Also the MoE layer as users write it on one GPU (moe_torch)."""
import torch
import torch.nn.functional as F

from xstage import layout


def sdpa_bshd(q, k, v, scale=None):
    """torch SDPA on [B, S, H, D] tensors (it takes [B, H, S, D]); returns [B, S, H, D]."""
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=scale)
    return o.transpose(1, 2)


def ulysses_sdpa(q, k, v, group, seq_len=None, scale=None):
    """This rank's output shard [B, S_rank, H, D] of sequence-parallel attention
    over `group`, from its shards q, k, v [B, S_rank, H, D] (torch.chunk's split
    of a sequence of seq_len rows; None: S_rank * P)."""
    import torch.distributed as dist

    P, rank = dist.get_world_size(group), dist.get_rank(group)
    S = layout.global_length("ulysses_sdpa", q.shape[1], P, rank, seq_len)
    qh, kh, vh = layout.seq_to_heads([q, k, v], S, P, rank, group)
    return layout.heads_to_seq(sdpa_bshd(qh, kh, vh, scale), S, P, rank, group)


def moe_torch(x, w13, w2, topk_ids, topk_weights):
    """The MoE layer as users write it on one GPU today (the baseline of the
    tests and of bench/moe_layer_torch.py): sort the (token, slot) pairs by
    expert, index_select the token rows, torch._grouped_mm, SwiGLU,
    torch._grouped_mm, the routing weight, index_add_ into the output (bf16,
    as Mixtral's and Qwen3-MoE's blocks accumulate). w13 [E, 2I, H] with the
    gate rows first (not interleaved), w2 [E, H, I]; no host synchronisation
    (offsets by searchsorted, not bincount), so it can be captured too."""
    T, k = topk_ids.shape
    E, I = w13.shape[0], w13.shape[1] // 2
    flat = topk_ids.reshape(-1)
    order = flat.argsort(stable=True)
    offs = torch.searchsorted(flat[order], torch.arange(E, device=x.device), right=True).to(torch.int32)
    tokens = order // k
    gu = torch._grouped_mm(x.index_select(0, tokens), w13.transpose(-2, -1), offs=offs)
    h = F.silu(gu[:, :I]) * gu[:, I:]
    y = torch._grouped_mm(h, w2.transpose(-2, -1), offs=offs)
    y = y * topk_weights.reshape(-1)[order].to(y.dtype)[:, None]
    return torch.zeros_like(x).index_add_(0, tokens, y)


class MoETorch(torch.nn.Module):
    """moe_torch as a module, with xstage.MoE's call signature: forward(x [T,
    H], topk_ids [T, k], topk_weights [T, k]) -> [T, H]. w13 [E, 2I, H] (gate
    rows then up rows) and w2 [E, H, I] are kept as given (buffers, not
    copied). Runs wherever torch._grouped_mm does (CUDA, and the CPU in torch
    2.11): the stand-in for xstage.MoE in replace_moe_experts(make_experts=...)
    on the CPU, and the baseline of bench/moe_client.py."""

    def __init__(self, w13, w2):
        super().__init__()
        self.register_buffer("w13", w13.detach())
        self.register_buffer("w2", w2.detach())

    def forward(self, x, topk_ids, topk_weights):
        return moe_torch(x, self.w13, self.w2, topk_ids, topk_weights)
