#!/usr/bin/env bash
# The system benchmark (`make bench-system`): builds bin/backstream, then for
# each shape runs `backstream devnet` and `backstream serve` as separate
# processes and measures the serve process alone — bootstrap records per
# CPU-second (utime+stime from /proc/<pid>/stat), records/s, repos/s, peak
# RSS (VmHWM), store bytes on disk per archived event. Medians of RUNS runs;
# JSON in bench/results/<date>.json. See bench/system/main.go.
#
#   SHAPES=2000x200,20000x50 RUNS=5 scripts/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
BIN=${BIN:-bin/backstream}
$GO build -o "$BIN" ./cmd/backstream
exec $GO run ./bench/system -bin "$BIN" \
  -shapes "${SHAPES:-2000x200}" -runs "${RUNS:-3}" -workers "${WORKERS:-100}" \
  -rate "${RATE:-50}" -out "${OUT:-bench/results}"
