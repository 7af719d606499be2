"""xstage.UlyssesAttention: sequence-parallel attention over a torch.distributed
process group (docs/design/python.md).

Pre-attention all-to-all as users write it (all_to_all_single); attention and
the post-attention all-to-all fused in our kernel's epilogue: every output row
is stored straight into the rank that owns it, through peer pointers of torch
symmetric memory, with completion flags beside the outputs
(docs/design/ulysses.md). fused=False runs the same attention kernel followed
by all_to_all_single.

Why no rank overwrites what another still reads, without any extra barrier:
rank A's kernel of call n+1 writes into rank B only when B owns rows, and then
A's pre-attention all-to-all of call n+1 receives B's rows, so it completes
only after B's stream has reached it, which is after B copied out its output
of call n (and, under graph capture, cleared its flags). B's own kernel of
call n ended only once every flag A sets in B had arrived (the receiver wait),
so nothing of call n is still in flight towards B either.
"""
import math
import weakref
from typing import Optional

import torch
import torch.distributed as dist

from xstage import _checks, _lib, layout
from xstage._forward_only import detached

OP = "xstage.UlyssesAttention"
_ALIGN = 256  # bytes between the parts of a symmetric buffer
# An eager call copies the timeout record back (48 bytes, a few microseconds
# on the stream) once in this many calls, the first included; a later call
# raises if it says a wait timed out. check_timeouts() reads it at once.
RECORD_EVERY = 64
_states = weakref.WeakValueDictionary()  # id -> _FusedState, the ops' handle on module state
_next_id = [0]
# (group, device, B, S, H, D, kernel) -> _Buffers, shared by every module on that group and kept for the
# process's life: a DiT's layers all use one, and no rank frees (and reallocates) a symmetric buffer
# that another still holds.
_BUFFERS = {}


def _align(n):
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class _Buffers:
    """One shape's symmetric buffer and what its launches read, made once
    (collectively) and reused by every call with that shape.

    The symmetric tensor holds [output | eager flags | graph flags]: rank d's
    output shard [B, S_d, H, D], then two uint64 flag arrays. Eager calls
    publish a growing epoch into the first and never reset it (as the C++
    runtime does). A CUDA graph replays the epoch it was captured with, so
    captured calls use the second array, publish epoch 1 and zero their own
    rank's array right after their output is copied out (safe for the reason
    in the module's docstring), so every replay finds it zero again."""

    def __init__(self, state, device, B, S, H, D):
        import torch.distributed._symmetric_memory as symm_mem

        self.shape = (state.world, state.rank, B, S, H, D, state.kernel)
        self.S_r = layout.seq_rows(S, state.world, state.rank)
        plan_ptr, plan = _lib.i64_array([0] * 6)
        shape_ptr, shape_keep = _lib.i64_array(self.shape)
        _lib.call("xstage_ulysses_plan", shape_ptr, plan_ptr)
        _, m_blocks, _, _, out_elems, flag_slots = list(plan)
        self.orders = []  # [linear, rotated] tile-order tables
        for which in (0, 1):
            order = torch.empty(state.world * m_blocks, dtype=torch.int32)
            _lib.call("xstage_ulysses_tile_order", shape_ptr, which, _int_ptr(order), order.numel())
            self.orders.append(order.to(device))
        out_bytes, flag_bytes = _align(out_elems * 2), _align(flag_slots * 8)
        self.tensor = symm_mem.empty(out_bytes + 2 * flag_bytes, dtype=torch.uint8, device=device)
        self.tensor[out_bytes:].zero_()
        self.out = self.tensor[:B * self.S_r * H * D * 2].view(torch.bfloat16).view(B, self.S_r, H, D)
        self.graph_flags = self.tensor[out_bytes + flag_bytes:]
        record_bytes = _lib.lib().xstage_ulysses_timeout_record_bytes()
        self.record = torch.zeros(record_bytes, dtype=torch.uint8, device=device)
        self.record_host = torch.zeros(record_bytes, dtype=torch.uint8, pin_memory=True)
        self.record_event = torch.cuda.Event()
        self.record_pending = False
        self.calls = 0  # eager calls: every RECORD_EVERY-th copies the record back (check_timeouts)
        # Every rank zeroes its flags before it enters the rendezvous, which
        # returns only once all ranks have entered it: no flag is written
        # into an array that is not zero yet.
        torch.cuda.current_stream(device).synchronize()
        self.handle = symm_mem.rendezvous(self.tensor, state.group)
        ptrs = [p + _offset_in_allocation(self.tensor, self.handle, state) for p in self.handle.buffer_ptrs]
        self.tables = torch.tensor([ptrs, [p + out_bytes for p in ptrs], [p + out_bytes + flag_bytes for p in ptrs]],
                                   dtype=torch.int64).to(device)
        torch.cuda.current_stream(device).synchronize()
        self.epoch = 0
        del shape_keep

    def timeout_message(self):
        """The receiver wait's timeout report of the last eager call whose record has come back, or ''."""
        if not self.record_pending or not self.record_event.query():
            return ""
        self.record_pending = False
        msg = _describe_timeout(self.record_host)
        if msg:  # reported once, as check_timeouts does: cleared, so the next copy does not report it again
            self.record.zero_()
            self.record_host.zero_()
        return msg


