"""The routing ids' value checks, shared by the one-GPU and the expert-parallel
MoE layer (moe_local.py, moe_ep.py): whether a call may read them, and the
ValueError naming the first bad one. Reading them synchronises with the
device, so only eager calls do it (the kernels themselves leave bad pairs out
and record the first).
"""
import torch
from torch._subclasses.fake_tensor import is_fake


def ids_readable(t):
    """Whether values can be read: a real CUDA tensor, outside torch.compile and graph capture.
    is_compiling() comes before is_fake(): Dynamo will not trace is_fake (a graph break under
    torch.compile(fullgraph=True) on the first GPU run), and the short circuit keeps it out of the trace."""
    return (t.device.type == "cuda" and not torch.compiler.is_compiling() and not is_fake(t)
            and not torch.cuda.is_current_stream_capturing())


def check_id_values(op, topk_ids, E):
    """ValueError naming the first bad (token, slot) of topk_ids: an id outside
    [0, E), or one that repeats an earlier slot's id of its token. One
    synchronisation (the ids are device data); a second to find the culprit."""
    out_of_range = (topk_ids < 0) | (topk_ids >= E)
    ordered = topk_ids.sort(dim=1).values
    repeated = (ordered[:, 1:] == ordered[:, :-1]).any(dim=1)
    if not bool(out_of_range.any() | repeated.any()):
        return
    if bool(out_of_range.any()):
        t, j = (int(v) for v in out_of_range.nonzero()[0])
        raise ValueError(f"{op}: topk_ids[{t}, {j}] = {int(topk_ids[t, j])}: expected an expert id in 0 .. {E - 1}")
    t = int(repeated.nonzero()[0, 0])
    row = topk_ids[t].tolist()
    j = next(j for j in range(len(row)) if row[j] in row[:j])
    raise ValueError(f"{op}: topk_ids[{t}, {j}] = {row[j]} repeats slot {row.index(row[j])}'s expert: expected "
                     f"k = {len(row)} distinct experts a token")
