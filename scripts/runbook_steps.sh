# Sourced by the one-off device runbooks that live with their results (results/<machine>/<topic>/run.sh): steps
# bounded by what is left of one call's time, each step's log under $OUT/r, and the results packed after every
# step, so that a call cut short still returns what it measured.
#   usage (after `cd` to the repository root):  TOPIC=<folder under $OUT/r> . scripts/runbook_steps.sh
# Sets PATH (the device image's torch and CUDA), OUT, R, commit, steps (the steps' status file) and the
# deadline from DEADLINE_S (default 540); defines left, pack and step.
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/xstage-out}
R=$OUT/r
mkdir -p "$R/$TOPIC"
deadline=$((SECONDS + ${DEADLINE_S:-540}))
commit=$(cat COMMIT 2>/dev/null || git rev-parse --short=12 HEAD)
steps=$R/$TOPIC/steps.txt
left() { echo $((deadline - SECONDS)); }
pack() { tar -czf "$OUT/results.tar.gz" -C "$OUT" r; }
step() {  # name, timeout seconds, command...: log r/<name>.log; status and time in the steps file
  local name=$1 limit=$2 t0=$SECONDS; shift 2
  ((limit > $(left))) && limit=$(left)
  if ((limit < 10)); then echo "$name skipped: no time left" >>"$steps"; return; fi
  timeout "$limit" "$@" >"$R/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0)) s (limit $limit s)" >>"$steps"
  pack
}
echo "commit $commit, $(date -u +%FT%TZ)" >"$steps"
