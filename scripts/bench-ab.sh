#!/usr/bin/env bash
# The A/B bootstrap benchmark (`make bench-ab REF=<git ref>`): builds REF
# (from a clean `git worktree` of it in a temporary directory) and the
# working tree, runs their bootstraps alternately on the same devnet worlds
# (a fresh devnet per run, same shape and seed, run by the working tree's
# binary) and prints, per shape, each pair's values and B/A ratios and
# their medians: CPU-µs per record of the serve process (from /proc, when
# the bootstrap completes and at steady state), peak RSS (VmHWM), and the
# data dir's bytes as left by serve and after a restart, and its peak
# during the bootstrap over 1.2x the compacted store + 64 MiB. A = REF, B = the
# working tree. See bench/system/ab.go.
#
# The machine may be shared: CPU-seconds per record, in ratios from one
# sitting, are what counts, not wall times or absolute figures.
#
#   REF=main scripts/bench-ab.sh                 # 3 pairs of 2000x200 and 20000x10
#   REF=main QUICK=1 scripts/bench-ab.sh         # smoke: 1 pair of 300x50
#   REF=HEAD~1 RUNS=5 SHAPES=2000x200 scripts/bench-ab.sh
#   REF=HEAD B_ARGS="--verify off" scripts/bench-ab.sh   # one side's serve flags
#
# Before the pairs each side bootstraps the first shape WARMUPS times
# (default 1; 0 with QUICK=1), measured and discarded: the first run of a
# sitting is often slow, and it would always be A's.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
REF=${REF:?"set REF to the git ref to compare against, e.g. REF=main"}
if [ "${QUICK:-0}" = 1 ]; then
  : "${RUNS:=1}" "${SHAPES:=300x50,1000x5}" "${WORKERS:=20}" "${WARMUPS:=0}"
fi

commit=$(git rev-parse --verify --quiet "$REF^{commit}") || {
  echo "bench-ab: REF=$REF is not a commit in this repository" >&2
  exit 2
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/backstream-bench-ab.XXXXXX")
cleanup() {
  git worktree remove --force "$tmp/ref" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "bench-ab: building A = $REF ($commit) in $tmp/ref" >&2
git worktree add --detach --quiet "$tmp/ref" "$commit"
(cd "$tmp/ref" && $GO build -o "$tmp/A" ./cmd/backstream)
# The reference must be exactly REF: no local change in its build.
if [ -n "$(git -C "$tmp/ref" status --porcelain)" ] ||
  $GO version -m "$tmp/A" | grep -q 'vcs.modified=true'; then
  echo "bench-ab: the build of REF=$REF is dirty (the worktree changed or the binary says vcs.modified=true); refusing to measure it" >&2
  git -C "$tmp/ref" status --short >&2
  exit 1
fi

echo "bench-ab: building B = the working tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ', with uncommitted changes'))" >&2
$GO build -o "$tmp/B" ./cmd/backstream
$GO build -o "$tmp/bench" ./bench/system

# In the background so that a SIGTERM to this script reaches the bench
# (which then stops its devnets and serves; they also die with it on
# SIGKILL), and the EXIT trap removes the reference worktree afterwards.
"$tmp/bench" -ab-ref "$tmp/A" -bin "$tmp/B" \
  -shapes "${SHAPES:-2000x200,20000x10}" -runs "${RUNS:-3}" -workers "${WORKERS:-100}" \
  -rate "${RATE:-50}" -ab-warmups "${WARMUPS:-1}" -a-serve-args "${A_ARGS:-}" -b-serve-args "${B_ARGS:-}" \
  -out "${OUT-bench/results}" &
bench=$!
trap 'kill -TERM $bench 2>/dev/null; wait $bench; exit 130' INT TERM
wait $bench
