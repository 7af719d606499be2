#!/usr/bin/env python3
"""Attention forward side by side on the GPU: xstage's sm90_bf16_attention_fwd
against torch SDPA (cuDNN and flash backends), bf16, on the DiT shapes of
issue 5, plus a correctness check of ours against torch on random inputs
exchanged through .npy files.

Run on the GPU machine from the repository root after the build:
    python3 bench/attention_vs_sdpa.py [--xstage build/xstage] [--out results/h200/attention/attention.json]
Writes results/h200/attention/attention.json (rows: B, H, S, S_kv, D, tflops,
cudnn_tflops, flash_tflops, rel_err; with --kernels, "ours" holds one entry
per xstage kernel and tflops / rel_err are the first one's) and prints a table last. A failure of one
backend on one shape is recorded in the row ("errors") and does not stop the run.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [  # (name, B, H, S, D)
    ("flux-1024", 1, 24, 4608, 128),
    ("wan2.1-720p-p8", 1, 5, 75600, 128),
    ("hunyuan-720p-p8", 1, 3, 118800, 128),
    ("s16k-d128", 1, 16, 16384, 128),
    ("s16k-d64", 1, 32, 16384, 64),
]
CHECKS = [  # (B, H, S, S_kv, D): random problems checked against torch on the device
    (1, 4, 1000, 777, 128),
    (2, 3, 333, 1025, 64),
]


def flops(B, H, S, S_kv, D):
    return 4.0 * B * H * S * S_kv * D


def time_torch(backend, q, k, v, warmup, iters):
    with sdpa_kernel(backend):
        for _ in range(warmup):
            F.scaled_dot_product_attention(q, k, v)
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
        for a, b in ev:
            a.record()
            F.scaled_dot_product_attention(q, k, v)
            b.record()
        torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in ev)


def run_xstage(xstage, args, timeout):
    cmd = [xstage, "attn"] + [str(a) for a in args] + ["--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out = p.stdout
    start = out.find("{")
    j = json.loads(out[start:]) if start >= 0 else {}
    if p.returncode != 0:
        msg = (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
        j["error"] = msg
    return j


def git_commit():
    """The commit of this tree: the COMMIT file of an exported snapshot (scripts/snapshot.sh), else git.

    The file comes first: a snapshot sits inside another checkout on the device
    machine, whose git HEAD is not the snapshot's commit."""
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "COMMIT")) as f:
            c = f.read().strip()
            if c:
                return c
    except OSError:
        pass
    try:
        c = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
        return c or "unknown"
    except Exception:
        return "unknown"


def driver_version():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout.strip().splitlines()[0]
    except Exception:
        return "unknown"


