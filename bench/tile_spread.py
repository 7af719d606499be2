#!/usr/bin/env python3
"""How far the CTAs' tiles drift apart in fused Ulysses launches: the tile-end
trace of a diagnostics build (XSTAGE_ULYSSES_EXPERIMENT=512 and
XSTAGE_TILE_TRACE=FILE; rows S, device, launch, cta, tile, end_ns, one
launch per (file, S, device, launch)) reduced to one row per launch:

    spread = (latest - earliest end of the CTAs' last common tile) / t

in tiles, with K the tiles every CTA ran (the last common one is tile K - 1)
and t the mean tile time, beside
the CTAs' mean tile times (how far apart, as a fraction of t) and the
tiles' own jitter (their standard deviation within a CTA over t): a steady
drift shows in the first, a random walk in the second. Then, per S, the
median, least and greatest spread over the launches.

Usage: bench/tile_spread.py TRACE.csv [TRACE.csv ...] > tile-spread.csv
"""
import collections
import csv
import statistics
import sys


def launches_of(path):
    """(S, device, launch) -> {cta: {tile: end_ns}}; exits on a malformed or repeated row."""
    out = collections.defaultdict(lambda: collections.defaultdict(dict))
    with open(path) as f:
        for lineno, row in enumerate(csv.reader(f), 1):
            try:
                S, device, launch, cta, tile, t = (int(x) for x in row)
            except ValueError:
                sys.exit(f"{path}:{lineno}: expected six integers S,device,launch,cta,tile,end_ns, got {row}")
            ends = out[(S, device, launch)][cta]
            if tile in ends:
                sys.exit(f"{path}:{lineno}: tile {tile} of CTA {cta} (S {S}, device {device}, launch {launch}) "
                         "appears twice")
            ends[tile] = t
    return out


def summary(ctas):
    K = min(len(v) for v in ctas.values())
    if K < 2:
        return None
    durations = [[v[k] - v[k - 1] for k in range(1, K)] for v in ctas.values()]
    t = statistics.mean(x for d in durations for x in d)
    last = [v[K - 1] for v in ctas.values()]
    means = [statistics.mean(d) for d in durations]
    return {"ctas": len(ctas), "tiles": K, "tile_us": t / 1e3, "spread": (max(last) - min(last)) / t,
            "cta_means_apart": (max(means) - min(means)) / t,
            "jitter": statistics.mean(statistics.pstdev(d) for d in durations) / t}


def main(argv):
    if not argv or argv[0].startswith("-"):
        sys.exit(__doc__)
    by_S = collections.defaultdict(list)
    print("file,S,device,launch,ctas,tiles,tile_us,last_tile_ends_apart,cta_mean_tiles_apart,jitter")
    for path in argv:
        for (S, device, launch), ctas in sorted(launches_of(path).items()):
            s = summary(ctas)
            if s is None:
                print(f"{path}: S {S}, launch {launch}: fewer than 2 tiles a CTA", file=sys.stderr)
                continue
            by_S[S].append(s)
            print(f"{path},{S},{device},{launch},{s['ctas']},{s['tiles']},{s['tile_us']:.3f},{s['spread']:.4f},"
                  f"{s['cta_means_apart']:.4f},{s['jitter']:.4f}")
    print()
    print("S,launches,tiles,tile_us,last_tile_ends_apart_median,least,greatest")
    for S in sorted(by_S):
        v = [s["spread"] for s in by_S[S]]
        print(f"{S},{len(v)},{by_S[S][0]['tiles']},{statistics.mean(s['tile_us'] for s in by_S[S]):.3f},"
              f"{statistics.median(v):.4f},{min(v):.4f},{max(v):.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])
