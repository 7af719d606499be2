"""CPU tests of the expert-parallel MoE layer (xstage.MoE with a group of P >
1 ranks; run in CI): the op's schema and fake shapes, torch.compile on meta
tensors without a graph break, the module's construction (expert slicing,
required sizes, option checks), every call check's message, the sizes
report against its formula, and the library's C entry points that need no
GPU (layout, plan, argument checks before launch, record messages). The
group is faked (P = 2, rank 1) through moe_local._group_shape."""
import ctypes
import struct

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import xstage
from xstage import _lib, moe_ep, moe_local
from conftest import library_or_skip

BF16 = torch.bfloat16
T_MAX, H, I, E, K, P = 64, 256, 128, 8, 2, 2


def meta(*shape, dtype=BF16):
    return torch.empty(*shape, dtype=dtype, device="meta")


@pytest.fixture
def two_ranks(monkeypatch):
    library_or_skip()
    monkeypatch.setattr(moe_local, "_group_shape", lambda group: (P, 1))
    return object()  # any group: only _group_shape and the first call look at it


def ep_module(group, **kw):
    kw.setdefault("tokens_max", T_MAX)
    kw.setdefault("topk", K)
    return xstage.MoE(meta(E, 2 * I, H), meta(E, H, I), group=group, **kw)


def call_args(T=37, k=K, device="meta", ids=torch.int64, wts=torch.float32):
    make = lambda *s, dtype=BF16: torch.zeros(*s, dtype=dtype, device=device)  # noqa: E731
    return make(T, H), make(T, k, dtype=ids), make(T, k, dtype=wts)


def test_op_registered_with_its_schema():
    assert str(torch.ops.xstage.moe_layer_ep.default._schema) == (
        "xstage::moe_layer_ep(Tensor x, Tensor w13, Tensor w2, Tensor topk_ids, Tensor topk_weights, SymInt state) "
        "-> Tensor")


def test_fake_shapes():
    with FakeTensorMode():
        x = torch.empty(300, 512, dtype=BF16, device="cuda")
        w13, w2 = torch.empty(4, 512, 512, dtype=BF16, device="cuda"), torch.empty(4, 512, 256, dtype=BF16,
                                                                                     device="cuda")
        ids = torch.empty(300, 2, dtype=torch.int64, device="cuda")
        out = torch.ops.xstage.moe_layer_ep(x, w13, w2, ids, ids.float(), 0)
        assert out.shape == (300, 512) and out.dtype == BF16 and out.device.type == "cuda"


