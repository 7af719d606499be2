#!/usr/bin/env bash
# One call on the lent H200: build, GPU tests, sanitizers, benchmarks.
# Results and logs go to $OUT (one tarball plus the summary); a short table last.
#   usage: scripts/device.sh [stage ...]
#   stages: build tests sanitize probe a2a attn report bench multi peerprobe diag ucheck usweep ustores ux2 nvsweep
#           usdpa kprof usan d64 upaired kcycles u2quick upower sass kexp ksrc utests ktrace kwarm kpoll upb upbx ubias kpw uctx ulong
#   (default: build tests sanitize probe a2a)
# Stages are whole words ("tests" does not run "utests"). Without the build
# stage it runs the binaries in prebuilt/ (scripts/snapshot.sh
# --prebuilt), and GPU tests straight from the GoogleTest binary.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/xstage-out}
mkdir -p "$OUT/r"
stages=${*:-build tests sanitize probe a2a}
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on shared machines
commit=$(cat COMMIT 2>/dev/null || git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
nccl_root=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
B=build-dev
if [[ " $stages " != *" build "* && -x prebuilt/xstage ]]; then B=prebuilt; fi
summary=()
note() { summary+=("$(printf '%-10s %-8s %s' "$1" "$2" "$3")"); }
timed() {  # name, timeout seconds, command...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/r/$name.log" 2>&1
  local rc=$?
  note "$name" "rc=$rc" "$((SECONDS - t0)) s  (log r/$name.log)"
  return $rc
}

{
  echo "date: $(date -u +%FT%TZ)"; echo "commit: $commit"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu --format=csv
  nvcc --version | tail -2; cmake --version | head -1
} >"$OUT/r/env.txt" 2>&1

if [[ " $stages " == *" build "* ]]; then
  mkdir -p "$B/nccl/lib"
  ln -sf "$nccl_root/lib/libnccl.so.2" "$B/nccl/lib/libnccl.so"
  ln -sfn "$nccl_root/include" "$B/nccl/include"
  timed build 420 env XSTAGE_BUILD_DIR=$B \
    XSTAGE_CMAKE_ARGS="-DXSTAGE_NCCL_ROOT=$PWD/$B/nccl -DXSTAGE_GIT_COMMIT=$commit" scripts/build.sh
  export LD_LIBRARY_PATH=$nccl_root/lib:${LD_LIBRARY_PATH:-}
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
}

if [[ " $stages " == *" tests "* ]]; then
  if [ -f "$B/CTestTestfile.cmake" ]; then
    timed tests 300 ctest --test-dir $B --output-on-failure -j4
  else
    gpu_tests tests 300 ""
  fi
  grep -E "tests passed|tests failed|Skipped|Failed|PASSED|FAILED|SKIPPED" "$OUT/r/tests.log" | tail -25 >"$OUT/r/tests-summary.txt"
fi

if [[ " $stages " == *" sanitize "* ]]; then
  san="compute-sanitizer --error-exitcode 9 --print-limit 20"
  small="--transport host --K 5 --V 100000 --G 0,2us --bursts 3 --quiet --bootstrap 0 -o /tmp/san"
  for tool in memcheck racecheck synccheck; do
    for store in v4 bulk; do
      timed "san-$tool-$store" 120 $san --tool $tool $X probe $small --store $store --gap-kind mma --completion flag
    done
  done
  timed san-memcheck-fence 120 $san --tool memcheck $X probe $small --store b32 --completion fence
  a2a_small="a2a --backend emulated --ranks 3 --heads 6 --head-dim 72 -b 300000 -e 300000 -n 1 -w 0 --check"
  for tool in memcheck racecheck synccheck; do
    for pl in device host; do
      timed "san-$tool-a2a-$pl" 120 $san --tool $tool $X $a2a_small --placement $pl
    done
  done
fi

if [[ " $stages " == *" probe "* ]]; then
  timed probe 300 $X probe --transport host,local --sweep quick -o "$OUT/r/probe"
  tail -40 "$OUT/r/probe.log" >"$OUT/r/probe-summary.txt"
fi

