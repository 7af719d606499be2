#!/usr/bin/env bash
# Each shared library given exports its C ABI (xstage_*) and nothing else: the CPU test capi_exports
# (CMakeLists.txt). usage: scripts/check_exports.sh LIB.so [LIB.so ...]
set -uo pipefail
status=0
for lib in "$@"; do
  syms=$(nm -D --defined-only "$lib" | awk 'NF == 3 {print $3}') || { echo "$lib: nm failed"; exit 2; }
  if ! grep -q '^xstage_' <<<"$syms"; then
    echo "$lib: exports no xstage_ function; expected its C ABI"
    status=1
  fi
  other=$(grep -v '^xstage_' <<<"$syms")
  if [ -n "$other" ]; then
    echo "$lib: exports $(wc -l <<<"$other") symbols beside its C ABI, e.g. $(head -3 <<<"$other" | tr '\n' ' ')"
    echo "  expected only xstage_* (src/capi/exports.map)"
    status=1
  fi
done
exit $status
