"""xstage.MoE's expert-parallel path with P = 2 ranks emulated in one process
on one GPU: moe_ep.py's checks, copies, plans, records and the C ABI forward
(xstage_torch_moe_ep_forward), each rank's symmetric area a plain device
allocation and the [5][P] tables built from them as make_buffers builds them
from torch symmetric memory's rendezvous, each rank's calls on its own
stream. What this cannot run is that rendezvous: torch refuses two ranks'
symmetric memory on one GPU ("allocations from overlapping devices") and
NCCL two ranks on one GPU, so test_gpu_moe_ep.py needs a GPU a rank.

Every rank holds the same E experts (one seed) and its own tokens; against
the fp32 reference of the whole layer on the rank's tokens (and as close as
the torch MoE users write gets to it); the same bits on a second call; T
varying per rank (0 included); CUDA graph replays interleaved with eager
calls; a rank whose peer never runs raises naming rank, flag and values.

The two ranks' kernels wait for each other on one GPU. A kernel that CUDA
loads lazily (its default) on its first launch makes the driver synchronise
the context, and so wait for the other rank's spinning wait kernel, which
waits for the launch being held up: each first device run timed out after
10 s there (a dispatch wait, on the second shape). So these tests need
eager module loading, set before CUDA starts; in any other process (CUDA's
default, or CUDA started already) the file is one test that runs it again
in a process of its own with CUDA_MODULE_LOADING=EAGER, so that the setting
does not change the other tests' process. (One process a GPU, as in use,
has no such cycle: a load there waits only for its own rank.)"""
import os
import subprocess
import sys

import pytest
import torch

import xstage
from xstage import moe_ep, moe_local
from test_gpu_moe_layer import check_layer_output as check, routing, tokens, weights

# Whether this process loads eagerly: set so before CUDA started (CUDA reads it once, at its start).
EAGER = os.environ.get("CUDA_MODULE_LOADING") == "EAGER" and not torch.cuda.is_initialized()

P = 2
# H, I, E, k; the last two no multiple of any tile (gpt-oss's 2880, and 16 / 8 columns past the last n-block)
SHAPES = [(1024, 512, 16, 4), (2048, 768, 8, 2), (512, 256, 64, 8), (2880, 2880, 8, 4), (272, 136, 8, 2)]


class EmulatedGroup:
    """What moe_ep reads of a process group: a name (its buffers' key)."""

    def __init__(self, rank):
        self.rank, self.group_name = rank, f"xstage-test-emulated-{rank}"


@pytest.fixture
def emulated(cuda, monkeypatch):
    if not EAGER:
        pytest.skip("run by test_in_a_process_of_its_own (CUDA_MODULE_LOADING=EAGER: the file's docstring)")
    monkeypatch.setattr(moe_local, "_group_shape", lambda group: (P, group.rank))
    yield cuda
    torch.cuda.synchronize()
    for key in [k for k in moe_ep._BUFFERS if str(k[0]).startswith("xstage-test-emulated-")]:
        del moe_ep._BUFFERS[key]


def setup(dev, H, I, E, k, T_max, **kw):
    """P modules of one layer, their buffers made and connected here."""
    w13, w2 = weights(dev, E, H, I, seed=E)
    moes = [xstage.MoE(w13, w2, group=EmulatedGroup(r), tokens_max=T_max, topk=k, **kw) for r in range(P)]
    states = [m._ep.state for m in moes]
    sym_bytes = moe_ep.layout(states[0].dims, states[0].timeout_s)["symmetric_bytes"]
    bufs = [moe_ep._EpBuffers(P, r, dev, s.dims, s.timeout_s, torch.zeros(sym_bytes, dtype=torch.uint8, device=dev))
            for r, s in enumerate(states)]
    tables = bufs[0].area_tables([b.sym.data_ptr() for b in bufs])
    for s, b in zip(states, bufs):
        b.connect(tables)
        s.use_buffers(b, dev)
    torch.cuda.synchronize()
    return w13, w2, moes


def inputs(dev, T, H, E, k, seed, rank):
    x = tokens(dev, T, H, seed=1000 * seed + rank)
    ids, wts = routing(dev, T, E, k, seed=1000 * seed + 17 + rank)
    return x, ids, wts


def run_ranks(calls, streams):
    """Each rank's call on its own stream, none waiting for another on the
    host (the ranks wait for each other on the device); their outputs."""
    outs = []
    for call, s in zip(calls, streams):
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            outs.append(call())
    for s in streams:
        torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    return outs


