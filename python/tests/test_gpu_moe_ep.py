"""xstage.MoE over a group of P >= 2 ranks (expert parallelism), one GPU a rank:
    torchrun --nproc-per-node 2 -m pytest python/tests/test_gpu_moe_ep.py
Every rank holds the same E experts (one seed) and its own tokens; against
the fp32 reference of the whole layer on the rank's tokens (and as close as
the torch MoE users write, xstage.reference.moe_torch, gets to it); the same
bits on a second call; T varying per rank (0 included); CUDA graph replays
with new tokens and routing; torch.compile(fullgraph=True); T > tokens_max;
the sizes report; a rank whose peer never runs raises naming rank, flag and
values. Skips with fewer than 2 ranks or GPUs (fails where
XSTAGE_REQUIRE_GPU says the machine has them)."""
import contextlib

import pytest
import torch
import torch.distributed as dist

import xstage
from conftest import require_gpus
from test_gpu_moe_layer import check_layer_output as check, routing, tokens, weights

BF16 = torch.bfloat16
SHAPES = [(1024, 512, 16, 4), (2048, 768, 8, 2), (512, 256, 64, 8)]  # H, I, E, k


@pytest.fixture
def pg(group, cuda):
    P = dist.get_world_size(group)
    if P < 2:
        pytest.skip("needs a group of >= 2 ranks: torchrun --nproc-per-node 2 -m pytest "
                    "python/tests/test_gpu_moe_ep.py")
    require_gpus(P)
    return group


def setup(pg, H, I, E, k, T_max, **kw):
    dev = torch.device("cuda", torch.cuda.current_device())
    w13, w2 = weights(dev, E, H, I, seed=E)  # every rank the same experts
    moe = xstage.MoE(w13, w2, group=pg, tokens_max=T_max, topk=k, **kw)
    return dev, w13, w2, moe


def inputs(dev, T, H, E, k, seed):
    rank = dist.get_rank()
    x = tokens(dev, T, H, seed=1000 * seed + rank)
    ids, wts = routing(dev, T, E, k, seed=1000 * seed + 17 + rank)
    return x, ids, wts


@contextlib.contextmanager
def agreed(pg):
    """A test's body on every rank, then one verdict for all: the failures
    recorded (and an exception that left the body) are counted across the
    ranks, and every rank fails if any did, with its own failures. No rank
    leaves a test early while the others still call the layer (its device
    epochs would fall out of step) or wait in a collective."""
    failures = []
    try:
        yield failures
    except Exception as e:  # noqa: BLE001 -- any failure; the verdict below is every rank's
        failures.append(f"{type(e).__name__}: {e}")
    bad = torch.tensor([len(failures)], dtype=torch.int32, device=torch.cuda.current_device())
    dist.all_reduce(bad, group=pg)
    assert not failures and int(bad) == 0, f"rank {dist.get_rank()}: {failures or 'another rank failed'}"