def test_module_keeps_its_ranks_experts(two_ranks):
    w13 = torch.arange(E, dtype=torch.float32).view(E, 1, 1).expand(E, 2 * I, H).clone()
    w2 = torch.arange(E, dtype=torch.float32).view(E, 1, 1).expand(E, H, I).clone()
    moe = xstage.MoE(w13, w2, group=two_ranks, tokens_max=T_MAX, topk=K)
    assert moe.w13.shape == (E // P, 2 * I, H) and moe.w2.shape == (E // P, H, I)
    assert moe.w13[:, 0, 0].tolist() == [4, 5, 6, 7] and moe.w2[:, 0, 0].tolist() == [4, 5, 6, 7]  # rank 1's
    assert moe.num_experts == E and "world=2, rank=1, local_experts=4" in repr(moe)
    local = xstage.MoE(w13[4:], w2[4:], group=two_ranks, tokens_max=T_MAX, topk=K, num_experts=E)
    assert torch.equal(local.w13, moe.w13)


@pytest.mark.parametrize("kw,exc,words", [
    ({"tokens_max": None}, ValueError, "tokens_max = None: expected an int >= 1 (tokens a rank"),
    ({"topk": 0}, ValueError, "topk = 0: expected an int >= 1 (experts a token"),
    ({"num_experts": 12}, ValueError, "w13: 8 experts with num_experts = 12 over P = 2 ranks"),
    ({"schedule": "fast"}, ValueError, "schedule = 'fast': expected one of expert-wave, interleaved, model-guided"),
    ({"tile": "m64n80"}, ValueError, "tile = 'm64n80': expected one of auto, m128n256, m64n256"),
    ({"timeout_s": 0}, ValueError, "timeout_s = 0: expected seconds in (0, 86400]"),
    ({"profile": 3}, TypeError, "profile: expected None, an embedded profile's name or a file path, got int"),
    ({"topk": 9}, ValueError, "topk = 9: expected 1 .. experts = 8"),
])
def test_construction_errors(two_ranks, kw, exc, words):
    with pytest.raises(exc) as e:
        ep_module(two_ranks, **kw)
    assert str(e.value).startswith("xstage.MoE: ") and words in str(e.value), str(e.value)


def test_experts_must_split_over_the_ranks(two_ranks):
    with pytest.raises(ValueError, match=r"w13: E = 7 experts do not split over P = 2 ranks"):
        xstage.MoE(meta(7, 2 * I, H), meta(7, H, I), group=two_ranks, tokens_max=T_MAX, topk=K)
    with pytest.raises(ValueError, match=r"hidden = 120: expected a positive multiple of 16"):
        xstage.MoE(meta(E, 2 * I, 120), meta(E, 120, I), group=two_ranks, tokens_max=T_MAX, topk=K)


def _with(i, value):
    a = list(call_args())
    a[i] = value
    return a


CALL_CASES = [
    (_with(0, "x"), TypeError, "x: expected a torch.Tensor, got str"),
    (_with(0, meta(37, H, dtype=torch.float16)), TypeError, "x: expected dtype torch.bfloat16, got torch.float16"),
    (_with(0, meta(37, 512)), ValueError, "x: expected a [T, H] tensor with H = 256, got shape (37, 512)"),
    (call_args(T=65), ValueError, "x: T = 65 tokens (dimension 0): expected at most tokens_max = 64"),
    (_with(1, meta(37, 2)), TypeError, "topk_ids: expected dtype torch.int32 or torch.int64, got torch.bfloat16"),
    (_with(1, meta(37, 3, dtype=torch.int64)), ValueError, "topk_ids: expected shape [T, k] = (37, 2)"),
    (_with(2, meta(37, 2, dtype=torch.float16)), TypeError,
     "topk_weights: expected dtype torch.float32 or torch.bfloat16, got torch.float16"),
    (_with(2, meta(36, 2, dtype=torch.float32)), ValueError, "topk_weights: expected shape [T, k] = (37, 2)"),
    (call_args(device="cpu"), ValueError, "x, w13, w2, topk_ids, topk_weights: expected one device, got cpu, meta"),
]


@pytest.mark.parametrize("a,exc,words", CALL_CASES)
def test_call_errors_say_what_and_where(two_ranks, a, exc, words):
    moe = ep_module(two_ranks)
    with pytest.raises(exc) as e:
        moe(*a)
    assert str(e.value).startswith("xstage.MoE: ") and words in str(e.value), str(e.value)


def test_traced_by_torch_compile_without_a_graph_break(two_ranks):
    moe = ep_module(two_ranks)
    gate = torch.nn.Linear(H, E, bias=False, device="meta", dtype=BF16)

    def block(x):
        weights, ids = xstage.topk_softmax(gate(x), K, renormalize=True)
        return moe(x, ids, weights) + x

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(block, backend=backend, fullgraph=True)(meta(T_MAX, H))
    assert out.shape == (T_MAX, H) and len(graphs) == 1
    calls = [n for n in graphs[0].graph.nodes if n.op == "call_function" and "moe_layer_ep" in str(n.target)]
    assert len(calls) == 1


def test_sizes_follow_the_formula(two_ranks):
    moe = ep_module(two_ranks)
    s = moe.sizes()
    rows_cap = P * T_MAX * min(K, E // P)
    assert s["rows_cap"] == rows_cap
    assert s["x_send"] == 2 * T_MAX * H and s["combine"] == 2 * K * T_MAX * H
    assert s["routes"] == 8 * E * T_MAX and s["counts"] == 4 * E and s["flags"] == 16 * P
    assert s["pool_x"] == 2 * rows_cap * H and s["pool_h"] == 2 * rows_cap * I
    assert s["weights"] == (E // P) * 3 * I * H * 2
    sym = s["x_send"] + s["routes"] + s["counts"] + s["combine"] + s["flags"]
    assert sym <= s["symmetric"] < sym + 5 * 256
    assert s["pool_x"] + s["pool_h"] < s["workspace"] < s["pool_x"] + s["pool_h"] + (1 << 20)
    assert s["total"] == s["symmetric"] + s["workspace"] + s["weights"]


def test_sizes_of_deepseek_v3_at_2048_tokens_a_rank():
    library_or_skip()
    mib = lambda b: b / 2**20  # noqa: E731
    two = moe_ep.moe_ep_sizes(2048, 7168, 2048, 256, 8, 2)
    eight = moe_ep.moe_ep_sizes(2048, 7168, 2048, 256, 8, 8)
    # docs/design/python.md's table: symmetric 256 MiB whatever P; the pool grows with P (worst case).
    assert 256 <= mib(two["symmetric"]) < 257 and 256 <= mib(eight["symmetric"]) < 257
    assert 576 <= mib(two["workspace"]) < 580 and 2304 <= mib(eight["workspace"]) < 2312


def _lib_dims(T_max=16):
    return _lib.i64_array([T_max, H, I, E, K, P, -1])


def test_library_checks_forward_arguments_before_anything_launches():
    library_or_skip()
    dims, keep = _lib_dims()
    plan = (ctypes.c_double * 5)(1, 1, 0, 0, 0)
    with pytest.raises(RuntimeError, match=r"MoE layer \(rank 0\): T = 17 tokens: expected 0 .. T_max = 16"):
        _lib.call("xstage_torch_moe_ep_forward", dims, 10.0, 0, None, None, 0, None, None, None, 17, plan, 132, None)
    with pytest.raises(RuntimeError, match=r"MoE layer \(rank\): tables: expected a device pointer, got null"):
        _lib.call("xstage_torch_moe_ep_forward", dims, 10.0, 0, None, None, 0, None, None, None, 4, plan, 132, None)
    with pytest.raises(RuntimeError, match=r"rank 2: expected 0 .. P - 1 = 1"):
        _lib.call("xstage_torch_moe_ep_forward", dims, 10.0, 2, None, None, 0, None, None, None, 4, plan, 132, None)
    bad_plan = (ctypes.c_double * 5)(1, 1, 0, 1.5, 0)
    with pytest.raises(RuntimeError, match=r"schedule plan \(interleaved\): expected wave_tiles >= 0, 0 <= l2_share"):
        _lib.call("xstage_torch_moe_ep_forward", dims, 10.0, 0, 16, 16, 1 << 30, 16, 16, 16, 4, bad_plan, 132, None)
    del keep


def test_model_guided_plan_on_the_embedded_profile():
    library_or_skip()
    dims, keep = _lib_dims(64)
    out = (ctypes.c_double * 5)()
    _lib.call("xstage_torch_moe_ep_plan", dims, 10.0, 64, 2, b"", 132, out)
    assert out[0] == 2 and out[1] in (0, 1)  # model-guided, run as expert-wave or interleaved
    with pytest.raises(RuntimeError, match="no-such-profile"):
        _lib.call("xstage_torch_moe_ep_plan", dims, 10.0, 64, 2, b"no-such-profile", 132, out)
    del keep


def _records(wait=None, rank=0, flag=0, expected=0, seen=0):
    """A host copy of the records block: 3 FlagTimeoutRecords (48 bytes each), then the routing record."""
    recs = []
    for i in range(3):
        on = i == wait
        recs.append(struct.pack("<Iiiii4xQQQ", int(on), rank if on else 0, flag if on else 0, 0, 0,
                                1000 if on else 0, expected if on else 0, seen if on else 0))
    block = b"".join(recs) + bytes(24)
    return torch.frombuffer(bytearray(block), dtype=torch.uint8)


@pytest.mark.parametrize("wait,rank,flag,words", [
    (None, 0, 0, ""),
    (0, 1, 0, "dispatch wait timed out: rank 1 waited on flag 0 (the counts of source 0) for 1000 ns: "
              "expected >= 5, saw 4"),
    (2, 0, 3, "combine wait timed out: rank 0 waited on flag 3 (the expert rows of rank 1) for 1000 ns: "
              "expected >= 5, saw 4"),
])
def test_record_messages_name_rank_flag_and_values(wait, rank, flag, words):
    library_or_skip()
    host = _records(wait, rank, flag, 5, 4)
    msg = ctypes.create_string_buffer(1024)
    got = _lib.lib().xstage_torch_moe_ep_describe(host.data_ptr(), P, rank, E, msg, 1024)
    assert got == (1 if words else 0) and words in msg.value.decode(), msg.value
