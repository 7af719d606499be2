"""What the MoE-layer benches against torch share (bench/moe_layer_torch.py on one GPU, bench/moe_ep_torch.py over
P ranks): their command line and its checks (the protocol's >= 7 rounds of >= 50 ms windows; --quick, a test of
the script, not a measurement), the eager window timer, the relative error, and the record's provenance."""
import datetime
import math
import os
import subprocess
import sys

import torch

WINDOW_MS = 50.0
QUICK = dict(shapes=[("quick", 512, 256, 8, 2)], tokens=[256], rounds=2, window_ms=5.0)


def add_arguments(ap, out, models_help, tokens_help):
    ap.add_argument("--out", default=out)
    ap.add_argument("--models", default=None, help=f"comma-separated model names (default: {models_help})")
    ap.add_argument("--tokens", default=None, help=f"comma-separated tokens (default: {tokens_help})")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="one small model at T = 256, 2 rounds, 5 ms windows "
                    "(a test of the script, not a measurement)")


def choose(a, script, shapes, tokens):
    """(shapes, tokens, rounds, window_ms) the arguments ask for; exits naming the argument where one is bad."""
    rounds, window_ms = a.rounds, WINDOW_MS
    if a.quick:
        shapes, tokens, rounds, window_ms = QUICK["shapes"], QUICK["tokens"], QUICK["rounds"], QUICK["window_ms"]
    if a.models:
        names = [s[0] for s in shapes]
        want = a.models.split(",")
        unknown = [m for m in want if m not in names]
        if unknown:
            sys.exit(f"{script}: --models {','.join(unknown)}: expected names of {names}")
        shapes = [s for s in shapes if s[0] in want]
    if a.tokens:
        try:
            tokens = [int(t) for t in a.tokens.split(",")]
        except ValueError:
            sys.exit(f"{script}: --tokens {a.tokens}: expected comma-separated integers")
        if any(t < 1 for t in tokens):
            sys.exit(f"{script}: --tokens {a.tokens}: expected counts >= 1")
    if rounds < 7 and not a.quick:
        sys.exit(f"{script}: --rounds {rounds}: expected >= 7 (the protocol's minimum)")
    return shapes, tokens, rounds, window_ms


def eager_window(fn, est_ms, window_ms, clock):
    """Milliseconds a call of fn called back to back from the host for >= window_ms (est_ms: a call's estimate),
    and clock() read inside the window."""
    n = max(1, math.ceil(window_ms / max(est_ms, 1e-3)))
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        fn()
    b.record()
    clk = clock()
    b.synchronize()
    return a.elapsed_time(b) / n, clk


def rel(a, b):
    """Relative Frobenius error of a against b."""
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def geomean(v):
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")


def git(*args):
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except Exception:
        return "unknown"


def driver():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, check=True).stdout.strip().splitlines()[0]
    except Exception:
        return "unknown"


def provenance(a, rounds, window_ms):
    """The record's device, driver, torch, commit, date, exact command and protocol."""
    return dict(device=torch.cuda.get_device_name(), driver=driver(), torch=torch.__version__,
                commit=git("rev-parse", "HEAD"), dirty=bool(git("status", "--porcelain", "--untracked-files=no")),
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                command=" ".join([sys.executable] + sys.argv), window_ms=window_ms, rounds=rounds, quick=a.quick)