if [[ " $stages " == *" diag "* ]]; then  # one-off diagnostics of the host path's stage (per-burst spans)
  d="$OUT/r/diag"; mkdir -p "$d"
  P="$X probe --transport host --K 132 --bursts 96 --quiet --bootstrap 0"
  {
    $P --V 256KiB --G 0,4us -o "$d/a" --bursts-out "$d/a-default.csv"
    $P --V 256KiB --G 0,4us --no-warmup --settle 0 -o "$d/b" --bursts-out "$d/b-nowarm.csv"
    $P --V 256KiB --G 0,4us --settle 20ms -o "$d/c" --bursts-out "$d/c-settle20ms.csv"
    $P --V 256KiB --G 0,4us --dst-size 8MiB -o "$d/d" --bursts-out "$d/d-fewslots.csv"
    $P --V 16MiB --G 0,512us -o "$d/e" --bursts-out "$d/e-16M.csv"
    $P --V 16MiB --G 512us --no-warmup --settle 20ms -o "$d/f" --bursts-out "$d/f-16M-nowarm.csv"
  } >"$OUT/r/diag.log" 2>&1
  note diag "rc=$?" "r/diag"
fi

if [[ " $stages " == *" multi "* || " $stages " == *" peerprobe "* ]]; then  # several GPUs: the NVLink X-Stage
  nvidia-smi topo -m >"$OUT/r/topo.txt" 2>&1
  timed probe-peer 300 $X probe --transport peer --sweep quick -o "$OUT/r/probe-peer"
  tail -40 "$OUT/r/probe-peer.log" >"$OUT/r/probe-peer-summary.txt"
fi

if [[ " $stages " == *" multi "* ]]; then  # several GPUs: peer and nccl backends
  timed a2a-peer 240 $X a2a --backend peer --placement device -b 1M -e 1G -f 2 -n 20 -w 5 --check \
    -o "$OUT/r/a2a-peer.csv"
  n=$(nvidia-smi -L | wc -l)
  timed a2a-nccl 240 $X launch -n "$n" -- bash -c \
    "$PWD/$X a2a --backend nccl -b 1M -e 1G -f 2 -n 20 -w 5 --check -o $OUT/r/a2a-nccl-rank\$RANK.csv"
fi

if [[ " $stages " == *" attn "* ]]; then  # attention forward: tests, sanitizers, and the side-by-side with torch SDPA
  gpu_tests attn-tests 240 Attention
  for tool in memcheck racecheck synccheck; do
    timed "san-$tool-attn" 120 compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 20 \
      $X attn --B 2 --S 77 --S-kv 130 --H 3 --D 64 --check
    timed "san-$tool-attn128" 120 compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 20 \
      $X attn --B 1 --S 130 --S-kv 65 --H 2 --D 128 --check
  done
  timed attn-bench 300 python3 bench/attention_vs_sdpa.py --xstage $X --kernels auto,mma --out "$OUT/r/attention.json"
  tail -15 "$OUT/r/attn-bench.log" >"$OUT/r/attn-summary.txt"
fi

if [[ " $stages " == *" ucheck "* || " $stages " == *" usan "* ]]; then  # fused Ulysses attention: sanitizers, both kernels
  u_small="ulysses --ranks 4 --heads 4 --seq 300 --check --check-rows 1 -n 1 -w 0 --max-seconds 0.001
    --flags lagged,at-exit --paced-rows 1,16"
  for tool in memcheck racecheck synccheck; do
    timed "san-$tool-ulysses" 200 compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 20 \
      $X $u_small --stores vector16,bulk,paced,paced-bulk,paced-warp --head-dim 64 --placement host
  done
  for tool in memcheck racecheck synccheck; do  # bulk and the producer's hand-over, several tiles a CTA
    timed "san-$tool-ulysses-pb" 200 compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 20 \
      $X ulysses --ranks 4 --heads 4 --seq 4999 --check --check-rows 1 -n 1 -w 0 --max-seconds 0.001 \
      --stores bulk,paced-bulk,paced-warp --flags at-exit --paced-rows 1,16 --variants fused --head-dim 128 --placement host
  done
  timed san-memcheck-ulysses128 200 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
    $X $u_small --stores vector16,bulk,paced,paced-bulk,paced-warp --head-dim 128 --placement device
  timed san-memcheck-ulysses-mma 200 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
    $X $u_small --stores vector16,bulk,paced --head-dim 128 --placement host --kernel mma
  grep -H "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT"/r/san-*ulysses*.log >"$OUT/r/u-san-summary.txt"
