"""xstage.MoE over a process group of P > 1 ranks: expert parallelism
(docs/design/python.md, "The MoE layer, expert parallel").

Rank r owns experts r E/P .. (r+1) E/P - 1. One call of the layer on every
rank, on torch's current stream, one ctypes call
(xstage_torch_moe_ep_forward -> xstage::moe_rank_forward) after three copies
into the layer's buffers:

    x, ids, weights  -> this rank's x_send (symmetric), ids / weights (workspace)
    run begin        the epoch and T, from the stream (a graph replay advances them)
    route            each (token, slot) pair's index and weight stored into its
                     expert owner's routes, counts into its counts, a flag each
    pull             the counts waited for (timed), the pool's plan made
    fused experts    L1 + SwiGLU x weight and L2, one persistent kernel, which
                     copies the token rows from the sources' x_send itself and
                     stores each L2 row straight into the token owner's combine
                     buffer; its last CTA publishes a done flag on every rank
    combine          every rank's done flag waited for (timed), each token's k
                     rows summed in fp32 in slot order

No host synchronisation and no host-side epoch: the same code runs eagerly,
under CUDA graph capture and replay, and under torch.compile (op
xstage::moe_layer_ep, with a fake implementation).

Why no call overwrites what another rank still reads, without a barrier:
docs/design/moe-layer.md, "Reuse across runs": a rank's next route (and its
next copy into x_send) comes after its combine, which waited for every
rank's expert kernel of this call, which came after that rank's pull.
"""
import ctypes
import weakref

import torch
import torch.distributed as dist

from xstage import _checks, _lib
from xstage._forward_only import detached
from xstage._routing_ids import check_id_values, ids_readable

MODULE = "xstage.MoE"
# Eager calls copy the records block back once in this many calls (the first
# included), asynchronously; a later call raises if a wait timed out.
RECORD_EVERY = 64
_LAYOUT_LEN = 22
_SCHEDULES = ("expert-wave", "interleaved", "model-guided")  # MoeSchedule's values, in order
_TILES = {"auto": -1, "m128n256": 0, "m64n256": 1}
_states = weakref.WeakValueDictionary()  # id -> _EpState, the op's handle on module state
_next_id = [0]
# (group, device, dims, timeout) -> _EpBuffers, shared by every module of that shape on that group (one
# model's MoE layers run one after another on one stream) and kept for the process's life: no rank frees
# (and reallocates) a symmetric buffer that another still holds.
_BUFFERS = {}
_LAYOUTS = {}


def layout(dims, timeout_s):
    """The library's layout of a rank's buffers (CPU only, cached): a dict of
    offsets and sizes in bytes. dims = (T_max, H, I, E, k, P, tile)."""
    key = tuple(dims) + (float(timeout_s),)
    got = _LAYOUTS.get(key)
    if got is None:
        dims_ptr, keep = _lib.i64_array(list(dims))
        out_ptr, out = _lib.i64_array([0] * _LAYOUT_LEN)
        try:
            _lib.call("xstage_torch_moe_ep_layout", dims_ptr, float(timeout_s), out_ptr, _LAYOUT_LEN)
        except RuntimeError as e:
            raise ValueError(f"{MODULE}: {e}") from None
        names = ("symmetric_bytes", "x_send", "routes", "counts", "combine", "flags", "workspace_bytes",
                 "topk_ids", "topk_weights", "records", "records_bytes", "epoch", "rows_cap", "tile",
                 "weight_bytes", "x_send_bytes", "routes_bytes", "counts_bytes", "combine_bytes", "flags_bytes",
                 "pool_x_bytes", "pool_h_bytes")
        got = _LAYOUTS[key] = dict(zip(names, list(out)))
        del keep
    return got


