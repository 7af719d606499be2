"""xstage's MoE expert GEMMs on the GPU against torch._grouped_mm (plus
torch's SwiGLU) and an fp32 reference: uneven and empty experts, row counts
that are no multiple of any tile, routing weights, split-K (few rows on a long
K), shapes no tile width divides (N a multiple of 16, K of 8), strided inputs,
another stream, CUDA graph capture and torch.compile.
Skips without a GPU (fails where XSTAGE_REQUIRE_GPU says the machine has them)."""
import ctypes

import pytest
import torch
import torch.nn.functional as F

import xstage
from conftest import require_gpus
from xstage import _lib

BF16 = torch.bfloat16


def rel_err(got, want):
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def problem(device, counts, H, I, weights, seed=0, extra_rows=0):
    g = torch.Generator(device=device).manual_seed(seed)
    rows = sum(counts) + extra_rows
    x = (torch.randn(rows, H, generator=g, device=device) * 0.5).to(BF16)
    w13 = (torch.randn(len(counts), 2 * I, H, generator=g, device=device) / H ** 0.5).to(BF16)
    w2 = (torch.randn(len(counts), H, I, generator=g, device=device) / I ** 0.5).to(BF16)
    offs = torch.tensor(counts, device=device).cumsum(0).to(torch.int32)
    wt = torch.rand(rows, generator=g, device=device) + 0.1 if weights else None
    return x, w13, w2, offs, wt


def torch_l1(x, w13, offs, wt):
    I = w13.shape[1] // 2
    gu = torch._grouped_mm(x, w13.transpose(-2, -1), offs=offs)
    h = F.silu(gu[:, :I]) * gu[:, I:]
    return (h * wt[:, None] if wt is not None else h).to(BF16)


def ref_l1(x, w13, offs, wt):
    """fp32 per expert on the same bf16 inputs."""
    I = w13.shape[1] // 2
    out, begin = torch.zeros(x.shape[0], I, device=x.device), 0
    for e, end in enumerate(offs.tolist()):
        gu = x[begin:end].float() @ w13[e].float().T
        h = F.silu(gu[:, :I]) * gu[:, I:]
        out[begin:end] = h * wt[begin:end, None] if wt is not None else h
        begin = end
    return out


def ref_l2(h, w2, offs):
    out, begin = torch.zeros(h.shape[0], w2.shape[1], device=h.device), 0
    for e, end in enumerate(offs.tolist()):
        out[begin:end] = h[begin:end].float() @ w2[e].float().T
        begin = end
    return out


def check(ours, ref, torch_bf16, rows):
    """As close to the fp32 reference as torch's own bf16 result is, over the rows that belong to an expert."""
    assert torch.isfinite(ours[:rows]).all()
    err, err_torch = rel_err(ours[:rows], ref[:rows]), rel_err(torch_bf16[:rows], ref[:rows])
    assert err < max(2 * err_torch, 4e-3), (err, err_torch)


CASES = [  # counts, H, I
    ([70, 0, 129, 1, 256, 0, 3], 512, 256),        # empty and ragged experts
    ([300, 513, 64], 1024, 768),                   # no multiple of any tile
    ([130], 512, 6144),                            # one expert, few rows on a long K: L2 split-K
    ([64] * 16, 2048, 768),                        # Qwen3-30B-A3B-like, P = 8
    ([0, 61, 1, 38, 200, 3], 2880, 1400),          # no tile width divides N (2880, 2I = 2800); K = 1400 ragged
    ([5, 0, 17, 1], 48, 24),                       # N = 48 and 48, K = 48 and 24: below one tile and k-block
]


@pytest.mark.parametrize("counts,H,I", CASES)
@pytest.mark.parametrize("weights", [False, True])
def test_matches_grouped_mm_and_the_fp32_reference(cuda, counts, H, I, weights):
    x, w13, w2, offs, wt = problem(cuda, counts, H, I, weights, seed=len(counts) + weights)
    rows = sum(counts)
    w13i = xstage.moe_interleave_w13(w13)
    h = xstage.grouped_mm_swiglu(x, w13i, offs, wt)
    assert h.shape == (rows, I) and h.dtype == BF16
    check(h, ref_l1(x, w13, offs, wt), torch_l1(x, w13, offs, wt), rows)
    y = xstage.grouped_mm(h, w2, offs)
    assert y.shape == (rows, H) and y.dtype == BF16
    check(y, ref_l2(h, w2, offs), torch._grouped_mm(h, w2.transpose(-2, -1), offs=offs), rows)
    assert torch.equal(xstage.moe_experts(x, w13i, w2, offs, wt), y)


def test_rows_past_the_last_expert_and_strided_inputs(cuda):
    counts, H, I = [40, 0, 77], 256, 128
    x, w13, w2, offs, _ = problem(cuda, counts, H, I, False, seed=9, extra_rows=13)
    rows = sum(counts)
    w13i = xstage.moe_interleave_w13(w13)
    want = xstage.grouped_mm_swiglu(x, w13i, offs)
    wide = torch.zeros(x.shape[0], 2 * H, dtype=BF16, device=cuda)
    wide[:, 3:3 + H] = x  # rows 2H apart, data 6 bytes off 16-byte alignment: copied first
    got = xstage.grouped_mm_swiglu(wide[:, 3:3 + H], w13i, offs)
    assert torch.equal(got[:rows], want[:rows])
    check(want, ref_l1(x, w13, offs, None), torch_l1(x, w13, offs, None), rows)