fi

if [[ " $stages " == *" ucheck "* ]]; then  # fused Ulysses attention: tests, torch SDPA on the full problem, store paths
  gpu_tests u-tests 300 "Attention|Ulysses"
  grep -E "tests passed|tests failed|Failed|PASSED|FAILED" "$OUT/r/u-tests.log" | tail -8 >"$OUT/r/u-tests-summary.txt"
  timed u-sdpa 300 python3 bench/ulysses_vs_sdpa.py --xstage $X --out "$OUT/r/ulysses-vs-sdpa.json"
  tail -8 "$OUT/r/u-sdpa.log" >"$OUT/r/u-sdpa-summary.txt"
  timed u-quick 200 $X ulysses --seq 4096,16384 --placement host --flags lagged,eager,at-exit --check --check-rows 2 \
    --stores vector16,bulk,paced --orders rotated \
    -o "$OUT/r/ulysses-quick.json"
  tail -8 "$OUT/r/u-quick.log" >"$OUT/r/u-quick-summary.txt"
fi

if [[ " $stages " == *" ustores "* ]]; then  # quick look at the fused kernel's store paths and flag timings
  timed u-stores 200 $X ulysses --kernel mma --seq 4096,16384 --placement host --flags lagged,eager,at-exit \
    --stores vector16,vector16-wt,bulk --orders rotated --variants attention-only,fused -n 5 -o "$OUT/r/ulysses-stores.json"
  tail -4 "$OUT/r/u-stores.log" >"$OUT/r/u-stores-summary.txt"
fi

if [[ " $stages " == *" usweep "* ]]; then  # the sequence sweep of the fused-attention issue, both placements
  timed u-sdpa 300 python3 bench/ulysses_vs_sdpa.py --xstage $X --out "$OUT/r/ulysses-vs-sdpa.json"
  tail -8 "$OUT/r/u-sdpa.log" >"$OUT/r/u-sdpa-summary.txt"
  for pl in host device; do
    timed "u-sweep-$pl" 280 $X ulysses --sweep --placement $pl --variants attention-only,sequential,fused,coupled \
      --stores vector16,bulk,paced --orders linear,rotated -o "$OUT/r/ulysses-$pl.json"
    tail -9 "$OUT/r/u-sweep-$pl.log" >"$OUT/r/u-sweep-$pl-summary.txt"
  done
fi

if [[ " $stages " == *" upaired "* ]]; then  # the sweep timed in interleaved rounds, the GPU's clocks logged beside it
  # 31 rounds where they fit in 2 s a configuration (an odd count: the median is one round's value);
  # at S = 4096 a round's configurations take ~0.4 ms each, and 10 rounds left the median residual +-1 point.
  for pl in ${UPL:-host device}; do
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,nounits -lms 200 \
      >"$OUT/r/clocks-$pl.csv" 2>&1 &
    smi=$!
    timed "u-sweep-$pl" 280 $X ulysses --sweep --placement $pl --variants attention-only,sequential,fused,coupled \
      --stores vector16,bulk,paced,paced-bulk,paced-warp --orders linear,rotated --flags lagged,at-exit -n 31 --max-seconds 2 \
      -o "$OUT/r/ulysses-$pl.json"
    kill $smi 2>/dev/null; wait $smi 2>/dev/null
    tail -9 "$OUT/r/u-sweep-$pl.log" >"$OUT/r/u-sweep-$pl-summary.txt"
  done
fi

if [[ " $stages " == *" upb "* ]]; then  # paced against paced-bulk (perf-log f11): a quick paired look, both placements
  for pl in host device; do
    timed "u-pb-$pl" 200 $X ulysses --seq 4096,16384,32768 --placement $pl --variants attention-only,fused \
      --stores vector16,bulk,paced,paced-bulk,paced-warp --orders linear --flags at-exit -n 15 --max-seconds 1 -o "$OUT/r/ulysses-pb-$pl.json"
    tail -9 "$OUT/r/u-pb-$pl.log" >"$OUT/r/u-pb-$pl-summary.txt"
  done
fi