def recorded(failures, what, fn, *args):
    """fn(*args); an exception is recorded as a failure, and the body goes on."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001
        failures.append(f"{what}: {type(e).__name__}: {e}")
        return None


@pytest.mark.parametrize("H,I,E,k", SHAPES)
@pytest.mark.parametrize("schedule", ["model-guided", "interleaved", "expert-wave"])
def test_matches_the_reference_and_repeats_bit_for_bit(pg, H, I, E, k, schedule):
    dev, w13, w2, moe = setup(pg, H, I, E, k, 300, schedule=schedule)
    with agreed(pg) as failures:
        for seed, T in enumerate([300, 1 + 97 * dist.get_rank(), 0 if dist.get_rank() == 0 else 5, 256]):
            x, ids, wts = inputs(dev, T, H, E, k, seed)
            out = recorded(failures, f"T = {T}, first call", moe, x, ids, wts)
            again = recorded(failures, f"T = {T}, second call", moe, x, ids, wts)
            if out is not None and again is not None:
                recorded(failures, f"T = {T}", check, out, x, w13, w2, ids, wts)
                if not torch.equal(again, out):
                    failures.append(f"T = {T}: a second call differs")
        moe.check_timeouts()


def test_cuda_graph_replays_with_new_tokens(pg):
    H, I, E, k, T = 1024, 512, 16, 4, 200
    dev, w13, w2, moe = setup(pg, H, I, E, k, T)
    x, ids, wts = inputs(dev, T, H, E, k, 0)
    moe(x, ids, wts)  # the buffers, outside capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = moe(x, ids, wts)
    with agreed(pg) as failures:
        for seed in range(1, 5):
            nx, nids, nwts = inputs(dev, T, H, E, k, seed)
            x.copy_(nx), ids.copy_(nids), wts.copy_(nwts)
            g.replay()
            # eager calls and replays interleave: one epoch counter on the device
            eager = recorded(failures, f"seed {seed}, eager call", moe, x, ids, wts)
            if eager is not None:
                if not torch.equal(static_out, eager):
                    failures.append(f"seed {seed}: the replay differs from the eager call")
                recorded(failures, f"seed {seed}", check, eager, x, w13, w2, ids, wts)
        moe.check_timeouts()


def test_torch_compile_fullgraph(pg):
    H, I, E, k, T = 1024, 512, 16, 4, 128
    dev, w13, w2, moe = setup(pg, H, I, E, k, T)
    gate = torch.nn.Linear(H, E, bias=False, device=dev, dtype=BF16)
    torch.manual_seed(0)

    def block(x):
        # Not renormalised: Inductor's fused sum may round the weights' last bit otherwise, and the bits are compared.
        wts, ids = xstage.topk_softmax(gate(x), k)
        return moe(x, ids, wts)

    x, _, _ = inputs(dev, T, H, E, k, 3)
    torch._dynamo.reset()
    with agreed(pg) as failures:
        compiled = recorded(failures, "compiled call", torch.compile(block, fullgraph=True), x)
        eager = recorded(failures, "eager call", block, x)  # both calls on every rank
        if compiled is not None and eager is not None and not torch.equal(compiled, eager):
            failures.append("compiled and eager outputs differ")
        moe.check_timeouts()


def test_limits_and_sizes(pg):
    H, I, E, k, T = 1024, 512, 16, 4, 64
    dev, _, _, moe = setup(pg, H, I, E, k, T)
    x, ids, wts = inputs(dev, T + 1, H, E, k, 0)
    with pytest.raises(ValueError, match=r"T = 65 tokens \(dimension 0\): expected at most tokens_max = 64"):
        moe(x, ids, wts)
    s = moe.sizes()
    P = dist.get_world_size(pg)
    assert s["rows_cap"] == P * T * min(k, E // P) and s["total"] > s["symmetric"] > 0
    bad = ids.clone()
    bad[3, 1] = E
    with pytest.raises(ValueError, match=r"topk_ids\[3, 1\] = 16: expected an expert id in 0 .. 15"):
        moe(x[:T], bad[:T], wts[:T])
    moe.check_timeouts()  # each refused call was still made on every rank, with no tokens: in step


def test_a_rank_whose_peers_never_run_raises_naming_rank_flag_and_values(pg):
    H, I, E, k, T = 512, 256, 8, 2, 48  # a shape of its own: buffers no other test shares
    dev, _, _, moe = setup(pg, H, I, E, k, T, timeout_s=0.5)
    moe.prepare()  # collective
    try:
        if dist.get_rank() == 0:
            x, ids, wts = inputs(dev, T, H, E, k, 0)
            moe(x, ids, wts)
            with pytest.raises(RuntimeError, match=r"dispatch wait timed out: rank 0 waited on flag \d+ \(the counts "
                                                   r"of source \d+\) for \d+ ns: expected >= 1, saw 0"):
                moe.check_timeouts()
    finally:
        dist.barrier(group=pg)  # the other ranks wait here, also when rank 0's check fails


def test_a_first_call_under_inference_mode_leaves_buffers_later_calls_can_write(pg):
    H, I, E, k, T = 1024, 512, 16, 4, 96  # a tokens_max no other test uses: the buffers are made here
    dev, w13, w2, moe = setup(pg, H, I, E, k, T)
    x, ids, wts = inputs(dev, T, H, E, k, 5)
    with agreed(pg) as failures:
        with torch.inference_mode():
            first = recorded(failures, "the call under inference mode", moe, x, ids, wts)
        # copies into the buffers in place, outside inference mode
        again = recorded(failures, "the call outside inference mode", moe, x, ids, wts)
        if first is not None and again is not None:
            if not torch.equal(first, again):
                failures.append("the call outside inference mode differs")
            recorded(failures, "output", check, again, x, w13, w2, ids, wts)
        moe.check_timeouts()


def test_bad_input_on_one_rank_raises_there_and_leaves_the_ranks_in_step(pg):
    H, I, E, k, T = 1024, 512, 16, 4, 80  # a tokens_max no other test uses: the buffers are made here
    dev, w13, w2, moe = setup(pg, H, I, E, k, T, timeout_s=5.0)
    x, ids, wts = inputs(dev, T, H, E, k, 6)
    with agreed(pg) as failures:
        if dist.get_rank() == 0:
            bad = ids.clone()
            bad[5, 2] = E
            try:
                moe(x, bad, wts)
                failures.append("bad ids on rank 0 did not raise")
            except ValueError as e:
                if "topk_ids[5, 2] = 16" not in str(e):
                    failures.append(f"the message: {e}")
        else:
            # rank 0 still takes part (with no tokens): these tokens' pairs on rank 0's experts are served
            out = recorded(failures, "the other ranks' call", moe, x, ids, wts)
            if out is not None:
                recorded(failures, "the other ranks' output", check, out, x, w13, w2, ids, wts)
        out = recorded(failures, "the next call", moe, x, ids, wts)  # every rank, in step
        if out is not None:
            recorded(failures, "the next output", check, out, x, w13, w2, ids, wts)
        moe.check_timeouts()
