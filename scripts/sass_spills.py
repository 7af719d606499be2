#!/usr/bin/env python3
"""Where each kernel's local-memory traffic (register spills) sits in its SASS.

Reads `cuobjdump -sass` output and, for every kernel whose name matches the
pattern, counts LDL/STL instructions inside the span of its HGMMA (wgmma)
instructions (the mainloop) and outside it (prologue, epilogue, tail).
ptxas -v only says how many bytes spill, not where; a spill that sits in the
mainloop costs every KV step, one in the tail next to nothing.

  cuobjdump -sass BINARY | scripts/sass_spills.py [NAME_REGEX]
"""
import re
import sys


def main() -> int:
    pattern = re.compile(sys.argv[1] if len(sys.argv) > 1 else "Epilogue")
    text = sys.stdin.read()
    kernels = re.split(r"\n\s+Function : ", text)[1:]
    if not kernels:
        print("sass_spills.py: no 'Function :' sections on stdin (expected cuobjdump -sass output)", file=sys.stderr)
        return 2
    print(f"{'kernel':<90} {'instr':>6} {'mma span':>15} {'LDL/STL in':>10} {'out':>5}")
    for k in kernels:
        name = k.split("\n", 1)[0].strip()
        if not pattern.search(name):
            continue
        lines = [l for l in k.split("\n") if re.match(r"\s+/\*[0-9a-f]{4,}\*/", l)]
        mma = [i for i, l in enumerate(lines) if "HGMMA" in l]
        local = [i for i, l in enumerate(lines) if re.search(r"\b(LDL|STL)\b", l)]
        lo, hi = (mma[0], mma[-1]) if mma else (len(lines), -1)
        inside = sum(1 for i in local if lo <= i <= hi)
        span = f"{lo}-{hi}" if mma else "none"
        print(f"{name[:90]:<90} {len(lines):>6} {span:>15} {inside:>10} {len(local) - inside:>5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