if [[ " $stages " == *" ubias "* ]]; then  # what a pair's attention-only run follows (perf-log f12): both pairings, timelines
  for pl in host device; do
    seqs=$([ $pl = host ] && echo 4096,16384,32768 || echo 4096,16384)
    for pairing in adjacent settled; do
      timed "u-bias-$pl-$pairing" 200 $X ulysses --seq $seqs --placement $pl --variants attention-only,fused,coupled \
        --stores vector16,bulk,paced,paced-bulk,paced-warp --orders linear --flags at-exit -n 31 --max-seconds 2 \
        --pairing $pairing --timeline "$OUT/r/timeline-$pl-$pairing.csv" -o "$OUT/r/ulysses-bias-$pl-$pairing.json"
      tail -6 "$OUT/r/u-bias-$pl-$pairing.log" >>"$OUT/r/u-bias-summary.txt"
    done
  done
fi

if [[ " $stages " == *" uctx "* ]]; then  # host 16k under different configuration sets (perf-log f16): what the sweep adds
  full="--variants attention-only,sequential,fused,coupled --stores vector16,bulk,paced,paced-bulk,paced-warp --orders linear,rotated --flags lagged,at-exit"
  short="--variants attention-only,fused --stores vector16,bulk,paced,paced-bulk,paced-warp --orders linear --flags at-exit"
  nocoupled="--variants attention-only,fused --stores vector16,bulk,paced,paced-bulk,paced-warp --orders linear,rotated --flags lagged,at-exit"
  pwonly="--variants attention-only,fused --stores paced-warp,paced --orders linear --flags at-exit"
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,nounits -lms 200 >"$OUT/r/clocks-ctx.csv" 2>&1 &
  smi=$!
  for rep in 1 2; do
    for set in full short nocoupled pwonly; do
      timed "u-ctx-$set-$rep" 120 $X ulysses --seq ${UCTX_SEQ:-16384} --placement host ${!set} -n 31 --max-seconds 2 \
        --timeline "$OUT/r/timeline-ctx-$set-$rep.csv" -o "$OUT/r/ulysses-ctx-$set-$rep.json"
    done
  done
  timed u-ctx-sweep3 120 $X ulysses --seq 4096,8192,16384 --placement host $full -n 31 --max-seconds 2 \
    --timeline "$OUT/r/timeline-ctx-sweep3.csv" -o "$OUT/r/ulysses-ctx-sweep3.json"
  kill $smi 2>/dev/null; wait $smi 2>/dev/null
  python3 bench/pairing_bias.py "$OUT"/r/timeline-ctx-*.csv 2>&1 | grep -E "==|paced|S=16384" >"$OUT/r/u-ctx-summary.txt"
fi

if [[ " $stages " == *" ulong "* ]]; then  # the host path's longest S with 15 paired rounds (the sweep has 12 and 3 there)
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,nounits -lms 200 >"$OUT/r/clocks-long.csv" 2>&1 &
  smi=$!
  timed u-long 300 $X ulysses --seq 65536,131072 --placement host --variants attention-only,sequential,fused,coupled \
    --a2a copy-engine --stores vector16,bulk,paced-bulk,paced-warp --orders rotated --flags at-exit -n 15 --max-seconds 30 \
    -o "$OUT/r/ulysses-long-host.json"
  kill $smi 2>/dev/null; wait $smi 2>/dev/null
  tail -5 "$OUT/r/u-long.log" >"$OUT/r/u-long-summary.txt"
fi

if [[ " $stages " == *" upbx "* ]]; then  # paced-bulk's cost against its slice count (perf-log f11): a diagnostic
  timed u-pbx 200 $X ulysses --seq 4096,16384 --placement device --variants attention-only,fused \
    --stores bulk,paced,paced-bulk --paced-rows 16,64,1000 --orders linear --flags at-exit -n 15 --max-seconds 1 \
    -o "$OUT/r/ulysses-pbx.json"
fi

if [[ " $stages " == *" u2quick "* ]]; then  # the fused kernel's receiver wait across GPUs: the multi-GPU Ulysses tests only
  gpu_tests u2-tests 200 "UlyssesPeer|UlyssesNccl"
  grep -E "tests passed|tests failed|Failed|PASSED|FAILED|SKIPPED" "$OUT/r/u2-tests.log" | tail -8 >"$OUT/r/u2-tests-summary.txt"
fi

