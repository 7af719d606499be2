#!/usr/bin/env bash
# One call on a lent H200 machine: build, GPU tests, sanitizers, benchmarks.
#   usage: scripts/device.sh [stage[:arg] ...]
#   default: build tests report sanitize probe a2a (README's build and main job first, so that a
#   library version on this machine that the CPU machine lacks shows at once)
#
# The eight stages; an argument is a comma-separated list:
#   build                 scripts/build.sh into build-dev/ (without it: the binaries in prebuilt/,
#                         scripts/snapshot.sh --prebuilt, and GPU tests straight from GoogleTest)
#   tests[:NAMES]         every test (ctest), or the GPU tests whose names hold one of NAMES
#   report                README's main job, `xstage report`
#   sanitize[:FAMILIES]   compute-sanitizer on small checked runs (default probe,a2a; `all`): probe a2a
#                         attention moe moe-layer duplex ulysses pipelined ulysses-peer (2+ GPUs)
#   probe[:TRANSPORTS]    the probe's quick sweep (default host,local; `peer` on 2+ GPUs)
#   a2a[:BACKENDS]        the all-to-all size sweep (default emulated; peer,nccl on 2+ GPUs)
#   bench[:TOPICS]        the benchmarks that docs/RESULTS.md's tables come from (default simulator):
#                         simulator attention moe moe-grid moe-short-k moe-tail moe-layer moe-sweep moe-ep duplex visible
#                         ulysses ulysses-long ulysses-nvlink sdpa pipeline
#   torch                 the Python package: install, tests on one GPU and on all, README's
#                         example, the DiT bench
# The two-GPU runbook is docs/RESULTS.md's "Not measured"; its stages, e.g.
#   scripts/device.sh build tests probe:peer a2a:peer,nccl sanitize:ulysses-peer bench:ulysses-nvlink torch
# One-off experiments are not stages: their commands lie beside their results (results/README.md,
# "Stage names in these records", says where each former stage went).
#
# Logs go to $OUT/r/*.log, result files to $OUT/r/<topic>/ (the topics of results/<machine>/),
# all in $OUT/results.tar.gz, and a short summary last. The exit status is 0 when every step it
# ran exited 0; the summary names the others. XSTAGE_REQUIRE_GPU is exported as the machine's
# GPU count (at least 1): on a device run a GPU test that finds fewer GPUs than the machine has
# fails instead of skipping (tests/gpu/need_gpus.hpp).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/xstage-out}
R=$OUT/r
mkdir -p "$R"
if (($#)); then stages=("$@"); else stages=(build tests report sanitize probe a2a); fi
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
export NCCL_NVLS_ENABLE=0  # never NVLink multicast on shared machines
commit=$(cat COMMIT 2>/dev/null || git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
nccl_root=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
export XSTAGE_REQUIRE_GPU=$((ngpu > 1 ? ngpu : 1))
machine=h200
((ngpu > 1)) && machine=h200x$ngpu
B=build-dev
summary=()   # one line a timed step
failed=()    # the timed steps that did not exit 0: the script's exit status
digests=()   # the *-summary.txt files written, printed at the end in that order

# --- helpers ---------------------------------------------------------------------------------
note() { summary+=("$(printf '%-10s %-8s %s' "$1" "$2" "$3")"); }
timed() {  # name, timeout seconds, command...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$R/$name.log" 2>&1
  local rc=$?
  note "$name" "rc=$rc" "$((SECONDS - t0)) s  (log r/$name.log)"
  ((rc == 0)) || failed+=("$name")
  return $rc
}
digest() {  # name, then a command whose output is the step's few lines for the summary
  local name=$1; shift
  "$@" >"$R/$name-summary.txt" 2>&1
  digests+=("$R/$name-summary.txt")
}
clocks_start() {  # file: nvidia-smi's clocks and power every 200 ms, until clocks_stop
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,nounits -lms 200 \
    >"$1" 2>&1 &
  smi=$!
}
clocks_stop() { kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null; }
san() {  # name, compute-sanitizer tool, command...
  local name=$1 tool=$2; shift 2
  timed "$name" 200 compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 20 "$@"
}
test_counts() { grep -E "tests passed|tests failed|Skipped|Failed|PASSED|FAILED|SKIPPED" "$1" | tail -25; }
words() { echo "${1//,/ }"; }  # a stage argument's list, for `for`

# --- build, tests, report --------------------------------------------------------------------
stage_build() {
  mkdir -p "$B/nccl/lib"
  ln -sf "$nccl_root/lib/libnccl.so.2" "$B/nccl/lib/libnccl.so"
  ln -sfn "$nccl_root/include" "$B/nccl/include"
  timed build 420 env XSTAGE_BUILD_DIR=$B XSTAGE_NO_FUZZ=1 \
    XSTAGE_CMAKE_ARGS="-DXSTAGE_NCCL_ROOT=$PWD/$B/nccl -DXSTAGE_GIT_COMMIT=$commit" scripts/build.sh
}

stage_tests() {  # names: "" for every test (CPU and GPU with a CTest build), else GPU tests matching one
  local names=$1 pat=${1//,/|} name=tests limit=300 jobs=4
  [ -n "$names" ] && name=tests-${names//,/-} limit=420
  # VisibleGpu's CPU poller and clock calibration are timing measurements: one test at a time.
  [[ $pat == *Visible* ]] && jobs=1
  if [ -f "$B/CTestTestfile.cmake" ]; then
    local label=()
    [ -n "$pat" ] && label=(-L gpu -R "$pat")
    timed "$name" "$limit" ctest --test-dir $B "${label[@]}" --output-on-failure -j$jobs
  else
    local filter="*"
    [ -n "$pat" ] && filter="*${pat//|/*:*}*"
    timed "$name" "$limit" $B/xstage_gpu_tests --gtest_filter="$filter"
  fi
  digest "$name" test_counts "$R/$name.log"
}

stage_report() { timed report 180 bash -c "cd /tmp && $PWD/$X report"; }

# --- sanitize: one function a kernel family, each a few small checked runs --------------------
san_probe() {  # the probe's store kernels
  local small="--transport host --K 5 --V 100000 --G 0,2us --bursts 3 --quiet --bootstrap 0 -o /tmp/san"
  for tool in memcheck racecheck synccheck; do
    for store in v4 bulk; do
      san "san-$tool-$store" $tool $X probe $small --store $store --gap-kind mma --completion flag
    done
  done
  san san-memcheck-fence memcheck $X probe $small --store b32 --completion fence
}
san_a2a() {
  local small="a2a --backend emulated --ranks 3 --heads 6 --head-dim 72 -b 300000 -e 300000 -n 1 -w 0 --check"
  for tool in memcheck racecheck synccheck; do
    for pl in device host; do san "san-$tool-a2a-$pl" $tool $X $small --placement $pl; done
  done
}
san_attention() {  # both head dims, ragged sizes
  for tool in memcheck racecheck synccheck; do
    san "san-$tool-attn" $tool $X attn --B 2 --S 77 --S-kv 130 --H 3 --D 64 --check
    san "san-$tool-attn128" $tool $X attn --B 1 --S 130 --S-kv 65 --H 2 --D 128 --check
  done
}
san_moe() {  # the grouped GEMMs: every output store, split-K, the 64 x 80 L2 tile, N and K tails
  for tool in memcheck racecheck synccheck; do
    for st in staged bulk tma; do
      san "san-$tool-moe-$st" $tool $X moe-gemm --hidden 256 --inter 128 --counts 3,0,70,129,1 --routing-weights \
        --check --out-store $st
      # K = 6144 on few short experts: the heuristic splits L2's K in two (the split-K kernel and its reduce)
      san "san-$tool-moe-splitk-$st" $tool $X moe-gemm --hidden 256 --inter 6144 --counts 3,0,70,129,1 \
        --routing-weights --check --out-store $st
      # N tails (L1 N = 272, L2 N = 272: 256 + 16 columns) on a ragged K (136 = 2 k-blocks + 8); K below one
      # k-block (24 and 48) with N = 48 (a 64 x 256 tile's second warpgroup wholly past N); split-K on K = 6152
      san "san-$tool-moe-tail-$st" $tool $X moe-gemm --hidden 272 --inter 136 --counts 3,0,70,129,1 \
        --routing-weights --check --out-store $st
      san "san-$tool-moe-shortk-$st" $tool $X moe-gemm --hidden 48 --inter 24 --counts 3,0,70,129,1 --check \
        --out-store $st --tile-l1 m64n256 --tile-l2 m64n256
      san "san-$tool-moe-tail-splitk-$st" $tool $X moe-gemm --hidden 272 --inter 6152 --counts 3,0,70,1 --check \
        --out-store $st
    done
    # the ping-pong tile: ~300 tiles a GEMM, so every CTA's warpgroups take turns; partial n- and k-blocks
    san "san-$tool-moe-pingpong" $tool $X moe-gemm --hidden 1040 --inter 264 --counts 3,0,700,1290,1,900,1100 \
      --routing-weights --check --tile-l1 m128n128pp --tile-l2 m128n128pp
    # the tail split: 71 m-blocks of 128 x 256 tiles; L2 2 n-blocks (142 tiles: a tail of 10 on 132 SMs, split 4
    # ways), L1 6 n-blocks (426 = 3 x 132 + 30, split 4 ways); K tails (712 = 11 x 64 + 8; 272 = 4 x 64 + 16)
    san "san-$tool-moe-tail-split" $tool $X moe-gemm --hidden 272 --inter 712 --counts 3000,0,2500,3400 --check \
      --routing-weights --tile-l1 m128n256 --tile-l2 m128n256 --tail-splits 4
    # the 64 x 80 tile's partial n-block (272 = 3 x 80 + 32)
    san "san-$tool-moe-tail-narrow" $tool $X moe-gemm --hidden 272 --inter 136 --counts 1,0,65,127,0,3 --check \
      --tile-l2 m64n80
    # the 64 x 80 L2 tile (staged store, its warpgroups' narrow 40-column rest); then 40 tiles on K = 6144: 2 splits
    san "san-$tool-moe-narrow" $tool $X moe-gemm --hidden 640 --inter 192 --counts 1,0,65,127,0,3 --check \
      --tile-l2 m64n80
    san "san-$tool-moe-narrow-splitk" $tool $X moe-gemm --hidden 640 --inter 6144 --counts 3,0,70,129,1 --check \
      --tile-l2 m64n80
  done
  # a model's tail shape, hidden 2880 and inter 1400 (memcheck only: the racecheck of this size takes long)
  for st in staged bulk tma; do
    san "san-memcheck-moe-2880-$st" memcheck $X moe-gemm --hidden 2880 --inter 1400 --counts 3,0,70,129,1 \
      --routing-weights --check --out-store $st
  done
}
san_moe_layer() {  # host and device placement, every variant and schedule
  local small="moe --shape 512/256/8/2 --tokens 77 --routing zipf --check --check-tokens 2 --timeout 100"
  for tool in memcheck racecheck synccheck; do san "san-$tool-moel" $tool $X $small --ranks 2 --placement host; done
  san san-memcheck-moel-device memcheck $X $small --ranks 4 --placement device --tile m64n256
  # hidden and inter no multiple of any tile: 16 columns past the last 256-column n-block of L1 and of L2
  local odd="moe --shape 272/136/8/2 --tokens 77 --routing zipf --check --check-tokens 2 --timeout 100"
  for tool in memcheck racecheck synccheck; do san "san-$tool-moel-odd" $tool $X $odd --ranks 2 --placement host; done
  san san-memcheck-moel-odd-device memcheck $X $odd --ranks 2 --placement device --tile m128n256
}
san_duplex() {
  for tool in memcheck racecheck synccheck; do san "san-$tool-duplex" $tool $X duplex --path host --bytes 4MiB --reps 1; done
}
san_ulysses() {  # fused Ulysses attention: every store path, both kernels
  local small="ulysses --ranks 4 --heads 4 --seq 300 --check --check-rows 1 -n 1 -w 0 --max-seconds 0.001
    --flags lagged,at-exit --paced-rows 1,16"
  local stores=vector16,bulk,paced,paced-bulk,paced-warp
  for tool in memcheck racecheck synccheck; do
    san "san-$tool-ulysses" $tool $X $small --stores $stores --head-dim 64 --placement host
  done
  for tool in memcheck racecheck synccheck; do  # bulk and the producer's hand-over, several tiles a CTA
    san "san-$tool-ulysses-pb" $tool $X ulysses --ranks 4 --heads 4 --seq 4999 --check --check-rows 1 -n 1 -w 0 \
      --max-seconds 0.001 --stores bulk,paced-bulk,paced-warp --flags at-exit --paced-rows 1,16 --variants fused \
      --head-dim 128 --placement host
  done
  san san-memcheck-ulysses128 memcheck $X $small --stores $stores --head-dim 128 --placement device
  san san-memcheck-ulysses-mma memcheck $X $small --stores vector16,bulk,paced --head-dim 128 --placement host \
    --kernel mma
}
san_pipelined() {  # the pipelined Ulysses baseline: head and row chunks
  san san-memcheck-ulysses-pipelined memcheck $X ulysses --ranks 3 --heads 15 --seq 300 --variants pipelined \
    --chunks 1,2,5 --row-chunks 1,3 --check --check-rows 1 -n 1 -w 0 --max-seconds 0.001 --placement host
}
san_ulysses_peer() {  # one rank a GPU
  san san-memcheck-ulysses-peer memcheck $X ulysses --backend peer --heads 4 --seq 300 --check --check-rows 1 -n 1 \
    -w 0 --max-seconds 0.001 --stores vector16,bulk,paced,paced-bulk,paced-warp --timeout 30
}
stage_sanitize() {
  local families=${1:-probe,a2a}
  if [ "$families" = all ]; then
    families=probe,a2a,attention,moe,moe-layer,duplex,ulysses,pipelined
    ((ngpu > 1)) && families+=,ulysses-peer
  fi
  local f
  for f in $(words "$families"); do
    if declare -F "san_${f//-/_}" >/dev/null; then "san_${f//-/_}"; else note "san-$f" skipped "no such family"; failed+=("san-$f"); fi
  done
  digest sanitize grep -H "ERROR SUMMARY\|RACECHECK SUMMARY" "$R"/san-*.log
}

# --- probe, a2a --------------------------------------------------------------------------------
stage_probe() {  # the X-Stage: results/<machine>/probe (peer: the NVLink one, 2+ GPUs)
  local transports=${1:-host,local} name=probe
  [ "$transports" != host,local ] && name=probe-${transports//,/-}
  [[ $transports == *peer* ]] && nvidia-smi topo -m >"$R/topo.txt" 2>&1
  timed "$name" 300 $X probe --transport "$transports" --sweep quick -o "$R/$name"
  digest "$name" bash -c "tail -40 '$R/$name.log' | grep -E '==|R = |T0 =|burst_gap|completion_coupled|unbounded_async|onset'"
}

stage_a2a() {  # the all-to-all baseline: results/<machine>/a2a
  mkdir -p "$R/a2a"
  local b
  for b in $(words "${1:-emulated}"); do
    case $b in
      emulated)  # emulated ranks on one GPU
        timed a2a-check 120 $X a2a --backend emulated --ranks 8 --placement host -b 1M -e 64M -f 4 -n 3 -w 1 --check
        timed a2a-host 240 $X a2a --backend emulated --ranks 8 --placement host -b 1M -e 1G -f 2 -n 20 -w 5 \
          -o "$R/a2a/a2a-emulated.csv"
        timed a2a-device 120 $X a2a --backend emulated --ranks 8 --placement device -b 1M -e 1G -f 2 -n 20 -w 5 \
          -o "$R/a2a/a2a-emulated-device.csv"
        digest a2a-host bash -c "grep -E 'copy-engine-d2h|store-kernel|copy-engine' '$R/a2a-host.log' | tail -6" ;;
      peer)  # every GPU, one process
        timed a2a-peer 240 $X a2a --backend peer --placement device -b 1M -e 1G -f 2 -n 20 -w 5 --check \
          -o "$R/a2a/a2a-peer.csv"
        digest a2a-peer tail -4 "$R/a2a-peer.log" ;;
      nccl)  # every GPU, one process a rank
        timed a2a-nccl 240 $X launch -n "$ngpu" -- bash -c \
          "$PWD/$X a2a --backend nccl -b 1M -e 1G -f 2 -n 20 -w 5 --check -o $R/a2a/a2a-nccl-rank\$RANK.csv" ;;
      *) note "a2a-$b" skipped "no such backend"; failed+=("a2a-$b") ;;
    esac
  done
}

# --- bench: one function a topic, each writing to $R/<topic>/ as in results/<machine>/<topic>/ --
bench_simulator() {  # the simulator's speed: results/<machine>/simulator
  [ -x $B/bench_simulator ] && timed bench-sim 60 $B/bench_simulator
}
bench_attention() {  # attention forward beside cuDNN and flash (torch SDPA): section 3
  mkdir -p "$R/attention"
  timed attn-bench 300 python3 bench/attention_vs_sdpa.py --xstage $X --kernels auto,mma \
    --out "$R/attention/attention.json"
  digest attn tail -15 "$R/attn-bench.log"
}
bench_moe() {  # the grouped GEMMs beside torch._grouped_mm and cuBLAS (one expert; --ceilings): section 7
  mkdir -p "$R/moe"
  clocks_start "$R/moe/clocks-moe.csv"
  # MOE_BENCH_ARGS: e.g. --rows 128,256 for a shorter run
  timed moe-bench 500 python3 bench/moe_vs_torch.py --lib "$B/libxstage_moe.so" --check --rounds 7 \
    --commit "$commit" --compare-stores staged,bulk,tma --ceilings --out "$R/moe/moe-gemm.json" ${MOE_BENCH_ARGS:-}
  clocks_stop
  digest moe tail -12 "$R/moe-bench.log"
}
# Issue 39's development grid (bench/moe_grid.py: the seeded sample and the section-7 cells, one protocol),
# split over calls: MOE_GRID_FIRST / MOE_GRID_COUNT pick the cells, MOE_GRID_S the time it may start new ones;
# MOE_GRID_ARGS: more options (--split-kernel-only).
bench_moe_grid() {
  mkdir -p "$R/moe-grid"
  clocks_start "$R/moe-grid/clocks-moe-grid.csv"
  timed moe-grid "$(( ${MOE_GRID_S:-480} + 100 ))" python3 bench/moe_grid.py --lib "$B/libxstage_moe.so" \
    --commit "$commit" --first "${MOE_GRID_FIRST:-0}" --count "${MOE_GRID_COUNT:-0}" --budget-s "${MOE_GRID_S:-480}" \
    ${MOE_GRID_ARGS:-} \
    --out "$R/moe-grid/moe-grid-${MOE_GRID_FIRST:-0}.json"
  clocks_stop
  timed moe-grid-plot 60 python3 bench/plot_moe_grid.py --out "$R/moe-grid/moe-grid-${MOE_GRID_FIRST:-0}.png" \
    "$R/moe-grid/moe-grid-${MOE_GRID_FIRST:-0}.json"
  digest moe-grid tail -12 "$R/moe-grid-plot.log"
}
# Issue 39's short-K study: the ping-pong tile forced beside the rule and torch on the grid's cells past one
# wave with K <= 2048 (results/<machine>/moe/short-k/; MOE_SHORTK_S the time it may start new cells).
bench_moe_short_k() {
  local d=$R/moe/short-k
  mkdir -p "$d"
  clocks_start "$d/clocks-pp.csv"
  timed moe-short-k "$(( ${MOE_SHORTK_S:-300} + 100 ))" python3 bench/moe_pingpong_study.py \
    --lib "$B/libxstage_moe.so" --commit "$commit" --budget-s "${MOE_SHORTK_S:-300}" --out "$d/pingpong-study.json"
  clocks_stop
  timed moe-short-k-plot 60 python3 bench/plot_moe_pingpong.py "$d/pingpong-study.json" --out "$d/pingpong.png"
  digest moe-short-k tail -14 "$R/moe-short-k-plot.log"
}
# Issue 39's wave-quantisation study: the tail split (its caps) beside whole tiles and torch on the grid's
# GEMMs of 1-16 waves (results/<machine>/moe/tail-split/; MOE_TAIL_S the time it may start new cells,
# MOE_TAIL_SKIP the cells of its order a previous call measured).
bench_moe_tail() {
  local d=$R/moe/tail-split skip=${MOE_TAIL_SKIP:-0}
  mkdir -p "$d"
  clocks_start "$d/clocks-tail-$skip.csv"
  timed moe-tail "$(( ${MOE_TAIL_S:-360} + 100 ))" python3 bench/moe_tail_study.py --lib "$B/libxstage_moe.so" \
    --commit "$commit" --budget-s "${MOE_TAIL_S:-360}" --skip "$skip" --out "$d/tail-study-$skip.json"
  clocks_stop
  digest moe-tail tail -6 "$R/moe-tail.log"
}
# Issue 40's P-rank comparison (bench/moe_ep_torch.py, every GPU a rank; 2+ GPUs): the script's quick test,
# then the measurement, MOE_EP_ARGS added (the five shapes at T in {2048, 4096} a rank take ~10 minutes: split
# them over calls, e.g. MOE_EP_ARGS="--tokens 2048"); MOE_EP_VDEV=1 runs the all_to_all_vdev_2d side instead
# (a run of its own). Results in r/moe-torch/ (results/<machine>/moe-torch/).
bench_moe_ep() {
  if ((ngpu < 2)); then note bench-moe-ep skipped "needs 2+ GPUs (a GPU a rank)"; return; fi
  local d=$R/moe-torch tag=${MOE_EP_ARGS//[^a-z0-9]/}
  mkdir -p "$d"
  local run=(env PYTHONPATH=python XSTAGE_LIBRARY="$B/libxstage_torch.so" TORCH_SYMM_MEM_DISABLE_MULTICAST=1
             NVSHMEM_DISABLE_NVLS=1 torchrun --nproc-per-node "$ngpu" bench/moe_ep_torch.py)
  timed moe-ep-quick 120 "${run[@]}" --quick --out "$d/moe-ep-torch-quick.json"
  clocks_start "$d/clocks-moe-ep$tag.csv"
  if [ "${MOE_EP_VDEV:-0}" = 1 ]; then
    timed moe-ep 420 "${run[@]}" --vdev --out "$d/moe-ep-vdev$tag.json" ${MOE_EP_ARGS:-}
  else
    timed moe-ep 420 "${run[@]}" --out "$d/moe-ep-torch$tag.json" ${MOE_EP_ARGS:-}
  fi
  clocks_stop
  digest moe-ep tail -20 "$R/moe-ep.log"
}
bench_moe_layer() {  # the fused MoE layer's quick checked bench with per-tile traces: section 11's pictures
  local d=$R/moe-layer
  mkdir -p "$d"
  clocks_start "$d/clocks-moe-quick.csv"
  timed moel-bench 240 $X moe --shape qwen3-30b-a3b --ranks 2 --tokens 1024,4096 --routing zipf --check \
    --check-tokens 1 --bench --rounds 5 --trace "$d/trace-quick.csv" -o "$d/moe-quick.json"
  clocks_stop
  [ -f "$d/moe-quick.json" ] &&
    timed moel-plot 60 python3 bench/plot_moe_sweep.py "$d/moe-quick.json" --trace "$d/trace-quick.csv" --out "$d"
  digest moel grep -E "^T = |check:|interleaved /|model-guided /|unfused /|floor" "$R/moel-bench.log"
}
# The 84-configuration sweep (bench/moe_sweep.sh): host placement, then device, each configuration checked and
# timed in paired rounds, R probed once a placement: section 11's tables. It takes longer than one call: parts
# already in MOE_PARTS_FROM (default results/<machine>/moe-sweep/parts, the parts of earlier calls committed
# there) are skipped; MOE_SHAPES, MOE_P, MOE_PLACEMENTS, MOE_TOKENS, MOE_BUDGET_S pick a subset;
# MOE_BACKEND=peer or nccl on two GPUs (P = 2, device placement).
bench_moe_sweep() {
  local d=$R/moe-sweep parts_from=${MOE_PARTS_FROM:-results/$machine/moe-sweep/parts}
  mkdir -p "$d/parts"
  compgen -G "$parts_from/*.json" >/dev/null && cp "$parts_from"/*.json "$d/parts/"
  ((ngpu > 1)) && [ "${MOE_BACKEND:-emulated}" != emulated ] && export MOE_P=${MOE_P:-2}
  clocks_start "$d/clocks-moe-sweep.csv"
  timed moe-sweep 590 env XSTAGE="$X" MOE_BUDGET_S="${MOE_BUDGET_S:-520}" bench/moe_sweep.sh "$d"
  clocks_stop
  [ -f "$d/moe-sweep.json" ] &&
    timed moe-sweep-plot 60 python3 bench/plot_moe_sweep.py "$d/moe-sweep.json" --out "$d"
  digest moe-sweep bash -c "grep -E '^== |configurations|failed|error' '$R/moe-sweep.log' | tail -40"
}
bench_duplex() {  # both directions of each path at once: the rates the MoE model's profiles carry (section 11)
  mkdir -p "$R/duplex"
  local paths="host local" p cfg
  ((ngpu > 1)) && paths+=" peer"
  for p in $paths; do
    # blocks an SM, reader warps, loads in flight: 1 3 4 is the fused kernel's copy warps, the rest for comparison
    for cfg in "1 3 4" "1 3 8" "2 4 4" "4 4 8"; do
      set -- $cfg
      timed "duplex-$p-b$1-r$2-f$3" 60 $X duplex --path "$p" --blocks-per-sm "$1" --read-warps "$2" \
        --loads-in-flight "$3" --reps 7 -o "$R/duplex/duplex-$p-b$1-r$2-f$3.json"
    done
  done
  digest duplex bash -c "grep -h 'both directions' '$R'/duplex-*-b*.log"
}
# When stores become visible: per-burst issue and visible times and the stage's occupancy beside the model, host
# path (CPU polls), local (a second kernel polls) and, on 2+ GPUs, peer (GPU 1 polls): section 10. Bursts:
# enough to store 1.5 x the profile's Q. Relaxed markers (no fence): the issuer is not held to the drain, so the
# stage can fill towards Q.
bench_visible() {
  local d=$R/visible paths="host local" p json=()
  ((ngpu > 1)) && paths+=" peer"
  for p in $paths; do
    timed "visible-$p" 60 $X visible --path "$p" --K 132 --V 1MiB,8MiB --G 0,10us -o "$d/$p"
    json+=("$d/$p/visible.json")
    [ "$p" = local ] && continue  # a second kernel polls: no relaxed run
    timed "visible-$p-relaxed" 60 $X visible --path "$p" --K 132 --V 1MiB,8MiB --G 0 --markers relaxed \
      -o "$d/$p-relaxed"
    json+=("$d/$p-relaxed/visible.json")
  done
  local j
  for j in "${json[@]}"; do
    [ -f "$j" ] && timed "visible-plot-$(basename "$(dirname "$j")")" 60 python3 bench/plot_visible.py "$j" \
      --out "$(dirname "$j")/occupancy.png"
  done
  digest visible bash -c "grep -hE '^== |clocks:|measured:|note:|error|warning' '$R'/visible-*.log"
}
# Fused Ulysses: every variant, store path, order and flag timing, each configuration timed right after an
# attention-only run (paired). 31 rounds where they fit in 2 s a configuration (an odd count: the median is one
# round's value); at S = 4096 10 rounds left the median residual +-1 point.
u_all="--variants attention-only,sequential,fused,coupled --stores vector16,bulk,paced,paced-bulk,paced-warp
  --orders linear,rotated --flags lagged,at-exit -n 31 --max-seconds 2"
bench_ulysses() {  # the sequence sweep, S = 4k..128k, both placements (UPL), the GPU's clocks beside it: section 4
  mkdir -p "$R/ulysses"
  local pl
  for pl in ${UPL:-host device}; do
    clocks_start "$R/ulysses/clocks-ulysses-$pl.csv"
    timed "u-sweep-$pl" 280 $X ulysses --sweep --placement $pl $u_all -o "$R/ulysses/ulysses-$pl.json"
    clocks_stop
    digest "u-sweep-$pl" tail -9 "$R/u-sweep-$pl.log"
  done
}
bench_ulysses_long() {  # the host path's longest S with 15 paired rounds (the sweep fits 12 and 3 there): section 4
  mkdir -p "$R/ulysses"
  clocks_start "$R/ulysses/clocks-ulysses-long-host.csv"
  timed u-long 300 $X ulysses --seq 65536,131072 --placement host --variants attention-only,sequential,fused,coupled \
    --a2a copy-engine --stores vector16,bulk,paced-bulk,paced-warp --orders rotated --flags at-exit -n 15 \
    --max-seconds 30 -o "$R/ulysses/ulysses-long-host.json"
  clocks_stop
  digest u-long tail -5 "$R/u-long.log"
}
bench_ulysses_nvlink() {  # the sequence sweep over NVLink, P = every GPU, peer and nccl backends, checked: section 5
  mkdir -p "$R/ulysses"
  bench_sdpa_peer
  local nv_sweep="--sweep --placement device --profile results/h200x2/probe/profile-peer.json
    --variants attention-only,sequential,fused,coupled --stores vector16,bulk,paced --orders linear,rotated
    --check --check-rows 2 --timeout 20 --max-seconds 0.6"
  timed u-sweep-peer 240 $X ulysses --backend peer $nv_sweep -o "$R/ulysses/ulysses-peer.json"
  digest u-sweep-peer tail -9 "$R/u-sweep-peer.log"
  timed u-sweep-nccl 240 $X launch -n "$ngpu" -- $PWD/$X ulysses --backend nccl $nv_sweep \
    -o "$R/ulysses/ulysses-nccl.json"
  digest u-sweep-nccl tail -9 "$R/u-sweep-nccl.log"
}
bench_sdpa_peer() {
  timed u-sdpa-peer 200 python3 bench/ulysses_vs_sdpa.py --xstage $X --backend peer \
    --out "$R/ulysses/ulysses-vs-sdpa-peer.json"
  digest u-sdpa-peer tail -6 "$R/u-sdpa-peer.log"
}
bench_sdpa() {  # fused Ulysses against torch SDPA on the full problem: emulated ranks, and peer on 2+ GPUs
  mkdir -p "$R/ulysses"
  timed u-sdpa 300 python3 bench/ulysses_vs_sdpa.py --xstage $X --out "$R/ulysses/ulysses-vs-sdpa.json"
  digest u-sdpa tail -8 "$R/u-sdpa.log"
  ((ngpu > 1)) && bench_sdpa_peer
}
# The pipelined baseline (issue 20) beside sequential and fused, paired rounds: section 8. Parts: UPIPE="host
# device" by default on one GPU, "peer nccl" on more (P = every GPU; all four parts do not fit one 10-minute
# call). Each part first checks pipelined bit for bit at 4k and 16k (UPIPE_STEPS: check, sweep or both). Host and
# device: ours (attention-only, fused, the pipelined sweep) and the torch user's pipeline, processes alternating
# (bench/ulysses_pipeline_vs_torch.py; UPIPE_SEQ the lengths, UPIPE_ARGS more of its arguments). Peer and nccl:
# attention-only, sequential, pipelined (every version x the chunk sweep) and fused (the paced paths, both
# orders, flags at exit), S = 4k..128k; --floor-probe: the floor's R measured by the probe's quick sweep first.
u_pipe="--variants attention-only,sequential,pipelined,fused --stores paced-warp,paced-bulk,paced
  --orders rotated,linear --flags at-exit -n 31 --timeout 20"
bench_pipeline() {
  mkdir -p "$R/ulysses"
  local parts=${UPIPE:-host device} steps=" ${UPIPE_STEPS:-check sweep} " part run budget
  ((ngpu > 1)) && [ -z "${UPIPE:-}" ] && parts="peer nccl"
  for part in $parts; do
    case $part in
      host | device) run=("$X" ulysses --placement "$part"); budget=1.5 ;;
      peer) run=("$X" ulysses --backend peer --placement device); budget=0.6 ;;
      nccl) run=("$X" launch -n "$ngpu" -- "$PWD/$X" ulysses --backend nccl); budget=0.6 ;;
      *) note "u-pipe-$part" skipped "UPIPE part '$part': expected host, device, peer or nccl"; continue ;;
    esac
    [[ $steps == *" check "* ]] &&
      timed "u-pipe-check-$part" 150 "${run[@]}" --seq 4096,16384 --variants attention-only,sequential,pipelined \
        --check --check-rows 2 -n 3 --max-seconds 0.2 --timeout 20
    [[ $steps == *" sweep "* ]] || continue
    clocks_start "$R/ulysses/clocks-pipelined-$part.csv"
    if [[ $part == host || $part == device ]]; then
      timed "u-pipe-$part" 560 python3 bench/ulysses_pipeline_vs_torch.py --xstage "$X" --placement "$part" \
        --seq "${UPIPE_SEQ:-4096,8192,16384,32768}" --commit "$commit" ${UPIPE_ARGS:-} \
        --out "$R/ulysses/pipeline-vs-torch-$part.json"
    else
      timed "u-pipe-$part" 420 "${run[@]}" --sweep $u_pipe --max-seconds $budget --floor-probe \
        -o "$R/ulysses/ulysses-pipelined-$part.json" --summary-csv "$R/ulysses/ulysses-pipelined-$part.csv"
    fi
    clocks_stop
    digest "u-pipe-$part" tail -12 "$R/u-pipe-$part.log"
  done
}
stage_bench() {
  local t
  for t in $(words "${1:-simulator}"); do
    if declare -F "bench_${t//-/_}" >/dev/null; then "bench_${t//-/_}"; else note "bench-$t" skipped "no such topic"; failed+=("bench-$t"); fi
  done
}

# --- torch: the Python package (python/xstage) -------------------------------------------------
stage_torch() {  # install, tests on one GPU and on every GPU, README's example, the DiT bench: section 9
  mkdir -p "$R/torch"
  export PYTHONUNBUFFERED=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  local site=/tmp/xstage-site wheel src_pid
  rm -rf "$site" && mkdir -p "$site"
  # What the image lacks (diffusers, importlib_metadata) comes as wheels in .whl/ (see bench/dit_ulysses.py).
  if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site/deps" .whl/*.whl \
      >"$R/torch-deps.log" 2>&1
  fi
  # `pip install .` builds the library with scikit-build-core (build/py/). A wheel built beside the
  # snapshot (prebuilt/xstage-*.whl) is installed instead, and the source build then runs beside the
  # tests as a check of the build machinery (its wheel unused; done before the benchmark).
  wheel=$(compgen -G "prebuilt/xstage-*.whl" | head -1)
  local src_build="python3 -m pip wheel -v --no-deps --no-build-isolation --no-index -w /tmp/xstage-wheel ."
  if [ -n "$wheel" ]; then
    (timeout 400 $src_build >"$R/torch-src-build.log" 2>&1; echo "rc=$?" >>"$R/torch-src-build.log") &
    src_pid=$!
    timed torch-install 120 python3 -m pip install --no-index --no-deps --target "$site/xs" "$wheel"
  else
    timed torch-install 400 python3 -m pip install -v --no-index --no-deps --no-build-isolation --target "$site/xs" .
  fi
  export PYTHONPATH=$site/xs:$site/deps${PYTHONPATH:+:$PYTHONPATH}
  timed torch-tests 240 python3 -m pytest -q -p no:cacheprovider --timeout 150 python/tests
  timed torch-tests-x$ngpu 420 torchrun --nproc-per-node "$ngpu" -m pytest -q -p no:cacheprovider --timeout 150 \
    python/tests/test_gpu_ulysses.py python/tests/test_gpu_moe_ep.py
  awk '/^## From PyTorch/{f=1} f && /^```python/{p=1; next} p && /^```/{exit} p' README.md >/tmp/readme_example.py
  timed torch-readme 120 torchrun --nproc-per-node "$ngpu" /tmp/readme_example.py
  if [ -n "$wheel" ]; then
    wait "$src_pid"
    note torch-src-build "$(tail -1 "$R/torch-src-build.log")" "(log r/torch-src-build.log)"
  fi
  clocks_start "$R/torch/clocks-dit.csv"
  timed dit 300 torchrun --nproc-per-node "$ngpu" bench/dit_ulysses.py --commit "$commit" --out "$R/torch/dit-step.json"
  clocks_stop
  digest torch bash -c "grep -hE '[0-9]+ (passed|failed|skipped|error)' '$R'/torch-tests*.log | tail -4
    grep -E '\^2 \(' '$R/dit.log'"
}

# --- main --------------------------------------------------------------------------------------
known="build tests report sanitize probe a2a bench torch"
for s in "${stages[@]}"; do
  if [[ " $known " != *" ${s%%:*} "* ]]; then
    echo "device.sh: no stage '${s%%:*}' (stages: $known; results/README.md says where former ones went)" >&2
    exit 2
  fi
done

{
  echo "date: $(date -u +%FT%TZ)"; echo "commit: $commit"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu --format=csv
  nvcc --version | tail -2; cmake --version | head -1
} >"$R/env.txt" 2>&1

# The build runs first wherever it is named; without it the snapshot's prebuilt binaries, when there are some.
if [[ " ${stages[*]} " == *" build "* ]]; then
  stage_build
elif [ -x prebuilt/xstage ]; then
  B=prebuilt
fi
export LD_LIBRARY_PATH=$nccl_root/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
X=$B/xstage
export XSTAGE_CLI=$PWD/$X  # the command the tests call

for s in "${stages[@]}"; do
  [ "${s%%:*}" = build ] && continue
  arg=
  [[ $s == *:* ]] && arg=${s#*:}
  "stage_${s%%:*}" "$arg"
done

tar -czf "$OUT/results.tar.gz" -C "$OUT" r
{
  echo "== xstage device run, commit $commit =="
  sed -n 3,4p "$R/env.txt"
  printf '%s\n' "${summary[@]}"
  for f in "${digests[@]}"; do [ -f "$f" ] && cat "$f"; done
  if ((${#failed[@]})); then echo "failed: ${failed[*]}"; else echo "every step exited 0"; fi
} | tee "$OUT/summary.txt"
((${#failed[@]} == 0))
