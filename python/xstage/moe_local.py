"""The MoE layer on one GPU (docs/design/python.md, "The MoE layer"): a
module and a functional op beside it. Routing (the gate, softmax or sigmoid,
top-k) stays the model's; topk_softmax is the common case.

    weights, ids = xstage.topk_softmax(router_logits, k, renormalize=False)
    moe = xstage.MoE(w13, w2)                      # or MoE.from_experts(gate, up, down)
    out = moe(x, ids, weights)                     # x [T, H] -> [T, H]
    out = xstage.moe_layer(x, w13i, w2, ids, weights)

Five kernels on torch's current stream, no host synchronisation (the counts
and offsets stay on the device): routing count, routing scatter (token rows
copied into expert order with their routing weights), L1 + SwiGLU with the
routing weight in its epilogue, L2, and the combine (each token's k rows
summed in fp32 in slot order: the same bits on every run). So a CUDA graph
captures it and torch.compile traces it as one node (op xstage::moe_layer).

What is checked when (ids are device data; reading them needs a sync):
- every call, before anything launches, on the host: types, dtypes, shapes,
  devices, the GEMMs' size rules, k <= min(E, 32), E <= 1024, T <= tokens_max;
- eager calls (not compiling, not capturing) with check_ids=True: the id
  values (in [0, E), k distinct a token), one synchronisation; a bad one is a
  ValueError naming the token and slot;
- always, on the device: a pair whose id is out of range or repeats an
  earlier slot's routes nowhere (adds nothing) and the first such pair is
  recorded; moe_routing_error() reads (and clears) the record.

No process group or a group of one; a group of P > 1 ranks runs the
expert-parallel layer instead (moe_ep.py), from the same module.
"""
import ctypes

import torch

from xstage import _checks, _lib
from xstage._forward_only import detached
from xstage._routing_ids import check_id_values, ids_readable
from xstage.moe import L1, L2, _check, _contiguous, moe_interleave_w13

OP = "xstage.moe_layer"
MODULE = "xstage.MoE"
MAX_EXPERTS = 1024  # src/device/moe/token_route_params.hpp
MAX_TOPK = 32
_IDS = (torch.int32, torch.int64)
_WEIGHTS = (torch.float32, torch.bfloat16)
_SIZES = {}          # (T, H, I, E, k, flags, device) -> (scratch, workspace, workspace zeroed) bytes: one call a shape
_GEMM_SHAPES = set()  # (rows, H, 2I, E) whose GEMM rules passed (moe._check on meta tensors)
_RECORDS = {}        # device -> int32[8], the routing record the kernels write (made outside graph capture)


def _type_name(t):
    return f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__