def check_against_torch(xstage, kernel, B, H, S, S_kv, D, tmp):
    """Ours (through .npy files) vs torch SDPA: rel err against an fp32 math
    reference on the same bf16-rounded inputs, and against cuDNN's bf16 output."""
    g = torch.Generator(device="cuda").manual_seed(1234 + S + D)
    q = torch.randn(B, S, H, D, device="cuda", generator=g).bfloat16()
    k = torch.randn(B, S_kv, H, D, device="cuda", generator=g).bfloat16()
    v = torch.randn(B, S_kv, H, D, device="cuda", generator=g).bfloat16()
    paths = {n: os.path.join(tmp, f"{n}.npy") for n in ("q", "k", "v", "o")}
    for n, t in (("q", q), ("k", k), ("v", v)):
        np.save(paths[n], t.float().cpu().numpy())  # exact: bf16 values in float32
    j = run_xstage(xstage, ["--q", paths["q"], "--k", paths["k"], "--v", paths["v"], "--o", paths["o"], "--check",
                            "--kernel", kernel], timeout=120)
    row = {"kernel": kernel, "B": B, "H": H, "S": S, "S_kv": S_kv, "D": D, "cpu_rel_err": j.get("rel_err")}
    if "error" in j or not os.path.exists(paths["o"]):
        row["error"] = j.get("error", "no output file")
        return row
    ours = torch.from_numpy(np.load(paths["o"])).cuda().transpose(1, 2)  # [B, H, S, D]
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(qt.float(), kt.float(), vt.float())
    row["rel_err"] = float((ours - ref).norm() / ref.norm())
    try:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            cud = F.scaled_dot_product_attention(qt, kt, vt).float()
        row["cudnn_rel_err"] = float((cud - ref).norm() / ref.norm())
    except Exception as e:  # noqa: BLE001
        row["cudnn_error"] = str(e).splitlines()[0][:200]
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--xstage", default=os.environ.get("XSTAGE_BIN", "build/xstage"))
    ap.add_argument("--out", default="results/h200/attention/attention.json")
    ap.add_argument("--kernels", default="auto",
                    help="comma-separated xstage kernels to time (xstage attn --kernel): auto, mma, wgmma, ...")
    ap.add_argument("--shapes", default="", help="comma-separated shape names to run (default: all)")
    args = ap.parse_args()
    kernels = [k for k in args.kernels.split(",") if k]
    wanted = {n for n in args.shapes.split(",") if n}
    t_start = time.time()
    dev = torch.cuda.get_device_name(0)
    rows, checks = [], []

    with tempfile.TemporaryDirectory() as tmp:
        for kern in kernels:
            for c in CHECKS:
                try:
                    checks.append(check_against_torch(args.xstage, kern, *c, tmp))
                except Exception as e:  # noqa: BLE001
                    checks.append({"kernel": kern, "B": c[0], "H": c[1], "S": c[2], "S_kv": c[3], "D": c[4],
                                   "error": str(e)[:300]})
                print("check", json.dumps(checks[-1]), flush=True)

    for name, B, H, S, D in SHAPES:
        if wanted and name not in wanted:
            continue
        S_kv = S
        fl = flops(B, H, S, S_kv, D)
        long_shape = fl > 2e12
        warmup, iters = (2, 5) if long_shape else (5, 20)
        row = {"name": name, "B": B, "H": H, "S": S, "S_kv": S_kv, "D": D, "tflops": None, "cudnn_tflops": None,
               "flash_tflops": None, "rel_err": None, "errors": {}}
        row["ours"] = {}
        for kern in kernels:
            ours = {"tflops": None, "rel_err": None}
            try:
                j = run_xstage(args.xstage, ["--B", B, "--S", S, "--S-kv", S_kv, "--H", H, "--D", D, "--bench",
                                             "--warmup", warmup, "--iters", iters, "--check", "--check-rows", 32,
                                             "--kernel", kern], timeout=120)
                for key in ("tflops", "rel_err", "median_ms", "kernel"):
                    ours[key] = j.get(key)
                if "error" in j:
                    row["errors"]["xstage-" + kern] = j["error"]
            except Exception as e:  # noqa: BLE001
                row["errors"]["xstage-" + kern] = str(e)[:300]
            row["ours"][kern] = ours
        first = row["ours"][kernels[0]]
        for key in ("tflops", "rel_err", "median_ms", "kernel"):
            row[key] = first.get(key)
        q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(B, H, S_kv, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(B, H, S_kv, D, device="cuda", dtype=torch.bfloat16)
        for key, backend in (("cudnn_tflops", SDPBackend.CUDNN_ATTENTION), ("flash_tflops", SDPBackend.FLASH_ATTENTION)):
            try:
                ms = time_torch(backend, q, k, v, warmup, iters)
                row[key] = fl / (ms * 1e-3) / 1e12
            except Exception as e:  # noqa: BLE001
                row["errors"][key] = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        del q, k, v
        torch.cuda.empty_cache()
        if not row["errors"]:
            del row["errors"]
        rows.append(row)
        print("row", json.dumps(row), flush=True)

    result = {
        "device": dev,
        "driver": driver_version(),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "command": " ".join([sys.executable] + sys.argv),
        "flop_formula": "4*B*H*S*S_kv*D",
        "rows": rows,
        "checks_vs_torch": checks,
        "wall_s": round(time.time() - t_start, 1),
    }
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)

    def fmt(x, spec):
        return format(x, spec) if isinstance(x, (int, float)) else "-"

    print(f"\nattention forward, bf16, {dev} (written to {args.out}, {result['wall_s']} s)")
    print(f"{'shape':>16} {'B':>2} {'H':>3} {'S':>7} {'D':>4} {'kernel':>15} {'ours':>7} {'cuDNN':>7} {'flash':>7} "
          f"{'ours/cuDNN':>10} {'rel_err':>9}")
    for r in rows:
        for kern, o in r["ours"].items():
            t = o.get("tflops")
            ratio = t / r["cudnn_tflops"] if t and r.get("cudnn_tflops") else None
            print(f"{r['name']:>16} {r['B']:>2} {r['H']:>3} {r['S']:>7} {r['D']:>4} {kern:>15} {fmt(t, '7.1f')} "
                  f"{fmt(r['cudnn_tflops'], '7.1f')} {fmt(r['flash_tflops'], '7.1f')} {fmt(ratio, '10.2f')} "
                  f"{fmt(o.get('rel_err'), '9.2e')}")
        if r.get("errors"):
            print(f"{r['name']:>16} ERR " + json.dumps(r["errors"]))
    for c in checks:
        print(f"check vs torch [{c['kernel']}] B={c['B']} H={c['H']} S={c['S']} S_kv={c['S_kv']} D={c['D']}: "
              f"rel_err {fmt(c.get('rel_err'), '.2e')} (cuDNN {fmt(c.get('cudnn_rel_err'), '.2e')}, "
              f"CPU fp64 {fmt(c.get('cpu_rel_err'), '.2e')})" + (f"  ERR {c['error']}" if c.get("error") else ""))


if __name__ == "__main__":
    main()
