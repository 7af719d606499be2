#!/usr/bin/env bash
# One call on a lent H200 machine: build, GPU tests, sanitizers, benchmarks.
# Logs go to $OUT/r/*.log, result files to $OUT/r/<topic>/ (the topic folders of
# results/<machine>/: probe, probe-peer (results/h200x2/probe), a2a, attention, ulysses),
# all in $OUT/results.tar.gz, and a short summary last.
#   usage: scripts/device.sh [stage ...]
#   stages: build tests sanitize probe a2a attn moe report bench usweep uquick ulong usdpa usan
#           peerprobe multi ux2 nvsweep upipe torch visible moel moesweep duplex
#           (default: build tests report sanitize probe a2a: README's build and main job first,
#           so that a library version on this machine that the CPU machine lacks shows at once)
# The exit status is 0 when every step it ran exited 0; the summary names the others.
# Stages are whole words; `upaired` is taken as `usweep`, its name in results/. Without
# the build stage it runs the binaries in prebuilt/ (scripts/snapshot.sh --prebuilt), and
# GPU tests straight from the GoogleTest binary. XSTAGE_REQUIRE_GPU is exported as the
# machine's GPU count (at least 1): on a device run a GPU test that finds fewer GPUs than
# the machine has fails instead of skipping (tests/gpu/need_gpus.hpp). One-off diagnostic
# stages are not kept here; docs/perf-log.md has their commands beside what they found.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/xstage-out}
mkdir -p "$OUT/r"
stages=${*:-build tests report sanitize probe a2a}
has() { [[ " $stages " == *" $1 "* ]]; }
has upaired && stages+=" usweep"
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on shared machines
commit=$(cat COMMIT 2>/dev/null || git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
nccl_root=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
B=build-dev
if ! has build && [ -x prebuilt/xstage ]; then B=prebuilt; fi
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
export XSTAGE_REQUIRE_GPU=$((ngpu > 1 ? ngpu : 1))
summary=()
failed=()  # the timed steps that did not exit 0: the script's exit status
note() { summary+=("$(printf '%-10s %-8s %s' "$1" "$2" "$3")"); }
timed() {  # name, timeout seconds, command...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/r/$name.log" 2>&1
  local rc=$?
  note "$name" "rc=$rc" "$((SECONDS - t0)) s  (log r/$name.log)"
  ((rc == 0)) || failed+=("$name")
  return $rc
}
clocks_start() {  # file: nvidia-smi's clocks and power every 200 ms, until clocks_stop
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,nounits -lms 200 \
    >"$1" 2>&1 &
  smi=$!
}
clocks_stop() { kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null; }

{
  echo "date: $(date -u +%FT%TZ)"; echo "commit: $commit"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu --format=csv
  nvcc --version | tail -2; cmake --version | head -1
} >"$OUT/r/env.txt" 2>&1

if has build; then
  mkdir -p "$B/nccl/lib"
  ln -sf "$nccl_root/lib/libnccl.so.2" "$B/nccl/lib/libnccl.so"
  ln -sfn "$nccl_root/include" "$B/nccl/include"
  timed build 420 env XSTAGE_BUILD_DIR=$B XSTAGE_NO_FUZZ=1 \
    XSTAGE_CMAKE_ARGS="-DXSTAGE_NCCL_ROOT=$PWD/$B/nccl -DXSTAGE_GIT_COMMIT=$commit" scripts/build.sh
fi
export LD_LIBRARY_PATH=$nccl_root/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
X=$B/xstage
export XSTAGE_CLI=$PWD/$X  # the command the tests call
gpu_tests() {  # name, timeout seconds, test-name pattern (a regex of words joined by |; "" for all)
  local name=$1 limit=$2 pat=$3
  if [ -f "$B/CTestTestfile.cmake" ]; then
    timed "$name" "$limit" ctest --test-dir $B -L gpu ${pat:+-R "$pat"} --output-on-failure -j4
  else
    local filter="*"
    [ -n "$pat" ] && filter="*${pat//|/*:*}*"
    timed "$name" "$limit" $B/xstage_gpu_tests --gtest_filter="$filter"
  fi
  grep -E "tests passed|tests failed|Skipped|Failed|PASSED|FAILED|SKIPPED" "$OUT/r/$name.log" | tail -25 \
    >"$OUT/r/$name-summary.txt"
}
san() {  # name, compute-sanitizer tool, command...
  local name=$1 tool=$2; shift 2
  timed "$name" 200 compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 20 "$@"
}

if has tests; then  # every test: CPU and GPU with a CTest build, the GPU ones with prebuilt binaries
  if [ -f "$B/CTestTestfile.cmake" ]; then
    timed tests 300 ctest --test-dir $B --output-on-failure -j4
    grep -E "tests passed|tests failed|Skipped|Failed|PASSED|FAILED|SKIPPED" "$OUT/r/tests.log" | tail -25 \
      >"$OUT/r/tests-summary.txt"
  else
    gpu_tests tests 300 ""
  fi
fi

if has sanitize; then  # the probe's store kernels and the all-to-all kernels
  small="--transport host --K 5 --V 100000 --G 0,2us --bursts 3 --quiet --bootstrap 0 -o /tmp/san"
  for tool in memcheck racecheck synccheck; do
    for store in v4 bulk; do
      san "san-$tool-$store" $tool $X probe $small --store $store --gap-kind mma --completion flag
    done
  done
  san san-memcheck-fence memcheck $X probe $small --store b32 --completion fence
  a2a_small="a2a --backend emulated --ranks 3 --heads 6 --head-dim 72 -b 300000 -e 300000 -n 1 -w 0 --check"
  for tool in memcheck racecheck synccheck; do
    for pl in device host; do
      san "san-$tool-a2a-$pl" $tool $X $a2a_small --placement $pl
    done
  done
fi

if has probe; then  # the X-Stage of the host path and local HBM: results/<machine>/probe
  timed probe 300 $X probe --transport host,local --sweep quick -o "$OUT/r/probe"
  tail -40 "$OUT/r/probe.log" >"$OUT/r/probe-summary.txt"
fi

if has peerprobe || has multi; then  # the NVLink X-Stage (2+ GPUs): results/h200x2/probe
  nvidia-smi topo -m >"$OUT/r/topo.txt" 2>&1
  timed probe-peer 300 $X probe --transport peer --sweep quick -o "$OUT/r/probe-peer"
  tail -40 "$OUT/r/probe-peer.log" >"$OUT/r/probe-peer-summary.txt"
fi

if has a2a; then  # the all-to-all baseline, emulated ranks on one GPU: results/<machine>/a2a
  mkdir -p "$OUT/r/a2a"
  timed a2a-check 120 $X a2a --backend emulated --ranks 8 --placement host -b 1M -e 64M -f 4 -n 3 -w 1 --check
  timed a2a-host 240 $X a2a --backend emulated --ranks 8 --placement host -b 1M -e 1G -f 2 -n 20 -w 5 \
    -o "$OUT/r/a2a/a2a-emulated.csv"
  timed a2a-device 120 $X a2a --backend emulated --ranks 8 --placement device -b 1M -e 1G -f 2 -n 20 -w 5 \
    -o "$OUT/r/a2a/a2a-emulated-device.csv"
fi

if has multi; then  # the all-to-all over every GPU: peer and nccl backends (and the peer probe above)
  mkdir -p "$OUT/r/a2a"
  timed a2a-peer 240 $X a2a --backend peer --placement device -b 1M -e 1G -f 2 -n 20 -w 5 --check \
    -o "$OUT/r/a2a/a2a-peer.csv"
  timed a2a-nccl 240 $X launch -n "$ngpu" -- bash -c \
    "$PWD/$X a2a --backend nccl -b 1M -e 1G -f 2 -n 20 -w 5 --check -o $OUT/r/a2a/a2a-nccl-rank\$RANK.csv"
fi

if has attn; then  # attention forward: tests, sanitizers, and the side-by-side with cuDNN and flash (torch SDPA)
  mkdir -p "$OUT/r/attention"
  gpu_tests attn-tests 240 Attention
  for tool in memcheck racecheck synccheck; do
    san "san-$tool-attn" $tool $X attn --B 2 --S 77 --S-kv 130 --H 3 --D 64 --check
    san "san-$tool-attn128" $tool $X attn --B 1 --S 130 --S-kv 65 --H 2 --D 128 --check
  done
  timed attn-bench 300 python3 bench/attention_vs_sdpa.py --xstage $X --kernels auto,mma \
    --out "$OUT/r/attention/attention.json"
  tail -15 "$OUT/r/attn-bench.log" >"$OUT/r/attn-summary.txt"
fi

if has moe; then  # MoE grouped GEMMs: tests, sanitizers, and the side-by-side with torch._grouped_mm and cuBLAS
  # (one expert; and batched and dense on the whole problem, --ceilings)
  mkdir -p "$OUT/r/moe"
  gpu_tests moe-tests 240 MoeGemm
  for tool in memcheck racecheck synccheck; do
    for st in staged bulk tma; do  # every output store
      san "san-$tool-moe-$st" $tool $X moe-gemm --hidden 256 --inter 128 --counts 3,0,70,129,1 --routing-weights \
        --check --out-store $st
      # K = 6144 on few short experts: the heuristic splits L2's K in two (the split-K kernel and its reduce)
      san "san-$tool-moe-splitk-$st" $tool $X moe-gemm --hidden 256 --inter 6144 --counts 3,0,70,129,1 \
        --routing-weights --check --out-store $st
    done
    # the 64 x 80 L2 tile (staged store, its warpgroups' narrow 40-column rest); then 40 tiles on K = 6144: 2 splits
    san "san-$tool-moe-narrow" $tool $X moe-gemm --hidden 640 --inter 192 --counts 1,0,65,127,0,3 --check \
      --tile-l2 m64n80
    san "san-$tool-moe-narrow-splitk" $tool $X moe-gemm --hidden 640 --inter 6144 --counts 3,0,70,129,1 --check \
      --tile-l2 m64n80
  done
  lib=$B/libxstage_moe.so
  clocks_start "$OUT/r/moe/clocks-moe.csv"
  # MOE_BENCH_ARGS: e.g. --rows 128,256 for a shorter run
  timed moe-bench 500 python3 bench/moe_vs_torch.py --lib "$lib" --check --rounds 7 --commit "$commit" \
    --compare-stores staged,bulk,tma --ceilings --out "$OUT/r/moe/moe-gemm.json" ${MOE_BENCH_ARGS:-}
  clocks_stop
  tail -12 "$OUT/r/moe-bench.log" >"$OUT/r/moe-summary.txt"
fi

# The expert-parallel MoE layer: its GPU tests (2-GPU peer and nccl ones where there are two
# GPUs), compute-sanitizer on one small checked run each (host and device placement, every variant and
# schedule), and a quick checked bench with per-tile traces: results/<machine>/moe-layer.
if has moel; then
  mkdir -p "$OUT/r/moe-layer"
  gpu_tests moel-tests 420 "MoeLayer|FusedLayer"
  moe_small="moe --shape 512/256/8/2 --tokens 77 --routing zipf --check --check-tokens 2 --timeout 100"
  for tool in memcheck racecheck synccheck; do
    san "san-$tool-moel" $tool $X $moe_small --ranks 2 --placement host
  done
  san san-memcheck-moel-device memcheck $X $moe_small --ranks 4 --placement device --tile m64n256
  clocks_start "$OUT/r/moe-layer/clocks-moe-quick.csv"
  timed moel-bench 240 $X moe --shape qwen3-30b-a3b --ranks 2 --tokens 1024,4096 --routing zipf --check \
    --check-tokens 1 --bench --rounds 5 --trace "$OUT/r/moe-layer/trace-quick.csv" -o "$OUT/r/moe-layer/moe-quick.json"
  clocks_stop
  [ -f "$OUT/r/moe-layer/moe-quick.json" ] && timed moel-plot 60 python3 bench/plot_moe_sweep.py \
    "$OUT/r/moe-layer/moe-quick.json" --trace "$OUT/r/moe-layer/trace-quick.csv" --out "$OUT/r/moe-layer"
  { cat "$OUT/r/moel-tests-summary.txt"; grep -H "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT"/r/san-*moel*.log
    grep -E "^T = |check:|interleaved /|model-guided /|unfused /|floor" "$OUT/r/moel-bench.log"; } \
    >"$OUT/r/moel-summary.txt" 2>&1
fi

# Both directions of each path at once (xstage duplex): its GPU tests, compute-sanitizer on a small run,
# and the rates the MoE model's profiles carry (one CTA an SM, three reader warps, four loads in flight, as the
# fused kernel's copy warps; the other shapes for comparison): results/<machine>/duplex.
if has duplex; then
  mkdir -p "$OUT/r/duplex"
  gpu_tests duplex-tests 120 DuplexGpu
  for tool in memcheck racecheck synccheck; do
    san "san-$tool-duplex" $tool $X duplex --path host --bytes 4MiB --reps 1
  done
  paths="host local"
  ((ngpu > 1)) && paths+=" peer"
  for p in $paths; do
    for cfg in "1 3 4" "1 3 8" "2 4 4" "4 4 8"; do  # blocks an SM, reader warps, loads in flight
      set -- $cfg
      timed "duplex-$p-b$1-r$2-f$3" 60 $X duplex --path "$p" --blocks-per-sm "$1" --read-warps "$2" \
        --loads-in-flight "$3" --reps 7 -o "$OUT/r/duplex/duplex-$p-b$1-r$2-f$3.json"
    done
  done
  { cat "$OUT/r/duplex-tests-summary.txt"; grep -H "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT"/r/san-*duplex*.log
    grep -h "both directions" "$OUT"/r/duplex-*-b*.log; } >"$OUT/r/duplex-summary.txt" 2>&1
fi

# The 84-configuration sweep (bench/moe_sweep.sh): host placement, then device, each configuration checked and
# timed in paired rounds, R probed once a placement: results/<machine>/moe-sweep. It takes longer than one
# call: parts already in MOE_PARTS_FROM (default results/<machine>/moe-sweep/parts, the parts of earlier calls
# committed there) are skipped; MOE_SHAPES, MOE_P, MOE_PLACEMENTS, MOE_TOKENS, MOE_BUDGET_S pick a subset;
# MOE_BACKEND=peer or nccl on two GPUs (P = 2, device placement).
if has moesweep; then
  mkdir -p "$OUT/r/moe-sweep/parts"
  machine=h200; ((ngpu > 1)) && machine=h200x$ngpu
  parts_from=${MOE_PARTS_FROM:-results/$machine/moe-sweep/parts}
  compgen -G "$parts_from/*.json" >/dev/null && cp "$parts_from"/*.json "$OUT/r/moe-sweep/parts/"
  ((ngpu > 1)) && [ "${MOE_BACKEND:-emulated}" != emulated ] && export MOE_P=${MOE_P:-2}
  clocks_start "$OUT/r/moe-sweep/clocks-moe-sweep.csv"
  timed moe-sweep 590 env XSTAGE="$X" MOE_BUDGET_S="${MOE_BUDGET_S:-520}" bench/moe_sweep.sh "$OUT/r/moe-sweep"
  clocks_stop
  if [ -f "$OUT/r/moe-sweep/moe-sweep.json" ]; then
    timed moe-sweep-plot 60 python3 bench/plot_moe_sweep.py "$OUT/r/moe-sweep/moe-sweep.json" --out "$OUT/r/moe-sweep"
  fi
  grep -E "^== |configurations|failed|error" "$OUT/r/moe-sweep.log" | tail -40 >"$OUT/r/moe-sweep-summary.txt"
fi

if has usan; then  # fused Ulysses attention under compute-sanitizer: every store path, both kernels
  u_small="ulysses --ranks 4 --heads 4 --seq 300 --check --check-rows 1 -n 1 -w 0 --max-seconds 0.001
    --flags lagged,at-exit --paced-rows 1,16"
  for tool in memcheck racecheck synccheck; do
    san "san-$tool-ulysses" $tool $X $u_small --stores vector16,bulk,paced,paced-bulk,paced-warp --head-dim 64 \
      --placement host
  done
  for tool in memcheck racecheck synccheck; do  # bulk and the producer's hand-over, several tiles a CTA
    san "san-$tool-ulysses-pb" $tool $X ulysses --ranks 4 --heads 4 --seq 4999 --check --check-rows 1 -n 1 -w 0 \
      --max-seconds 0.001 --stores bulk,paced-bulk,paced-warp --flags at-exit --paced-rows 1,16 --variants fused \
      --head-dim 128 --placement host
  done
  san san-memcheck-ulysses128 memcheck $X $u_small --stores vector16,bulk,paced,paced-bulk,paced-warp --head-dim 128 \
    --placement device
  san san-memcheck-ulysses-mma memcheck $X $u_small --stores vector16,bulk,paced --head-dim 128 --placement host \
    --kernel mma
  grep -H "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT"/r/san-*ulysses*.log >"$OUT/r/u-san-summary.txt"
fi

if has usdpa; then  # fused Ulysses against torch SDPA on the full problem: emulated ranks, and peer on 2+ GPUs
  mkdir -p "$OUT/r/ulysses"
  timed u-sdpa 300 python3 bench/ulysses_vs_sdpa.py --xstage $X --out "$OUT/r/ulysses/ulysses-vs-sdpa.json"
  tail -8 "$OUT/r/u-sdpa.log" >"$OUT/r/u-sdpa-summary.txt"
  if ((ngpu > 1)); then
    timed u-sdpa-peer 200 python3 bench/ulysses_vs_sdpa.py --xstage $X --backend peer \
      --out "$OUT/r/ulysses/ulysses-vs-sdpa-peer.json"
    tail -6 "$OUT/r/u-sdpa-peer.log" >"$OUT/r/u-sdpa-peer-summary.txt"
  fi
fi

# The Ulysses sweep's configurations: every variant, store path, order and flag timing, each configuration
# timed right after an attention-only run (paired). 31 rounds where they fit in 2 s a configuration (an odd
# count: the median is one round's value); at S = 4096 10 rounds left the median residual +-1 point.
u_all="--variants attention-only,sequential,fused,coupled --stores vector16,bulk,paced,paced-bulk,paced-warp
  --orders linear,rotated --flags lagged,at-exit -n 31 --max-seconds 2"

if has usweep; then  # the sequence sweep, S = 4k..128k, both placements, the GPU's clocks beside it
  mkdir -p "$OUT/r/ulysses"
  for pl in ${UPL:-host device}; do
    clocks_start "$OUT/r/ulysses/clocks-ulysses-$pl.csv"
    timed "u-sweep-$pl" 280 $X ulysses --sweep --placement $pl $u_all -o "$OUT/r/ulysses/ulysses-$pl.json"
    clocks_stop
    tail -9 "$OUT/r/u-sweep-$pl.log" >"$OUT/r/u-sweep-$pl-summary.txt"
  done
fi

if has uquick; then  # the same configurations at S = 4096 and 32768 only, both placements
  mkdir -p "$OUT/r/ulysses"
  for pl in ${UPL:-host device}; do
    timed "u-quick-$pl" 200 $X ulysses --seq 4096,32768 --placement $pl $u_all \
      -o "$OUT/r/ulysses/ulysses-quick-$pl.json"
    tail -5 "$OUT/r/u-quick-$pl.log" >"$OUT/r/u-quick-$pl-summary.txt"
  done
fi

if has ulong; then  # the host path's longest S with 15 paired rounds (the sweep fits 12 and 3 there)
  mkdir -p "$OUT/r/ulysses"
  clocks_start "$OUT/r/ulysses/clocks-ulysses-long-host.csv"
  timed u-long 300 $X ulysses --seq 65536,131072 --placement host --variants attention-only,sequential,fused,coupled \
    --a2a copy-engine --stores vector16,bulk,paced-bulk,paced-warp --orders rotated --flags at-exit -n 15 \
    --max-seconds 30 -o "$OUT/r/ulysses/ulysses-long-host.json"
  clocks_stop
  tail -5 "$OUT/r/u-long.log" >"$OUT/r/u-long-summary.txt"
fi

if has ux2; then  # fused Ulysses on every GPU of the machine: multi-GPU tests, checked peer and nccl runs, memcheck
  mkdir -p "$OUT/r/ulysses"
  gpu_tests u-x2-tests 240 "UlyssesPeer|UlyssesNccl|PeerBackend|NcclBackend"
  u_multi="--seq 4096,16384 --stores vector16,bulk,paced,paced-bulk,paced-warp --orders rotated --check --check-rows 2
    -n 5 --max-seconds 0.5 --timeout 10"
  timed u-peer 70 $X ulysses --backend peer --placement device $u_multi -o "$OUT/r/ulysses/ulysses-peer-quick.json"
  timed u-nccl 70 $X launch -n "$ngpu" -- $PWD/$X ulysses --backend nccl $u_multi \
    -o "$OUT/r/ulysses/ulysses-nccl-quick.json"
  san san-memcheck-ulysses-peer memcheck $X ulysses --backend peer --heads 4 --seq 300 --check --check-rows 1 -n 1 \
    -w 0 --max-seconds 0.001 --stores vector16,bulk,paced,paced-bulk,paced-warp --timeout 30
  tail -5 "$OUT/r/u-peer.log" >"$OUT/r/u-peer-summary.txt"
  tail -5 "$OUT/r/u-nccl.log" >"$OUT/r/u-nccl-summary.txt"
fi

if has nvsweep; then  # the sequence sweep over NVLink, P = every GPU, peer and nccl backends, checked
  mkdir -p "$OUT/r/ulysses"
  timed u-sdpa-peer 200 python3 bench/ulysses_vs_sdpa.py --xstage $X --backend peer \
    --out "$OUT/r/ulysses/ulysses-vs-sdpa-peer.json"
  tail -6 "$OUT/r/u-sdpa-peer.log" >"$OUT/r/u-sdpa-peer-summary.txt"
  nv_sweep="--sweep --placement device --profile results/h200x2/probe/profile-peer.json
    --variants attention-only,sequential,fused,coupled --stores vector16,bulk,paced --orders linear,rotated
    --check --check-rows 2 --timeout 20 --max-seconds 0.6"
  timed u-sweep-peer 240 $X ulysses --backend peer $nv_sweep -o "$OUT/r/ulysses/ulysses-peer.json"
  tail -9 "$OUT/r/u-sweep-peer.log" >"$OUT/r/u-sweep-peer-summary.txt"
  timed u-sweep-nccl 240 $X launch -n "$ngpu" -- $PWD/$X ulysses --backend nccl $nv_sweep \
    -o "$OUT/r/ulysses/ulysses-nccl.json"
  tail -9 "$OUT/r/u-sweep-nccl.log" >"$OUT/r/u-sweep-nccl-summary.txt"
fi

# The pipelined baseline (issue 20) beside sequential and fused, S = 4k..128k, paired rounds: attention-only,
# sequential (every all-to-all version), pipelined (every version x the chunk sweep: 2, 4, 8, ... below H/P,
# and H/P), fused (the paced paths, both orders, flags at exit). --floor-probe: the floor's R measured by the
# probe's quick sweep in the same process, before the sweep. Parts: UPIPE="host device" by default on one GPU,
# "peer nccl" on more (P = every GPU; all four parts do not fit one 10-minute call); each part first checks
# pipelined bit for bit at 4k and 16k.
u_pipe="--variants attention-only,sequential,pipelined,fused --stores paced-warp,paced-bulk,paced
  --orders rotated,linear --flags at-exit -n 31 --timeout 20"
if has upipe; then
  mkdir -p "$OUT/r/ulysses"
  upipe_parts=${UPIPE:-host device}
  ((ngpu > 1)) && [ -z "${UPIPE:-}" ] && upipe_parts="peer nccl"
  u_tests="UlyssesEmulated|UlyssesCommand"
  [[ " $upipe_parts " == *" peer "* || " $upipe_parts " == *" nccl "* ]] && u_tests+="|UlyssesPeer|UlyssesNccl"
  # UPIPE_STEPS: any of tests, check, sweep (default all three)
  upipe_steps=" ${UPIPE_STEPS:-tests check sweep} "
  if [[ $upipe_steps == *" tests "* ]]; then
    gpu_tests u-pipe-tests 300 "$u_tests"
    san san-memcheck-ulysses-pipelined memcheck $X ulysses --ranks 3 --heads 15 --seq 300 --variants pipelined \
      --chunks 1,2,5 --row-chunks 1,3 --check --check-rows 1 -n 1 -w 0 --max-seconds 0.001 --placement host
  fi
  for part in $upipe_parts; do
    case $part in
      host | device) run=("$X" ulysses --placement "$part"); budget=1.5 ;;
      peer) run=("$X" ulysses --backend peer --placement device); budget=0.6 ;;
      nccl) run=("$X" launch -n "$ngpu" -- "$PWD/$X" ulysses --backend nccl); budget=0.6 ;;
      *) note "u-pipe-$part" "skipped" "UPIPE part '$part': expected host, device, peer or nccl"; continue ;;
    esac
    [[ $upipe_steps == *" check "* ]] &&
      timed "u-pipe-check-$part" 150 "${run[@]}" --seq 4096,16384 --variants attention-only,sequential,pipelined \
        --check --check-rows 2 -n 3 --max-seconds 0.2 --timeout 20
    [[ $upipe_steps == *" sweep "* ]] || continue
    clocks_start "$OUT/r/ulysses/clocks-pipelined-$part.csv"
    if [[ $part == host || $part == device ]]; then
      # Ours (attention-only, fused, the pipelined sweep) and the torch pipeline, processes alternating
      # (bench/ulysses_pipeline_vs_torch.py). UPIPE_SEQ: the lengths; UPIPE_ARGS: more of its arguments.
      timed "u-pipe-$part" 560 python3 bench/ulysses_pipeline_vs_torch.py --xstage "$X" --placement "$part" \
        --seq "${UPIPE_SEQ:-4096,8192,16384,32768}" --commit "$commit" ${UPIPE_ARGS:-} \
        --out "$OUT/r/ulysses/pipeline-vs-torch-$part.json"
    else
      timed "u-pipe-$part" 420 "${run[@]}" --sweep $u_pipe --max-seconds $budget --floor-probe \
        -o "$OUT/r/ulysses/ulysses-pipelined-$part.json" --summary-csv "$OUT/r/ulysses/ulysses-pipelined-$part.csv"
    fi
    clocks_stop
    tail -12 "$OUT/r/u-pipe-$part.log" >"$OUT/r/u-pipe-$part-summary.txt"
  done
fi

if has torch; then  # the Python package (python/xstage): install, tests on one GPU and on every GPU, the DiT bench
  mkdir -p "$OUT/r/torch"
  export PYTHONUNBUFFERED=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  site=/tmp/xstage-site
  rm -rf "$site" && mkdir -p "$site"
  # What the image lacks (diffusers, importlib_metadata) comes as wheels in .whl/ (see bench/dit_ulysses.py).
  if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site/deps" .whl/*.whl \
      >"$OUT/r/torch-deps.log" 2>&1
  fi
  # `pip install .` builds the library with scikit-build-core (build/py/). A wheel built beside the
  # snapshot (prebuilt/xstage-*.whl) is installed instead, and the source build then runs beside the
  # tests as a check of the build machinery (its wheel unused; done before the benchmark).
  wheel=$(compgen -G "prebuilt/xstage-*.whl" | head -1)
  src_build="python3 -m pip wheel -v --no-deps --no-build-isolation --no-index -w /tmp/xstage-wheel ."
  if [ -n "$wheel" ]; then
    (timeout 400 $src_build >"$OUT/r/torch-src-build.log" 2>&1; echo "rc=$?" >>"$OUT/r/torch-src-build.log") &
    src_pid=$!
    timed torch-install 120 python3 -m pip install --no-index --no-deps --target "$site/xs" "$wheel"
  else
    timed torch-install 400 python3 -m pip install -v --no-index --no-deps --no-build-isolation --target "$site/xs" .
  fi
  export PYTHONPATH=$site/xs:$site/deps${PYTHONPATH:+:$PYTHONPATH}
  timed torch-tests 240 python3 -m pytest -q -p no:cacheprovider --timeout 150 python/tests
  timed torch-tests-x$ngpu 240 torchrun --nproc-per-node "$ngpu" -m pytest -q -p no:cacheprovider --timeout 150 \
    python/tests/test_gpu_ulysses.py
  awk '/^## From PyTorch/{f=1} f && /^```python/{p=1; next} p && /^```/{exit} p' README.md >/tmp/readme_example.py
  timed torch-readme 120 torchrun --nproc-per-node "$ngpu" /tmp/readme_example.py
  if [ -n "$wheel" ]; then
    wait "$src_pid"
    note torch-src-build "$(tail -1 "$OUT/r/torch-src-build.log")" "(log r/torch-src-build.log)"
  fi
  clocks_start "$OUT/r/torch/clocks-dit.csv"
  timed dit 300 torchrun --nproc-per-node "$ngpu" bench/dit_ulysses.py --commit "$commit" \
    --out "$OUT/r/torch/dit-step.json"
  clocks_stop
  { grep -hE "[0-9]+ (passed|failed|skipped|error)" "$OUT"/r/torch-tests*.log | tail -4
    grep -E "\^2 \(" "$OUT/r/dit.log"; } >"$OUT/r/torch-summary.txt"
fi

# When stores become visible (issue 20, part 2): the GPU tests of `xstage visible`, then per-burst issue and
# visible times and the stage's occupancy beside the model: host path (CPU polls), local (a second kernel
# polls) and, on 2+ GPUs, peer (GPU 1 polls). Bursts: enough to store 1.5 x the profile's Q. Results:
# results/<machine>/visible (one JSON + CSV per point, visible.json, occupancy plots).
if has visible; then
  mkdir -p "$OUT/r/visible"
  # One test at a time: the CPU poller and the clock calibration are timing measurements.
  if [ -f "$B/CTestTestfile.cmake" ]; then
    timed visible-tests 90 ctest --test-dir $B -L gpu -R VisibleGpu --output-on-failure
  else
    timed visible-tests 90 $B/xstage_gpu_tests --gtest_filter="VisibleGpu*"
  fi
  grep -E "tests passed|tests failed|Skipped|Failed|PASSED|FAILED|SKIPPED" "$OUT/r/visible-tests.log" | tail -10 \
    >"$OUT/r/visible-tests-summary.txt"
  timed visible-host 60 $X visible --path host --K 132 --V 1MiB,8MiB --G 0,10us -o "$OUT/r/visible/host"
  # The local path: a second kernel on the same GPU polls.
  timed visible-local 60 $X visible --path local --K 132 --V 1MiB,8MiB --G 0,10us -o "$OUT/r/visible/local"
  # Relaxed markers (no fence): the issuer is not held to the drain, so the stage can fill towards Q.
  timed visible-host-relaxed 60 $X visible --path host --K 132 --V 1MiB,8MiB --G 0 --markers relaxed \
    -o "$OUT/r/visible/host-relaxed"
  vis_json=("$OUT/r/visible/host/visible.json" "$OUT/r/visible/host-relaxed/visible.json"
    "$OUT/r/visible/local/visible.json")
  if ((ngpu > 1)); then
    timed visible-peer 60 $X visible --path peer --K 132 --V 1MiB,8MiB --G 0,10us -o "$OUT/r/visible/peer"
    timed visible-peer-relaxed 60 $X visible --path peer --K 132 --V 1MiB,8MiB --G 0 --markers relaxed \
      -o "$OUT/r/visible/peer-relaxed"
    vis_json+=("$OUT/r/visible/peer/visible.json" "$OUT/r/visible/peer-relaxed/visible.json")
  fi
  for j in "${vis_json[@]}"; do
    [ -f "$j" ] && timed "visible-plot-$(basename "$(dirname "$j")")" 60 python3 bench/plot_visible.py "$j" \
      --out "$(dirname "$j")/occupancy.png"
  done
  grep -hE "^== |clocks:|measured:|note:|error|warning" "$OUT"/r/visible-host*.log "$OUT"/r/visible-local.log "$OUT"/r/visible-peer*.log \
    2>/dev/null >"$OUT/r/visible-summary.txt"
fi

if has report; then  # README's main job on a GPU machine
  timed report 180 bash -c "cd /tmp && $PWD/$X report"
fi

if has bench && [ -x $B/bench_simulator ]; then  # the simulator's speed: results/<machine>/simulator
  timed bench-sim 60 $B/bench_simulator
fi

tar -czf "$OUT/results.tar.gz" -C "$OUT" r
{
  echo "== xstage device run, commit $commit =="
  sed -n 3,4p "$OUT/r/env.txt"
  printf '%s\n' "${summary[@]}"
  [ -f "$OUT/r/tests-summary.txt" ] && tail -6 "$OUT/r/tests-summary.txt"
  [ -f "$OUT/r/a2a-host.log" ] && grep -E "copy-engine-d2h|store-kernel|copy-engine" "$OUT/r/a2a-host.log" | tail -6
  [ -f "$OUT/r/attn-summary.txt" ] && cat "$OUT/r/attn-summary.txt"
  [ -f "$OUT/r/moe-summary.txt" ] && cat "$OUT/r/moe-summary.txt"
  [ -f "$OUT/r/torch-summary.txt" ] && cat "$OUT/r/torch-summary.txt"
  for f in u-san u-sdpa u-sweep-host u-sweep-device u-quick-host u-quick-device u-long u-x2-tests u-peer u-nccl \
           u-sdpa-peer u-sweep-peer u-sweep-nccl u-pipe-tests u-pipe-host u-pipe-device u-pipe-peer u-pipe-nccl \
           visible-tests visible moel moe-sweep duplex; do
    [ -f "$OUT/r/$f-summary.txt" ] && cat "$OUT/r/$f-summary.txt"
  done
  [ -f "$OUT/r/probe-peer-summary.txt" ] && grep -E "==|R = |T0 =|burst_gap|completion_coupled|unbounded_async|onset" "$OUT/r/probe-peer-summary.txt"
  [ -f "$OUT/r/a2a-peer.log" ] && tail -4 "$OUT/r/a2a-peer.log"
  [ -f "$OUT/r/probe-summary.txt" ] && grep -E "==|R = |T0 =|burst_gap|completion_coupled|unbounded_async|onset" "$OUT/r/probe-summary.txt"
  if ((${#failed[@]})); then echo "failed: ${failed[*]}"; else echo "every step exited 0"; fi
} | tee "$OUT/summary.txt"
((${#failed[@]} == 0))