def _check_layer(op, x, w13, w2, topk_ids, topk_weights, tokens_max=None):
    """Types, dtypes, shapes and devices of one call; returns (T, H, I, E, k)."""
    for name, t in (("x", x), ("w13", w13), ("w2", w2), ("topk_ids", topk_ids), ("topk_weights", topk_weights)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name}: expected a torch.Tensor, got {type(t).__name__}")
    for name, t, dims, what in (("x", x, 2, "[T, H]"), ("w13", w13, 3, "[E, 2I, H]"), ("w2", w2, 3, "[E, H, I]")):
        if t.dtype != torch.bfloat16:
            raise TypeError(f"{op}: {name}: expected dtype torch.bfloat16, got {t.dtype}")
        if t.dim() != dims:
            raise ValueError(f"{op}: {name}: expected a {what} tensor, got shape {tuple(t.shape)}")
    if topk_ids.dtype not in _IDS:
        raise TypeError(f"{op}: topk_ids: expected dtype torch.int32 or torch.int64, got {topk_ids.dtype}")
    if topk_weights.dtype not in _WEIGHTS:
        raise TypeError(f"{op}: topk_weights: expected dtype torch.float32 or torch.bfloat16, got "
                        f"{topk_weights.dtype}")
    T, H = x.shape
    E, two_i, H13 = w13.shape
    if topk_ids.dim() != 2 or topk_ids.shape[0] != T:
        raise ValueError(f"{op}: topk_ids: expected [T, k] with T = {T} as in x {tuple(x.shape)}, got shape "
                         f"{tuple(topk_ids.shape)}")
    k = topk_ids.shape[1]
    if not 1 <= E <= MAX_EXPERTS:
        raise ValueError(f"{op}: w13: E = {E} experts (dimension 0): expected 1 .. {MAX_EXPERTS}")
    if not 1 <= k <= min(E, MAX_TOPK):
        raise ValueError(f"{op}: topk_ids: k = {k} (dimension 1): expected 1 .. {min(E, MAX_TOPK)} "
                         f"(at most E = {E} and {MAX_TOPK})")
    if tuple(topk_weights.shape) != tuple(topk_ids.shape):
        raise ValueError(f"{op}: topk_weights: expected the shape of topk_ids {tuple(topk_ids.shape)}, got "
                         f"{tuple(topk_weights.shape)}")
    if H13 != H:
        raise ValueError(f"{op}: w13: expected [E, 2I, H] with H = {H} as in x {tuple(x.shape)}, got "
                         f"{tuple(w13.shape)}")
    if two_i % 2:
        raise ValueError(f"{op}: w13: 2I = {two_i} (dimension 1): expected an even number (gate and up rows)")
    I = two_i // 2
    if tuple(w2.shape) != (E, H, I):
        raise ValueError(f"{op}: w2: expected [E, H, I] = {(E, H, I)} from w13 {tuple(w13.shape)}, got "
                         f"{tuple(w2.shape)}")
    if T * k >= 2**31:  # the routing kernels index rows in 32 bits
        raise ValueError(f"{op}: x, topk_ids: T x k = {T} x {k} = {T * k} rows: expected fewer than 2^31")
    if tokens_max is not None and T > tokens_max:
        raise ValueError(f"{op}: x: T = {T} tokens (dimension 0): expected at most tokens_max = {tokens_max}")
    _checks.check_one_device(op, ("x", "w13", "w2", "topk_ids", "topk_weights"), (x, w13, w2, topk_ids, topk_weights))
    _check_gemms(op, T * k, H, two_i, E)
    return T, H, I, E, k


