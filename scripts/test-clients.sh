#!/usr/bin/env bash
# test-clients.sh: the Jetstream client libraries people use, unchanged,
# against the real binary (oracle/clients, build tag npmclients).
#
# Installs @atcute/jetstream 2.x and @skyware/jetstream 0.2.x (and ws, the
# WebSocket both take on Node) from the npm registry into a cache directory,
# then runs TestNPMClients: `backstream serve` archives a simulated network
# with repo resets and resyncs; @atcute/jetstream replays it all with its
# validation on, @skyware/jetstream replays it while stopped and resumed
# from its own time_us cursor; zero validation errors, zero duplicates, and
# both folds equal the network's records.
#
# Needs go, node and npm (Debian: apt-get install -y nodejs npm). Not part
# of `make test`: it needs the registry.
#
#   BACKSTREAM_CLIENTS_DIR  where the packages are installed
#                           (default: ${XDG_CACHE_HOME:-$HOME/.cache}/backstream-clients)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
for tool in go node npm; do
	if ! command -v "$tool" >/dev/null; then
		echo "test-clients: $tool is not installed (node and npm: apt-get install -y nodejs npm)" >&2
		exit 1
	fi
done
dir=${BACKSTREAM_CLIENTS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/backstream-clients}
mkdir -p "$dir"
cp "$root/scripts/clients/package.json" "$root/scripts/clients/clients.mjs" "$dir/"
# One retry: a registry hiccup is not a test failure.
install() { (cd "$dir" && npm install --no-package-lock --no-audit --no-fund --loglevel=error); }
install || { echo "test-clients: npm install failed; once more in 5 s" >&2; sleep 5; install; }
echo "test-clients: node $(node --version); $(cd "$dir" && npm ls --depth=0 2>/dev/null | tail -n +2 | tr -d '\n' | sed 's/[├└]── / /g')"
cd "$root"
BACKSTREAM_CLIENTS_DIR="$dir" exec go test -tags npmclients -run '^TestNPMClients$' -count=1 -v -timeout 20m ./oracle/clients
