#!/bin/bash
# per-tile end times of the fused kernel (diagnostics build, XSTAGE_ULYSSES_EXPERIMENT=512): 3 processes on
# device buffers, 1 on host buffers; every traced launch written once, with its index
set -u
mkdir -p /tmp/sn
xz -dkf .device/xstage_diag.xz; X=$PWD/.device/xstage_diag
cd /tmp/sn
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:/usr/local/cuda/lib64
R=/tmp/o/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $R/env.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 500 > $R/clocks.csv &
CP=$!
export XSTAGE_ULYSSES_EXPERIMENT=512
for rep in 1 2 3; do
  XSTAGE_TILE_TRACE=$R/tiles-device-$rep.csv $X ulysses --placement device --seq 4096,8192,16384,32768,65536,131072 --variants attention-only,fused --stores vector16 --orders linear --flags at-exit -n 3 --max-seconds 1 --timeout 30 -o $R/u-device-$rep.json > $R/u-device-$rep.log 2>&1
  echo "device $rep rc $?"
done
XSTAGE_TILE_TRACE=$R/tiles-host-1.csv $X ulysses --placement host --seq 4096,16384,65536 --variants attention-only,fused --stores vector16 --orders linear --flags at-exit -n 3 --max-seconds 1 --timeout 30 -o $R/u-host-1.json > $R/u-host-1.log 2>&1
echo "host rc $?"
XSTAGE_TILE_TRACE=$R/refused.csv $X ulysses --placement device --seq 4096 --variants fused --stores paced-warp -n 3 > $R/refused.log 2>&1
echo "paced-warp with the tile trace: rc $? (expected non-zero)"; tail -1 $R/refused.log
kill $CP
gzip $R/tiles-*.csv
tar -czf $OUT/res.tgz -C /tmp/o r
