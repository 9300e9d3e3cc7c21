// Package clients holds the end-to-end test of the Jetstream client
// libraries people use, unchanged, against the real binary: the npm
// packages @atcute/jetstream and @skyware/jetstream read a whole archive of
// the simulated network (with repo resets, resyncs that changed a few
// records, reactivations) from `backstream serve`, and their folds must
// equal the network's records. It needs node and npm and installs the
// packages from the npm registry, so it is behind the build tag npmclients
// and out of `make test`: run scripts/test-clients.sh (`make test-clients`;
// CI runs it after `make test`).
package clients
