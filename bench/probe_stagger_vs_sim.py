#!/usr/bin/env python3
"""The probe's staggered points (`xstage probe --stagger`) against the simulator.

For every `run` row of a probe CSV (the slowest producer's mean issue time over
all bursts of the run), runs `xstage simulate` on the same K, V, gap, bursts
and stagger with a profile, and computes the same statistic from the
simulated bursts. Prints measured against simulated, one row a point.

    python3 bench/probe_stagger_vs_sim.py PROBE_CSV [--xstage build/xstage] [--profile h200-host-pcie]
"""
import argparse
import collections
import csv
import os
import subprocess
import sys
import tempfile


def probe_rows(path):
    with open(path) as f:
        lines = [l for l in f if not l.startswith("#")]
    for r in csv.DictReader(lines):
        if r["stat"] == "run":
            yield r


def simulated_run_ns(xstage, profile, K, V, G, bursts, stagger):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "bursts.csv")
        cmd = [xstage, "simulate", "--profile", profile, "--K", str(K), "--V", str(V), "--G", f"{G}ns",
               "--bursts", str(bursts), "--bursts-out", out, "--show", "0", "--json"]
        if stagger > 0:
            cmd += ["--stagger", f"{stagger}ns"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        per = collections.defaultdict(float)
        with open(out) as f:
            for r in csv.DictReader(f):
                per[int(r["producer"])] += float(r["issue_ns"])
    return max(per.values()) / bursts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("probe_csv")
    ap.add_argument("--xstage", default="build/xstage")
    ap.add_argument("--profile", default="h200-host-pcie")
    a = ap.parse_args()
    print(f"{'K':>4} {'V':>10} {'gap':>10} {'stagger':>10} {'realised':>10} {'measured':>10} {'simulated':>10}"
          "  (run issue, us; realised: the first bursts' start spread, where the CSV has it)")
    for r in probe_rows(a.probe_csv):
        K, V, G = int(r["K"]), float(r["V_bytes"]), float(r["gap_ns"])
        stagger = float(r.get("stagger_ns") or 0)
        sim = simulated_run_ns(a.xstage, a.profile, K, V, G, int(r["bursts"]), stagger)
        real = r.get("stagger_realised_ns") or ""
        real = f"{float(real) / 1e3:8.2f}us" if real else f"{'-':>10}"
        print(f"{K:4d} {V:10.0f} {G / 1e3:8.1f}us {stagger / 1e3:8.2f}us {real} {float(r['issue_ns']) / 1e3:10.2f} "
              f"{sim / 1e3:10.2f}")


if __name__ == "__main__":
    sys.exit(main())
