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
# XSTAGE_NO_FUZZ=1 leaves them out. Outside CI, a machine that cannot install
# them (no package registry, as on the lent GPU machine) builds without them
# and says so; in CI (CI=true) that is an error.
fuzz=1
[ "${XSTAGE_NO_FUZZ:-0}" = 1 ] && fuzz=0
fuzz_need=()
if ((fuzz)); then
  command -v clang++ >/dev/null || fuzz_need+=(clang)
  compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null || fuzz_need+=(libclang-rt-dev)
fi
# The Python package's tests (CTest python_tests: python/tests) need a Python
# with torch (>= 2.6) and pytest. A python3 that has them is used as it is
# (the GPU machine's, with its venv on PATH); else a virtual environment is
# made once per machine, outside the build tree, and reused: torch 2.11 from
# PyPI with its CUDA libraries, ~4.5 GB, about 2 minutes the first time.
# XSTAGE_TORCH_INDEX names another index (e.g. the CPU-only wheels where they
# can be reached); XSTAGE_NO_PYTHON=1 leaves the Python tests out, and so
# does a machine outside CI where the environment cannot be made (saying so).
python_tests=1
[ "${XSTAGE_NO_PYTHON:-0}" = 1 ] && python_tests=0
has_torch='import torch, pytest; assert tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 6)'
py_need=()
if ((python_tests)) && ! python3 -c "$has_torch" 2>/dev/null; then
  python3 -c "import venv, ensurepip" 2>/dev/null || py_need+=(python3-venv)
fi
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
# The optional packages (fuzz targets, the Python tests' venv) are left out
# with a word where they cannot be installed outside CI; the build's own
# packages are required everywhere.
optional=("${fuzz_need[@]}" "${py_need[@]}")
if ((${#need[@]} + ${#optional[@]})); then
  echo "build.sh: installing ${need[*]} ${optional[*]}"
  timeout 180 $sudo apt-get update -qq -o Acquire::Retries=0 || true  # no registry: fails below, naming the packages
  if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" "${optional[@]}"; then
    if ((${#optional[@]})) && [ "${CI:-}" != true ] &&
      { ((${#need[@]} == 0)) || DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}"; }; then
      if ((${#fuzz_need[@]})); then
        echo "build.sh: could not install ${fuzz_need[*]}: building without the fuzz targets (fuzz_smoke left out)"
        fuzz=0
      fi
      if ((${#py_need[@]})); then
        echo "build.sh: could not install ${py_need[*]}: building without the Python tests"
        python_tests=0
      fi
    else
      echo "build.sh: could not install ${need[*]} ${optional[*]}" >&2
      exit 1
    fi
  fi
fi
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || {
  echo "build.sh: nvcc not found: install the CUDA toolkit (13.x) and put /usr/local/cuda/bin on PATH" >&2
  exit 1
}
export PATH=$PATH:/usr/local/cuda/bin

py=""
if ((python_tests)); then
  if python3 -c "$has_torch" 2>/dev/null; then
    py=$(command -v python3)
  else
    py_env=${XSTAGE_PY_ENV:-$HOME/.cache/xstage/py-torch-2.11.0}
    if ! "$py_env/bin/python" -c "$has_torch" 2>/dev/null; then
      echo "build.sh: making $py_env (torch, pytest) for the Python package's tests"
      rm -rf "$py_env"
      if python3 -m venv "$py_env" &&
        "$py_env/bin/python" -m pip install -q --disable-pip-version-check \
          ${XSTAGE_TORCH_INDEX:+--index-url "$XSTAGE_TORCH_INDEX"} torch==2.11.0 &&
        "$py_env/bin/python" -m pip install -q --disable-pip-version-check pytest numpy; then
        :
      elif [ "${CI:-}" != true ]; then
        echo "build.sh: could not make $py_env (no package registry?): building without the Python tests"
        rm -rf "$py_env"
        python_tests=0
      else
        echo "build.sh: could not make $py_env for the Python tests" >&2
        exit 1
      fi
    fi
    ((python_tests)) && py=$py_env/bin/python
  fi
fi
# cuobjdump, for the test that reads the GEMM kernels' SASS (scripts/check_sass_loops.py): the CUDA toolkit's
# where it has one (the GPU machine), else NVIDIA's wheels (with nvdisasm, which it runs) in the tests' Python
# (CI: required there).
has_wheel='import glob, sysconfig, sys; sys.exit(not glob.glob(sysconfig.get_paths()["purelib"] + "/nvidia/*/bin/cuobjdump"))'
if ! command -v cuobjdump >/dev/null && ! { [ -n "$py" ] && "$py" -c "$has_wheel"; }; then
  if [ -n "$py" ] && "$py" -m pip install -q --disable-pip-version-check "nvidia-cuda-cuobjdump>=13,<14" \
    "nvidia-cuda-nvdisasm>=13,<14"; then
    :
  elif [ "${CI:-}" = true ]; then
    echo "build.sh: no cuobjdump for the SASS test (nor a Python to install NVIDIA's wheels into)" >&2
    exit 1
  else
    echo "build.sh: no cuobjdump (nor its wheel): the SASS test will be skipped"
  fi
fi

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXSTAGE_FUZZ_SMOKE=$((fuzz)) -DXSTAGE_PYTHON="$py" \
  ${XSTAGE_CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
# The fuzz targets, which the CPU test fuzz_smoke runs (a project of their own: clang, no nvcc).
if ((fuzz)); then XSTAGE_FUZZ_BUILD_DIR="$build_dir/fuzz" scripts/fuzz.sh build; fi
