#!/usr/bin/env bash
# Exports the git index (HEAD plus what is staged; not unstaged or untracked
# work in progress) into .device/snapshot, for a device run that must not pick
# up half-written files. Prints the snapshot's commit.
#   scripts/snapshot.sh [--prebuilt]
# --prebuilt also builds the command, the GPU tests and the libraries (the
# bench's libxstage_moe.so, the Python package's libxstage_torch.so for
# XSTAGE_LIBRARY) here (build-device/, the
# same nvcc 13.0 and sm_90a code as the device machine) and puts them in
# .device/snapshot/prebuilt/, so a device run can skip its build stage. It
# refuses when the compiled sources in the working tree differ from the index:
# the binaries must be built from exactly the snapshot's sources.
set -euo pipefail
cd "$(dirname "$0")/.."
prebuilt=0
[ "${1:-}" = --prebuilt ] && prebuilt=1
rev=$(git write-tree)
commit=$(git rev-parse --short=12 HEAD)
if [ "$rev" != "$(git rev-parse HEAD^{tree})" ]; then commit="$commit-dirty"; fi
if ((prebuilt)); then
  compiled=(src include tests CMakeLists.txt 'bench/*.cpp')  # what the binaries are built from
  if ! git diff --quiet -- "${compiled[@]}" ||
    [ -n "$(git ls-files --others --exclude-standard -- "${compiled[@]}")" ]; then
    echo "snapshot.sh --prebuilt: the working tree differs from the index (stage or stash it first)" >&2
    exit 1
  fi
fi
rm -rf .device/snapshot
mkdir -p .device/snapshot
git archive "$rev" | tar -x -C .device/snapshot
echo "$commit" > .device/snapshot/COMMIT
if ((prebuilt)); then
  export PATH=$PATH:/usr/local/cuda/bin
  cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_GIT_COMMIT="$commit" >/dev/null
  cmake --build build-device -j "$(nproc)" --target xstage_cli xstage_gpu_tests xstage_moe xstage_torch >&2
  mkdir -p .device/snapshot/prebuilt
  cp build-device/xstage build-device/xstage_gpu_tests build-device/libxstage_moe.so build-device/libxstage_torch.so \
    .device/snapshot/prebuilt/
fi
echo "$commit"