def moe_ep_sizes(tokens_max, hidden, inter, experts, topk, world, tile="auto"):
    """Bytes one rank of the expert-parallel layer holds, without allocating
    (CPU): {'symmetric': torch symmetric memory (x_send, routes, counts,
    combine, flags), 'workspace': this rank's device memory (the pool of rows
    it may receive, L1's output, metadata), 'weights': its E/P experts, bf16,
    'total', and each area's bytes}. The pool is sized for the worst case,
    every pair of every rank routed to this rank's experts: rows_cap = P
    T_max min(k, E/P) rows."""
    if tile not in _TILES:
        raise ValueError(f"{MODULE}: tile = {tile!r}: expected one of {', '.join(_TILES)}")
    lo = layout((tokens_max, hidden, inter, experts, topk, world, _TILES[tile]), 10.0)
    out = {"symmetric": lo["symmetric_bytes"], "workspace": lo["workspace_bytes"], "weights": lo["weight_bytes"]}
    out["total"] = out["symmetric"] + out["workspace"] + out["weights"]
    for area in ("x_send", "routes", "counts", "combine", "flags", "pool_x", "pool_h"):
        out[area] = lo[f"{area}_bytes"]
    out["rows_cap"] = lo["rows_cap"]
    return out


def _offset_in_allocation(tensor, handle, group, world, rank):
    """Where the tensor starts in its symmetric allocation (the handle's
    buffer_ptrs are the allocations' bases); the same on every rank, checked."""
    offset = tensor.data_ptr() - handle.buffer_ptrs[rank]
    mine = torch.tensor([offset], dtype=torch.int64, device=tensor.device)
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine, group=group)
    offsets = [int(o) for o in every]
    if offset < 0 or any(o != offset for o in offsets):
        raise RuntimeError(f"{MODULE}: the symmetric buffer starts at different offsets in the ranks' allocations "
                           f"({offsets} bytes): allocate symmetric memory in the same order on every rank")
    return offset


class _EpBuffers:
    """One shape's buffers of one rank: the symmetric allocation [x_send |
    routes | counts | combine | flags] (given, zeroed), this rank's workspace
    (zeroed), the kernels loaded, the records' host copy; then connect()
    with the [5][P] device table of every rank's areas. make_buffers() does
    both over a process group."""

    def __init__(self, world, rank, device, dims, timeout_s, sym):
        self.dims, self.timeout_s, self.rank, self.world = tuple(dims), float(timeout_s), rank, world
        lo = self.layout = layout(dims, timeout_s)
        T_max, H, _, _, k = dims[:5]
        self.sym = sym
        self.workspace = torch.zeros(lo["workspace_bytes"], dtype=torch.uint8, device=device)
        self.x_send = self._view(self.sym, lo["x_send"], T_max * H * 2, torch.bfloat16, (T_max, H))
        self.ids = self._view(self.workspace, lo["topk_ids"], T_max * k * 4, torch.int32, (T_max, k))
        self.weights = self._view(self.workspace, lo["topk_weights"], T_max * k * 4, torch.float32, (T_max, k))
        self.records = self.workspace[lo["records"]:lo["records"] + lo["records_bytes"]]
        self.records_host = torch.zeros(lo["records_bytes"], dtype=torch.uint8, pin_memory=True)
        self.records_event = torch.cuda.Event()
        self.records_pending = False
        self.calls = 0
        self.sms = torch.cuda.get_device_properties(device).multi_processor_count
        self.tables = None
        dims_ptr, keep = _lib.i64_array(list(dims))
        with torch.cuda.device(device):
            _lib.call("xstage_torch_moe_ep_prepare", dims_ptr, self.timeout_s)
        del keep

    def area_tables(self, bases):
        """The [5][P] int64 device table of every rank's areas from the ranks'
        symmetric buffers' addresses (bases[p])."""
        lo = self.layout
        areas = [lo[a] for a in ("x_send", "routes", "counts", "combine", "flags")]
        return torch.tensor([[p + a for p in bases] for a in areas], dtype=torch.int64).to(self.sym.device)

    def connect(self, tables):
        self.tables = tables

    @staticmethod
    def _view(t, offset, nbytes, dtype, shape):
        return t[offset:offset + nbytes].view(dtype).view(shape)

    def message(self, E, host):
        msg = ctypes.create_string_buffer(_lib._ERR_LEN)
        if _lib.lib().xstage_torch_moe_ep_describe(host.data_ptr(), self.world, self.rank, E, msg, _lib._ERR_LEN):
            return msg.value.decode(errors="replace")
        return ""


