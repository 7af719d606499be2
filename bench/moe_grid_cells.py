"""The MoE GEMM development grid of issue 39, drawn without a GPU (bench/moe_grid.py measures it).

A cell is (hidden, inter, local experts, mean rows per expert, routing). The grid is a seeded random sample of
`n` distinct cells from the issue's sets, plus the 108 cells of RESULTS section 7's table (uniform rows). A
drawn cell whose operands and outputs would not fit `max_bytes` of GPU memory is drawn again (the rule is
written into the grid's record, so the sample is reproducible from the seed alone).

Counts: `uniform` gives every expert the mean; `zipf` gives expert i (in a seeded random order) a share
proportional to 1 / (i + 1) of experts * mean rows (Zipf(1)), rounded so the total is exact (at the issue's
means every expert keeps some rows: the least gets mean / H_E, about a sixth of it at 128 experts; experts with
no rows are the tests' business, tests/gpu).
"""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

HIDDEN = [1024, 1536, 2048, 2560, 3072, 4096, 5120, 6144, 7168]
INTER = [256, 384, 640, 768, 1024, 1536, 2048, 3072, 4096, 6912, 14336]
EXPERTS = [1, 2, 4, 8, 16, 32, 64, 128]
ROWS = [32, 64, 128, 256, 512, 1024, 4096]
ROUTING = ["uniform", "zipf"]

# RESULTS section 7's table: its models, P where it divides the experts, its rows per expert.
from moe_models import MODELS as TABLE_MODELS, RANKS as TABLE_RANKS, ROWS as TABLE_ROWS  # noqa: E402


def zipf_counts(E, mean, rng):
    """Zipf(1) over the experts (in a random order), total E * mean, integers, the largest remainders rounded up."""
    total = E * mean
    order = list(range(E))
    rng.shuffle(order)
    h = sum(1.0 / (i + 1) for i in range(E))
    exact = [total / (h * (i + 1)) for i in range(E)]
    counts = [int(v) for v in exact]
    rest = total - sum(counts)
    for i in sorted(range(E), key=lambda i: exact[i] - counts[i], reverse=True)[:rest]:
        counts[i] += 1
    out = [0] * E
    for rank, e in enumerate(order):
        out[e] = counts[rank]
    return out


def counts_of(cell, seed):
    """Rows of each local expert for a cell (deterministic in the cell and the seed)."""
    E, m = cell["experts"], cell["rows_per_expert"]
    if cell["routing"] == "uniform":
        return [m] * E
    rng = random.Random(f"{seed}:{cell['hidden']}:{cell['inter']}:{E}:{m}")
    return zipf_counts(E, m, rng)


def cell_bytes(hidden, inter, experts, rows_per_expert):
    """GPU bytes a cell's problem holds at once: x, W13 (and its interleaved copy), W2, h (ours and torch's,
    plus torch's [rows, 2 inter] gate/up), y (ours and torch's), bf16."""
    rows = experts * rows_per_expert
    return 2 * (rows * hidden + 2 * experts * 2 * inter * hidden + experts * hidden * inter
                + 2 * rows * inter + rows * 2 * inter + 2 * rows * hidden)


def draw(seed, n, max_bytes):
    """n distinct cells drawn from the issue's sets (a cell over max_bytes is drawn again)."""
    rng = random.Random(seed)
    seen, cells, redrawn = set(), [], 0
    while len(cells) < n:
        c = (rng.choice(HIDDEN), rng.choice(INTER), rng.choice(EXPERTS), rng.choice(ROWS), rng.choice(ROUTING))
        if c in seen:
            continue
        seen.add(c)
        if cell_bytes(*c[:4]) > max_bytes:
            redrawn += 1
            continue
        cells.append(dict(source="drawn", hidden=c[0], inter=c[1], experts=c[2], rows_per_expert=c[3],
                          routing=c[4]))
    return cells, redrawn


def table_cells():
    """The 108 GEMM cells of RESULTS section 7 (54 shapes; each cell is one shape's L1 or L2)."""
    out = []
    for name, hidden, inter, E, _ in TABLE_MODELS:
        for P in TABLE_RANKS:
            if E % P:
                continue
            for m in TABLE_ROWS:
                out.append(dict(source=f"table:{name}:P{P}", hidden=hidden, inter=inter, experts=E // P,
                                rows_per_expert=m, routing="uniform"))
    return out


def grid(seed, n, max_bytes):
    drawn, redrawn = draw(seed, n, max_bytes)
    return dict(seed=seed, drawn=n, redrawn_over_memory=redrawn, max_bytes=max_bytes,
                rule="cells drawn uniformly from the issue's sets without repeats; one whose problem exceeds "
                     "max_bytes of GPU memory is drawn again",
                cells=drawn + table_cells())
