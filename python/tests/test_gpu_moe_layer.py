"""The MoE layer on one GPU (xstage.MoE, xstage.moe_layer) against an fp32
reference (per-expert matmuls on the same bf16 inputs, SwiGLU, the weighted
sum) and the torch MoE users write (xstage.reference.moe_torch): odd token
counts, experts with no rows, k in {1, 2, 8}, int32 and int64 ids, fp32 and
bf16 weights; outputs over poisoned memory; the same bits on every call; CUDA
graph capture with new routing at each replay; torch.compile(fullgraph=True);
bad ids refused in eager calls and left out (and recorded) on the device.
Skips without a GPU (fails where XSTAGE_REQUIRE_GPU says the machine has them)."""
import pytest
import torch
import torch.nn.functional as F

import xstage
from xstage.reference import moe_torch

BF16 = torch.bfloat16


def rel_err(got, want):
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def routing(device, T, E, k, seed, used=None, ids_dtype=torch.int64, wts_dtype=torch.float32):
    """k distinct experts a token, drawn from `used` (default: all E), and random weights."""
    g = torch.Generator(device=device).manual_seed(seed)
    used = torch.arange(E, device=device) if used is None else torch.tensor(used, device=device)
    ids = used[torch.rand(T, len(used), generator=g, device=device).argsort(dim=1)[:, :k]]
    wts = torch.rand(T, k, generator=g, device=device) + 0.05
    return ids.to(ids_dtype), wts.to(wts_dtype)


