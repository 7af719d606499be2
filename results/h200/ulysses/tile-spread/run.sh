#!/bin/bash
# per-tile end times of the fused kernel (diagnostics build, XSTAGE_ULYSSES_EXPERIMENT=512)
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
for pl in device host; do
  seqs=4096,8192,16384,32768,65536,131072
  [ $pl = host ] && seqs=4096,16384,65536
  for st in vector16; do
    XSTAGE_TILE_TRACE=$R/tiles-$pl-$st.csv $X ulysses --placement $pl --seq $seqs --variants attention-only,fused --stores $st --orders linear --flags at-exit -n 3 --max-seconds 1 --timeout 30 -o $R/u-$pl-$st.json > $R/u-$pl-$st.log 2>&1
    echo "$pl $st rc $?"
  done
done
kill $CP
tar -czf $OUT/res.tgz -C /tmp/o r
