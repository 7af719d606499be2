#!/bin/bash
# repeat of the tile trace: 3 processes, device buffers, vector16 (perf-log f18)
set -u
rm -rf /tmp/sn && mkdir -p /tmp/sn && tar -C /tmp/sn -xJf .device/snap.tar.xz
xz -dkf .device/xstage_diag.xz; X=$PWD/.device/xstage_diag
cd /tmp/sn/snapshot
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:/usr/local/cuda/lib64
R=/tmp/o/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $R/env.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 500 > $R/clocks.csv &
CP=$!
export XSTAGE_ULYSSES_EXPERIMENT=512
for rep in 1 2 3; do
  XSTAGE_TILE_TRACE=$R/tiles-device-vector16-$rep.csv $X ulysses --placement device --seq 4096,8192,16384,32768,65536,131072 --variants attention-only,fused --stores vector16 --orders linear --flags at-exit -n 3 --max-seconds 1 --timeout 30 -o $R/u-device-vector16-$rep.json > $R/u-device-vector16-$rep.log 2>&1
  echo "rep $rep rc $?"
done
kill $CP
gzip $R/tiles-*.csv
tar -czf $OUT/res.tgz -C /tmp/o r
