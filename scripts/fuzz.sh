#!/usr/bin/env bash
# The parsers' fuzz targets (fuzz/): libFuzzer with ASan + UBSan, built with
# clang into build-fuzz/ (or $XSTAGE_FUZZ_BUILD_DIR); no nvcc needed.
#   scripts/fuzz.sh build                      build the targets
#   scripts/fuzz.sh smoke [SECONDS]            each target SECONDS (default 10) on the committed corpus; CI
#   scripts/fuzz.sh campaign SECONDS [NAME..]  each target (or those named) SECONDS, one at a time, one process;
#                                              new inputs are merged into fuzz/corpus/NAME
# A crash, a sanitizer report, an input slower than 10 s or an exception other
# than xstage::Error stops the run with a non-zero exit and leaves the input in
# $build/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${XSTAGE_FUZZ_BUILD_DIR:-build-fuzz}
targets=(units samples_csv schedule_csv profile_json npy ulysses_report moe_sweep profile_file)

build_targets() {
  command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (scripts/build.sh installs it)" >&2; exit 1; }
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S fuzz -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" >/dev/null
  cmake --build "$build" -j "$(nproc)"
}

run_target() {  # name seconds corpus-to-write
  local name=$1 seconds=$2 scratch=$3
  mkdir -p "$build/artifacts" "$scratch"
  echo "fuzz.sh: $name for ${seconds}s"
  local extra=()
  # The profile at size, through the file reader: inputs up to 4 MiB from the
  # start (-len_control=0), not grown slowly from a few bytes.
  [ "$name" = profile_file ] && extra=(-max_len=4194304 -len_control=0)
  "$build/fuzz_$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 "${extra[@]}" \
    -print_final_stats=1 -artifact_prefix="$build/artifacts/$name-" "$scratch" "fuzz/corpus/$name" \
    2>"$build/fuzz-$name.log" || { tail -40 "$build/fuzz-$name.log" >&2; return 1; }
  grep -E "^stat::number_of_executed_units|^Done" "$build/fuzz-$name.log" | tr '\n' ' '
  echo
}

mode=${1:-smoke}
case $mode in
  build) build_targets ;;
  smoke)
    build_targets
    seconds=${2:-10}
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    for t in "${targets[@]}"; do run_target "$t" "$seconds" "$scratch/$t"; done
    ;;
  campaign)
    build_targets
    seconds=${2:?seconds per target}
    shift 2
    (($#)) && targets=("$@")
    for t in "${targets[@]}"; do
      scratch="$build/campaign/$t"
      run_target "$t" "$seconds" "$scratch"
      # Keep what found new coverage, minimised, beside the seeds.
      "$build/fuzz_$t" -merge=1 "fuzz/corpus/$t" "$scratch" 2>>"$build/fuzz-$t.log" >/dev/null
    done
    ;;
  *) echo "usage: scripts/fuzz.sh build | smoke [SECONDS] | campaign SECONDS [NAME...]" >&2; exit 2 ;;
esac
