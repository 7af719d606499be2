#!/usr/bin/env bash
# Builds xstage into build/ (or $XSTAGE_BUILD_DIR). On a fresh Debian/Ubuntu
# machine it first installs the packages the build needs, when it can (root or sudo).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${XSTAGE_BUILD_DIR:-build}

need=()
[ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
[ -f /usr/include/CLI/CLI.hpp ] || need+=(libcli11-dev)
[ -f /usr/include/fmt/format.h ] || need+=(libfmt-dev)
[ -d /usr/include/gtest ] || need+=(libgtest-dev)
[ -d /usr/include/benchmark ] || need+=(libbenchmark-dev)
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
# The parsers' fuzz targets (scripts/fuzz.sh) need clang with libFuzzer.
# XSTAGE_NO_FUZZ=1 leaves them out (a machine without the package registry,
# such as the lent GPU machine; CI builds and runs them).
fuzz=1
[ "${XSTAGE_NO_FUZZ:-0}" = 1 ] && fuzz=0
if ((fuzz)); then
  command -v clang++ >/dev/null || need+=(clang)
  compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null || need+=(libclang-rt-dev)
fi
if ((${#need[@]})); then
  echo "build.sh: installing ${need[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}"
fi
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || {
  echo "build.sh: nvcc not found: install the CUDA toolkit (13.x) and put /usr/local/cuda/bin on PATH" >&2
  exit 1
}
export PATH=$PATH:/usr/local/cuda/bin

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_FUZZ_SMOKE=$((fuzz)) ${XSTAGE_CMAKE_ARGS:-} \
  >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
# The fuzz targets, which the CPU test fuzz_smoke runs (a project of their own: clang, no nvcc).
if ((fuzz)); then XSTAGE_FUZZ_BUILD_DIR="$build_dir/fuzz" scripts/fuzz.sh build; fi
