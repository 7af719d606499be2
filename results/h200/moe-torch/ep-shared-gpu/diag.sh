#!/usr/bin/env bash
# Diagnostic only: where xstage_torch_moe_ep_prepare segfaults (run from the repository root after the build).
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH PYTHONPATH=$PWD/python XSTAGE_LIBRARY=$PWD/build-dev/libxstage_torch.so XSTAGE_REQUIRE_GPU=1
L=$OUT/r; mkdir -p $L
symb() { grep -o 'libxstage_torch.so(+0x[0-9a-f]*)' "$1" | sed 's/.*(+\(0x[0-9a-f]*\))/\1/' | xargs -r addr2line -f -C -i -e build-dev/libxstage_torch.so > "$1.sym" 2>&1; head -60 "$1.sym"; }
echo "== one process"; LD_PRELOAD=$PWD/.carry/libsegv_bt.so timeout 60 python3 .carry/diag_ep.py > $L/diag-one.log 2>&1; echo rc=$?; tail -40 $L/diag-one.log; symb $L/diag-one.log
command -v gdb && timeout 90 gdb -q -batch -ex run -ex bt --args python3 .carry/diag_ep.py > $L/diag-gdb.log 2>&1; tail -40 $L/diag-gdb.log 2>/dev/null
echo "== two processes on one GPU"; XSTAGE_TEST_SHARE_GPU=1 LD_PRELOAD=$PWD/.carry/libsegv_bt.so timeout 240 python3 -m torch.distributed.run --nproc-per-node 2 -m pytest -q -p no:cacheprovider -p no:faulthandler -x -rs python/tests/test_gpu_moe_ep.py > $L/diag-shared.log 2>&1; echo rc=$?; grep -v "^\s*$" $L/diag-shared.log | grep -v "site-packages" | tail -60; symb $L/diag-shared.log