def make_buffers(group, world, rank, device, dims, timeout_s):
    """A rank's _EpBuffers over a process group (collective): the symmetric
    allocation from torch symmetric memory, exchanged by its rendezvous."""
    import torch.distributed._symmetric_memory as symm_mem

    sym = symm_mem.empty(layout(dims, timeout_s)["symmetric_bytes"], dtype=torch.uint8, device=device)
    sym.zero_()
    bufs = _EpBuffers(world, rank, device, dims, timeout_s, sym)
    # Every rank's areas are zero before any rank enters the rendezvous,
    # which returns once all have entered: no flag or row lands in
    # memory that is still to be zeroed.
    torch.cuda.current_stream(device).synchronize()
    bufs.handle = symm_mem.rendezvous(sym, group)
    base = _offset_in_allocation(sym, bufs.handle, group, world, rank)
    bufs.connect(bufs.area_tables([p + base for p in bufs.handle.buffer_ptrs]))
    torch.cuda.current_stream(device).synchronize()
    return bufs


class _EpState:
    """What the op needs of a module: group, rank, sizes, schedule choices;
    the buffers it has used; plans by token count."""

    def __init__(self, group, world, rank, dims, schedule, profile, timeout_s):
        self.group, self.world, self.rank = group, world, rank
        self.dims, self.schedule, self.profile, self.timeout_s = tuple(dims), schedule, profile, float(timeout_s)
        self.buffers = None
        self.plans = {}
        self.dims_ptr, self._dims_keep = _lib.i64_array(list(self.dims))  # made once: every call passes it

    def key(self, device):
        return (self.group.group_name, device.index) + self.dims + (self.timeout_s,)

    def use_buffers(self, bufs, device):
        """Buffers made and connected by the caller (several ranks emulated in
        one process: python/tests/test_gpu_moe_ep_emulated.py)."""
        _BUFFERS[self.key(device)] = bufs

    def buffers_for(self, device):
        key = self.key(device)
        bufs = _BUFFERS.get(key)
        if bufs is None:
            if torch.cuda.is_current_stream_capturing():
                raise RuntimeError(
                    f"{MODULE}: the first call makes and exchanges the layer's symmetric buffers, a collective "
                    "that cannot run under CUDA graph capture: call the module once before capturing")
            # Plain tensors even when the first call is under torch.inference_mode(): later calls outside it
            # copy into them in place, which inference tensors refuse.
            with torch.inference_mode(False):
                bufs = _BUFFERS[key] = make_buffers(self.group, self.world, self.rank, device, self.dims,
                                                    self.timeout_s)
        self.buffers = bufs
        return bufs

    def plan(self, T, sms):
        got = self.plans.get(T)
        if got is None:
            out = (ctypes.c_double * 5)()
            _lib.call("xstage_torch_moe_ep_plan", self.dims_ptr, self.timeout_s, T, self.schedule,
                      (self.profile or "").encode(), sms, out)
            if len(self.plans) >= 4096:  # a server's token counts vary without end: start over
                self.plans.clear()
            got = self.plans[T] = out
        return got

    def check_timeouts(self, synchronize=True):
        """Raises RuntimeError naming rank, flag and values if a wait of any
        call so far timed out (or bad routing reached the device); reported
        once, then cleared. synchronize=False: only a record already back."""
        msg = self.take_report(synchronize)
        if msg:
            raise RuntimeError(msg)

    def take_report(self, synchronize):
        """check_timeouts' message, or "" (cleared once taken)."""
        bufs = self.buffers
        if bufs is None:
            return ""
        if synchronize:
            torch.cuda.synchronize(bufs.records.device)
            bufs.records_host.copy_(bufs.records)
        elif not (bufs.records_pending and bufs.records_event.query()):
            return ""
        bufs.records_pending = False
        msg = bufs.message(self.dims[3], bufs.records_host)
        if not msg:
            return ""
        bufs.records.zero_()
        bufs.records_host.zero_()
        return f"{MODULE}: {msg}"

    def forward(self, x, w13, w2, topk_ids, topk_weights):
        capturing = torch.cuda.is_current_stream_capturing()
        # An earlier call's timeout is raised after this call has run: a rank
        # that raised first would skip a call the others make, and every later
        # wait of the group would then be an epoch apart.
        late = "" if capturing else self.take_report(synchronize=False)
        bufs = self.buffers_for(x.device)
        T, H = x.shape
        bufs.x_send[:T].copy_(x)
        # int64 ids are clamped to [-1, E] first: narrowed to int32 as they are, 2^32 + 3 would become a
        # valid expert; clamped, every out-of-range id stays out of range (the route records it).
        E = self.dims[3]
        bufs.ids[:T].copy_(topk_ids.clamp(-1, E) if topk_ids.dtype == torch.int64 else topk_ids)
        bufs.weights[:T].copy_(topk_weights)
        # A rank with no tokens still runs (the others wait for its counts and
        # its expert rows): one row keeps the pointer valid.
        out = torch.empty((max(T, 1), H), dtype=torch.bfloat16, device=x.device)
        plan = self.plan(T, bufs.sms)
        stream = torch.cuda.current_stream(x.device)
        with torch.cuda.device(x.device):
            _lib.call("xstage_torch_moe_ep_forward", self.dims_ptr, self.timeout_s, self.rank, bufs.tables.data_ptr(),
                      bufs.workspace.data_ptr(), bufs.workspace.numel(), w13.data_ptr(), w2.data_ptr(),
                      out.data_ptr(), T, plan, bufs.sms, stream.cuda_stream)
        if not capturing:
            bufs.calls += 1
            if not bufs.records_pending and bufs.calls % RECORD_EVERY == 1:
                bufs.records_host.copy_(bufs.records, non_blocking=True)
                bufs.records_event.record(stream)
                bufs.records_pending = True
        if late:
            raise RuntimeError(late)
        return out[:T]


