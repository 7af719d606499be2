#!/usr/bin/env python3
"""The top stall locations of a kernel from Nsight Compute's source page (docs/perf-log.md, f14).

Input: `ncu -i REPORT --page source --print-source sass --csv` (perf-log f14's kpw stage wrote them; gzip is read
too). Prints the share of each stall reason over all warp-stall samples, then the instructions with the most
samples and their two largest reasons.

  python3 bench/ncu_sass_top.py results/h200/ulysses/kpw/kpw-warp-sass-0056948.csv.gz [more.csv ...] [--top N]
"""
import argparse
import csv
import gzip


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    hdr, data = rows[1], rows[2:]  # row 0: the kernel's name
    i_src, i_samples = hdr.index("Source"), hdr.index("Warp Stall Sampling (All Samples)")
    reasons = [c for c in hdr if c.startswith("stall_") and "Not Issued" not in c]
    idx = [hdr.index(c) for c in reasons]
    out = []
    for r in data:
        if len(r) < len(hdr) or not r[i_samples].isdigit():
            continue
        out.append((int(r[i_samples]), r[i_src].strip(), {c[6:]: int(r[i] or 0) for c, i in zip(reasons, idx)}))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--top", type=int, default=18)
    a = ap.parse_args()
    for path in a.files:
        d = load(path)
        total = sum(s for s, _, _ in d) or 1
        by_reason = {}
        for _, _, c in d:
            for k, v in c.items():
                by_reason[k] = by_reason.get(k, 0) + v
        print(f"== {path}: {total} samples over {len(d)} instructions")
        print("  by reason: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in
                                          sorted(by_reason.items(), key=lambda x: -x[1])[:8]))
        for s, src, c in sorted(d, key=lambda x: -x[0])[:a.top]:
            top = sorted(c.items(), key=lambda x: -x[1])[:2]
            print(f"  {100 * s / total:5.2f}% {src[:60]:60s} " + ", ".join(f"{k} {v}" for k, v in top))


if __name__ == "__main__":
    main()
