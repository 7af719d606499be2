"""Ulysses layouts in torch (include/xstage/ulysses/ulysses_layout.hpp in C++):

  sequence-sharded  rank r holds [B, S_r, H, D], rows [r c, min(S, (r+1) c))
                    with c = ceil(S / P) (torch.chunk's split: the last ranks
                    may hold fewer rows, even none);
  head-sharded      rank r holds [B, S, H/P, D], heads [r H/P, (r+1) H/P).

The all-to-alls between them as users write them (all_to_all_single), split
into pack, exchange and unpack so that the packing can be checked on the CPU
with the exchange done by hand."""
import torch
import torch.distributed as dist


def chunk_rows(S, P):
    return -(-S // P)


def seq_rows(S, P, rank):
    """S_rank: the rows rank holds in the sequence-sharded layout."""
    begin = rank * chunk_rows(S, P)
    return max(0, min(S, begin + chunk_rows(S, P)) - begin)


def seq_split(S, P):
    return [seq_rows(S, P, r) for r in range(P)]


def global_length(op, S_r, P, rank, seq_len=None):
    """The global sequence length S of a rank holding S_r rows: seq_len, or
    S_r * P when not given. Raises ValueError when S_r is not the rank's
    torch.chunk share of S (uneven shards need seq_len, the same on every rank)."""
    S = S_r * P if seq_len is None else int(seq_len)
    if S < 1 or seq_rows(S, P, rank) != S_r:
        want = f"{seq_rows(S, P, rank)} (torch.chunk's split: {seq_split(S, P)})" if S >= 1 else "at least one"
        raise ValueError(f"{op}: rank {rank} of {P} holds {S_r} rows; with seq_len = {S} it must hold {want}; "
                         "pass the global seq_len when shards are uneven")
    return S


def pack_seq_to_heads(tensors, P):
    """Sequence-sharded [B, S_r, H, D] tensors -> the send buffer of the
    pre-attention all-to-all: [P * S_r, n, B, H/P, D], block j (S_r rows) for
    rank j holding its heads of every tensor (one copy, all n at once)."""
    B, S_r, H, D = tensors[0].shape
    Hl = H // P
    parts = [t.reshape(B, S_r, P, Hl, D).permute(2, 1, 0, 3, 4) for t in tensors]  # [P, S_r, B, Hl, D] views
    return torch.stack(parts, dim=2).reshape(P * S_r, len(tensors), B, Hl, D)


def unpack_seq_to_heads(recv):
    """The received [S, n, B, H/P, D] -> n head-sharded [B, S, H/P, D] views
    (strided: the attention kernels read them in place)."""
    return [recv[:, i].permute(1, 0, 2, 3) for i in range(recv.shape[1])]


def pack_heads_to_seq(o):
    """Head-sharded [B, S, H/P, D] -> the post-attention send buffer [S, B, H/P, D]
    (rank j's block is its rows)."""
    return o.permute(1, 0, 2, 3).contiguous()


def unpack_heads_to_seq(recv, P):
    """The received [P * S_r, B, H/P, D] (block i from rank i) -> [B, S_r, H, D]."""
    S_r = recv.shape[0] // P
    _, B, Hl, D = recv.shape
    return recv.view(P, S_r, B, Hl, D).permute(2, 1, 0, 3, 4).reshape(B, S_r, P * Hl, D)


def all_to_all_rows(send, out_rows, in_rows, group):
    """all_to_all_single over dim 0: in_rows[j] rows of send go to rank j,
    out_rows[i] rows arrive from rank i, in rank order."""
    recv = send.new_empty((sum(out_rows),) + tuple(send.shape[1:]))
    dist.all_to_all_single(recv, send, output_split_sizes=out_rows, input_split_sizes=in_rows, group=group)
    return recv


def seq_to_heads(tensors, S, P, rank, group):
    """Pre-attention all-to-all: sequence-sharded [B, S_rank, H, D] tensors ->
    head-sharded [B, S, H/P, D] views of one received buffer."""
    if P == 1:
        return list(tensors)
    S_r = seq_rows(S, P, rank)
    send = pack_seq_to_heads(tensors, P)
    return unpack_seq_to_heads(all_to_all_rows(send, seq_split(S, P), [S_r] * P, group))


def heads_to_seq(o, S, P, rank, group):
    """Post-attention all-to-all: head-sharded [B, S, H/P, D] -> sequence-sharded [B, S_rank, H, D]."""
    if P == 1:
        return o
    S_r = seq_rows(S, P, rank)
    return unpack_heads_to_seq(all_to_all_rows(pack_heads_to_seq(o), [S_r] * P, seq_split(S, P), group), P)
