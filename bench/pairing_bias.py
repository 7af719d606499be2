#!/usr/bin/env python3
"""What a paired attention-only run follows, from `xstage ulysses --timeline` CSVs (docs/perf-log.md, f12).

For each timeline and S: the attention-only runs grouped by the variant of the run before them (median time and
count), and each configuration's paired residual (its time over the attention-only run just before it, minus 1;
median and interquartile range over its runs).

  python3 bench/pairing_bias.py results/h200/ulysses/pairing/timeline-host-adjacent.csv ...
"""
import csv
import statistics
import sys
from collections import defaultdict


def quartiles(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 4], xs[n // 2], xs[(3 * n) // 4]


def main(paths):
    for path in paths:
        rows = list(csv.DictReader(open(path)))
        by_s = defaultdict(list)
        for r in rows:
            by_s[int(r["S"])].append(r)
        print(f"== {path}")
        for S, runs in sorted(by_s.items()):
            runs.sort(key=lambda r: int(r["run"]))
            after = defaultdict(list)
            resid = defaultdict(list)
            for i, r in enumerate(runs):
                t = float(r["time_us"])
                if r["config"] == "attention-only":
                    if i > 0:
                        after[r["after"].split(" ")[0]].append(t)
                elif i > 0 and runs[i - 1]["config"] == "attention-only":
                    resid[r["config"]].append(t / float(runs[i - 1]["time_us"]) - 1)
            line = ", ".join(f"after {k}: {statistics.median(v):.1f} us (n={len(v)})" for k, v in sorted(after.items()))
            print(f"S={S} attention-only {line}")
            for cfg, v in sorted(resid.items()):
                q1, q2, q3 = quartiles(v)
                print(f"  {cfg:40s} paired residual {100 * q2:6.2f}%  (IQR {100 * q1:.2f} .. {100 * q3:.2f}, n={len(v)})")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
