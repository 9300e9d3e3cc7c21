#!/usr/bin/env bash
# The system benchmark (`make bench`): builds bin/backstream, runs
# `backstream devnet` and `backstream serve` as separate processes and
# measures the serve process alone (CPU-seconds from /proc/<pid>/stat, peak
# RSS from VmHWM). One table, each row with its target and met/missed:
#   - bootstrap per shape: records per CPU-second, records/s, repos/s, peak
#     RSS; bytes on disk per archived event after a manual compaction;
#   - live ingest of a --preload-events history at saturation: events/s and
#     CPU-seconds per million events; replay from cursor 0 to one subscriber:
#     events/s and CPU-µs per event;
#   - SUBSCRIBERS live subscribers at LIVE_RATE events/s: CPU-µs per
#     delivered event (net of idle) and p50/p99 delivery latency.
# Medians of RUNS runs; JSON in bench/results/<date>.json. About 6 minutes
# with the defaults on 2 cores; QUICK=1 (one run, one shape, a smaller
# history, shorter windows) about 1. See bench/system/doc.go.
#
#   RUNS=5 SHAPES=2000x200 PARTS=bootstrap,ingest,fanout scripts/bench.sh
#   QUICK=1 scripts/bench.sh
#   ENUMERATE=hosts QUICK=1 scripts/bench.sh   # bootstrap in one --enumerate mode (default: relay,hosts)
#   PPROF=/tmp/prof QUICK=1 scripts/bench.sh   # + CPU profiles of serve
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
BIN=${BIN:-bin/backstream}
if [ "${QUICK:-0}" = 1 ]; then
  : "${RUNS:=1}" "${SHAPES:=2000x200}" "${PRELOAD:=50000}" "${WINDOW:=5s}"
fi
$GO build -o "$BIN" ./cmd/backstream
exec $GO run ./bench/system -bin "$BIN" -enumerate "${ENUMERATE:-relay,hosts}" \
  -parts "${PARTS:-bootstrap,ingest,fanout}" \
  -shapes "${SHAPES:-2000x200,20000x50}" -runs "${RUNS:-3}" -workers "${WORKERS:-100}" \
  -rate "${RATE:-50}" -preload "${PRELOAD:-200000}" \
  -live-rate "${LIVE_RATE:-1000}" -subscribers "${SUBSCRIBERS:-100}" -window "${WINDOW:-10s}" \
  -pprof "${PPROF:-}" -out "${OUT:-bench/results}"
