#!/usr/bin/env python3
"""How far the CTAs' tiles drift apart: the tile-end trace of a fused Ulysses
run (a diagnostics build, XSTAGE_ULYSSES_EXPERIMENT=512 and
XSTAGE_TILE_TRACE=FILE: rows S, cta, tile, end_ns) reduced to one number
per S, the spread the per-store-path model takes (StorePathOptions::tile_spread,
`xstage ulysses-predict --store-paths --tile-spread-table`):

    tile_spread = (latest - earliest end of the CTAs' last common tile) / (2 K t)

with K the tiles every CTA ran and t the mean tile time: the model gives slot
c the tile time (1 + tile_spread u_c) t, u_c evenly over [-1, 1], whose ends
of tile K lie 2 K tile_spread t apart. Also printed (stderr): the spread of
the CTAs' mean tile times and the tiles' own jitter, to tell a steady drift
from a random walk.

With several traces (one launch each), the median over them a S, and
their least and greatest beside it.

Usage: bench/tile_spread.py TRACE.csv [TRACE.csv ...] > tile-spread.csv
"""
import collections
import csv
import statistics
import sys


def spreads_of(path):
    """S -> (CTAs, tiles, mean tile ns, spread) of one launch's trace."""
    ends = collections.defaultdict(lambda: collections.defaultdict(dict))
    with open(path) as f:
        for row in csv.reader(f):
            if len(row) != 4:
                sys.exit(f"{path}: expected rows S,cta,tile,end_ns, got {row}")
            S, cta, tile, t = (int(x) for x in row)
            ends[S][cta][tile] = t
    out = {}
    for S in sorted(ends):
        ctas = ends[S]
        K = min(len(v) for v in ctas.values())
        if K < 2:
            print(f"{path} S={S}: fewer than 2 tiles a CTA, no spread", file=sys.stderr)
            continue
        durations = {c: [v[k] - v[k - 1] for k in range(1, K)] for c, v in ctas.items()}
        t = statistics.mean(x for d in durations.values() for x in d)
        last = [v[K - 1] for v in ctas.values()]
        means = [statistics.mean(d) for d in durations.values()]
        jitter = statistics.mean(statistics.pstdev(d) for d in durations.values()) / t
        print(f"{path} S={S}: {len(ctas)} CTAs, {K} tiles, tile {t / 1e3:.1f} us; CTAs' mean tile times "
              f"{(max(means) - min(means)) / t:.2%} apart, jitter {jitter:.2%} a tile, last tile's ends "
              f"{(max(last) - min(last)) / t:.3f} tile apart", file=sys.stderr)
        out[S] = (len(ctas), K, t, (max(last) - min(last)) / (2 * K * t))
    return out


def main(argv):
    if not argv or argv[0].startswith("-"):
        sys.exit(__doc__)
    runs = [spreads_of(p) for p in argv]
    print("S,ctas,tiles,tile_us,tile_spread,launches,tile_spread_min,tile_spread_max")
    for S in sorted(set().union(*runs)):
        got = [r[S] for r in runs if S in r]
        spread = [g[3] for g in got]
        ctas, K, t = got[0][0], got[0][1], statistics.mean(g[2] for g in got)
        print(f"{S},{ctas},{K},{t / 1e3:.3f},{statistics.median(spread):.6f},{len(got)},{min(spread):.6f},"
              f"{max(spread):.6f}")


if __name__ == "__main__":
    main(sys.argv[1:])