def test_another_stream_and_a_cuda_graph(cuda):
    counts, H, I = [100, 3, 0, 250], 512, 256
    x, w13, w2, offs, wt = problem(cuda, counts, H, I, True, seed=4)
    w13i = xstage.moe_interleave_w13(w13)
    eager = xstage.moe_experts(x, w13i, w2, offs, wt)
    # On s, behind a sleep and the copy of the input: launched on any other stream, the op would read
    # x_s before the copy lands.
    x_s = torch.zeros_like(x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)
        x_s.copy_(x)
        on_s = xstage.moe_experts(x_s, w13i, w2, offs, wt)
    torch.cuda.current_stream().wait_stream(s)
    assert torch.equal(on_s, eager)

    static_x = x.clone()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = xstage.moe_experts(static_x, w13i, w2, offs, wt)
    g.replay()
    assert torch.equal(static_y, eager)
    x2 = problem(cuda, counts, H, I, False, seed=5)[0]
    static_x.copy_(x2)
    g.replay()
    assert torch.equal(static_y, xstage.moe_experts(x2, w13i, w2, offs, wt))


def assert_graph_replays(fn, eager, replays=3):
    """fn captured in a CUDA graph gives eager's bits on every replay (a workspace left ready by the last)."""
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = fn()
    for _ in range(replays):
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, eager)


def test_split_k_in_a_cuda_graph(cuda):
    """Few rows on a long K: the heuristic splits K, and the op's workspace comes from torch's allocator."""
    counts, H, I = [128], 512, 6144
    x, w13, w2, offs, _ = problem(cuda, counts, H, I, False, seed=6)
    h = xstage.grouped_mm_swiglu(x, xstage.moe_interleave_w13(w13), offs)
    ws, y0 = ctypes.c_int64(0), torch.empty(128, H, dtype=BF16, device=cuda)
    _lib.call("xstage_torch_moe_workspace_bytes", 1, h.data_ptr(), w2.data_ptr(), y0.data_ptr(), offs.data_ptr(), 128, I, H,
              1, ctypes.byref(ws), ctypes.byref(ctypes.c_int64(0)))
    assert ws.value > 0, "the heuristic did not split K: this test would not cover split-K"
    eager = xstage.grouped_mm(h, w2, offs)
    check(eager, ref_l2(h, w2, offs), torch._grouped_mm(h, w2.transpose(-2, -1), offs=offs), 128)
    assert_graph_replays(lambda: xstage.grouped_mm(h, w2, offs), eager)


def test_tail_split_in_a_cuda_graph(cuda):
    """Just past whole waves of tiles on a long K: the last wave's tiles split over the idle SMs (the tail
    split), its workspace from torch's allocator with only the counts zeroed; eager, then graph replays."""
    sms = torch.cuda.get_device_properties(cuda).multi_processor_count
    H, I = 2048, 4096  # L2: N = 2048, K = 4096 (64 k-blocks: the shortest K the rule splits)
    counts = [128 * (sms // 8 + 1) + 5, 128 * 2 - 3]  # about a wave of 128 x 256 tiles and a few more
    x, w13, w2, offs, wt = problem(cuda, counts, H, I, True, seed=9)
    w13i = xstage.moe_interleave_w13(w13)
    h = xstage.grouped_mm_swiglu(x, w13i, offs, wt)
    rows = sum(counts)
    ws, zeroed, y0 = ctypes.c_int64(0), ctypes.c_int64(0), torch.empty(rows, H, dtype=BF16, device=cuda)
    _lib.call("xstage_torch_moe_workspace_bytes", 1, h.data_ptr(), w2.data_ptr(), y0.data_ptr(), offs.data_ptr(), rows,
              I, H, len(counts), ctypes.byref(ws), ctypes.byref(zeroed))
    assert ws.value > zeroed.value > 0, "no tail split planned: this test would not cover it"
    eager = xstage.grouped_mm(h, w2, offs)
    check(eager, ref_l2(h, w2, offs), torch._grouped_mm(h, w2.transpose(-2, -1), offs=offs), rows)
    assert_graph_replays(lambda: xstage.grouped_mm(h, w2, offs), eager)


def test_torch_compile(cuda):
    counts, H, I = [33, 0, 200], 256, 384
    x, w13, w2, offs, wt = problem(cuda, counts, H, I, True, seed=8)
    w13i = xstage.moe_interleave_w13(w13)

    def layer(x, offs, wt):
        return xstage.moe_experts(x * 1.0, w13i, w2, offs, wt) + 0

    torch._dynamo.reset()
    got = torch.compile(layer, fullgraph=True)(x, offs, wt)
    assert torch.equal(got, xstage.moe_experts(x, w13i, w2, offs, wt))


def test_tensors_on_cpu_and_gpu(cuda):
    x, w13, _, offs, _ = problem(cuda, [8], 256, 128, False)
    with pytest.raises(ValueError, match="expected every tensor on one device"):
        xstage.grouped_mm_swiglu(x, w13.cpu(), offs)


def test_tensors_on_another_gpu_than_the_current_one():
    require_gpus(2)
    counts, H, I = [50, 0, 77], 256, 128
    x, w13, w2, offs, wt = problem(torch.device("cuda", 0), counts, H, I, True, seed=12)
    w13i = xstage.moe_interleave_w13(w13)
    want = xstage.moe_experts(x, w13i, w2, offs, wt)
    with torch.cuda.device(0):  # the op must launch on the tensors' GPU, with its own stream
        got = xstage.moe_experts(*(t.to("cuda:1") for t in (x, w13i, w2, offs, wt)))
    assert got.device == torch.device("cuda", 1)
    assert torch.equal(got.cpu(), want.cpu())
