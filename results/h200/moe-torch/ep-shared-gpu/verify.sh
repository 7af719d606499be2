#!/usr/bin/env bash
# Verification after the regex fix: the one-process prepare, then the expert-parallel pytest as two processes on one GPU.
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH PYTHONPATH=$PWD/python XSTAGE_LIBRARY=$PWD/build-dev/libxstage_torch.so XSTAGE_REQUIRE_GPU=1
L=$OUT/r; mkdir -p $L
echo "== one process"; LD_PRELOAD=$PWD/.carry/libsegv_bt.so timeout 60 python3 .carry/diag_ep.py > $L/diag-one.log 2>&1; echo rc=$?; tail -5 $L/diag-one.log
echo "== two processes on one GPU"; nvidia-smi --query-gpu=clocks.sm,power.draw,driver_version --format=csv > $L/smi.txt
t0=$SECONDS; XSTAGE_TEST_SHARE_GPU=1 timeout 180 python3 -m torch.distributed.run --nproc-per-node 2 -m pytest -v -p no:cacheprovider -x -rs python/tests/test_gpu_moe_ep.py > $L/pytest-moe-ep-shared.log 2>&1; echo rc=$? $((SECONDS-t0)) s
grep -E "PASSED|FAILED|SKIPPED|ERROR|passed|failed|Error" $L/pytest-moe-ep-shared.log | tail -40
