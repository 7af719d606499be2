"""Sequential Ulysses as users run it today: the pre-attention all_to_all_single,
torch's scaled_dot_product_attention, the post-attention all_to_all_single.
The baseline of the tests and of bench/dit_ulysses.py (same all-to-alls as
xstage.UlyssesAttention, so only attention and the post-attention exchange differ)."""
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