if [[ " $stages " == *" ux2 "* ]]; then  # fused Ulysses attention on every GPU of the machine (peer, then nccl)
  n=$(nvidia-smi -L | wc -l)
  gpu_tests u-x2-tests 240 "UlyssesPeer|UlyssesNccl|PeerBackend|NcclBackend"
  grep -E "tests passed|tests failed|Failed|PASSED|FAILED|SKIPPED" "$OUT/r/u-x2-tests.log" | tail -8 >"$OUT/r/u-x2-tests-summary.txt"
  u_multi="--seq 4096,16384 --stores vector16,bulk,paced,paced-bulk,paced-warp --orders rotated --check --check-rows 2 -n 5 --max-seconds 0.5 --timeout 10"
  timed u-peer 70 $X ulysses --backend peer --placement device $u_multi -o "$OUT/r/ulysses-peer.json"
  timed u-nccl 70 $X launch -n "$n" -- $PWD/$X ulysses --backend nccl $u_multi -o "$OUT/r/ulysses-nccl.json"
  timed san-memcheck-ulysses-peer 200 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
    $X ulysses --backend peer --heads 4 --seq 300 --check --check-rows 1 -n 1 -w 0 --max-seconds 0.001 \
    --stores vector16,bulk,paced,paced-bulk,paced-warp --timeout 30
  tail -5 "$OUT/r/u-peer.log" >"$OUT/r/u-peer-summary.txt"
  tail -5 "$OUT/r/u-nccl.log" >"$OUT/r/u-nccl-summary.txt"
fi

if [[ " $stages " == *" nvsweep "* ]]; then  # issue 7: fused Ulysses over NVLink, P = every GPU, the sequence sweep
  n=$(nvidia-smi -L | wc -l)
  timed u-sdpa-peer 200 python3 bench/ulysses_vs_sdpa.py --xstage $X --backend peer --out "$OUT/r/ulysses-vs-sdpa-peer.json"
  tail -6 "$OUT/r/u-sdpa-peer.log" >"$OUT/r/u-sdpa-peer-summary.txt"
  nv_sweep="--sweep --placement device --profile results/h200x2/probe/profile-peer.json --variants attention-only,sequential,fused,coupled
    --stores vector16,bulk,paced --orders linear,rotated --check --check-rows 2 --timeout 20 --max-seconds 0.6"
  timed u-sweep-peer 240 $X ulysses --backend peer $nv_sweep -o "$OUT/r/ulysses-peer.json"
  tail -9 "$OUT/r/u-sweep-peer.log" >"$OUT/r/u-sweep-peer-summary.txt"
  timed u-sweep-nccl 240 $X launch -n "$n" -- $PWD/$X ulysses --backend nccl $nv_sweep -o "$OUT/r/ulysses-nccl.json"
  tail -9 "$OUT/r/u-sweep-nccl.log" >"$OUT/r/u-sweep-nccl-summary.txt"
fi

if [[ " $stages " == *" usdpa "* ]]; then  # fused Ulysses against torch SDPA: emulated ranks, and peer on 2+ GPUs
  timed u-sdpa 300 python3 bench/ulysses_vs_sdpa.py --xstage $X --out "$OUT/r/ulysses-vs-sdpa.json"
  tail -8 "$OUT/r/u-sdpa.log" >"$OUT/r/u-sdpa-summary.txt"
  if (($(nvidia-smi -L | wc -l) > 1)); then
    timed u-sdpa-peer 200 python3 bench/ulysses_vs_sdpa.py --xstage $X --backend peer --out "$OUT/r/ulysses-vs-sdpa-peer.json"
    tail -6 "$OUT/r/u-sdpa-peer.log" >"$OUT/r/u-sdpa-peer-summary.txt"
  fi
fi

if [[ " $stages " == *" kprof "* ]]; then  # Nsight Compute: the local attention kernel against the fused ones, same shape
  ncu_args="--clock-control none --kernel-name-base demangled -c 1 --section SpeedOfLight --section WarpStateStats
    --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis --section LaunchStats
    --metrics sm__inst_executed.sum,sm__cycles_elapsed.max,lts__t_sector_hit_rate.pct,dram__bytes_read.sum"
  u_prof="ulysses --placement device --seq 16384 --orders rotated -n 1 -w 0 --max-seconds 0.001 --profile none"
  timed kprof-local 200 ncu -k regex:LocalStoreEpilogue $ncu_args $X $u_prof --variants attention-only
  timed kprof-paced 200 ncu -k regex:UlyssesPacedEpilogue $ncu_args $X $u_prof --variants fused --stores paced
  timed kprof-vec 200 ncu -k regex:UlyssesStoreEpilogue $ncu_args $X $u_prof --variants fused --stores vector16 --flags at-exit
  cat "$OUT/r/kprof-local.log" "$OUT/r/kprof-paced.log" "$OUT/r/kprof-vec.log" >"$OUT/r/kprof.log"