def _check_gemms(op, rows, H, two_i, E):
    """The grouped GEMMs' own size rules (moe._check), on meta tensors of the layer's GEMM shapes."""
    key = (rows, H, two_i, E)
    compiling = torch.compiler.is_compiling()
    if not compiling and key in _GEMM_SHAPES:
        return
    meta = lambda *shape, dtype=torch.bfloat16: torch.empty(*shape, dtype=dtype, device="meta")  # noqa: E731
    offs = meta(E, dtype=torch.int32)
    _check(L1, meta(rows, H), meta(E, two_i, H), offs, meta(rows, dtype=torch.float32), op)
    _check(L2, meta(rows, two_i // 2), meta(E, H, two_i // 2), offs, None, op)
    if not compiling:
        if len(_GEMM_SHAPES) >= 4096:
            _GEMM_SHAPES.clear()
        _GEMM_SHAPES.add(key)


def _flags(topk_ids, topk_weights):
    return int(topk_ids.dtype == torch.int64) | (int(topk_weights.dtype == torch.bfloat16) << 1)


def _sizes(dims, flags, device):
    key = dims + (flags, device)
    got = _SIZES.get(key)
    if got is None:
        dims_ptr, keep = _lib.i64_array(list(dims))
        out_ptr, out = _lib.i64_array([0, 0, 0, 0])
        with torch.cuda.device(device):
            _lib.call("xstage_torch_moe_layer_sizes", dims_ptr, flags, out_ptr)
        if len(_SIZES) >= 4096:  # a server's token counts vary without end: start over
            _SIZES.clear()
        got = _SIZES[key] = (out[0], out[1], out[3])
    return got


def _record(device):
    """This device's routing record, made on first use outside graph capture
    (a capture with none yet runs without one: call once eagerly first)."""
    rec = _RECORDS.get(device)
    if rec is None and not torch.cuda.is_current_stream_capturing():
        # A plain tensor even under torch.inference_mode(): moe_routing_error clears it in place, maybe outside.
        with torch.inference_mode(False):
            rec = _RECORDS[device] = torch.zeros(8, dtype=torch.int32, device=device)
    return rec


def _launch(x, w13, w2, topk_ids, topk_weights):
    T, H, I, E, k = _check_layer(OP, x, w13, w2, topk_ids, topk_weights)
    out = torch.empty((T, H), dtype=torch.bfloat16, device=x.device)
    if T == 0:
        return out
    x, w13, w2, topk_ids, topk_weights = (_contiguous(t) for t in (x, w13, w2, topk_ids, topk_weights))
    flags = _flags(topk_ids, topk_weights)
    scratch_bytes, ws_bytes, ws_zeroed = _sizes((T, H, I, E, k), flags, x.device)
    # From torch's caching allocator on the current stream, each call: CUDA
    # graphs capture them, and calls on other streams never share one. The
    # split workspace's counts must start zeroed (each GEMM leaves them so).
    scratch = torch.empty(scratch_bytes, dtype=torch.uint8, device=x.device)
    ws = None
    if ws_bytes > 0:
        ws = torch.empty(ws_bytes, dtype=torch.uint8, device=x.device)
        ws[:ws_zeroed].zero_()
    rec = _record(x.device)
    dims_ptr, keep = _lib.i64_array([T, H, I, E, k])
    with torch.cuda.device(x.device):
        _lib.call("xstage_torch_moe_layer", dims_ptr, flags, x.data_ptr(), w13.data_ptr(), w2.data_ptr(),
                  topk_ids.data_ptr(), topk_weights.data_ptr(), out.data_ptr(), scratch.data_ptr(), scratch_bytes,
                  None if ws is None else ws.data_ptr(), ws_bytes, None if rec is None else rec.data_ptr(),
                  torch.cuda.current_stream(x.device).cuda_stream)
    return out


@torch.library.custom_op("xstage::moe_layer", mutates_args=())
def _moe_layer(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor,
               topk_weights: torch.Tensor) -> torch.Tensor:
    return _launch(x, w13, w2, topk_ids, topk_weights)


@_moe_layer.register_fake
def _moe_layer_fake(x, w13, w2, topk_ids, topk_weights):
    T, H, _, _, _ = _check_layer(OP, x, w13, w2, topk_ids, topk_weights)
    return x.new_empty((T, H))


def _call(op, x, w13, w2, topk_ids, topk_weights, check_ids, tokens_max):
    for name, t in (("x", x), ("w13", w13), ("w2", w2), ("topk_ids", topk_ids), ("topk_weights", topk_weights)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name}: expected a torch.Tensor, got {type(t).__name__}")
    read_ids = check_ids and ids_readable(topk_ids)
    # The op checks its arguments itself (real and fake implementations); the
    # whole check runs here first where an error inside tracing would lose its
    # type (torch.compile), where the op does not know the limit (tokens_max)
    # or the caller's name (the module), and before the value check, which
    # indexes by the shapes.
    if torch.compiler.is_compiling() or tokens_max is not None or read_ids or op != OP:
        _check_layer(op, x, w13, w2, topk_ids, topk_weights, tokens_max)
    if read_ids:
        check_id_values(op, topk_ids, w13.shape[0])
    return torch.ops.xstage.moe_layer(*detached(op, x, w13, w2, topk_ids, topk_weights))


def moe_layer(x, w13, w2, topk_ids, topk_weights, check_ids=True, tokens_max=None):
    """The MoE layer on one GPU: out[t] = sum over j of topk_weights[t, j] *
    W2[e] (silu(g) * u), g and u the gate and up halves of W13[e] x[t], e =
    topk_ids[t, j]. x bf16 [T, H]; w13 bf16 [E, 2I, H] interleaved by
    moe_interleave_w13; w2 bf16 [E, H, I]; topk_ids int32 or int64 [T, k];
    topk_weights fp32 or bf16 [T, k]. Returns a new bf16 [T, H], the same bits
    on every call. check_ids: read the id values in eager calls (one sync; see
    the module docstring for what is checked when). Forward only."""
    return _call(OP, x, w13, w2, topk_ids, topk_weights, check_ids, tokens_max)


def moe_routing_error(device=None, clear=True):
    """The device's routing record as a message, or None: the first pair that
    a call since the last clear routed nowhere (id out of range or repeated).
    Synchronises with the device."""
    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    rec = _RECORDS.get(device)
    if rec is None:
        return None
    host = rec.cpu()
    if clear:
        rec.zero_()
    msg = ctypes.create_string_buffer(_lib._ERR_LEN)
    if _lib.lib().xstage_torch_moe_describe_route_error(host.data_ptr(), msg, _lib._ERR_LEN) == 0:
        return None
    return f"{OP}: {msg.value.decode(errors='replace')}"


def topk_softmax(logits, k, renormalize=False):
    """The common router: softmax over the experts in fp32, then the top k.
    logits [T, E] (any float dtype). Returns (weights fp32 [T, k], ids int64
    [T, k]), in torch.topk's order (largest first); renormalize: the k weights
    of a token divided by their sum (Qwen3-MoE's norm_topk_prob, Mixtral)."""
    op = "xstage.topk_softmax"
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"{op}: logits: expected a torch.Tensor, got {type(logits).__name__}")
    if not logits.dtype.is_floating_point:
        raise TypeError(f"{op}: logits: expected a floating-point dtype, got {logits.dtype}")
    if logits.dim() != 2:
        raise ValueError(f"{op}: logits: expected a [T, E] tensor, got shape {tuple(logits.shape)}")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= logits.shape[1]:
        raise ValueError(f"{op}: k = {k!r}: expected an int in 1 .. E = {logits.shape[1]}")
    weights, ids = torch.topk(torch.softmax(logits, dim=-1, dtype=torch.float32), k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids


def _weight(t, name, shape, op):
    """An expert's weight from an nn.Linear (no bias) or a tensor, checked against its expected shape."""
    if isinstance(t, torch.nn.Linear):
        if t.bias is not None:
            raise ValueError(f"{op}: {name}: expected an nn.Linear without bias (the layer has none), got one with")
        t = t.weight
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name}: expected an nn.Linear or a torch.Tensor, got {type(t).__name__}")
    if shape is not None and tuple(t.shape) != shape:
        raise ValueError(f"{op}: {name}: expected shape {shape} (as expert 0's), got {tuple(t.shape)}")
    return t.detach()


def _group_shape(group):
    """(size, rank) of a process group (a seam for the CPU tests)."""
    import torch.distributed as dist
    return dist.get_world_size(group), dist.get_rank(group)


def _positive_int(value, name, what):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{MODULE}: {name} = {value!r}: expected an int >= 1 ({what})")
    return value


class MoE(torch.nn.Module):
    """This rank's experts and the layer over them: forward(x [T, H],
    topk_ids [T, k], topk_weights [T, k]) -> [T, H] bf16.

    w13 [E, 2I, H]: each expert's gate projection's I rows, then its up
    projection's (as nn.Linear stores them; interleaved=True: already
    interleaved by moe_interleave_w13); w2 [E, H, I]. Stored once, bf16, as
    buffers (so .to(device) moves them). tokens_max: a call with more tokens
    is a ValueError. check_ids: see moe_layer.

    group None or of one rank: the one-GPU layer (moe_layer). A group of P >
    1 ranks (NCCL; torch symmetric memory must work on it): expert
    parallelism (moe_ep.py). Rank r keeps experts r E/P .. (r+1) E/P - 1 of
    w13 / w2 (all E experts; or, with num_experts=E, w13 / w2 hold only this
    rank's E/P). tokens_max (T_max a rank) and topk (k) are then required:
    the buffers are sized once from them (sizes() reports them) and made on
    the first call (collective: every rank calls, not under graph capture).
    schedule: the fused kernel's claim order, 'model-guided' (default: the
    plan the profile predicts best), 'interleaved' or 'expert-wave';
    profile: an embedded profile's name or a profile file (None: h200-peer);
    tile: 'auto', 'm128n256' or 'm64n256'; timeout_s: every cross-rank wait's
    limit (check_timeouts() raises naming rank, flag and values; eager calls
    also raise on a later call, after making it). Bad input on one rank
    (ids, shapes, dtypes) raises a ValueError or TypeError there after that
    rank has taken part in the call with no tokens of its own, so this call
    completes on the other ranks; their later layers then wait for a rank
    that left the forward (each wait times out): treat it as fatal for the
    step on every rank."""

    def __init__(self, w13, w2, *, interleaved=False, group=None, tokens_max=None, check_ids=True, topk=None,
                 num_experts=None, schedule="model-guided", profile=None, tile="auto", timeout_s=10.0):
        super().__init__()
        world, rank = _group_shape(group) if group is not None else (1, 0)
        for name, t in (("w13", w13), ("w2", w2)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{MODULE}: {name}: expected a torch.Tensor, got {type(t).__name__}")
            if not t.dtype.is_floating_point:
                raise TypeError(f"{MODULE}: {name}: expected a floating-point dtype (stored as bf16), got {t.dtype}")
            if t.dim() != 3:
                what = "[E, 2I, H]" if name == "w13" else "[E, H, I]"
                raise ValueError(f"{MODULE}: {name}: expected a {what} tensor, got shape {tuple(t.shape)}")
        E, two_i, H = w13.shape
        if two_i % 2:
            raise ValueError(f"{MODULE}: w13: 2I = {two_i} (dimension 1): expected an even number (gate and up rows)")
        if tuple(w2.shape) != (E, H, two_i // 2):
            raise ValueError(f"{MODULE}: w2: expected [E, H, I] = {(E, H, two_i // 2)} from w13 {tuple(w13.shape)}, "
                             f"got {tuple(w2.shape)}")
        if tokens_max is not None and (isinstance(tokens_max, bool) or not isinstance(tokens_max, int)
                                       or tokens_max < 1):
            raise ValueError(f"{MODULE}: tokens_max = {tokens_max!r}: expected None or an int >= 1")
        self._ep = None
        if world > 1:
            tokens_max = _positive_int(tokens_max, "tokens_max", "tokens a rank: the expert-parallel buffers are "
                                       "sized for it")
            topk = _positive_int(topk, "topk", "experts a token: the expert-parallel buffers are sized for it")
            if num_experts is None:
                num_experts = E
                if E % world:
                    raise ValueError(f"{MODULE}: w13: E = {E} experts do not split over P = {world} ranks; expected "
                                     "a multiple of P (or this rank's experts with num_experts=E)")
                E_loc = E // world
                w13, w2 = w13[rank * E_loc:(rank + 1) * E_loc], w2[rank * E_loc:(rank + 1) * E_loc]
            else:
                _positive_int(num_experts, "num_experts", "all ranks' experts")
                if num_experts != E * world:
                    raise ValueError(f"{MODULE}: w13: {E} experts with num_experts = {num_experts} over P = "
                                     f"{world} ranks; expected num_experts / P = this rank's experts")
            from xstage.moe_ep import ExpertParallel
            self._ep = ExpertParallel(group, world, rank, H, two_i // 2, num_experts, topk, tokens_max, schedule,
                                      profile, tile, timeout_s)
        w13 = w13.detach().to(torch.bfloat16)
        self.register_buffer("w13", w13.contiguous() if interleaved else moe_interleave_w13(w13))
        self.register_buffer("w2", w2.detach().to(torch.bfloat16).contiguous())
        self.tokens_max, self.check_ids, self.world, self.rank = tokens_max, check_ids, world, rank

    @classmethod
    def from_experts(cls, gate, up, down, **kwargs):
        """From a model's experts: gate, up and down, one entry an expert, each
        an nn.Linear without bias or its weight ([I, H], [I, H], [H, I], as
        nn.Linear stores them: Mixtral's w1, w3, w2; Qwen3-MoE's gate_proj,
        up_proj, down_proj). Copies them once; the model's own may be freed."""
        op = f"{MODULE}.from_experts"
        gate, up, down = list(gate), list(up), list(down)
        if not gate or len(up) != len(gate) or len(down) != len(gate):
            raise ValueError(f"{op}: gate, up, down: expected one entry an expert each, got {len(gate)}, {len(up)}, "
                             f"{len(down)}")
        g0 = _weight(gate[0], "gate[0]", None, op)
        if g0.dim() != 2:
            raise ValueError(f"{op}: gate[0]: expected an [I, H] weight, got shape {tuple(g0.shape)}")
        I, H = g0.shape
        w13 = torch.stack([torch.cat([_weight(g, f"gate[{e}]", (I, H), op), _weight(u, f"up[{e}]", (I, H), op)])
                           for e, (g, u) in enumerate(zip(gate, up))])
        w2 = torch.stack([_weight(d, f"down[{e}]", (H, I), op) for e, d in enumerate(down)])
        return cls(w13, w2, **kwargs)

    @property
    def num_experts(self):
        """All ranks' experts (this rank holds num_experts / world of them)."""
        return self.w13.shape[0] * self.world

    def forward(self, x, topk_ids, topk_weights):
        if self._ep is not None:
            return self._ep(x, self.w13, self.w2, topk_ids, topk_weights, self.check_ids)
        return _call(MODULE, x, self.w13, self.w2, topk_ids, topk_weights, self.check_ids, self.tokens_max)

    def sizes(self):
        """Bytes this rank holds for the layer: {'symmetric', 'workspace',
        'weights', 'total', ...} (moe_ep.moe_ep_sizes). One GPU: the weights
        only; the scratch of a call comes from torch's caching allocator."""
        if self._ep is not None:
            return self._ep.sizes()
        w = self.w13.numel() * 2 + self.w2.numel() * 2
        return {"symmetric": 0, "workspace": 0, "weights": w, "total": w}

    def prepare(self):
        """Expert parallel: makes and exchanges the symmetric buffers now, on
        the weights' device (collective: every rank calls it), instead of in
        the first forward. One GPU: nothing to make."""
        if self._ep is not None:
            self._ep.prepare(self.w13.device)

    def check_timeouts(self):
        """Expert parallel: waits for the device and raises RuntimeError if a
        cross-rank wait of any call so far timed out (naming rank, flag and
        values) or the device saw bad routing. One GPU: nothing waits on
        another rank (routing errors: routing_error())."""
        if self._ep is not None:
            self._ep.state.check_timeouts(synchronize=True)

    def routing_error(self, clear=True):
        """moe_routing_error on this module's device (one GPU; expert parallel:
        check_timeouts() reports bad routing the device saw)."""
        return moe_routing_error(self.w13.device, clear)

    def extra_repr(self):
        E, two_i, H = self.w13.shape
        ep = f", world={self.world}, rank={self.rank}, local_experts={E}" if self._ep is not None else ""
        return (f"experts={E * self.world}, hidden={H}, inter={two_i // 2}, tokens_max={self.tokens_max}, "
                f"check_ids={self.check_ids}{ep}")