@pytest.mark.parametrize("H,I,E,k", SHAPES)
@pytest.mark.parametrize("schedule", ["model-guided", "interleaved", "expert-wave"])
def test_matches_the_reference_and_repeats_bit_for_bit(emulated, H, I, E, k, schedule):
    dev = emulated
    w13, w2, moes = setup(dev, H, I, E, k, 300, schedule=schedule)
    streams = [torch.cuda.Stream() for _ in range(P)]
    for seed, Ts in enumerate([(300, 300), (1, 98), (0, 5), (256, 0), (17, 300)]):
        ins = [inputs(dev, T, H, E, k, seed, r) for r, T in enumerate(Ts)]
        outs = run_ranks([lambda m=m, a=a: m(*a) for m, a in zip(moes, ins)], streams)
        again = run_ranks([lambda m=m, a=a: m(*a) for m, a in zip(moes, ins)], streams)
        for m in moes:  # a timed-out wait says so, rather than as the output it left
            m.check_timeouts()
        for r in range(P):
            check(outs[r], *ins[r][:1], w13, w2, *ins[r][1:])
            assert torch.equal(again[r], outs[r]), f"rank {r}, T = {Ts}: a second call differs"
    for m in moes:
        m.check_timeouts()


def test_cuda_graph_replays_with_new_tokens(emulated):
    dev = emulated
    H, I, E, k, T = 1024, 512, 16, 4, 200
    w13, w2, moes = setup(dev, H, I, E, k, T)
    streams = [torch.cuda.Stream() for _ in range(P)]
    ins = [inputs(dev, T, H, E, k, 0, r) for r in range(P)]
    run_ranks([lambda m=m, a=a: m(*a) for m, a in zip(moes, ins)], streams)  # outside capture first
    graphs, static = [], []
    for m, a, s in zip(moes, ins, streams):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            static.append(m(*a))
        graphs.append(g)
    for seed in range(1, 5):
        for r in range(P):
            for dst, src in zip(ins[r], inputs(dev, T, H, E, k, seed, r)):
                dst.copy_(src)
        run_ranks([g.replay for g in graphs], streams)
        # eager calls and replays interleave: one epoch counter on the device a rank
        eager = run_ranks([lambda m=m, a=a: m(*a) for m, a in zip(moes, ins)], streams)
        for r in range(P):
            assert torch.equal(static[r], eager[r]), f"rank {r}, seed {seed}: the replay differs from the eager call"
            check(eager[r], *ins[r][:1], w13, w2, *ins[r][1:])
    for m in moes:
        m.check_timeouts()


def test_a_rank_whose_peer_never_runs_raises_naming_rank_flag_and_values(emulated):
    dev = emulated
    H, I, E, k, T = 512, 256, 8, 2, 48
    _, _, moes = setup(dev, H, I, E, k, T, timeout_s=0.5)
    moes[0](*inputs(dev, T, H, E, k, 0, 0))
    with pytest.raises(RuntimeError, match=r"dispatch wait timed out: rank 0 waited on flag \d+ \(the counts of "
                                           r"source 1\) for \d+ ns: expected >= 1, saw 0"):
        moes[0].check_timeouts()


def test_bad_input_on_one_rank_raises_there_and_leaves_the_ranks_in_step(emulated):
    dev = emulated
    H, I, E, k, T = 1024, 512, 16, 4, 80
    w13, w2, moes = setup(dev, H, I, E, k, T, timeout_s=5.0)
    streams = [torch.cuda.Stream() for _ in range(P)]
    ins = [inputs(dev, T, H, E, k, 6, r) for r in range(P)]
    bad = ins[0][1].clone()
    bad[5, 2] = E

    def rank0_bad():
        with pytest.raises(ValueError, match=r"topk_ids\[5, 2\] = 16: expected an expert id in 0 \.\. 15"):
            moes[0](ins[0][0], bad, ins[0][2])  # rank 0 still takes part, with no tokens
        return None

    _, out1 = run_ranks([rank0_bad, lambda: moes[1](*ins[1])], streams)
    check(out1, *ins[1][:1], w13, w2, *ins[1][1:])  # rank 1's pairs on rank 0's experts were served
    outs = run_ranks([lambda m=m, a=a: m(*a) for m, a in zip(moes, ins)], streams)  # the next call, in step
    for r in range(P):
        check(outs[r], *ins[r][:1], w13, w2, *ins[r][1:])
    for m in moes:
        m.check_timeouts()


def test_in_a_process_of_its_own(cuda):
    """This file's tests, again, in a child process that loads eagerly."""
    if EAGER:
        pytest.skip("this process loads eagerly: the tests above ran here")
    env = dict(os.environ, CUDA_MODULE_LOADING="EAGER")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", __file__, "-k",
                        "not test_in_a_process_of_its_own"], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"the eager process: rc {r.returncode}\n{r.stdout[-6000:]}\n{r.stderr[-2000:]}"
    summary = r.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "skipped" not in summary, r.stdout[-3000:]
