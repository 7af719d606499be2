#!/usr/bin/env bash
# The store paths before the redesign (base: adb5037's device code) and after it with the 32-bit walks at the
# kernels' end (fix), alternating round by round, S = 4096, both placements.
set -u
tar -C .abtest -xJf .abtest/bins.tar.xz
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
nccl=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH=$nccl:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/ab-env.txt
for round in 1 2 3 4 5; do
  for bin in base fix; do
    for pl in device host; do
      .abtest/xstage-$bin ulysses --seq 4096 --placement $pl --variants attention-only,fused \
        --stores vector16,bulk,paced-bulk,paced-warp --orders rotated --flags at-exit -n 31 --max-seconds 2 \
        -o $OUT/ab-$bin-$pl-$round.json > $OUT/ab-$bin-$pl-$round.log 2>&1 || echo "FAIL $bin $pl $round"
    done
  done
done
cd $OUT && tar -czf ab.tar.gz ab-* && rm -f ab-*.json ab-*.log
