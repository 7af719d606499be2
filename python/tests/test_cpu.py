"""CPU tests of the Python package (run in CI): op registration, fake-tensor
shapes under FakeTensorMode and torch.compile, error messages, the Ulysses
all-to-all packing, and the library's validation (it loads without a GPU)."""
import ctypes
import struct

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import xstage
from xstage import layout
from conftest import library_or_skip

BF16 = torch.bfloat16


def test_ops_registered_with_schemas():
    assert str(torch.ops.xstage.attention.default._schema) == (
        "xstage::attention(Tensor q, Tensor k, Tensor v, float? scale, SymInt kernel) -> Tensor")
    assert str(torch.ops.xstage.ulysses_attention.default._schema) == (
        "xstage::ulysses_attention(Tensor q, Tensor k, Tensor v, SymInt state, SymInt world, SymInt rank, "
        "float? scale) -> Tensor")
    assert callable(xstage.attention) and issubclass(xstage.UlyssesAttention, torch.nn.Module)


def test_multicast_is_off_by_default():
    import os
    assert os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert os.environ["NCCL_NVLS_ENABLE"] == "0"


@pytest.mark.parametrize("B,S_q,S_kv,H,D", [(1, 77, 130, 3, 64), (2, 4097, 1, 5, 128)])
def test_attention_fake_shape(B, S_q, S_kv, H, D):
    with FakeTensorMode():
        q = torch.empty(B, S_q, H, D, dtype=BF16, device="cuda")
        k = torch.empty(B, S_kv, H, D, dtype=BF16, device="cuda")
        o = xstage.attention(q, k, k, scale=0.5)
        assert o.shape == (B, S_q, H, D) and o.dtype == BF16 and o.device.type == "cuda"
        assert o.is_contiguous()


