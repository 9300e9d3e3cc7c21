#!/usr/bin/env bash
# The whole product on loopback: `backstream serve --devnet` runs a simulated
# atproto network (relay, PDS hosts, live firehose traffic) in-process and
# follows it: bootstrap → merging → steady_state, with progress on /status.
# Ctrl-C stops it. Exits non-zero if steady state is not reached within
# WAIT seconds (default 300).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/backstream}
LISTEN=${LISTEN:-127.0.0.1:6008}
ADMIN=${ADMIN:-127.0.0.1:6009}
RELAY=${RELAY:-127.0.0.1:7777}

# A port that already answers (another demo still running, say) would make
# this script read that process's /status and report its steady state as
# ours: refuse to start instead, naming the address.
for addr in "$LISTEN" "$ADMIN" "$RELAY"; do
  [ -n "$addr" ] || continue # an empty ADMIN disables the admin listener
  host=${addr%:*} host=${host#[} host=${host%]}
  case $host in "" | 0.0.0.0) host=127.0.0.1 ;; ::) host=::1 ;; esac
  if (exec 3<>"/dev/tcp/$host/${addr##*:}") 2>/dev/null; then
    echo "demo: $addr is already in use (another make demo?); stop what listens there, or set LISTEN, ADMIN and RELAY to free host:port addresses" >&2
    exit 1
  fi
done
DATA=${DATA:-$(mktemp -d -t backstream-demo.XXXXXX)}

"$BIN" serve --devnet --devnet-listen "$RELAY" --devnet-accounts "${ACCOUNTS:-3000}" --devnet-rate "${RATE:-50}" \
  --data-dir "$DATA" --listen "$LISTEN" --admin-listen "$ADMIN" --log-format text &
pid=$!
stop() { kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; }
trap stop EXIT
# Ctrl-C (or a TERM) stops backstream and ends the script here. backstream
# gets the terminal's SIGINT too and exits 0, and bash may run this trap
# only after the loop below has seen that exit: the loop tells a stop (0)
# from a failure too.
interrupted() {
  trap - EXIT
  stop
  echo "demo: stopped (data dir: $DATA)" >&2
  exit 130
}
trap interrupted INT TERM

echo "backstream:  http://$LISTEN/status (open it in a browser for the progress page)"
echo "admin:       http://$ADMIN/metrics   http://$ADMIN/debug/pprof/"
echo "data dir:    $DATA"
# /status is JSON indented by two spaces: the top-level phase is the one
# "phase" key at that depth (nested objects, such as a gap's repair, have
# their own).
phase=
for _ in $(seq 1 $((${WAIT:-300} * 2))); do
  phase=$(curl -fsS "http://$LISTEN/status" 2>/dev/null | sed -n 's/^  "phase": *"\([a-z_]*\)".*/\1/p' || true)
  # The answer counts only while our process runs: one that failed to
  # bind has not answered it.
  if ! kill -0 $pid 2>/dev/null; then
    wait $pid && interrupted # exit 0: stopped by a signal, not failed
    echo "demo: backstream exited before steady state (see its log above)" >&2
    exit 1
  fi
  [ "$phase" = steady_state ] && break
  sleep 0.5
done
if [ "$phase" != steady_state ]; then
  echo "demo: no steady state after ${WAIT:-300} s (phase: ${phase:-unknown}); see http://$LISTEN/status and the log above" >&2
  exit 1
fi
echo
echo "steady state: serving the archive and the live firehose at ws://$LISTEN/subscribe"
echo "try:         curl -s $LISTEN/status"
echo "             $BIN tail --url ws://$LISTEN/subscribe --cursor 0 --collection app.bsky.feed.post --limit 5"
echo "Ctrl-C to stop."
wait $pid
