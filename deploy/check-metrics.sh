#!/usr/bin/env bash
# `make check-metrics`: promtool over everything Prometheus reads from us.
#   - `promtool check metrics` over the /metrics of a live `backstream serve`
#     that bootstrapped a small simulated network (`backstream devnet`);
#   - `promtool check config deploy/prometheus.yml` (which also checks the
#     rule files it loads);
#   - `promtool check rules deploy/alerts.yml`;
#   - `promtool test rules deploy/alerts_test.yml` (the rules' unit tests).
# promtool comes from Debian's `prometheus` package, installed if missing
# (that package also ships the server; it is not started here).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/backstream}
PROMTOOL=${PROMTOOL:-promtool}

if ! command -v "$PROMTOOL" >/dev/null 2>&1; then
  echo "check-metrics: promtool not found; installing Debian's prometheus package" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus >&2 || {
    $SUDO apt-get update >&2 && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus >&2; }
fi
"$PROMTOOL" --version 2>&1 | head -1

tmp=$(mktemp -d -t backstream-check-metrics.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

# The simulated network on a free port: its first stdout line is the relay URL.
"$BIN" devnet --listen 127.0.0.1:0 --accounts 200 --log-format json >"$tmp/devnet.out" 2>"$tmp/devnet.log" &
pids+=($!)
relay=""
for _ in $(seq 1 100); do
  relay=$(head -n1 "$tmp/devnet.out" 2>/dev/null || true)
  [ -n "$relay" ] && break
  sleep 0.1
done
[ -n "$relay" ] || { echo "check-metrics: devnet did not start:" >&2; cat "$tmp/devnet.log" >&2; exit 1; }

"$BIN" serve --relay "$relay" --data-dir "$tmp/data" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --capture-wait 2s \
  --log-format json 2>"$tmp/serve.log" &
pids+=($!)
addr=""
admin=""
phase=""
for _ in $(seq 1 600); do
  [ -z "$addr" ] && addr=$(grep -o '"msg":"serving","listen":"[^"]*"' "$tmp/serve.log" 2>/dev/null | sed 's/.*"listen":"//; s/"$//' || true)
  [ -z "$admin" ] && admin=$(grep -o '"admin_listen":"[^"]*"' "$tmp/serve.log" 2>/dev/null | head -n1 | sed 's/.*"admin_listen":"//; s/"$//' || true)
  if [ -n "$addr" ]; then
    phase=$(curl -fsS "http://$addr/status" 2>/dev/null | grep -o '"phase": *"[a-z_]*"' | head -n1 | sed 's/.*"\([a-z_]*\)"$/\1/' || true)
    [ "$phase" = "steady_state" ] && break
  fi
  sleep 0.1
done
[ "$phase" = "steady_state" ] || { echo "check-metrics: serve did not reach steady_state (phase '$phase'):" >&2; tail -20 "$tmp/serve.log" >&2; exit 1; }

status=0
[ -n "$admin" ] || { echo "check-metrics: serve logged no admin listener:" >&2; tail -20 "$tmp/serve.log" >&2; exit 1; }
echo "== promtool check metrics  (live /metrics of backstream serve's admin listener at $admin, steady_state)"
curl -fsS "http://$admin/metrics" >"$tmp/metrics.txt"
if "$PROMTOOL" check metrics <"$tmp/metrics.txt"; then echo "  SUCCESS: $(grep -vc '^#' "$tmp/metrics.txt") samples, no problems"; else status=1; fi
echo "== promtool check config deploy/prometheus.yml"
"$PROMTOOL" check config deploy/prometheus.yml || status=1
echo "== promtool check rules deploy/alerts.yml"
"$PROMTOOL" check rules deploy/alerts.yml || status=1
echo "== promtool test rules deploy/alerts_test.yml"
"$PROMTOOL" test rules deploy/alerts_test.yml || status=1
exit $status