@pytest.mark.parametrize("S,P", [(4097, 2), (4096, 2), (5, 4), (300, 3)])
def test_ulysses_fake_shape_every_rank(S, P):
    B, H, D = 2, 12, 128
    with FakeTensorMode():
        qh = torch.empty(B, S, H // P, D, dtype=BF16, device="cuda")
        rows = []
        for rank in range(P):
            o = torch.ops.xstage.ulysses_attention(qh, qh, qh, 0, P, rank, None)
            assert o.shape == (B, layout.seq_rows(S, P, rank), H, D) and o.dtype == BF16
            rows.append(o.shape[1])
    chunks = [len(c) for c in torch.arange(S).chunk(P)]  # torch.chunk's split; it may give fewer than P
    assert rows == chunks + [0] * (P - len(chunks))


def _compile_and_capture(fn, *args):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(fn, backend=backend, fullgraph=True)(*args)
    assert len(graphs) == 1
    return out, graphs[0]


def _calls(gm, packet):
    """How many nodes of the traced graph call the op (its packet or an overload)."""
    return sum(n.op == "call_function" and (n.target is packet or n.target in [packet.default])
               for n in gm.graph.nodes)


def test_attention_traced_by_torch_compile():
    q = torch.empty(2, 100, 4, 64, dtype=BF16, device="meta")
    k = torch.empty(2, 33, 4, 64, dtype=BF16, device="meta")
    out, gm = _compile_and_capture(lambda q, k: xstage.attention(q, k, k) * 2, q, k)
    assert out.shape == (2, 100, 4, 64)
    assert _calls(gm, torch.ops.xstage.attention) == 1


@pytest.mark.parametrize("fused", [True, False])
def test_ulysses_module_traced_by_torch_compile(group, fused):
    library_or_skip()
    ua = xstage.UlyssesAttention(group, fused=fused)
    P = ua.world
    q = torch.empty(1, 300, 4 * P, 128, dtype=BF16, device="meta")
    out, gm = _compile_and_capture(ua, q, q, q)
    assert out.shape == (1, 300, 4 * P, 128)
    assert _calls(gm, torch.ops.xstage.ulysses_attention) == int(fused)
    assert _calls(gm, torch.ops.xstage.attention) == int(not fused)


def _bf16(*shape):
    return torch.zeros(*shape, dtype=BF16)


@pytest.mark.parametrize("args,exc,words", [
    ((_bf16(1, 8, 2, 64).half(), _bf16(1, 8, 2, 64), _bf16(1, 8, 2, 64)), TypeError, "q: expected dtype torch.bfloat16"),
    ((_bf16(1, 8, 2, 96),) * 3, ValueError, "head dim D = 96"),
    ((_bf16(8, 2, 64),) * 3, ValueError, "q: expected 4 dimensions"),
    ((_bf16(1, 8, 2, 64), _bf16(1, 9, 2, 64), _bf16(1, 8, 2, 64)), ValueError, "k and v: expected one shape"),
    ((_bf16(1, 8, 2, 64), _bf16(1, 9, 3, 64), _bf16(1, 9, 3, 64)), ValueError, "H = 2"),
    ((_bf16(1, 0, 2, 64),) * 3, ValueError, "non-empty"),
    ((_bf16(1, 8, 2, 64),) * 3, ValueError, "expected CUDA tensors, got a tensor on cpu"),
    ((_bf16(1, 8, 2, 64), "k", _bf16(1, 8, 2, 64)), TypeError, "k: expected a torch.Tensor"),
])
def test_attention_errors_say_what_and_where(args, exc, words):
    with pytest.raises(exc) as e:
        xstage.attention(*args)
    assert str(e.value).startswith("xstage.attention: ") and words in str(e.value)


def test_attention_rejects_a_bad_scale_and_fake_mode_checks_too():
    with pytest.raises(ValueError, match="scale: expected a finite number"):
        xstage.attention(*(_bf16(1, 8, 2, 64),) * 3, scale=float("nan"))
    with FakeTensorMode():
        q = torch.empty(1, 8, 2, 96, dtype=BF16, device="cuda")
        with pytest.raises(ValueError, match="head dim D = 96"):
            torch.ops.xstage.attention(q, q, q, None, 0)


def test_ulysses_module_errors(group):
    library_or_skip()
    ua = xstage.UlyssesAttention(group)
    P = ua.world
    q = torch.empty(1, 10, 2 * P, 64, dtype=BF16, device="meta")
    with pytest.raises(ValueError, match=r"holds 10 rows; with seq_len = 7 it must hold"):
        ua(q, q, q, seq_len=7)
    k = torch.empty(1, 11, 2 * P, 64, dtype=BF16, device="meta")
    with pytest.raises(ValueError, match="k and v: expected one shape"):
        ua(q, k, q)
    with pytest.raises(ValueError, match="expected shards of one sequence"):
        ua(q, k, k)
    with pytest.raises(ValueError, match="kernel: expected 'wgmma' or 'mma'"):
        xstage.UlyssesAttention(group, kernel="flash")
    with pytest.raises(ValueError, match="store path 'nope': expected vector16"):
        xstage.UlyssesAttention(group, store="nope")
    with pytest.raises(ValueError, match="timeout_s: expected > 0"):
        xstage.UlyssesAttention(group, timeout_s=0)


def _exchange(sends, out_splits_of, in_splits_of):
    """all_to_all_single over dim 0 done by hand: rank j receives, in rank
    order, block j of every rank's send."""
    P = len(sends)
    blocks = [list(s.split(in_splits_of(i))) for i, s in enumerate(sends)]
    recvs = [torch.cat([blocks[i][j] for i in range(P)]) for j in range(P)]
    for j, r in enumerate(recvs):
        assert r.shape[0] == sum(out_splits_of(j))
    return recvs


@pytest.mark.parametrize("S,P", [(4097, 2), (12, 3), (5, 4), (64, 1)])
def test_ulysses_all_to_all_packing_round_trip(S, P):
    B, H, D = 2, 3 * P, 8
    g = torch.Generator().manual_seed(S * 10 + P)
    full = [torch.randn(B, S, H, D, generator=g) for _ in range(3)]
    shards = [[t[:, r * layout.chunk_rows(S, P):][:, :layout.seq_rows(S, P, r)] for t in full] for r in range(P)]
    assert [s[0].shape[1] for s in shards] == layout.seq_split(S, P)
    # pre-attention: rank j ends with every row of heads [j H/P, (j+1) H/P)
    recvs = _exchange([layout.pack_seq_to_heads(s, P) for s in shards], lambda j: layout.seq_split(S, P),
                      lambda i: [layout.seq_rows(S, P, i)] * P)
    Hl = H // P
    heads = [layout.unpack_seq_to_heads(r) for r in recvs]
    for j in range(P):
        for t in range(3):
            assert torch.equal(heads[j][t], full[t][:, :, j * Hl:(j + 1) * Hl])
    # post-attention: back to each rank's rows, all heads
    sends = [layout.pack_heads_to_seq(heads[j][0]) for j in range(P)]
    back = _exchange(sends, lambda j: [layout.seq_rows(S, P, j)] * P, lambda i: layout.seq_split(S, P))
    for r in range(P):
        assert torch.equal(layout.unpack_heads_to_seq(back[r], P), shards[r][0])


def _record(set_, rank, flag, block, thread, waited, expected, seen):
    return struct.pack("<Iiiii4xQQQ", set_, rank, flag, block, thread, waited, expected, seen)


def test_library_reports_a_timeout_record():
    lib = library_or_skip()
    from xstage import ulysses
    assert lib.xstage_ulysses_timeout_record_bytes() == 48
    clear = torch.frombuffer(bytearray(_record(0, 0, 0, 0, 0, 0, 0, 0)), dtype=torch.uint8)
    assert ulysses._describe_timeout(clear) == ""
    rec = torch.frombuffer(bytearray(_record(1, 1, 17, 131, 5, 2_000_000_000, 9, 8)), dtype=torch.uint8)
    msg = ulysses._describe_timeout(rec)
    assert "flag timeout: rank 1 waited on flag 17" in msg and "expected >= 9, saw 8" in msg


@pytest.mark.parametrize("shape,words", [
    ((2, 0, 1, 64, 24, 96, 4), "head dim D: expected 64 or 128, got 96"),
    ((2, 0, 1, 64, 25, 128, 4), "H = 25 heads do not split over P = 2 ranks"),
    ((2, 2, 1, 64, 24, 128, 4), "rank: expected 0 .. 1 (P = 2), got 2"),
    ((2, 0, 1, 0, 24, 128, 4), "expected >= 1"),
    ((2, 0, 1, 2 ** 31, 24, 128, 4), "expected at most 2^31 - 1 tokens"),
    ((2, 0, 1, 64, 24, 128, 2), "attention kernel: expected wgmma-pingpong or mma"),
])
def test_library_validates_the_ulysses_shape(shape, words):
    library_or_skip()
    from xstage import _lib
    plan_ptr, _ = _lib.i64_array([0] * 6)
    shape_ptr, _keep = _lib.i64_array(shape)
    with pytest.raises(RuntimeError) as e:
        _lib.call("xstage_ulysses_plan", shape_ptr, plan_ptr)
    assert str(e.value).startswith("ulysses: ") and words in str(e.value)


def test_library_plan_matches_the_python_layout():
    library_or_skip()
    from xstage import _lib
    for P, rank, S in [(2, 1, 4097), (3, 2, 10), (4, 3, 5), (1, 0, 77)]:
        plan_ptr, plan = _lib.i64_array([0] * 6)
        shape_ptr, _keep = _lib.i64_array((P, rank, 2, S, 4 * P, 128, 4))
        _lib.call("xstage_ulysses_plan", shape_ptr, plan_ptr)
        block_m, m_blocks, chunk, rows, out_elems, flag_slots = list(plan)
        assert (chunk, rows) == (layout.chunk_rows(S, P), layout.seq_rows(S, P, rank))
        assert m_blocks == -(-S // block_m) and out_elems == 2 * chunk * 4 * P * 128
        order = (ctypes.c_int * (P * m_blocks))()
        _lib.call("xstage_ulysses_tile_order", shape_ptr, 1, order, P * m_blocks)
        for r in range(P):  # every rank's order is a permutation of its m-blocks
            assert sorted(order[r * m_blocks:(r + 1) * m_blocks]) == list(range(m_blocks))


# The C functions' arguments one by one: each case breaks one argument and
# expects the message naming it, so a swapped or shifted argument in the
# ctypes declarations (python/xstage/_lib.py) fails here. Nothing is
# dereferenced before validation passes; the last case passes validation and
# fails only at the launch, which needs a GPU (skipped where there is one,
# since its pointers are made up).
_AT_EXIT, _LAGGED, _PACED_WARP = 2, 0, 6  # xstage::Completion, StorePath values (checked by test below)


def test_enum_values_used_by_the_argument_tests():
    library_or_skip()
    from xstage import _lib
    assert _lib.parse("completion", "at-exit") == _AT_EXIT and _lib.parse("completion", "lagged") == _LAGGED
    assert _lib.parse("store_path", "paced-warp") == _PACED_WARP
    assert _lib.parse("attention_kernel", "wgmma-pingpong") == 4 and _lib.parse("attention_kernel", "auto") == 0


def _call_fused(**over):
    from xstage import _lib
    a = dict(shape=(2, 0, 1, 256, 8, 128, 4), q=0x1000, k=0x2000, v=0x3000, strides=(4 * 128 * 256, 4 * 128, 128) * 3,
             out=0x4000, flags=0x5000, order=0x6000, record=0x7000, epoch=1, scale=float("nan"), store=-1,
             completion=_AT_EXIT, paced=0, timeout=60.0)
    a.update(over)
    shape, _k1 = _lib.i64_array(a["shape"])
    strides, _k2 = _lib.i64_array(a["strides"])
    _lib.call("xstage_ulysses_fused", shape, a["q"], a["k"], a["v"], strides, a["out"], a["flags"], a["order"],
              a["record"], a["epoch"], a["scale"], a["store"], a["completion"], a["paced"], a["timeout"], None)


@pytest.mark.parametrize("over,words", [
    (dict(q=0), "ulysses: q: expected a device pointer, got null"),
    (dict(k=0x2008), "ulysses: k: expected a 16-byte aligned pointer"),
    (dict(v=0x3004), "ulysses: v: expected a 16-byte aligned pointer"),
    (dict(strides=(4 * 128 * 256, 4 * 128, 128) * 2 + (7, 4 * 128, 128)), "ulysses: v strides (b 7, s 512, h 128)"),
    (dict(strides=(4 * 128 * 256, 12, 128) + (4 * 128 * 256, 4 * 128, 128) * 2), "ulysses: q strides (b 131072, s 12"),
    (dict(out=0), "ulysses: output table: expected a device pointer"),
    (dict(flags=0), "ulysses: flag table: expected a device pointer"),
    (dict(order=0), "ulysses: tile order: expected a device pointer"),
    (dict(record=0), "ulysses: timeout record: expected a device pointer"),
    (dict(epoch=0), "ulysses: epoch: expected >= 1"),
    (dict(paced=-1), "ulysses: paced rows: expected >= 0"),
    (dict(timeout=0.0), "ulysses: timeout: expected > 0 seconds, got 0"),
    (dict(scale=float("inf")), "ulysses: scale: expected a finite number, got inf"),
    (dict(store=_PACED_WARP, completion=_LAGGED), "ulysses: store path paced-warp with lagged flags"),
    (dict(shape=(2, 1, 1, 256, 9, 128, 4)), "ulysses: H = 9 heads do not split over P = 2"),
    (dict(shape=(2, 1 << 40, 1, 256, 8, 128, 4)), "ulysses: rank: expected -2147483648 .. 2147483647"),
    (dict(shape=(2, 0, 1, 256, 8, 128, 99)), "ulysses: kernel: expected 0 .. 7, got 99"),
    (dict(store=42), "ulysses: store path: expected 0 .. 6, got 42"),
    (dict(completion=-3), "ulysses: flags: expected 0 .. 3, got -3"),
    (dict(), "fused Ulysses attention launch (wgmma-pingpong kernel, rank 0 of 2, B = 1, S = 256, H = 8, D = 128)"),
])
def test_fused_launch_arguments_reach_the_library_in_order(over, words):
    _expect_message(_call_fused, over, words)


def _expect_message(call, over, words):
    """call(**over) fails with a message that starts with words; the call
    with every argument valid (over empty) runs only where there is no GPU."""
    library_or_skip()
    if not over and torch.cuda.is_available():
        pytest.skip("the made-up pointers would be launched on this GPU")
    with pytest.raises(RuntimeError) as e:
        call(**over)
    assert str(e.value).startswith(words), str(e.value)


def _call_attention(B=1, H=2, S_q=100, S_kv=70, D=128, ptrs=(0x1000, 0x2000, 0x3000, 0x4000), strides=None,
                    scale=float("nan"), kernel=0):
    from xstage import _lib
    if strides is None:
        strides = (S_q * H * D, H * D, D, S_kv * H * D, H * D, D, S_kv * H * D, H * D, D, S_q * H * D, H * D, D)
    st, _keep = _lib.i64_array(strides)
    _lib.call("xstage_attention_forward", *ptrs, B, H, S_q, S_kv, D, st, scale, kernel, None)


@pytest.mark.parametrize("kw,words", [
    (dict(D=96), "attention: head dim D: expected 64 or 128, got 96"),
    (dict(B=0), "attention: B: expected >= 1, got 0"),
    (dict(H=0), "attention: H: expected >= 1, got 0"),
    (dict(S_q=0), "attention: S_q: expected >= 1, got 0"),
    (dict(S_kv=0), "attention: S_kv: expected >= 1, got 0"),
    (dict(kernel=5), "attention: kernel wgmma-n192: not available for head dim D=128"),
    (dict(kernel=8), "attention: kernel: expected 0 .. 7, got 8"),
    (dict(scale=float("inf")), "attention: scale: expected a finite number"),
    (dict(strides=(25601, 256, 128) + (17920, 256, 128) * 3), "attention: q stride over b"),
    (dict(strides=(25600, 256, 128) * 3 + (25600, 256, 4)), "attention: o stride over h"),
    (dict(ptrs=(0x1000, 0x2000, 0x3008, 0x4000)), "attention: v: expected a 16-byte aligned pointer"),
    (dict(ptrs=(0x1000, 0x2000, 0x3000, 0)), "attention: o: expected a device pointer, got null"),
    (dict(), "attention forward (wgmma-pingpong) launch (B=1 H=2 S_q=100 S_kv=70 D=128)"),
])
def test_attention_arguments_reach_the_library_in_order(kw, words):
    _expect_message(_call_attention, kw, words)


# ---- MoE expert GEMMs (xstage/moe.py)

def test_moe_ops_registered_with_schemas():
    assert str(torch.ops.xstage.moe_l1.default._schema) == (
        "xstage::moe_l1(Tensor x, Tensor w13, Tensor offs, Tensor? row_weight) -> Tensor")
    assert str(torch.ops.xstage.moe_l2.default._schema) == "xstage::moe_l2(Tensor h, Tensor w2, Tensor offs) -> Tensor"
    assert str(torch.ops.xstage.moe_experts.default._schema) == (
        "xstage::moe_experts(Tensor x, Tensor w13, Tensor w2, Tensor offs, Tensor? row_weight) -> Tensor")


def test_moe_interleave_w13_alternates_gate_and_up_in_groups_of_8():
    E, I, H = 2, 24, 3
    w13 = torch.arange(E * 2 * I * H, dtype=torch.float32).reshape(E, 2 * I, H)
    got = xstage.moe_interleave_w13(w13)
    assert got.shape == w13.shape and got.is_contiguous()
    for e in range(E):
        for g in range(2 * I // 16):
            assert torch.equal(got[e, 16 * g:16 * g + 8], w13[e, 8 * g:8 * g + 8])  # gate rows
            assert torch.equal(got[e, 16 * g + 8:16 * g + 16], w13[e, I + 8 * g:I + 8 * g + 8])  # up rows
    with pytest.raises(ValueError, match=r"2I = 24 \(dimension 1\): expected a multiple of 16"):
        xstage.moe_interleave_w13(torch.zeros(1, 24, 8))


def test_moe_fake_shapes_and_torch_compile():
    rows, H, I, E = 300, 256, 384, 5
    x = torch.empty(rows, H, dtype=BF16, device="meta")
    w13 = torch.empty(E, 2 * I, H, dtype=BF16, device="meta")
    w2 = torch.empty(E, H, I, dtype=BF16, device="meta")
    offs = torch.empty(E, dtype=torch.int32, device="meta")
    wt = torch.empty(rows, dtype=torch.float32, device="meta")
    out, gm = _compile_and_capture(lambda x, w13, w2, offs, wt: xstage.moe_experts(x, w13, w2, offs, wt),
                                   x, w13, w2, offs, wt)
    assert out.shape == (rows, H) and out.dtype == BF16
    assert _calls(gm, torch.ops.xstage.moe_experts) == 1
    _, gm = _compile_and_capture(lambda x, w13, w2, offs, wt: xstage.grouped_mm(xstage.grouped_mm_swiglu(x, w13, offs, wt),
                                                                             w2, offs), x, w13, w2, offs, wt)
    assert _calls(gm, torch.ops.xstage.moe_l1) == 1 and _calls(gm, torch.ops.xstage.moe_l2) == 1
    with FakeTensorMode():
        h = torch.ops.xstage.moe_l1(torch.empty(7, H, dtype=BF16, device="cuda"),
                                    torch.empty(E, 256, H, dtype=BF16, device="cuda"),
                                    torch.empty(E, dtype=torch.int32, device="cuda"), None)
        assert h.shape == (7, 128) and h.device.type == "cuda"


@pytest.mark.parametrize("fn,args,exc,words", [
    ("l1", (_bf16(16, 256).half(), _bf16(3, 256, 256), torch.zeros(3, dtype=torch.int32)), TypeError,
     "x: expected dtype torch.bfloat16"),
    ("l1", (_bf16(16, 256), _bf16(3, 256, 200), torch.zeros(3, dtype=torch.int32)), ValueError,
     "w13: expected [E, N, K] with K = 256"),
    ("l1", (_bf16(16, 256), _bf16(3, 256, 256), torch.zeros(3, dtype=torch.int64)), TypeError,
     "offs: expected a 1-dimensional torch.int32"),
    ("l1", (_bf16(16, 256), _bf16(3, 256, 256), torch.zeros(4, dtype=torch.int32)), ValueError,
     "offs: expected one end per expert (3"),
    ("l1", (_bf16(16, 250), _bf16(3, 256, 250), torch.zeros(3, dtype=torch.int32)), ValueError,
     "K = 250 (last dimension of x): expected a positive multiple of 8"),
    ("l1", (_bf16(16, 256), _bf16(3, 200, 256), torch.zeros(3, dtype=torch.int32)), ValueError,
     "2I = 200 (dimension 1): expected a positive multiple of 16"),
    ("l1", (_bf16(16, 256), _bf16(3, 0, 256), torch.zeros(3, dtype=torch.int32)), ValueError,
     "2I = 0 (dimension 1): expected a positive multiple of 16"),
    ("l1", (_bf16(16, 256), _bf16(3, 256, 256), torch.zeros(3, dtype=torch.int32), torch.zeros(15)), TypeError,
     "row_weight: expected a torch.float32 tensor of shape (16,)"),
    ("l1", (_bf16(16, 256), _bf16(3, 256, 256), torch.zeros(3, dtype=torch.int32)), ValueError,
     "expected CUDA tensors, got a tensor on cpu"),
    ("l2", (_bf16(16, 128), _bf16(3, 200, 128), torch.zeros(3, dtype=torch.int32)), ValueError,
     "w2: H = 200 (dimension 1): expected a positive multiple of 16"),
    ("l2", (_bf16(16, 12), _bf16(3, 2880, 12), torch.zeros(3, dtype=torch.int32)), ValueError,
     "K = 12 (last dimension of h): expected a positive multiple of 8"),
    ("l2", (_bf16(16, 128), "w2", torch.zeros(3, dtype=torch.int32)), TypeError, "w2: expected a torch.Tensor"),
])
def test_moe_errors_say_what_and_where(fn, args, exc, words):
    # Through the public functions, and for L1 also through moe_experts (it checks L1's arguments first).
    f = xstage.grouped_mm_swiglu if fn == "l1" else xstage.grouped_mm
    with pytest.raises(exc) as e:
        f(*args)
    name = "xstage.grouped_mm_swiglu" if fn == "l1" else "xstage.grouped_mm"
    assert str(e.value).startswith(name + ": ") and words in str(e.value), str(e.value)
    if fn == "l1":  # moe_experts checks L1's arguments first, under its own name
        w2 = _bf16(3, 256, 128)
        with pytest.raises(exc) as e:
            xstage.moe_experts(args[0], args[1], w2, args[2], *args[3:])
        assert str(e.value).startswith("xstage.moe_experts: ") and words in str(e.value), str(e.value)


@pytest.mark.parametrize("H,I,E", [(2880, 1400, 3), (16, 8, 1), (48, 24, 300), (272, 136, 2)])
def test_moe_takes_the_shapes_torch_grouped_mm_takes(H, I, E):
    # H a multiple of 16 (L2's N, L1's K), I a multiple of 8 (L2's K, half L1's N), any E: no tile-width multiple.
    meta = lambda *shape: torch.empty(*shape, dtype=BF16, device="meta")  # noqa: E731
    x, offs = meta(37, H), torch.empty(E, dtype=torch.int32, device="meta")
    assert xstage.grouped_mm_swiglu(x, meta(E, 2 * I, H), offs).shape == (37, I)
    assert xstage.grouped_mm(meta(37, I), meta(E, H, I), offs).shape == (37, H)
    assert xstage.moe_experts(x, meta(E, 2 * I, H), meta(E, H, I), offs).shape == (37, H)


def test_moe_experts_checks_l2_before_anything_runs():
    # Meta tensors: L1's arguments pass (the device check admits meta), so the error is L2's.
    meta = lambda *shape: torch.empty(*shape, dtype=BF16, device="meta")  # noqa: E731
    x, w13, offs = meta(16, 256), meta(3, 256, 256), torch.empty(3, dtype=torch.int32, device="meta")
    for w2, exc, words in ((meta(3, 256, 100), ValueError, "w2: expected [E, N, K] with K = 128"),
                           (meta(3, 200, 128), ValueError, "w2: H = 200 (dimension 1)"),
                           ("w2", TypeError, "w2: expected a torch.Tensor, got str")):
        with pytest.raises(exc) as e:
            xstage.moe_experts(x, w13, w2, offs)
        assert str(e.value).startswith("xstage.moe_experts: ") and words in str(e.value), str(e.value)


def test_moe_errors_under_torch_compile_keep_their_type():
    x = torch.empty(16, 256, dtype=torch.float16, device="meta")
    w13 = torch.empty(3, 256, 256, dtype=BF16, device="meta")
    w2 = torch.empty(3, 256, 128, dtype=BF16, device="meta")
    offs = torch.empty(3, dtype=torch.int32, device="meta")
    for f in (lambda: xstage.grouped_mm_swiglu(x, w13, offs), lambda: xstage.moe_experts(x, w13, w2, offs)):
        torch._dynamo.reset()
        with pytest.raises(TypeError, match="x: expected dtype torch.bfloat16"):
            torch.compile(f)()