def _offset_in_allocation(tensor, handle, state):
    """Where the tensor starts in its symmetric allocation: the handle's
    buffer_ptrs are the allocations' bases, and a memory pool may place a
    tensor inside one. It must be the same on every rank (checked: the
    kernel adds no per-rank offsets)."""
    offset = tensor.data_ptr() - handle.buffer_ptrs[state.rank]
    mine = torch.tensor([offset], dtype=torch.int64, device=tensor.device)
    every = [torch.empty_like(mine) for _ in range(state.world)]
    dist.all_gather(every, mine, group=state.group)
    offsets = [int(o) for o in every]
    if offset < 0 or any(o != offset for o in offsets):
        raise RuntimeError(f"{OP}: the symmetric buffer starts at different offsets in the ranks' allocations "
                           f"({offsets} bytes): allocate symmetric memory in the same order on every rank")
    return offset


def _int_ptr(t):
    import ctypes
    return ctypes.cast(t.data_ptr(), ctypes.POINTER(ctypes.c_int))


def _describe_timeout(host_record):
    import ctypes
    msg = ctypes.create_string_buffer(1024)
    if _lib.lib().xstage_ulysses_describe_timeout(host_record.data_ptr(), msg, 1024):
        return msg.value.decode(errors="replace")
    return ""