fi

if [[ " $stages " == *" kpw "* ]]; then  # Nsight Compute: where paced-warp's own cost goes (perf-log f14), S = 4096, device buffers
  # Stall reasons per issued instruction (all warps), then the stall samples by SASS instruction.
  ncu_pw="--clock-control none --kernel-name-base demangled -c 1 --section WarpStateStats --section SourceCounters
    --metrics sm__cycles_elapsed.max,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
  u_pw="ulysses --placement device --seq 4096 --orders linear --flags at-exit -n 1 -w 0 --max-seconds 0.001 --profile none"
  for k in local:LocalStoreEpilogue:attention-only: bulk:UlyssesProducerPacedEpilogue:fused:paced-bulk \
           warp:UlyssesProducerPacedEpilogue:fused:paced-warp paced:UlyssesPacedEpilogue:fused:paced; do
    IFS=: read -r name kern variant store <<<"$k"
    timed "kpw-$name" 200 ncu -k regex:$kern $ncu_pw -o "/tmp/kpw-$name" -f $X $u_pw --variants $variant \
      ${store:+--stores $store}
    ncu -i "/tmp/kpw-$name.ncu-rep" --page details --print-units base >"$OUT/r/kpw-$name-details.txt" 2>&1
    ncu -i "/tmp/kpw-$name.ncu-rep" --page source --print-source sass --csv >"$OUT/r/kpw-$name-sass.csv" 2>&1
  done
  for name in local bulk warp paced; do
    echo "== $name"; grep -E "sm__cycles_elapsed.max|issue_stalled" "$OUT/r/kpw-$name-details.txt" |
      awk '$NF+0 > 0.05' | head -30
  done >"$OUT/r/kpw-summary.txt"
fi

if [[ " $stages " == *" kcycles "* ]]; then  # Nsight Compute: each kernel's duration and SM cycles (clock-independent)
  gpu_tests kc-tests 200 "Ulysses"
  ncu_cyc="--clock-control none --cache-control none --csv --metrics gpu__time_duration.sum,sm__cycles_elapsed.max,dram__bytes_read.sum,lts__t_sector_hit_rate.pct"
  kc="ulysses --variants attention-only,fused --stores vector16,paced --paced-rows 16 --orders rotated
    --flags lagged,at-exit -n 3 -w 0 --max-seconds 0.001 --profile none"
  timed kcyc-device 200 ncu $ncu_cyc $X $kc --seq 4096,16384 --placement device
  timed kcyc-host 200 ncu $ncu_cyc $X $kc --seq 16384 --placement host
  kf="ulysses --variants attention-only,fused --stores vector16,bulk,paced --paced-rows 8,16 --orders rotated
    --flags lagged,at-exit"
  timed kflags-device 150 $X $kf --seq 4096,8192,16384,65536 --placement device -o "$OUT/r/kflags-device.json"
  timed kflags-host 150 $X $kf --seq 4096,8192,16384,32768,65536 --placement host -o "$OUT/r/kflags-host.json"
fi

if [[ " $stages " == *" upower "* ]]; then  # host path, S = 32k: fused vs attention-only alone, clocks and power beside; cycles at base clock
  for v in attention-only fused; do
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,nounits -lms 100 \
      >"$OUT/r/power-$v.csv" 2>&1 &
    smi=$!
    timed "upower-$v" 60 $X ulysses --variants $v --stores paced --orders linear --flags at-exit --seq 32768 \
      --placement host -n 200 -w 10 --max-seconds 100 --profile none -o "$OUT/r/upower-$v.json"
    kill $smi 2>/dev/null; wait $smi 2>/dev/null
  done
  timed kcyc-host32k-base 200 ncu --clock-control base --cache-control none --csv \
    --metrics gpu__time_duration.sum,sm__cycles_elapsed.max $X ulysses --variants attention-only,fused \
    --stores vector16,paced --orders linear --flags at-exit -n 3 -w 0 --max-seconds 0.001 --profile none \
    --seq 32768 --placement host
