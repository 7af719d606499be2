#!/usr/bin/env bash
# The fused MoE layer's sweep (issue 23): 6 shapes x tokens a rank {256 .. 16K} x P {2, 4} = 84
# configurations a path, every schedule and baseline in each, paired rounds, checked; host placement
# first, then device. One `xstage moe` a (backend, placement, shape, P) writes a part (all its token
# counts, the layer sized once); the parts merge into moe-sweep-<backend>-<placement>.json and all of
# them into moe-sweep.json (the record helper B's model reads).
#   usage: bench/moe_sweep.sh OUT_DIR
# A device command may run 10 minutes, the sweep longer: parts already in OUT_DIR/parts are skipped
# (copy the parts of an earlier call there), no part starts after MOE_BUDGET_S seconds, and each part
# gets the time left. Environment (defaults in brackets):
#   XSTAGE [build/xstage]   MOE_BACKEND [emulated] (peer, nccl: P = 2 on two GPUs)
#   MOE_PLACEMENTS [host device]   MOE_SHAPES [the six; names or hidden/inter/experts/topk]   MOE_P [2 4]
#   MOE_TOKENS [256,512,1024,2048,4096,8192,16384]   MOE_ROUNDS [11]   MOE_BUDGET_S [540]
#   MOE_CHECK [1]: --check with one sampled token a rank (plus the first, the last and a one-rank token)
#   MOE_PROBE [1]: --floor-probe in the first part of each placement (R measured in this sweep)
#   MOE_ARGS: more arguments for every part
set -uo pipefail
out=${1:?usage: bench/moe_sweep.sh OUT_DIR}
X=${XSTAGE:-build/xstage}
backend=${MOE_BACKEND:-emulated}
placements=${MOE_PLACEMENTS:-host device}
[ "$backend" = nccl ] && placements=${MOE_PLACEMENTS:-device}
shapes=${MOE_SHAPES:-deepseek-v3 deepseek-v4-flash qwen3-235b qwen3-30b-a3b mixtral-8x7b hidream-i1}
ranks=${MOE_P:-2 4}
tokens=${MOE_TOKENS:-256,512,1024,2048,4096,8192,16384}
rounds=${MOE_ROUNDS:-11}
budget=${MOE_BUDGET_S:-540}
mkdir -p "$out/parts"
start=$SECONDS
status=0
for pl in $placements; do
  probe=${MOE_PROBE:-1}
  for shape in $shapes; do
    for P in $ranks; do
      part="$out/parts/moe-$backend-$pl-${shape//\//x}-P$P.json"  # custom shapes: 2048/512/128/8 -> 2048x512x128x8
      if [ -s "$part" ]; then
        echo "== $part: done before, skipped"
        probe=0
        continue
      fi
      left=$((budget - (SECONDS - start)))
      if ((left < 30)); then
        echo "== budget of $budget s spent: $backend $pl $shape P=$P and the rest not started"
        status=3
        break 3
      fi
      args=(moe --backend "$backend" --placement "$pl" --shape "$shape" --tokens "$tokens" --bench
        --rounds "$rounds" --timeout 30 -o "$part.tmp")
      [ "$backend" != nccl ] && args+=(--ranks "$P")
      [ "${MOE_CHECK:-1}" = 1 ] && args+=(--check --check-tokens 1)
      ((probe)) && args+=(--floor-probe)
      # shellcheck disable=SC2206
      args+=(${MOE_ARGS:-})
      run=("$X" "${args[@]}")
      [ "$backend" = nccl ] && run=("$X" launch -n "$P" -- "$PWD/$X" "${args[@]}")
      echo "== $backend $pl $shape P=$P (${left} s left): ${run[*]}"
      t0=$SECONDS
      if timeout "$left" "${run[@]}"; then
        mv "$part.tmp" "$part"
        probe=0
      else
        echo "== $backend $pl $shape P=$P failed (rc $?) after $((SECONDS - t0)) s"
        rm -f "$part.tmp"
        status=1
      fi
      echo "== $((SECONDS - t0)) s"
    done
  done
done

# Merge: per (backend, placement), then everything. Top-level fields from the first part; the
# probe's R from the part that measured it; every part's command kept.
python3 - "$out" <<'EOF'
import glob, json, os, sys
out = sys.argv[1]
parts = sorted(glob.glob(os.path.join(out, "parts", "moe-*.json")))
groups = {}
for p in parts:
    with open(p) as f:
        doc = json.load(f)
    cfg = doc["configs"][0] if doc["configs"] else {}
    groups.setdefault((cfg.get("backend"), cfg.get("placement")), []).append(doc)

def merge(docs):
    m = {k: v for k, v in docs[0].items() if k not in ("configs", "command", "probe", "sizes")}
    m["command"] = "bench/moe_sweep.sh (one xstage moe per shape and P; their commands in parts[])"
    m["parts"] = [d["command"] for d in docs]
    probes = [d["probe"] for d in docs if d["probe"]["R_GBps"] is not None]
    m["probe"] = probes[0] if probes else {"R_GBps": None, "seconds": None}
    m["configs"] = []
    for d in docs:
        for c in d["configs"]:
            c.setdefault("profile", d["profile"])
            m["configs"].append(c)
    return m

merged = []
for (backend, placement), docs in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]) != "host")):
    m = merge(docs)
    with open(os.path.join(out, f"moe-sweep-{backend}-{placement}.json"), "w") as f:
        json.dump(m, f, indent=1)
    print(f"{backend} {placement}: {len(m['configs'])} configurations from {len(docs)} parts, probe R = {m['probe']['R_GBps']}")
    merged.append(m)
if merged:
    # Every path in one record: the probe's R then belongs to each configuration's path.
    allm = merge([d for (_, _), docs in sorted(groups.items(), key=lambda kv: str(kv[0])) for d in docs])
    for m in merged:
        for c in m["configs"]:
            c["probe_R_GBps"] = m["probe"]["R_GBps"]
    allm["configs"] = [c for m in merged for c in m["configs"]]
    allm["probe"] = {"R_GBps": None, "seconds": None, "note": "per path: configs[].probe_R_GBps"}
    with open(os.path.join(out, "moe-sweep.json"), "w") as f:
        json.dump(allm, f, indent=1)
    print(f"moe-sweep.json: {len(allm['configs'])} configurations")
EOF
exit $status
