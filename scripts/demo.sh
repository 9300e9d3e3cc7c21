#!/usr/bin/env bash
# The whole product on loopback: `backstream serve --devnet` runs a simulated
# atproto network (relay, PDS hosts, live firehose traffic) in-process and
# follows it: bootstrap → merging → steady_state, with progress on /status.
# Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/backstream}
DATA=${DATA:-$(mktemp -d -t backstream-demo.XXXXXX)}
LISTEN=${LISTEN:-127.0.0.1:6008}
ADMIN=${ADMIN:-127.0.0.1:6009}
RELAY=${RELAY:-127.0.0.1:7777}

"$BIN" serve --devnet --devnet-listen "$RELAY" --devnet-accounts "${ACCOUNTS:-3000}" --devnet-rate "${RATE:-50}" \
  --data-dir "$DATA" --listen "$LISTEN" --admin-listen "$ADMIN" --log-format text &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT INT TERM

echo "backstream:  http://$LISTEN/status (open it in a browser for the progress page)"
echo "admin:       http://$ADMIN/metrics   http://$ADMIN/debug/pprof/"
echo "data dir:    $DATA"
for _ in $(seq 1 600); do
  phase=$(curl -fsS "http://$LISTEN/status" 2>/dev/null | sed -n 's/.*"phase": *"\([a-z_]*\)".*/\1/p' | head -1 || true)
  [ "$phase" = steady_state ] && break
  kill -0 $pid 2>/dev/null || exit 1
  sleep 0.5
done
echo
echo "steady state: serving the archive and the live firehose at ws://$LISTEN/subscribe"
echo "try:         $BIN tail --url ws://$LISTEN/subscribe --cursor 0 --collection app.bsky.feed.post --limit 5"
echo "Ctrl-C to stop."
wait $pid