@torch.library.custom_op("xstage::moe_layer_ep", mutates_args=())
def _moe_layer_ep(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor,
                  topk_weights: torch.Tensor, state: int) -> torch.Tensor:
    st = _states.get(state)
    if st is None:
        raise RuntimeError(f"{MODULE}: module state {state} is gone (the expert-parallel MoE was deleted)")
    check_call(MODULE, x, w13, w2, topk_ids, topk_weights, st.dims)
    return st.forward(x, w13, w2, topk_ids, topk_weights)


@_moe_layer_ep.register_fake
def _moe_layer_ep_fake(x, w13, w2, topk_ids, topk_weights, state):
    return x.new_empty((x.shape[0], x.shape[1]))


def check_call(op, x, w13, w2, topk_ids, topk_weights, dims):
    """Types, dtypes, shapes and devices of one call against the layer's
    dims (T_max, H, I, E, k, P, tile); TypeError or ValueError naming the argument."""
    T_max, H, I, E, k, P = dims[:6]
    E_loc = E // P
    for name, t in (("x", x), ("topk_ids", topk_ids), ("topk_weights", topk_weights)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name}: expected a torch.Tensor, got {type(t).__name__}")
    if x.dtype != torch.bfloat16:
        raise TypeError(f"{op}: x: expected dtype torch.bfloat16, got {x.dtype}")
    if topk_ids.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{op}: topk_ids: expected dtype torch.int32 or torch.int64, got {topk_ids.dtype}")
    if topk_weights.dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"{op}: topk_weights: expected dtype torch.float32 or torch.bfloat16, got "
                        f"{topk_weights.dtype}")
    if x.dim() != 2 or x.shape[1] != H:
        raise ValueError(f"{op}: x: expected a [T, H] tensor with H = {H}, got shape {tuple(x.shape)}")
    T = x.shape[0]
    if T > T_max:
        raise ValueError(f"{op}: x: T = {T} tokens (dimension 0): expected at most tokens_max = {T_max} (the "
                         "expert-parallel buffers are sized for it once)")
    for name, t in (("topk_ids", topk_ids), ("topk_weights", topk_weights)):
        if tuple(t.shape) != (T, k):
            raise ValueError(f"{op}: {name}: expected shape [T, k] = {(T, k)} (T of x, the module's topk), got "
                             f"{tuple(t.shape)}")
    check_weights(op, w13, w2, dims)
    _checks.check_one_device(op, ("x", "w13", "w2", "topk_ids", "topk_weights"), (x, w13, w2, topk_ids, topk_weights))