def weights(device, E, H, I, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    w13 = (torch.randn(E, 2 * I, H, generator=g, device=device) / H ** 0.5).to(BF16)
    w2 = (torch.randn(E, H, I, generator=g, device=device) / I ** 0.5).to(BF16)
    return w13, w2


def tokens(device, T, H, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(T, H, generator=g, device=device) * 0.5).to(BF16)


def ref_fp32(x, w13, w2, ids, wts):
    """fp32 on the same bf16 values; pairs with an id outside [0, E) add nothing."""
    E, I = w13.shape[0], w13.shape[1] // 2
    out = torch.zeros(x.shape[0], x.shape[1], device=x.device)
    for e in range(E):
        t, j = (ids == e).nonzero(as_tuple=True)
        if t.numel() == 0:
            continue
        gu = x[t].float() @ w13[e].float().T
        y = (F.silu(gu[:, :I]) * gu[:, I:]) @ w2[e].float().T
        out.index_add_(0, t, y * wts[t, j].float()[:, None])
    return out


def check_layer_output(out, x, w13, w2, ids, wts):
    """A layer's bf16 output on its tokens against the fp32 reference, as close
    as the torch MoE users write (xstage.reference.moe_torch) gets to it."""
    assert out.shape == x.shape and out.dtype == BF16
    if x.shape[0] == 0:
        return
    assert torch.isfinite(out).all()
    want = ref_fp32(x, w13, w2, ids, wts)
    baseline = moe_torch(x, w13, w2, ids, wts)
    assert rel_err(out, want) < max(2 * rel_err(baseline, want), 1e-2), (rel_err(out, want), rel_err(baseline, want))


def poison(device, nbytes=1 << 28):
    """Fill what torch's caching allocator hands out next with NaN: a row the
    layer forgets to write stays NaN."""
    torch.empty(nbytes // 2, dtype=BF16, device=device).fill_(float("nan"))
    torch.cuda.synchronize(device)


CASES = [  # T, H, I, E, k, experts used (None: all)
    (37, 256, 128, 8, 2, [0, 2, 3, 7]),            # half the experts get no rows
    (1000, 512, 384, 16, 8, None),                 # k = 8, T no multiple of anything
    (513, 384, 256, 4, 1, [1, 3]),                 # k = 1
    (1, 256, 128, 1, 1, None),                     # one token, one expert
    (4099, 1024, 768, 64, 8, list(range(0, 64, 3))),  # many experts, a third used, long rows
]


@pytest.mark.parametrize("T,H,I,E,k,used", CASES)
@pytest.mark.parametrize("ids_dtype,wts_dtype", [(torch.int64, torch.float32), (torch.int32, torch.bfloat16)])
def test_matches_the_fp32_reference_and_torch(cuda, T, H, I, E, k, used, ids_dtype, wts_dtype):
    seed = T + E + k
    w13, w2 = weights(cuda, E, H, I, seed)
    x = tokens(cuda, T, H, seed + 1)
    ids, wts = routing(cuda, T, E, k, seed + 2, used, ids_dtype, wts_dtype)
    moe = xstage.MoE(w13, w2)
    poison(cuda)
    out = moe(x, ids, wts)
    assert out.shape == (T, H) and out.dtype == BF16 and torch.isfinite(out).all()
    ref = ref_fp32(x, w13, w2, ids, wts)
    err, err_torch = rel_err(out, ref), rel_err(moe_torch(x, w13, w2, ids, wts), ref)
    assert err < max(2 * err_torch, 4e-3), (err, err_torch)
    # The same bits on every call, and from the functional op.
    poison(cuda)
    assert torch.equal(moe(x, ids, wts), out)
    assert torch.equal(xstage.moe_layer(x, moe.w13, moe.w2, ids, wts), out)


def test_from_experts_matches_the_stacked_weights(cuda):
    E, H, I, T, k = 4, 256, 128, 301, 2
    experts = [torch.nn.ModuleDict({n: torch.nn.Linear(i, o, bias=False, device=cuda, dtype=BF16)
                                    for n, i, o in (("w1", H, I), ("w3", H, I), ("w2", I, H))}) for _ in range(E)]
    moe = xstage.MoE.from_experts([m["w1"] for m in experts], [m["w3"] for m in experts], [m["w2"] for m in experts])
    x = tokens(cuda, T, H, 3)
    wts, ids = xstage.topk_softmax(torch.randn(T, E, device=cuda), k, renormalize=True)
    w13 = torch.stack([torch.cat([m["w1"].weight, m["w3"].weight]) for m in experts])
    w2 = torch.stack([m["w2"].weight for m in experts])
    ref = ref_fp32(x, w13, w2, ids, wts)
    assert rel_err(moe(x, ids, wts), ref) < max(2 * rel_err(moe_torch(x, w13, w2, ids, wts), ref), 4e-3)


def test_cuda_graph_replays_new_routing(cuda):
    """Counts and offsets live on the device: a captured call replayed with
    other ids (other counts a expert, some experts emptied) gives what an
    eager call gives."""
    T, H, I, E, k = 777, 512, 256, 8, 2
    w13, w2 = weights(cuda, E, H, I, 5)
    moe = xstage.MoE(w13, w2)
    x = tokens(cuda, T, H, 6)
    ids, wts = routing(cuda, T, E, k, 7)
    static = [x.clone(), ids.clone(), wts.clone()]
    moe(*static)  # warm-up outside capture (as torch's graph docs ask): the routing record is made here
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = moe(*static)
    for seed, used in ((8, None), (9, [0, 5]), (10, [1, 2, 3, 4, 6, 7])):
        x2 = tokens(cuda, T, H, seed)
        ids2, wts2 = routing(cuda, T, E, k, seed, used)
        for s, v in zip(static, (x2, ids2, wts2)):
            s.copy_(v)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, moe(x2, ids2, wts2))


def test_torch_compile_fullgraph(cuda):
    T, H, I, E, k = 333, 256, 384, 6, 2
    w13, w2 = weights(cuda, E, H, I, 11)
    moe = xstage.MoE(w13, w2)
    gate = torch.nn.Linear(H, E, bias=False, device=cuda, dtype=BF16)
    with torch.no_grad():  # seeded here: the global generator's state depends on the tests run before
        g = torch.Generator(device=cuda).manual_seed(13)
        gate.weight.copy_(torch.randn(E, H, device=cuda, dtype=BF16, generator=g) * H ** -0.5)

    def block(x):
        wts, ids = xstage.topk_softmax(gate(x), k)
        return moe(x, ids, wts) + x

    def layer(x, ids, wts):
        return moe(x, ids, wts) + x

    x = tokens(cuda, T, H, 12)
    torch._dynamo.reset()
    # The layer compiled without a graph break gives the eager call's bits.
    wts, ids = xstage.topk_softmax(gate(x), k)
    assert torch.equal(torch.compile(layer, fullgraph=True)(x, ids, wts), layer(x, ids, wts))
    # The whole block too, the router included: inductor's softmax may round the routing weights differently
    # from eager's (it splits the reduction), so rows agree to bf16 rounding, not bit for bit.
    got = torch.compile(block, fullgraph=True)(x)
    want = block(x)
    assert rel_err(got, want) < 1e-2, rel_err(got, want)
    # Forward only: the gate's weights require grad, the layer's output does not, eager or compiled.
    wts, ids = xstage.topk_softmax(gate(x), k)
    assert wts.requires_grad and not want.requires_grad and not moe(x, ids, wts).requires_grad


def test_bad_ids_refused_eagerly_and_left_out_on_the_device(cuda):
    T, H, I, E, k = 50, 256, 128, 4, 2
    w13, w2 = weights(cuda, E, H, I, 13)
    x = tokens(cuda, T, H, 14)
    ids, wts = routing(cuda, T, E, k, 15)
    moe = xstage.MoE(w13, w2)
    moe(x, ids, wts)
    assert moe.routing_error() is None
    bad = ids.clone()
    bad[7, 1] = E  # out of range
    with pytest.raises(ValueError, match=rf"xstage.MoE: topk_ids\[7, 1\] = {E}: expected an expert id in 0 .. {E - 1}"):
        moe(x, bad, wts)
    bad[7, 1] = bad[7, 0]  # repeated
    with pytest.raises(ValueError, match=r"xstage.MoE: topk_ids\[7, 1\] = \d+ repeats slot 0's expert"):
        moe(x, bad, wts)
    # Without the eager check (as under capture), the pair is left out and recorded.
    unchecked = xstage.MoE(w13, w2, check_ids=False)
    bad[7, 1] = -3
    bad[20] = torch.tensor([E + 5, 1 << 40], device=cuda)  # an int64 id beyond int32 too
    poison(cuda)
    out = unchecked(x, bad, wts)
    assert torch.isfinite(out).all()
    keep = (bad >= 0) & (bad < E)
    ref = ref_fp32(x, w13, w2, torch.where(keep, bad, -1), wts)
    assert torch.equal(out[20], torch.zeros_like(out[20]))  # both pairs left out: nothing added
    assert rel_err(out, ref) < 4e-3
    msg = unchecked.routing_error()
    assert msg is not None and msg.startswith("xstage.moe_layer: topk_ids[") and "(the pair was left out)" in msg, msg
    assert unchecked.routing_error() is None  # read and cleared


def test_a_first_call_under_inference_mode_leaves_a_record_later_calls_can_clear(cuda, monkeypatch):
    # Serving code often runs its first call under torch.inference_mode(); the device's routing record made
    # then is cleared in place by routing_error(), inside inference mode or not.
    from xstage import moe_local
    monkeypatch.setattr(moe_local, "_RECORDS", {})  # as in a fresh process: the first call makes the record
    T, H, I, E, k = 40, 256, 128, 4, 2
    w13, w2 = weights(cuda, E, H, I, 21)
    x = tokens(cuda, T, H, 22)
    ids, wts = routing(cuda, T, E, k, 23)
    moe = xstage.MoE(w13, w2, check_ids=False)
    bad = ids.clone()
    bad[3, 0] = E
    with torch.inference_mode():
        moe(x, bad, wts)
    msg = moe.routing_error()  # clears the record in place, outside inference mode
    assert msg is not None and "topk_ids[3, 0]" in msg, msg
    assert moe.routing_error() is None


def test_no_tokens_and_tokens_max(cuda):
    w13, w2 = weights(cuda, 2, 256, 128, 16)
    moe = xstage.MoE(w13, w2, tokens_max=64)
    ids, wts = routing(cuda, 0, 2, 1, 17)
    assert moe(tokens(cuda, 0, 256, 1), ids, wts).shape == (0, 256)
    ids, wts = routing(cuda, 65, 2, 1, 17)
    with pytest.raises(ValueError, match="T = 65 tokens"):
        moe(tokens(cuda, 65, 256, 1), ids, wts)


def test_another_stream(cuda):
    T, H, I, E, k = 400, 256, 128, 4, 2
    w13, w2 = weights(cuda, E, H, I, 18)
    moe = xstage.MoE(w13, w2)
    x = tokens(cuda, T, H, 19)
    ids, wts = routing(cuda, T, E, k, 20)
    want = moe(x, ids, wts)
    x_s = torch.zeros_like(x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)  # launched on any other stream, the layer would read x_s before the copy
        x_s.copy_(x)
        got = moe(x_s, ids, wts)
    torch.cuda.current_stream().wait_stream(s)
    assert torch.equal(got, want)


def test_the_benchmark_runs_quick(cuda, tmp_path):
    """bench/moe_layer_torch.py --quick: the script end to end (not a measurement)."""
    import json
    import os
    import pathlib
    import subprocess
    import sys
    root = pathlib.Path(__file__).resolve().parents[2]
    out = tmp_path / "quick.json"
    env = dict(os.environ, PYTHONPATH=str(root / "python"))
    r = subprocess.run([sys.executable, str(root / "bench" / "moe_layer_torch.py"), "--quick", "--out", str(out)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["summary"]["all_same_bits"] and doc["cells"][0]["check"]["rel_err_vs_torch"] < 2e-2
    assert {"device", "driver", "commit", "date", "command"} <= doc.keys()
