#!/usr/bin/env bash
# Exports the git index (HEAD plus what is staged; not unstaged or untracked
# work in progress) into .device/snapshot, for a device run that must not pick
# up half-written files. Prints the snapshot's commit.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=$(git write-tree)
rm -rf .device/snapshot
mkdir -p .device/snapshot
git archive "$rev" | tar -x -C .device/snapshot
commit=$(git rev-parse --short=12 HEAD)
if [ "$rev" != "$(git rev-parse HEAD^{tree})" ]; then commit="$commit-dirty"; fi
echo "$commit" > .device/snapshot/COMMIT
echo "$commit"