def check_weights(op, w13, w2, dims):
    """The module's buffers (a model's .to(dtype) casts them too): bf16,
    contiguous, this rank's experts' shapes; TypeError or ValueError."""
    _, H, I, E, _, P = dims[:6]
    E_loc = E // P
    for name, t in (("w13", w13), ("w2", w2)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.bfloat16 or not t.is_contiguous():
            raise TypeError(f"{op}: {name}: expected a contiguous torch.bfloat16 tensor, got "
                            f"{t.dtype if isinstance(t, torch.Tensor) else type(t).__name__}"
                            f"{'' if not isinstance(t, torch.Tensor) or t.is_contiguous() else ' (not contiguous)'}")
    if tuple(w13.shape) != (E_loc, 2 * I, H) or tuple(w2.shape) != (E_loc, H, I):
        raise ValueError(f"{op}: w13, w2: expected this rank's experts {(E_loc, 2 * I, H)} and {(E_loc, H, I)}, got "
                         f"{tuple(w13.shape)} and {tuple(w2.shape)}")


class ExpertParallel:
    """The expert-parallel part of xstage.MoE (moe_local.MoE makes one for a
    group of P > 1 ranks): the layer's dims, the op's state and the calls."""

    def __init__(self, group, world, rank, hidden, inter, experts, topk, tokens_max, schedule, profile, tile,
                 timeout_s):
        if schedule not in _SCHEDULES:
            raise ValueError(f"{MODULE}: schedule = {schedule!r}: expected one of {', '.join(_SCHEDULES)}")
        if tile not in _TILES:
            raise ValueError(f"{MODULE}: tile = {tile!r}: expected one of {', '.join(_TILES)}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s <= 86400:
            raise ValueError(f"{MODULE}: timeout_s = {timeout_s!r}: expected seconds in (0, 86400]")
        if profile is not None and not isinstance(profile, str):
            raise TypeError(f"{MODULE}: profile: expected None, an embedded profile's name or a file path, got "
                            f"{type(profile).__name__}")
        self.dims = (tokens_max, hidden, inter, experts, topk, world, _TILES[tile])
        self.layout = layout(self.dims, timeout_s)  # the library's checks of the sizes: ValueError
        self.state = _EpState(group, world, rank, self.dims, _SCHEDULES.index(schedule), profile, timeout_s)
        self.id = _next_id[0]
        _next_id[0] += 1
        _states[self.id] = self.state

    def __call__(self, x, w13, w2, topk_ids, topk_weights, check_ids):
        try:
            check_call(MODULE, x, w13, w2, topk_ids, topk_weights, self.dims)
            if check_ids and ids_readable(topk_ids):
                check_id_values(MODULE, topk_ids, self.dims[3])
        except (TypeError, ValueError) as e:
            late = self._keep_in_step(w13, w2)
            if late:  # an earlier call's timeout, reported by the call made here: beside the input's error
                e.add_note(late)
            raise
        return torch.ops.xstage.moe_layer_ep(*detached(MODULE, x, w13, w2, topk_ids, topk_weights), self.id)

    def _keep_in_step(self, w13, w2):
        """Before a rank's bad input raises: the call the other ranks wait for,
        with no tokens of this rank (its experts still serve theirs), so that
        this layer's call completes on every rank. (Where the exception then
        leaves the model's forward, the later layers' calls on the other
        ranks wait in vain: docs/design/python.md.) Eager calls only (a trace
        or a capture that raises does not run); not with bad weights, which
        the module's ranks share. Returns an earlier call's timeout report
        that this call raised, or ""."""
        try:
            check_weights(MODULE, w13, w2, self.dims)
        except (TypeError, ValueError):
            return ""
        if w13.device.type != "cuda" or w2.device != w13.device or torch.compiler.is_compiling() \
                or torch.cuda.is_current_stream_capturing():
            return ""
        H, k = self.dims[1], self.dims[4]
        dev = w13.device
        none = torch.empty((0, H), dtype=torch.bfloat16, device=dev)
        try:
            torch.ops.xstage.moe_layer_ep(none, w13.detach(), w2.detach(),
                                          torch.empty((0, k), dtype=torch.int32, device=dev),
                                          torch.empty((0, k), dtype=torch.float32, device=dev), self.id)
        except RuntimeError as late:
            return str(late)
        return ""

    def prepare(self, device):
        """Makes the buffers now (collective) rather than in the first call."""
        self.state.buffers_for(torch.device(device))

    def sizes(self):
        T_max, H, I, E, k, P, tile = self.dims
        return moe_ep_sizes(T_max, H, I, E, k, P, next(n for n, v in _TILES.items() if v == tile))
