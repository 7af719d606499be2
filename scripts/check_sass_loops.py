#!/usr/bin/env python3
"""The producer's TMA k loop of each warp-specialised GEMM kernel compiles to uniform registers.

A loop that issues TMA loads (UTMALDG) takes its operands from uniform registers. When ptxas cannot prove the
loop's state warp-uniform (a role chosen by `tid == 0` beside another role in the same warp, a value read from
shared or global memory by a plain load, an atomic's result), it keeps that state per-thread and copies it into
uniform registers before every load: 4-6 R2UR a UTMALDG, and a convergence barrier around every stage wait. The
split grouped GEMM ran 2-15% slower so (docs/perf-log.md, MoE M5); nothing in the source shows it and no test of
results catches it. So this reads the SASS: in every kernel whose name matches --kernels, the k loop (the
shortest loop, from a backward branch to its target, that holds two or more UTMALDG) must hold fewer R2UR than
UTMALDG (uniform: 0 or 1 in all; per-thread: 6 a load). Longer loops are the tile walks around it, whose address
ranges may take in other roles' code (the consumers' wgmma descriptors go through R2UR), so they are not read.

usage: check_sass_loops.py LIBRARY [--kernels REGEX] [--cuobjdump PATH]
Exit 0: every loop uniform; 1: a loop is not, or a kernel has none; 77: no cuobjdump here (CTest: skipped).
cuobjdump is looked for in --cuobjdump, $XSTAGE_CUOBJDUMP, PATH, beside nvcc, and in this Python's
site-packages (NVIDIA's wheels nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm, which scripts/build.sh puts in the
tests' Python).
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig

SKIP = 77


def find_cuobjdump(given):
    for c in (given, os.environ.get("XSTAGE_CUOBJDUMP"), shutil.which("cuobjdump")):
        if c and os.path.isfile(c):
            return c
    nvcc = shutil.which("nvcc")
    if nvcc and os.path.isfile(os.path.join(os.path.dirname(nvcc), "cuobjdump")):
        return os.path.join(os.path.dirname(nvcc), "cuobjdump")
    for site in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        for c in sorted(glob.glob(os.path.join(site, "nvidia", "*", "bin", "cuobjdump"))):
            return c
    return None


def functions(sass):
    """{mangled name: [(address, instruction)]} from cuobjdump -sass output."""
    out, cur = {}, None
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = out.setdefault(m.group(1), [])
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m and cur is not None:
            cur.append((int(m.group(1), 16), m.group(2).strip()))
    return out


def tma_loops(code):
    """(start, end, counts) of every backward-branch loop with >= 2 TMA loads."""
    at = {a: i for i, (a, _) in enumerate(code)}
    loops = []
    for i, (a, ins) in enumerate(code):
        m = re.search(r"\bBRA(?:\.U)?(?:\.ANY)? 0x([0-9a-f]+)", ins)
        if not m or "BRA.DIV" in ins:
            continue
        target = int(m.group(1), 16)
        if target >= a or target not in at:
            continue
        body = [x for _, x in code[at[target]:i + 1]]
        count = {k: sum(k in x for x in body) for k in ("UTMALDG", "R2UR", "BSSY")}
        if count["UTMALDG"] >= 2:
            loops.append((target, a, count))
    return loops


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("library")
    ap.add_argument("--kernels", default="sm90_grouped_gemm", help="regex on the mangled kernel names")
    ap.add_argument("--cuobjdump", default="")
    a = ap.parse_args()
    tool = find_cuobjdump(a.cuobjdump)
    if tool is None:
        print("check_sass_loops: no cuobjdump here (PATH, beside nvcc, or pip's nvidia-cuda-cuobjdump): skipped")
        return SKIP
    # cuobjdump runs nvdisasm, which the wheels put beside it
    env = dict(os.environ, PATH=os.path.dirname(tool) + os.pathsep + os.environ.get("PATH", ""))
    sass = subprocess.run([tool, "-sass", a.library], capture_output=True, text=True, env=env)
    if sass.returncode != 0:
        print(f"check_sass_loops: {tool} -sass {a.library} failed: {sass.stderr.strip()}")
        return 1
    kernels = {n: c for n, c in functions(sass.stdout).items() if re.search(a.kernels, n)}
    if not kernels:
        print(f"check_sass_loops: no kernel of {a.library} matches '{a.kernels}'")
        return 1
    bad = 0
    for name in sorted(kernels):
        loops = tma_loops(kernels[name])
        if not loops:
            print(f"NO TMA LOOP  {name}")
            bad += 1
        # the k loop: the fewest instructions
        for start, end, n in sorted(loops, key=lambda l: l[1] - l[0])[:1]:
            ok = n["R2UR"] < n["UTMALDG"]
            bad += not ok
            if not ok:
                print(f"PER-THREAD   {name} loop {start:#x}-{end:#x}: {n['UTMALDG']} UTMALDG, {n['R2UR']} R2UR, "
                      f"{n['BSSY']} BSSY")
    print(f"check_sass_loops: {len(kernels)} kernels matching '{a.kernels}' in {os.path.basename(a.library)}, "
          f"{bad} problem(s) ({tool})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
