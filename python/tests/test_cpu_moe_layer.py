"""CPU tests of the MoE layer (xstage.MoE, xstage.moe_layer, xstage.topk_softmax;
run in CI): the op's schema, fake shapes under FakeTensorMode and
torch.compile on meta tensors, every argument check's message, the id value
check, the router helper, building the module from experts, and the
library's own checks of the launch arguments (it loads without a GPU)."""
import ctypes

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import xstage
from xstage import _lib, moe_local
from conftest import library_or_skip

BF16 = torch.bfloat16


def meta(*shape, dtype=BF16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def args(T=37, H=256, I=128, E=5, k=2, device="meta", ids=torch.int64, wts=torch.float32):
    make = lambda *s, dtype=BF16: torch.zeros(*s, dtype=dtype, device=device)  # noqa: E731
    return make(T, H), make(E, 2 * I, H), make(E, H, I), make(T, k, dtype=ids), make(T, k, dtype=wts)


def test_op_registered_with_its_schema():
    assert str(torch.ops.xstage.moe_layer.default._schema) == (
        "xstage::moe_layer(Tensor x, Tensor w13, Tensor w2, Tensor topk_ids, Tensor topk_weights) -> Tensor")


@pytest.mark.parametrize("ids,wts", [(torch.int32, torch.float32), (torch.int64, torch.bfloat16)])
def test_fake_shapes(ids, wts):
    with FakeTensorMode():
        out = torch.ops.xstage.moe_layer(*args(T=300, H=512, I=384, E=7, k=3, device="cuda", ids=ids, wts=wts))
        assert out.shape == (300, 512) and out.dtype == BF16 and out.device.type == "cuda"
    out = xstage.moe_layer(*args(T=0))
    assert out.shape == (0, 256)


def _compile_and_capture(fn, *inputs):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(fn, backend=backend, fullgraph=True)(*inputs)
    assert len(graphs) == 1
    return out, graphs[0]


def _calls(gm, packet):
    return sum(n.op == "call_function" and (n.target is packet or n.target in [packet.default])
               for n in gm.graph.nodes)


def test_module_and_router_traced_by_torch_compile_without_a_graph_break():
    T, H, I, E, k = 77, 256, 128, 6, 2
    moe = xstage.MoE(meta(E, 2 * I, H), meta(E, H, I))
    gate = torch.nn.Linear(H, E, bias=False, device="meta", dtype=BF16)

    def block(x):
        weights, ids = xstage.topk_softmax(gate(x), k, renormalize=True)
        return moe(x, ids, weights) + x

    out, gm = _compile_and_capture(block, meta(T, H))
    assert out.shape == (T, H) and out.dtype == BF16
    assert _calls(gm, torch.ops.xstage.moe_layer) == 1
    _, gm = _compile_and_capture(lambda *a: xstage.moe_layer(*a), *args())
    assert _calls(gm, torch.ops.xstage.moe_layer) == 1


def _with(i, value):
    a = list(args(device="cpu"))
    a[i] = value
    return a


CASES = [  # (arguments, exception, words)
    (_with(0, "x"), TypeError, "x: expected a torch.Tensor, got str"),
    (_with(0, torch.zeros(37, 256, dtype=torch.float16)), TypeError, "x: expected dtype torch.bfloat16, got torch.float16"),
    (_with(0, torch.zeros(37, 4, 64, dtype=BF16)), ValueError, "x: expected a [T, H] tensor, got shape (37, 4, 64)"),
    (_with(1, torch.zeros(5, 256, 256)), TypeError, "w13: expected dtype torch.bfloat16, got torch.float32"),
    (_with(1, torch.zeros(5, 256, 200, dtype=BF16)), ValueError, "w13: expected [E, 2I, H] with H = 256 as in x"),
    (_with(2, torch.zeros(5, 256, 64, dtype=BF16)), ValueError, "w2: expected [E, H, I] = (5, 256, 128) from w13"),
    (_with(3, torch.zeros(37, 2)), TypeError, "topk_ids: expected dtype torch.int32 or torch.int64, got torch.float32"),
    (_with(3, torch.zeros(36, 2, dtype=torch.int64)), ValueError, "topk_ids: expected [T, k] with T = 37 as in x"),
    (_with(3, torch.zeros(37, 6, dtype=torch.int64)), ValueError, "topk_ids: k = 6 (dimension 1): expected 1 .. 5"),
    (_with(3, torch.zeros(37, 0, dtype=torch.int64)), ValueError, "topk_ids: k = 0 (dimension 1): expected 1 .. 5"),
    (_with(4, torch.zeros(37, 2, dtype=torch.float16)), TypeError,
     "topk_weights: expected dtype torch.float32 or torch.bfloat16, got torch.float16"),
    (_with(4, torch.zeros(37, 3)), ValueError, "topk_weights: expected the shape of topk_ids (37, 2), got (37, 3)"),
    (args(device="cpu"), ValueError, "expected CUDA tensors, got a tensor on cpu"),
    (_with(0, torch.zeros(37, 256, dtype=BF16, device="meta")), ValueError,
     "x, w13, w2, topk_ids, topk_weights: expected one device, got meta, cpu"),
    (args(H=250, device="meta"), ValueError, "K = 250 (last dimension of x): expected a positive multiple of 8"),
    (args(E=1025, k=2, H=128, I=64, device="meta"), ValueError, "w13: E = 1025 experts (dimension 0): expected 1 .. 1024"),
    (args(E=64, k=33, H=128, I=64, device="meta"), ValueError, "topk_ids: k = 33 (dimension 1): expected 1 .. 32"),
]


@pytest.mark.parametrize("a,exc,words", CASES)
def test_errors_say_what_and_where(a, exc, words):
    with pytest.raises(exc) as e:
        xstage.moe_layer(*a)
    assert str(e.value).startswith("xstage.moe_layer: ") and words in str(e.value), str(e.value)
    if not isinstance(a[1], torch.Tensor) or a[1].shape[1:] != (256, 256) or a[1].dtype != BF16 or \
            not isinstance(a[2], torch.Tensor) or a[2].shape[1:] != (256, 128):
        return  # a case of the weights: the module's constructor checks those (test_from_experts...)
    if all(isinstance(t, torch.Tensor) for t in a):  # through the module too
        moe = xstage.MoE(a[1], a[2], interleaved=True)
        with pytest.raises(exc) as e:
            moe(a[0], a[3], a[4])
        assert str(e.value).startswith("xstage.MoE: ") and words in str(e.value), str(e.value)


def test_errors_under_torch_compile_keep_their_type():
    a = _with(4, torch.zeros(37, 2, dtype=torch.float16, device="meta"))
    a = [t.to("meta") for t in a]
    torch._dynamo.reset()
    with pytest.raises(TypeError, match="topk_weights: expected dtype torch.float32 or torch.bfloat16"):
        torch.compile(lambda: xstage.moe_layer(*a))()


def test_tokens_max():
    moe = xstage.MoE(meta(5, 256, 256), meta(5, 256, 128), tokens_max=36)
    x, _, _, ids, wts = args()
    with pytest.raises(ValueError, match=r"xstage.MoE: x: T = 37 tokens \(dimension 0\): expected at most tokens_max = 36"):
        moe(x, ids, wts)
    assert moe(x[:36], ids[:36], wts[:36]).shape == (36, 256)
    with pytest.raises(ValueError, match=r"tokens_max = 0: expected None or an int >= 1"):
        xstage.MoE(meta(5, 256, 256), meta(5, 256, 128), tokens_max=0)


@pytest.mark.parametrize("ids,words", [
    ([[0, 1], [2, 5]], "topk_ids[1, 1] = 5: expected an expert id in 0 .. 4"),
    ([[0, 1], [-1, 3]], "topk_ids[1, 0] = -1: expected an expert id in 0 .. 4"),
    ([[0, 1], [3, 3]], "topk_ids[1, 1] = 3 repeats slot 0's expert: expected k = 2 distinct experts a token"),
    ([[4, 2, 1], [0, 1, 0]], "topk_ids[1, 2] = 0 repeats slot 0's expert: expected k = 3 distinct experts"),
])
def test_id_value_check_names_token_and_slot(ids, words):
    with pytest.raises(ValueError) as e:
        moe_local.check_id_values("xstage.moe_layer", torch.tensor(ids), 5)
    assert words in str(e.value), str(e.value)
    moe_local.check_id_values("xstage.moe_layer", torch.tensor([[0, 4], [3, 1]]), 5)  # no error


def test_topk_softmax():
    logits = torch.randn(9, 7, dtype=BF16)
    w, ids = xstage.topk_softmax(logits, 3)
    probs = torch.softmax(logits.float(), dim=-1)
    want_w, want_ids = probs.topk(3, dim=-1)
    assert w.dtype == torch.float32 and ids.dtype == torch.int64
    assert torch.equal(ids, want_ids) and torch.allclose(w, want_w)
    w, _ = xstage.topk_softmax(logits, 3, renormalize=True)
    assert torch.allclose(w, want_w / want_w.sum(-1, keepdim=True))
    with pytest.raises(ValueError, match=r"xstage.topk_softmax: k = 8: expected an int in 1 .. E = 7"):
        xstage.topk_softmax(logits, 8)
    with pytest.raises(TypeError, match=r"logits: expected a floating-point dtype, got torch.int64"):
        xstage.topk_softmax(torch.zeros(3, 4, dtype=torch.int64), 1)
    with pytest.raises(ValueError, match=r"logits: expected a \[T, E\] tensor, got shape \(3,\)"):
        xstage.topk_softmax(torch.zeros(3), 1)


def test_from_experts_interleaves_once_and_checks_shapes():
    E, H, I = 3, 16, 32
    lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
    gate, up, down = [lin(H, I) for _ in range(E)], [lin(H, I) for _ in range(E)], [lin(I, H) for _ in range(E)]
    moe = xstage.MoE.from_experts(gate, up, down)
    w13 = torch.stack([torch.cat([g.weight, u.weight]) for g, u in zip(gate, up)]).to(BF16)
    assert torch.equal(moe.w13, xstage.moe_interleave_w13(w13))
    assert torch.equal(moe.w2, torch.stack([d.weight for d in down]).to(BF16))
    assert moe.num_experts == E and dict(moe.named_buffers()).keys() == {"w13", "w2"}
    # Tensors work as well as modules; the stacked constructor agrees.
    same = xstage.MoE.from_experts([g.weight for g in gate], [u.weight for u in up], [d.weight for d in down])
    assert torch.equal(same.w13, moe.w13)
    assert torch.equal(xstage.MoE(w13, torch.stack([d.weight for d in down])).w13, moe.w13)
    with pytest.raises(ValueError, match=r"xstage.MoE.from_experts: up\[1\]: expected shape \(32, 16\)"):
        xstage.MoE.from_experts(gate, [up[0], lin(H, I + 1), up[2]], down)
    with pytest.raises(ValueError, match=r"down\[0\]: expected an nn.Linear without bias"):
        xstage.MoE.from_experts(gate, up, [torch.nn.Linear(I, H)] + down[1:])
    with pytest.raises(ValueError, match=r"gate, up, down: expected one entry an expert each, got 3, 2, 3"):
        xstage.MoE.from_experts(gate, up[:2], down)
    with pytest.raises(ValueError, match=r"xstage.MoE: w2: expected \[E, H, I\] = \(3, 16, 32\)"):
        xstage.MoE(w13, torch.zeros(3, 16, 31))


def test_a_group_of_one_rank(group):
    if torch.distributed.get_world_size(group) != 1:
        pytest.skip("a group of one rank only")
    assert xstage.MoE(meta(2, 256, 128), meta(2, 128, 128), group=group).num_experts == 2


# ---- the library's checks of the launch (xstage_torch_moe_layer*), without a GPU

def _sizes_call(dims, flags=0):
    out_ptr, _ = _lib.i64_array([0, 0, 0, 0])
    dims_ptr, _keep = _lib.i64_array(dims)
    _lib.call("xstage_torch_moe_layer_sizes", dims_ptr, flags, out_ptr)


@pytest.mark.parametrize("dims,flags,words", [
    ([10, 256, 128, 0, 1], 0, "E (experts) = 0: expected 1 .. 1024"),
    ([10, 256, 128, 4, 5], 0, "k (experts a token) = 5: expected 1 .. 4"),
    ([-1, 256, 128, 4, 2], 0, "moe layer: T: expected 0 .. "),
    ([10, 250, 128, 4, 2], 0, "moe gemm L1: K: expected a positive multiple of 8"),
    ([10, 256, 128, 4, 2], 4, "flags (bit 0 ids int64, bit 1 weights bf16): expected 0 .. 3, got 4"),
    ([2 ** 30, 256, 128, 4, 2], 0, "T (tokens) = 1073741824 with k = 2: expected T >= 0 and T * k below 2^31"),
])
def test_library_checks_the_sizes(dims, flags, words):
    library_or_skip()
    with pytest.raises(RuntimeError) as e:
        _sizes_call(dims, flags)
    assert words in str(e.value), str(e.value)


@pytest.mark.parametrize("null,words", [(0, "x: expected a device pointer"), (1, "w13: expected a device pointer"),
                                        (2, "w2: expected"), (3, "topk_ids: expected"), (4, "topk_weights: expected"),
                                        (5, "out: expected"), (6, "scratch: expected"), (-1, "error: expected a 4-byte")])
def test_launch_arguments_reach_the_library_in_order(null, words):
    """Each pointer broken alone must come back as the message naming it: a
    swapped or shifted ctypes argument fails here. (Valid ones would launch.)"""
    library_or_skip()
    dims_ptr, _keep = _lib.i64_array([10, 256, 128, 4, 2])
    ptrs = [4096 * (i + 1) for i in range(7)]
    if null >= 0:
        ptrs[null] = None
    error = 4096 * 9 + (2 if null == -1 else 0)
    with pytest.raises(RuntimeError) as e:
        _lib.call("xstage_torch_moe_layer", dims_ptr, 0, *ptrs, 1 << 20, None, 0, error, None)
    assert words in str(e.value), str(e.value)


@pytest.mark.parametrize("record,words", [
    ([0, 0, 0, 0, 0, 0], None),
    ([1, 1, 12, 3, 300, 256], "topk_ids[12, 3] = 300: expected an expert id in 0 .. 255 (the pair was left out)"),
    ([1, 2, 5, 1, 7, 8], "topk_ids[5, 1] = 7 repeats an earlier slot's expert of token 5: expected k distinct"),
])
def test_library_describes_the_routing_record(record, words):
    library_or_skip()
    rec = (ctypes.c_int32 * 6)(*record)
    msg = ctypes.create_string_buffer(1024)
    got = _lib.lib().xstage_torch_moe_describe_route_error(ctypes.addressof(rec), msg, 1024)
    assert got == (words is not None)
    if words:
        assert words in msg.value.decode(), msg.value