class _FusedState:
    """What the fused op needs of a module: group, rank, choices, and the
    buffers (by shape) it has used."""

    def __init__(self, group, world, rank, kernel, store, flags, order, timeout_s):
        self.group, self.world, self.rank = group, world, rank
        self.kernel, self.store, self.flags, self.order, self.timeout_s = kernel, store, flags, order, timeout_s
        self.buffers = {}

    def buffers_for(self, q, B, S, H, D):
        key = (self.group.group_name, q.device.index, B, S, H, D, self.kernel)
        bufs = _BUFFERS.get(key)
        if bufs is None:
            if torch.cuda.is_current_stream_capturing():
                raise RuntimeError(
                    f"{OP}: the first call with shape B = {B}, S = {S}, H = {H}, D = {D} makes and exchanges "
                    "this shape's symmetric buffers, a collective that cannot run under CUDA graph capture: "
                    "call the module once with this shape before capturing")
            # Plain tensors even when the first call is under torch.inference_mode(): later calls outside it
            # write into them in place, which inference tensors refuse.
            with torch.inference_mode(False):
                bufs = _BUFFERS[key] = _Buffers(self, q.device, B, S, H, D)
        self.buffers[key] = bufs
        return bufs

    def check_timeouts(self, synchronize=True):
        """Raises RuntimeError if a receiver wait of any call so far timed out
        (its output is then incomplete). synchronize: wait for the device first;
        then a timeout is reported once (the record is cleared, as the C++
        runtime does), so later calls are not blamed for it."""
        msg = self.take_report(synchronize)
        if msg:
            raise RuntimeError(msg)

    def take_report(self, synchronize):
        """check_timeouts' message, or "" (cleared once taken)."""
        for bufs in self.buffers.values():
            if synchronize:
                torch.cuda.synchronize(bufs.record.device)
                bufs.record_host.copy_(bufs.record)
                msg = _describe_timeout(bufs.record_host)
                if msg:
                    bufs.record.zero_()
                    bufs.record_host.zero_()
            else:
                msg = bufs.timeout_message()
            if msg:
                return f"{OP}: {msg}"
        return ""

    def fused(self, q, k, v, scale):
        B, S, S_kv, Hl, D = _checks.check_qkv(OP, q, k, v)
        if S_kv != S:
            raise ValueError(f"{OP}: head-sharded q and k: expected one sequence length, got {S} and {S_kv}")
        _checks.check_cuda(OP, q)
        _checks.check_scale(OP, scale)
        H = Hl * self.world
        capturing = torch.cuda.is_current_stream_capturing()
        # An earlier call's timeout is raised after this call has run: a rank
        # that raised first would skip a call (and an epoch) the others make.
        late = "" if capturing else self.take_report(synchronize=False)
        bufs = self.buffers_for(q, B, S, H, D)
        q, qs = _checks.kernel_layout(q)
        k, ks = _checks.kernel_layout(k)
        v, vs = _checks.kernel_layout(v)
        if capturing:
            epoch, flags_row = 1, 2
        else:
            bufs.epoch += 1
            epoch, flags_row = bufs.epoch, 1
        shape_ptr, shape_keep = _lib.i64_array(bufs.shape)
        strides, strides_keep = _lib.i64_array(qs + ks + vs)
        stream = torch.cuda.current_stream(q.device)
        with torch.cuda.device(q.device):
            _lib.call("xstage_ulysses_fused", shape_ptr, q.data_ptr(), k.data_ptr(), v.data_ptr(), strides,
                      bufs.tables[0].data_ptr(), bufs.tables[flags_row].data_ptr(), bufs.orders[self.order].data_ptr(),
                      bufs.record.data_ptr(), epoch, math.nan if scale is None else float(scale), self.store,
                      self.flags, 0, self.timeout_s, stream.cuda_stream)
        out = bufs.out.clone()
        if capturing:
            bufs.graph_flags.zero_()
        else:
            bufs.calls += 1
            if not bufs.record_pending and bufs.calls % RECORD_EVERY == 1:
                bufs.record_host.copy_(bufs.record, non_blocking=True)
                bufs.record_event.record(stream)
                bufs.record_pending = True
        del shape_keep, strides_keep
        if late:
            raise RuntimeError(late)
        return out


@torch.library.custom_op("xstage::ulysses_attention", mutates_args=())
def _ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, state: int, world: int, rank: int,
                       scale: Optional[float]) -> torch.Tensor:
    st = _states.get(state)
    if st is None:
        raise RuntimeError(f"{OP}: module state {state} is gone (the UlyssesAttention was deleted)")
    return st.fused(q, k, v, scale)


@_ulysses_attention.register_fake
def _ulysses_attention_fake(q, k, v, state, world, rank, scale):
    B, S, _, Hl, D = _checks.check_qkv(OP, q, k, v)
    return q.new_empty((B, layout.seq_rows(S, world, rank), Hl * world, D))


