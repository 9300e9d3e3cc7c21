#!/usr/bin/env bash
# Runs the whole product on loopback: a simulated atproto network
# (`backstream devnet`) and `backstream serve` following it. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/backstream}
DATA=${DATA:-$(mktemp -d -t backstream-demo.XXXXXX)}
RELAY_ADDR=${RELAY_ADDR:-127.0.0.1:7777}
LISTEN=${LISTEN:-127.0.0.1:6008}

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

"$BIN" devnet --listen "$RELAY_ADDR" --accounts "${ACCOUNTS:-1000}" --rate "${RATE:-50}" --log-format text &
pids+=($!)
for _ in $(seq 1 100); do
  curl -fsS "http://$RELAY_ADDR/_devnet/status" >/dev/null 2>&1 && break
  sleep 0.2
done
"$BIN" serve --relay "http://$RELAY_ADDR" --data-dir "$DATA" --listen "$LISTEN" --log-format text &
pids+=($!)
echo
echo "simulated relay:  http://$RELAY_ADDR   (status: http://$RELAY_ADDR/_devnet/status)"
echo "backstream:       http://$LISTEN/status   http://$LISTEN/metrics"
echo "data dir:         $DATA"
echo "Ctrl-C to stop."
wait -n "${pids[@]}"