fi

if [[ " $stages " == *" utests "* ]]; then  # the attention and Ulysses GPU tests alone
  gpu_tests u-tests 300 "Attention|Ulysses"
  grep -E "tests passed|tests failed|Failed|PASSED|FAILED|SKIPPED" "$OUT/r/u-tests.log" | tail -8 >"$OUT/r/u-tests-summary.txt"
fi

if [[ " $stages " == *" kexp "* ]]; then  # what each part of the fused kernel's end costs: SM cycles with parts left out
  # XSTAGE_ULYSSES_EXPERIMENT bits (ulysses_params.hpp): 1 no receiver wait, 2 no acquire fence after it.
  # Not results: diagnostics (more bits at the commits of results/h200/ulysses/diagnostics/ulysses-kernel-end.txt).
  ncu_cyc="--clock-control none --cache-control none --csv --metrics sm__cycles_elapsed.max"
  ke="ulysses --variants attention-only,fused --stores vector16,bulk,paced --orders rotated --flags at-exit
    -n 3 -w 0 --max-seconds 0.001 --profile none --placement device"
  for e in ${KEXP:-0 1 2}; do
    seqs=4096; [ $e = 0 ] && seqs=4096,16384
    XSTAGE_ULYSSES_EXPERIMENT=$e timed "kexp-$e" 120 ncu $ncu_cyc $X $ke --seq $seqs
  done
fi

if [[ " $stages " == *" ksrc "* ]]; then  # Nsight Compute source counters: where the fused kernels spend what the local one does not
  ks="ulysses --variants attention-only,fused --orders rotated --flags at-exit -n 1 -w 0 --max-seconds 0.001
    --profile none --placement device"
  src_sections="--section SourceCounters --section WarpStateStats --section InstructionStats --section LaunchStats"
  timed ksrc-4k 200 ncu --clock-control none --kernel-name-base demangled $src_sections -k regex:"LocalStoreEpilogue|UlyssesStoreEpilogue" -c 2 \
    -o "$OUT/r/ksrc-4k" $X $ks --stores vector16 --seq 4096
  timed ksrc-paced 200 ncu --clock-control none --kernel-name-base demangled $src_sections -k regex:"LocalStoreEpilogue|UlyssesPacedEpilogue" -c 2 \
    -o "$OUT/r/ksrc-paced" $X $ks --stores paced --seq 16384
  for r in ksrc-4k ksrc-paced; do
    timed "$r-csv" 120 ncu --import "$OUT/r/$r.ncu-rep" --page source --csv --print-source sass
    gzip -f "$OUT/r/$r-csv.log"
    timed "$r-details" 60 ncu --import "$OUT/r/$r.ncu-rep" --page details
  done
fi

if [[ " $stages " == *" ktrace "* ]]; then  # time stamps of the fused kernel's end (XSTAGE_ULYSSES_EXPERIMENT=128 and more)
  kt="ulysses --variants fused --stores vector16 --orders rotated --flags at-exit -n 3 -w 1 --profile none"
  for e in ${KTRACE:-128 130}; do
    XSTAGE_ULYSSES_EXPERIMENT=$e timed "ktrace-$e" 60 $X $kt --seq ${KTSEQ:-4096,16384} --placement device
  done
  XSTAGE_ULYSSES_EXPERIMENT=128 timed "ktrace-host" 60 $X $kt --seq 4096,32768 --placement host
  grep -H "^trace" "$OUT"/r/ktrace-*.log >"$OUT/r/ktrace-summary.txt"
fi

if [[ " $stages " == *" kpoll "* ]]; then  # host 32k: does the receiver's polling cost the others? (bits: 1 no wait, 256 slow poll)
  for e in ${KPOLL:-0 256 1 0}; do
    XSTAGE_ULYSSES_EXPERIMENT=$e timed "kpoll-$e" 100 $X ulysses --variants attention-only,fused --stores paced,vector16 \
      --orders linear --flags at-exit --seq ${KPSEQ:-32768} --placement host -n 31 --max-seconds 2 --profile none \
      -o "$OUT/r/kpoll-$e.json"
  done
  grep -h -A4 "attn-only" "$OUT"/r/kpoll-*.log >"$OUT/r/kpoll-summary.txt"
fi

