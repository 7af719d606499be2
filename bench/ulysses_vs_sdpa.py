#!/usr/bin/env python3
"""Correctness of the fused Ulysses attention against torch SDPA on the full
problem: for each (P, H, D, S) it runs `xstage ulysses --variants fused --dump
DIR` (the dump holds the global Q, K, V and every rank's sequence-sharded
output, assembled), computes torch SDPA on the same Q, K, V (bf16 on the GPU),
and reports ||O - ref|| / ||ref||.

--backend emulated (default): P ranks on one GPU, P = 2, 4, 8, both placements.
--backend peer: one rank per GPU of the machine (P = the GPU count), device
buffers reached through CUDA peer access (NVLink on a multi-GPU H200 node).

Run on the GPU machine from the repository root after the build:
    python3 bench/ulysses_vs_sdpa.py [--xstage build/xstage] [--backend peer] [--out ulysses-vs-sdpa.json]
Exits non-zero when any relative error exceeds 1e-2.
"""
import argparse
import datetime
import json
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

CASES = [  # (P, H, D, S, placement, store): uneven S/P, both head dims, both paths
    (2, 4, 128, 4099, "host", "paced"),
    (4, 8, 64, 1000, "device", "bulk"),
    (8, 24, 128, 8191, "host", "bulk"),
    (8, 16, 64, 333, "device", "vector16"),
    (8, 24, 128, 77, "host", "vector16"),
    (4, 8, 128, 2048 + 3, "device", "paced"),
    (8, 24, 128, 8191, "host", "paced-warp"),
    (2, 4, 64, 4099, "device", "paced-warp"),
    (4, 8, 64, 1000, "host", "paced-bulk"),
    (8, 16, 128, 333, "device", "paced-bulk"),
]
# One rank per GPU: the P of each case is the GPU count; heads are per rank here.
PEER_CASES = [  # (heads per rank, D, S, store)
    (2, 128, 4099, "paced"),
    (4, 64, 1001, "bulk"),
    (12, 128, 8191, "vector16"),
    (1, 64, 77, "paced"),
    (3, 128, 2048 + 5, "bulk"),
    (2, 128, 4099, "paced-warp"),
    (4, 64, 1001, "paced-bulk"),
]


def cases(backend):
    if backend == "emulated":
        return CASES
    P = torch.cuda.device_count()
    if P < 2:
        raise SystemExit(f"--backend {backend}: needs two or more GPUs, this machine has {P}")
    return [(P, h * P, D, S, "device", store) for h, D, S, store in PEER_CASES]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--xstage", default="build/xstage")
    ap.add_argument("--backend", default="emulated", choices=["emulated", "peer"])
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    rows, worst = [], 0.0
    for P, H, D, S, placement, store in cases(args.backend):
        with tempfile.TemporaryDirectory() as d:
            cmd = [args.xstage, "ulysses", "--backend", args.backend, "--ranks", str(P), "--heads", str(H), "--head-dim", str(D), "--seq",
                   str(S), "--placement", placement, "--variants", "fused", "--stores", store, "--orders",
                   "rotated", "-n", "1", "-w", "0", "--dump", d]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(r.stdout, r.stderr, file=sys.stderr)
                raise SystemExit(f"{' '.join(cmd)} failed with {r.returncode}")
            q, k, v, o = (torch.from_numpy(np.load(f"{d}/{n}.npy")) for n in "qkvo")
        # [B, S, H, D] -> [B, H, S, D] for SDPA; bf16 on the GPU, as a user would run it.
        to = lambda t: t.permute(0, 2, 1, 3).to("cuda", torch.bfloat16)
        ref = F.scaled_dot_product_attention(to(q), to(k), to(v)).float().permute(0, 2, 1, 3).cpu()
        rel = float(torch.linalg.norm(o - ref) / torch.linalg.norm(ref))
        finite = bool(torch.isfinite(o).all())
        worst = max(worst, rel if finite else float("inf"))
        rows.append({"backend": args.backend, "P": P, "H": H, "D": D, "S": S, "placement": placement, "store": store, "rel_err": rel,
                     "all_finite": finite})
        print(f"{args.backend} P={P} H={H} D={D} S={S} {placement} {store}: rel_err {rel:.2e}{'' if finite else ' (NaN/Inf!)'}")
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
    try:
        commit = open("COMMIT").read().strip()  # a device snapshot stamps it
    except OSError:
        pass
    out = {"tool": "bench/ulysses_vs_sdpa.py", "torch": torch.__version__, "device": torch.cuda.get_device_name(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "commit": commit or "unknown", "command": " ".join(sys.argv),
           "reference": "torch.nn.functional.scaled_dot_product_attention, bf16, default backend", "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=2)
    print(f"worst relative error {worst:.2e} (bar 1e-2)")
    return 0 if worst <= 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
