"""xstage.UlyssesAttention on the GPU, over every rank of the process group:
one rank by itself, or each GPU's rank under
    torchrun --nproc-per-node 2 -m pytest python/tests/test_gpu_ulysses.py
Against sequential Ulysses (torch SDPA + all_to_all_single) and fp32 SDPA on
the whole sequence; fused against fused=False bit for bit (same kernel);
uneven shards, repeated calls (epochs), store paths, torch.compile, CUDA graph
capture of a step. Skips without a GPU (fails where XSTAGE_REQUIRE_GPU says the machine has them)."""
import pytest
import torch
import torch.distributed as dist

import xstage
from xstage import layout
from xstage.reference import sdpa_bshd, ulysses_sdpa
from conftest import require_gpus

BF16 = torch.bfloat16


@pytest.fixture
def pg(group, cuda):
    require_gpus(dist.get_world_size(group))
    return group


def rand(device, *shape, seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(*shape, generator=g, device=device).to(BF16)


def rel_err(got, want):
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


class Problem:
    """Global q, k, v (the same on every rank: one seed) and this rank's shards."""

    def __init__(self, group, B, S, H, D, seed=0):
        self.P, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.S = S
        dev = torch.device("cuda", torch.cuda.current_device())
        self.full = [rand(dev, B, S, H, D, seed=seed + i) for i in range(3)]
        self.begin = self.rank * layout.chunk_rows(S, self.P)
        self.rows = layout.seq_rows(S, self.P, self.rank)
        self.shards = [t[:, self.begin:self.begin + self.rows] for t in self.full]

    def reference(self, scale=None):
        """fp32 SDPA on the whole sequence, this rank's rows."""
        o = sdpa_bshd(*(t.float() for t in self.full), scale)
        return o[:, self.begin:self.begin + self.rows]


def check(group, prob, out, scale=None):
    """out (this rank's shard) against fp32 SDPA, as close as sequential Ulysses on torch SDPA gets."""
    want = prob.reference(scale)
    seq_sdpa = ulysses_sdpa(*prob.shards, group, seq_len=prob.S, scale=scale)
    assert out.shape == want.shape == seq_sdpa.shape and out.dtype == BF16
    if prob.rows == 0:
        return
    assert torch.isfinite(out).all()
    err, err_torch = rel_err(out, want), rel_err(seq_sdpa, want)
    assert err < max(2 * err_torch, 4e-3), (err, err_torch)


SHAPES = [(1, 4096, 24, 128), (2, 1000, 8, 64), (1, 4097, 4, 128), (1, 301, 2, 64), (1, 77, 4, 128)]


@pytest.mark.parametrize("B,S,H,D", SHAPES)
def test_fused_equals_sequential_and_matches_sdpa(pg, B, S, H, D):
    prob = Problem(pg, B, S, H, D, seed=S)
    fused = xstage.UlyssesAttention(pg)
    out = fused(*prob.shards, seq_len=S)
    seq = xstage.UlyssesAttention(pg, fused=False)(*prob.shards, seq_len=S)
    assert torch.equal(out, seq)
    check(pg, prob, out)
    fused.check_timeouts()


@pytest.mark.parametrize("kernel,store,flags", [
    ("wgmma", "vector16", "at-exit"), ("wgmma", "bulk", "at-exit"), ("wgmma", "paced", "lagged"),
    ("wgmma", "paced-bulk", "at-exit"), ("wgmma", "vector16", "eager"), ("mma", None, "at-exit")])
def test_store_paths_flag_timings_and_kernels(pg, kernel, store, flags):
    prob = Problem(pg, 1, 1027, 8, 128, seed=7)
    fused = xstage.UlyssesAttention(pg, kernel=kernel, store=store, flags=flags)
    out = fused(*prob.shards, seq_len=prob.S, scale=0.2)
    assert torch.equal(out, xstage.UlyssesAttention(pg, fused=False, kernel=kernel)(*prob.shards, seq_len=prob.S,
                                                                                  scale=0.2))
    check(pg, prob, out, scale=0.2)
    fused.check_timeouts()


def test_repeated_calls_and_interleaved_shapes_reuse_buffers(pg):
    fused, seq = xstage.UlyssesAttention(pg), xstage.UlyssesAttention(pg, fused=False)
    other = xstage.UlyssesAttention(pg, order="linear")  # another module on the group shares the buffers
    made = None
    for i in range(6):
        S = 2048 if i % 2 else 1500
        prob = Problem(pg, 1, S, 8, 128, seed=100 + i)
        want = seq(*prob.shards, seq_len=S)
        assert torch.equal(fused(*prob.shards, seq_len=S), want)
        assert torch.equal(other(*prob.shards, seq_len=S), want)
        if i == 1:
            made = {k: (b, b.epoch) for k, b in fused._state.buffers.items()}
    assert len(made) == 2  # one symmetric buffer per shape, made once, shared by both modules
    assert other._state.buffers.keys() == made.keys()
    for key, (bufs, epoch) in made.items():
        assert fused._state.buffers[key] is bufs and other._state.buffers[key] is bufs
        assert bufs.epoch == epoch + 4  # two more calls of each module: the epochs go on counting
    fused.check_timeouts()


def test_torch_compile_of_the_module(pg):
    prob = Problem(pg, 1, 2000, 8, 128, seed=3)
    fused = xstage.UlyssesAttention(pg)
    compiled = torch.compile(fused, fullgraph=True)
    got = compiled(*prob.shards, seq_len=prob.S)
    assert torch.equal(got, fused(*prob.shards, seq_len=prob.S))
    fused.check_timeouts()


def test_cuda_graph_capture_of_a_step(pg):
    """A step (the pre-attention all-to-all, the fused kernel, the copy out, an
    elementwise op) captured once and replayed on new inputs, with eager calls
    of the same module in between."""
    B, S, H, D = 1, 3001, 8, 128
    fused, seq = xstage.UlyssesAttention(pg), xstage.UlyssesAttention(pg, fused=False)
    static = [t.clone() for t in Problem(pg, B, S, H, D, seed=0).shards]

    def step():
        return fused(*static, seq_len=S) * 2

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up: makes the symmetric buffer and NCCL's communicator outside capture
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step()
    for seed in (11, 22, 33, None, 44):
        if seed is None:  # an eager call between replays: the epochs and the graph's flags do not mix
            prob = Problem(pg, B, S, H, D, seed=55)
            assert torch.equal(fused(*prob.shards, seq_len=S), seq(*prob.shards, seq_len=S))
            continue
        prob = Problem(pg, B, S, H, D, seed=seed)
        for s, t in zip(static, prob.shards):
            s.copy_(t)
        g.replay()
        assert torch.equal(out, seq(*prob.shards, seq_len=S) * 2)
    fused.check_timeouts()


def test_a_new_shape_under_capture_is_refused(pg):
    fused = xstage.UlyssesAttention(pg)
    P, rank = fused.world, fused.rank
    qh = torch.zeros(1, 640, 2, 64, dtype=BF16, device="cuda")
    g = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="cannot run under CUDA graph capture: call the module once"):
        with torch.cuda.graph(g):
            torch.ops.xstage.ulysses_attention(qh, qh, qh, fused._id, P, rank, None)
    torch.cuda.synchronize()


def test_a_first_call_under_inference_mode_leaves_buffers_later_calls_can_write(pg):
    # Serving code often runs its first (warm-up) call under torch.inference_mode(); the shape's buffers made
    # then are written in place by every later call, inside inference mode or not.
    prob = Problem(pg, 1, 1111, 4, 64, seed=11)  # a shape no other test uses: its buffers are made here
    fused = xstage.UlyssesAttention(pg)
    with torch.inference_mode():
        first = fused(*prob.shards, seq_len=prob.S)
    again = fused(*prob.shards, seq_len=prob.S)
    fused.check_timeouts()  # clears the timeout record in place too
    assert torch.equal(first, again)
    check(pg, prob, again)