class UlyssesAttention(torch.nn.Module):
    """Sequence-parallel (Ulysses) attention over a process group.

    forward(q, k, v, seq_len=None, scale=None): q, k, v are this rank's
    sequence shards [B, S_rank, H, D] (bf16, CUDA, D = 64 or 128, H a multiple
    of the group size P); returns this rank's shard of the attention output
    [B, S_rank, H, D]. Shards follow torch.chunk over the sequence (rank r
    holds rows [r c, min(S, (r+1) c)), c = ceil(S / P)); with uneven shards
    pass the global length seq_len (every rank the same), else S = P * S_rank.

    group: a torch.distributed process group (NCCL for CUDA tensors; None:
    the default group). fused: attention and the post-attention all-to-all in
    one kernel (default), else our attention then all_to_all_single, on the
    same kernel (bit-identical outputs). store, flags: the fused epilogue's
    store path and flag timing (the C++ runtime's words; None: its defaults),
    kernel: 'wgmma' or 'mma'. timeout_s: how long a fused kernel waits for
    its rows before it gives up (check_timeouts() then raises).

    Buffers: the fused path makes one symmetric buffer per group and shape on
    first use (collective: every rank must call with the same shapes in the
    same order; not under graph capture) and every module on that group
    reuses it, so calls must be ordered (one stream, as a model's layers are).
    Forward only (no autograd).
    """

    def __init__(self, group=None, *, fused=True, store=None, flags="at-exit", kernel="wgmma",
                 order="rotated", timeout_s=60.0):
        super().__init__()
        if not dist.is_initialized():
            raise RuntimeError(f"{OP}: torch.distributed is not initialized (dist.init_process_group first)")
        if kernel not in ("wgmma", "mma"):
            raise ValueError(f"{OP}: kernel: expected 'wgmma' or 'mma', got {kernel!r}")
        if order not in ("linear", "rotated"):
            raise ValueError(f"{OP}: order: expected 'linear' or 'rotated', got {order!r}")
        if not timeout_s > 0:
            raise ValueError(f"{OP}: timeout_s: expected > 0 seconds, got {timeout_s}")
        self.group = group if group is not None else dist.group.WORLD
        self.world = dist.get_world_size(self.group)
        self.rank = dist.get_rank(self.group)
        self.fused = bool(fused)
        self.kernel = _lib.parse("attention_kernel", "wgmma-pingpong" if kernel == "wgmma" else "mma")
        store_id = -1 if store is None else _lib.parse("store_path", store)
        flags_id = _lib.parse("completion", flags)
        self._state = _FusedState(self.group, self.world, self.rank, self.kernel, store_id, flags_id,
                                  0 if order == "linear" else 1, float(timeout_s))
        self._id = _next_id[0]
        _next_id[0] += 1
        _states[self._id] = self._state

    def forward(self, q, k, v, seq_len: Optional[int] = None, scale: Optional[float] = None):
        B, S_r, S_kv, H, D = _checks.check_qkv(OP, q, k, v)
        P, rank = self.world, self.rank
        if S_kv != S_r:
            raise ValueError(f"{OP}: q and k: expected shards of one sequence (self-attention), got {S_r} and "
                             f"{S_kv} rows")
        if H % P:
            raise ValueError(f"{OP}: H = {H} heads do not split over P = {P} ranks; expected H a multiple of P")
        S = layout.global_length(OP, S_r, P, rank, seq_len)
        _checks.check_scale(OP, scale)
        scale = None if scale is None else float(scale)
        qh, kh, vh = detached(OP, *layout.seq_to_heads([q, k, v], S, P, rank, self.group))
        if self.fused:
            return torch.ops.xstage.ulysses_attention(qh, kh, vh, self._id, P, rank, scale)
        o = torch.ops.xstage.attention(qh, kh, vh, scale, self.kernel)
        return layout.heads_to_seq(o, S, P, rank, self.group)

    def check_timeouts(self):
        """Waits for the device; raises RuntimeError if any fused call's receiver wait timed out."""
        self._state.check_timeouts(synchronize=True)
