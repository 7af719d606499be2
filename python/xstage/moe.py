"""The MoE expert GEMMs as torch custom ops (docs/design/python.md, "MoE
expert GEMMs"): the same grouped problem as torch._grouped_mm, the rows of
expert e being x[offs[e-1]:offs[e]] (offs[-1] = 0), with L1's SwiGLU and
routing weight in its epilogue.

    h = xstage.grouped_mm_swiglu(x, w13i, offs, row_weight=None)   L1
    y = xstage.grouped_mm(h, w2, offs)                              L2
    y = xstage.moe_experts(x, w13i, w2, offs, row_weight=None)      both

w13i is W13 with its gate and up rows interleaved (moe_interleave_w13, once
at load time); w2 is [E, H, I] as nn.Linear stores it. The tile, split-K and
output store are the library's heuristic (docs/design/moe.md).
"""
import ctypes
from typing import Optional

import torch

from xstage import _lib
from xstage._forward_only import detached

L1, L2 = 0, 1
_NAMES = {L1: "xstage.grouped_mm_swiglu", L2: "xstage.grouped_mm"}
_EXPERTS = "xstage.moe_experts"
_WORKSPACE_BYTES = {}  # (kind, rows, K, N, E, device) -> split workspace (bytes, bytes zeroed): one library call a shape


