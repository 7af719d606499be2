#!/usr/bin/env python3
"""CPU checks of issue 39's grid (bench/moe_grid_cells.py): reproducible, distinct, inside the issue's sets,
the memory rule kept, the table's shapes, the counts' totals. Run by CTest (bench_grid_cells)."""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moe_grid_cells as g  # noqa: E402

GIB = 2**30


def main():
    a, b = g.grid(39, 160, 100 * GIB), g.grid(39, 160, 100 * GIB)
    assert a == b, "the same seed draws the same grid"
    assert g.grid(40, 160, 100 * GIB)["cells"] != a["cells"], "another seed, another grid"
    drawn = [c for c in a["cells"] if c["source"] == "drawn"]
    table = [c for c in a["cells"] if c["source"].startswith("table:")]
    assert len(drawn) == 160 and len(table) == 54, (len(drawn), len(table))  # 54 shapes: 108 GEMM cells
    keys = {(c["hidden"], c["inter"], c["experts"], c["rows_per_expert"], c["routing"]) for c in drawn}
    assert len(keys) == 160, "drawn cells are distinct"
    for c in drawn:
        assert c["hidden"] in g.HIDDEN and c["inter"] in g.INTER and c["experts"] in g.EXPERTS
        assert c["rows_per_expert"] in g.ROWS and c["routing"] in g.ROUTING
        assert g.cell_bytes(c["hidden"], c["inter"], c["experts"], c["rows_per_expert"]) <= 100 * GIB
    small = g.grid(39, 160, 8 * GIB)
    assert small["redrawn_over_memory"] > a["redrawn_over_memory"], "a tighter cap redraws more"
    for E in (1, 2, 7, 64, 128):
        for m in (32, 64, 4096):
            z = g.zipf_counts(E, m, random.Random(E * 1000 + m))
            assert len(z) == E and sum(z) == E * m and min(z) >= 0, (E, m)
            if E > 1:
                assert max(z) > m, "Zipf(1) is skewed"
    c = dict(hidden=1024, inter=256, experts=128, rows_per_expert=32, routing="zipf")
    z = g.counts_of(c, 39)
    assert z == g.counts_of(c, 39), "the counts are the seed's"
    h = sum(1.0 / (i + 1) for i in range(128))
    assert abs(max(z) - 4096 / h) <= 1 and abs(min(z) - 4096 / (128 * h)) <= 1, "the largest 1/H_E, the least 1/(E H_E)"
    assert g.counts_of(dict(c, routing="uniform"), 39) == [32] * 128
    print("ok")


if __name__ == "__main__":
    main()
