#!/usr/bin/env bash
# Builds the package's wheel (libxstage_torch.so inside) into DIR, here, for a
# GPU machine that should not spend its time compiling: scripts/device.sh's
# torch stage installs prebuilt/xstage-*.whl when the snapshot has one.
#   python/make_wheel.sh [DIR]        (default dist/; e.g. .device/snapshot/prebuilt)
# Uses the Python that scripts/build.sh made (torch, pytest), adding
# scikit-build-core to it, and XSTAGE_CMAKE_ARGS (ccache launchers) as CMAKE_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
py=${XSTAGE_PY_ENV:-$HOME/.cache/xstage/py-torch-2.11.0}/bin/python
[ -x "$py" ] || { echo "make_wheel.sh: $py not found: run scripts/build.sh first (or set XSTAGE_PY_ENV)" >&2; exit 1; }
"$py" -c "import scikit_build_core" 2>/dev/null || "$py" -m pip install -q --disable-pip-version-check scikit-build-core
export PATH=$PATH:/usr/local/cuda/bin
mkdir -p "$out"
CMAKE_ARGS="${XSTAGE_CMAKE_ARGS:-}" "$py" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
  -w "$out" .
ls "$out"/xstage-*.whl