def moe_interleave_w13(w13):
    """[E, 2I, H] with the gate projection's I rows then the up projection's
    -> the kernel's layout, gate and up rows alternating in groups of 8, so
    that one output tile holds matching gate and up columns. A new contiguous
    tensor; 2I must be a multiple of 16."""
    op = "xstage.moe_interleave_w13"
    if not isinstance(w13, torch.Tensor):
        raise TypeError(f"{op}: w13: expected a torch.Tensor, got {type(w13).__name__}")
    if w13.dim() != 3:
        raise ValueError(f"{op}: w13: expected a [E, 2I, H] tensor, got shape {tuple(w13.shape)}")
    E, two_i, H = w13.shape
    if two_i % 16:
        raise ValueError(f"{op}: w13: 2I = {two_i} (dimension 1): expected a multiple of 16")
    return w13.reshape(E, 2, two_i // 16, 8, H).permute(0, 2, 1, 3, 4).reshape(E, two_i, H).contiguous()


def _check(kind, a, b, offs, row_weight, op=None):
    """Shapes, dtypes, devices and layouts of one GEMM: a [rows, K], b [E, N, K], offs int32 [E], row_weight
    fp32 [rows] (L1 only). Returns (rows, K, N, E). op: the name errors start with (default: the GEMM's)."""
    op = op or _NAMES[kind]
    names = ("x", "w13") if kind == L1 else ("h", "w2")
    for name, t, dims in ((names[0], a, 2), (names[1], b, 3)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.bfloat16:
            raise TypeError(f"{op}: {name}: expected dtype torch.bfloat16, got {t.dtype}")
        if t.dim() != dims:
            raise ValueError(f"{op}: {name}: expected {dims} dimensions, got shape {tuple(t.shape)}")
    if not isinstance(offs, torch.Tensor) or offs.dtype != torch.int32 or offs.dim() != 1:
        raise TypeError(f"{op}: offs: expected a 1-dimensional torch.int32 tensor of cumulative row ends, got "
                        f"{offs.dtype if isinstance(offs, torch.Tensor) else type(offs).__name__}"
                        f"{' ' + str(tuple(offs.shape)) if isinstance(offs, torch.Tensor) else ''}")
    rows, K = a.shape
    E, N, K_b = b.shape
    if K_b != K:
        raise ValueError(f"{op}: {names[1]}: expected [E, N, K] with K = {K} as in {names[0]} {tuple(a.shape)}, "
                         f"got {tuple(b.shape)}")
    if offs.shape[0] != E:
        raise ValueError(f"{op}: offs: expected one end per expert ({E}, as {names[1]} has), got {offs.shape[0]}")
    if E < 1:
        raise ValueError(f"{op}: {names[1]}: expected at least one expert, got shape {tuple(b.shape)}")
    if K < 8 or K % 8:
        raise ValueError(f"{op}: K = {K} (last dimension of {names[0]}): expected a positive multiple of 8")
    if N < 16 or N % 16:  # 16-byte output rows; L1: whole gate/up groups of 8 (moe_interleave_w13)
        what = "2I" if kind == L1 else "H"
        raise ValueError(f"{op}: {names[1]}: {what} = {N} (dimension 1): expected a positive multiple of 16")
    if row_weight is not None:
        if kind != L1:
            raise ValueError(f"{op}: row_weight: L1 only (the routing weight belongs to its epilogue); expected None for L2")
        if not isinstance(row_weight, torch.Tensor) or row_weight.dtype != torch.float32 or \
                tuple(row_weight.shape) != (rows,):
            raise TypeError(f"{op}: row_weight: expected a torch.float32 tensor of shape ({rows},), got "
                            f"{row_weight.dtype if isinstance(row_weight, torch.Tensor) else type(row_weight).__name__}"
                            f"{' ' + str(tuple(row_weight.shape)) if isinstance(row_weight, torch.Tensor) else ''}")
    ts = [a, b, offs] + ([row_weight] if row_weight is not None else [])
    if any(t.device != a.device for t in ts):
        raise ValueError(f"{op}: expected every tensor on one device, got {', '.join(str(t.device) for t in ts)}")
    if a.device.type not in ("cuda", "meta"):
        raise ValueError(f"{op}: expected CUDA tensors, got a tensor on {a.device}")
    return rows, K, N, E


def _contiguous(t):
    """t when the kernels can read it in place (contiguous, 16-byte aligned), else a contiguous copy."""
    if t.is_contiguous() and t.data_ptr() % 16 == 0:
        return t
    return t.clone(memory_format=torch.contiguous_format)


def _prepare(kind, a, b, offs, row_weight, op=None):
    """Everything of one launch but the launch: the checks, operands the kernel can read in place, the output
    and split-K's workspace. Returns the arguments of _run."""
    rows, K, N, E = _check(kind, a, b, offs, row_weight, op)
    a, b, offs = _contiguous(a), _contiguous(b), _contiguous(offs)
    if row_weight is not None:
        row_weight = _contiguous(row_weight)
    c = torch.empty((rows, N // 2 if kind == L1 else N), dtype=torch.bfloat16, device=a.device)
    key = (kind, rows, K, N, E, a.device)
    sizes = _WORKSPACE_BYTES.get(key)
    if sizes is None:  # the size depends on these alone (the heuristic's tile and splits)
        n, z = ctypes.c_int64(0), ctypes.c_int64(0)
        with torch.cuda.device(a.device):
            _lib.call("xstage_torch_moe_workspace_bytes", kind, a.data_ptr(), b.data_ptr(), c.data_ptr(), offs.data_ptr(),
                      rows, K, N, E, ctypes.byref(n), ctypes.byref(z))
        if len(_WORKSPACE_BYTES) >= 4096:  # a server's row counts vary without end: start over
            _WORKSPACE_BYTES.clear()
        sizes = _WORKSPACE_BYTES[key] = (n.value, z.value)
    ws_bytes, zeroed = sizes
    # The split tiles' counts, then their fp32 partials (a grid of tiles for the tail split, 16.5 MiB at most on
    # an H200; about 1 MiB for split-K at 128 rows on K = 6144): a fresh tensor each call, from torch's caching
    # allocator on the caller's stream, so that calls on other streams or in CUDA graphs never share one (the
    # kernel needs it to itself). Only the counts must start at zero.
    ws = None
    if ws_bytes > 0:
        ws = torch.empty(ws_bytes, dtype=torch.uint8, device=a.device)
        ws[:zeroed].zero_()
    return kind, a, b, c, offs, row_weight, (rows, K, N, E), ws, ws_bytes


def _run(kind, a, b, c, offs, row_weight, dims, ws, ws_bytes):
    rows, K, N, E = dims
    with torch.cuda.device(a.device):
        _lib.call("xstage_torch_moe_gemm", kind, a.data_ptr(), b.data_ptr(), c.data_ptr(), offs.data_ptr(),
                  None if row_weight is None else row_weight.data_ptr(), rows, K, N, E,
                  None if ws is None else ws.data_ptr(), ws_bytes, torch.cuda.current_stream(a.device).cuda_stream)
    return c


def _launch(kind, a, b, offs, row_weight):
    return _run(*_prepare(kind, a, b, offs, row_weight))


@torch.library.custom_op("xstage::moe_l1", mutates_args=())
def _moe_l1(x: torch.Tensor, w13: torch.Tensor, offs: torch.Tensor, row_weight: Optional[torch.Tensor]) -> torch.Tensor:
    return _launch(L1, x, w13, offs, row_weight)


@_moe_l1.register_fake
def _moe_l1_fake(x, w13, offs, row_weight):
    rows, _, N, _ = _check(L1, x, w13, offs, row_weight)
    return x.new_empty((rows, N // 2))


@torch.library.custom_op("xstage::moe_l2", mutates_args=())
def _moe_l2(h: torch.Tensor, w2: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    return _launch(L2, h, w2, offs, None)


@_moe_l2.register_fake
def _moe_l2_fake(h, w2, offs):
    rows, _, N, _ = _check(L2, h, w2, offs, None)
    return h.new_empty((rows, N))


@torch.library.custom_op("xstage::moe_experts", mutates_args=())
def _moe_experts(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, offs: torch.Tensor,
                 row_weight: Optional[torch.Tensor]) -> torch.Tensor:
    # Both GEMMs checked (and L2's input allocated) before L1 is launched: bad
    # input stops the call before anything reaches the GPU.
    l1 = _prepare(L1, x, w13, offs, row_weight, _EXPERTS)
    l2 = _prepare(L2, l1[3], w2, offs, None, _EXPERTS)
    _run(*l1)
    return _run(*l2)


def _check_experts(x, w13, w2, offs, row_weight):
    """Both GEMMs' checks; returns the output's shape."""
    rows, _, N, _ = _check(L1, x, w13, offs, row_weight, _EXPERTS)
    rows, _, H, _ = _check(L2, x.new_empty((rows, N // 2)), w2, offs, None, _EXPERTS)
    return rows, H


@_moe_experts.register_fake
def _moe_experts_fake(x, w13, w2, offs, row_weight):
    return x.new_empty(_check_experts(x, w13, w2, offs, row_weight))


def _tensors(op, **named):
    """What the ops' schemas cannot say well: an argument that is no tensor at all."""
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name}: expected a torch.Tensor, got {type(t).__name__}")


def _optional(row_weight):
    return {} if row_weight is None else {"row_weight": row_weight}


# The ops check their arguments (real and fake implementations alike), so
# eager calls here check only that they are tensors: no second pass. Under
# torch.compile the op's check would run inside the fake implementation,
# where tracing turns its TypeError or ValueError into an internal error:
# there the whole check runs first.
def grouped_mm_swiglu(x, w13, offs, row_weight=None):
    """L1 of the expert layer: for every expert e, h[rows of e] = silu(g) * u
    (times row_weight[row] when given), where g and u are the gate and up
    halves of x[rows of e] @ W13[e]^T. x bf16 [rows, H]; w13 bf16 [E, 2I, H],
    interleaved by moe_interleave_w13; offs int32 [E], cumulative row ends as
    torch._grouped_mm takes them (any counts, 0 included); row_weight fp32
    [rows] or None. Returns a new bf16 [rows, I]; rows at or past offs[-1]
    belong to no expert and are left unwritten. Forward only."""
    _tensors(_NAMES[L1], x=x, w13=w13, offs=offs, **_optional(row_weight))
    if torch.compiler.is_compiling():
        _check(L1, x, w13, offs, row_weight)
    return torch.ops.xstage.moe_l1(*detached(_NAMES[L1], x, w13, offs, row_weight))


def grouped_mm(h, w2, offs):
    """L2 of the expert layer: y[rows of e] = h[rows of e] @ W2[e]^T for every
    expert e. h bf16 [rows, I]; w2 bf16 [E, H, I]; offs as in
    grouped_mm_swiglu. Returns a new bf16 [rows, H]; rows at or past
    offs[-1] are left unwritten. Forward only."""
    _tensors(_NAMES[L2], h=h, w2=w2, offs=offs)
    if torch.compiler.is_compiling():
        _check(L2, h, w2, offs, None)
    return torch.ops.xstage.moe_l2(*detached(_NAMES[L2], h, w2, offs))


def moe_experts(x, w13, w2, offs, row_weight=None):
    """Both GEMMs of the expert layer: grouped_mm(grouped_mm_swiglu(x, w13,
    offs, row_weight), w2, offs), as one op (one dispatch: eager calls on
    small problems are bound by the host)."""
    _tensors(_EXPERTS, x=x, w13=w13, w2=w2, offs=offs, **_optional(row_weight))
    if torch.compiler.is_compiling():
        _check_experts(x, w13, w2, offs, row_weight)
    return torch.ops.xstage.moe_experts(*detached(_EXPERTS, x, w13, w2, offs, row_weight))