if [[ " $stages " == *" kwarm "* ]]; then  # the same 4k point first in the process and again after a longer load
  timed kwarm 120 $X ulysses --variants attention-only,fused --stores vector16,bulk --orders rotated --flags at-exit \
    --seq 4096,16384,65536,4096 --placement device --max-seconds 1 -o "$OUT/r/kwarm.json"
fi

if [[ " $stages " == *" sass "* ]]; then  # where the fused kernels' register spills sit (mainloop or tail)
  timed sass 120 bash -c "cuobjdump -sass $X | python3 scripts/sass_spills.py Epilogue"
fi

if [[ " $stages " == *" d64 "* ]]; then  # head dim 64: the three-consumer-warpgroup kernels, tests, sanitizers, cuDNN
  gpu_tests d64-tests 240 "AttentionFwd"
  grep -E "tests passed|tests failed|Failed|PASSED|FAILED" "$OUT/r/d64-tests.log" | tail -6 >"$OUT/r/d64-tests-summary.txt"
  for k in wgmma-m192 wgmma-m192-overlap; do
    for tool in memcheck racecheck synccheck; do
      timed "san-$tool-$k" 120 compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 20 \
        $X attn --B 2 --S 77 --S-kv 130 --H 3 --D 64 --check --kernel $k
    done
    timed "san-memcheck-$k-persistent" 120 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
      $X attn --B 2 --S 333 --S-kv 200 --H 40 --D 64 --check --kernel $k
  done
  grep -H "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT"/r/san-*m192*.log >"$OUT/r/d64-san-summary.txt"
  timed d64-bench 240 python3 bench/attention_vs_sdpa.py --xstage $X --kernels auto,wgmma-m192,wgmma-m192-overlap \
    --shapes s16k-d64 --out "$OUT/r/attention-d64.json"
  grep -v "^check" "$OUT/r/d64-bench.log" | tail -12 >"$OUT/r/d64-bench-summary.txt"
fi

if [[ " $stages " == *" report "* ]]; then  # README's main job on a GPU machine
  timed report 180 bash -c "cd /tmp && $PWD/$X report"
fi

if [[ " $stages " == *" bench "* ]] && [ -x $B/bench_simulator ]; then
  timed bench-sim 60 $B/bench_simulator
fi

tar -czf "$OUT/results.tar.gz" -C "$OUT" r
{
  echo "== xstage device run, commit $commit =="
  cat "$OUT/r/env.txt" | sed -n 3,4p
  printf '%s\n' "${summary[@]}"
  [ -f "$OUT/r/tests-summary.txt" ] && tail -6 "$OUT/r/tests-summary.txt"
  [ -f "$OUT/r/a2a-host.log" ] && grep -E "copy-engine-d2h|store-kernel|copy-engine" "$OUT/r/a2a-host.log" | tail -6
  [ -f "$OUT/r/attn-summary.txt" ] && cat "$OUT/r/attn-summary.txt"
  [ -f "$OUT/r/kprof.log" ] && grep -E "sm90_bf16|Duration|Executed Ipc A|inst_executed|sector_hit|dram__bytes|Registers|Achieved Occ|Warp Cycles Per Issued|No Eligible|L2 Hit|Compute \(SM\) Thr|Memory Thr" "$OUT/r/kprof.log" | head -60
  for f in kpw u-long u-ctx u-bias u-pb-host u-pb-device u2-tests d64-tests d64-san d64-bench u-san u-tests u-sdpa u-quick u-stores u-sweep-host u-sweep-device u-x2-tests u-peer u-nccl u-sdpa-peer u-sweep-peer u-sweep-nccl; do
    [ -f "$OUT/r/$f-summary.txt" ] && cat "$OUT/r/$f-summary.txt"
  done
  [ -f "$OUT/r/probe-peer-summary.txt" ] && grep -E "==|R = |T0 =|burst_gap|completion_coupled|unbounded_async|onset" "$OUT/r/probe-peer-summary.txt"
  [ -f "$OUT/r/a2a-peer.log" ] && tail -4 "$OUT/r/a2a-peer.log"
  [ -f "$OUT/r/probe-summary.txt" ] && grep -E "==|R = |T0 =|burst_gap|completion_coupled|unbounded_async|onset" "$OUT/r/probe-summary.txt"
} | tee "$OUT/summary.txt"
