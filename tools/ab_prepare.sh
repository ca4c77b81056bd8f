#!/usr/bin/env bash
# Export the packages of git revision REV into ab_old/ (git-ignored) for tools/ab_bench.sh.
set -euo pipefail
REV=${1:?usage: ab_prepare.sh REV}
cd "$(dirname "$0")/.."
rm -rf ab_old && mkdir ab_old
git archive "$REV" packages integration | tar -x -C ab_old
git rev-parse --short=12 "$REV" > ab_old/REV
echo "ab_old/ = $(cat ab_old/REV) ($(du -sh ab_old | cut -f1))"
