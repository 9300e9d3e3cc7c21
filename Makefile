# backstream — build, test and run targets. `make test` is what CI runs.

GO      ?= go
BIN     := bin/backstream
PKGS    := ./...
FUZZTIME ?= 30s

.PHONY: all build test test-skipped test-long test-clients bench-ab vet fmt-check lint bench bench-go fuzz demo clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/backstream

# The CI suite: vet, gofmt, every test in its short form (heavy tiers skip
# under -short). Must finish in under 10 minutes on a 2-core machine.
test: vet fmt-check
	$(GO) test -short -count=1 -timeout 9m $(PKGS)

# The tests `make test` skips whole, in full: every test that calls
# citest.Long (process-level SIGKILL tests, big worlds, the soak, the
# upgrade test, which needs the git history), listed by scripts/longtests,
# one package at a time. CI runs it after `make test`. Every package runs;
# the target fails if any failed.
test-skipped:
	@list=$$(mktemp); $(GO) run ./scripts/longtests > $$list || { rm -f $$list; exit 1; }; \
	fail=0; while read -r pkg run; do \
		echo "test-skipped: $$pkg $$run"; \
		$(GO) test -count=1 -timeout 30m -run "$$run" "$$pkg" || fail=1; \
	done < $$list; rm -f $$list; exit $$fail

# Slow tiers: process-level restarts, SIGKILL, big worlds, long sweeps, the
# soak (crash.TestSoakPlateau, about 2.5 minutes). The
# subscriber-load test at full size asserts the live p99: it runs alone,
# after the other packages, not beside them. The upgrade test builds two
# older commits from the git history (needs it; about a minute) and runs on
# its own, as in CI.
test-long: vet fmt-check
	$(GO) test -count=1 -timeout 60m -skip '^(TestSilentAndReplayingSubscribers|TestUpgradeFromOlderBuilds)$$' $(PKGS)
	$(GO) test -count=1 -timeout 10m -run '^TestSilentAndReplayingSubscribers$$' ./oracle/crash
	$(GO) test -count=1 -timeout 10m -run '^TestUpgradeFromOlderBuilds$$' ./oracle/crash
	$(GO) test -count=1 -timeout 20m ./oracle/scenario -scenario.seeds=5

# The Jetstream client libraries people use (@atcute/jetstream,
# @skyware/jetstream), installed from the npm registry, against a served
# devnet with resyncs: zero validation errors, no duplicate past v1's
# inclusive time resume, folds equal to the truth. Needs node, npm and the
# registry, so it is not part of `make test`.
test-clients:
	bash scripts/test-clients.sh

vet:
	$(GO) vet $(PKGS)
	$(GO) vet -tags crashpoint ./internal/crashpoint ./cmd/backstream

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

lint: vet fmt-check

# The system benchmark: devnet and serve as separate processes, CPU and RSS
# of serve alone; one table of bootstrap, archive size, live ingest, replay
# and live fan-out rows against their targets; medians of RUNS runs (default
# 3); JSON in bench/results/. QUICK=1 for a short run. See scripts/bench.sh.
bench:
	BIN=$(BIN) ./scripts/bench.sh

# A/B bootstrap: REF (a git ref, built from a clean worktree) against the
# working tree, alternating runs on the same devnet worlds; per-pair ratios
# and medians of CPU-seconds per record, peak RSS and data-dir bytes.
# QUICK=1 for a smoke run; A_ARGS / B_ARGS add serve flags to one side
# (e.g. B_ARGS="--verify off"). See scripts/bench-ab.sh.
REF ?= main
bench-ab:
	GO=$(GO) REF=$(REF) A_ARGS="$(A_ARGS)" B_ARGS="$(B_ARGS)" ./scripts/bench-ab.sh

# Micro-benchmarks (writer, codecs, verifier, renderer, simulated network).
# Report CPU-seconds and ratios: the machine is shared and noisy; compare
# runs with benchstat.
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem -timeout 60m $(PKGS)

# Every fuzz target for FUZZTIME each, stopping at the first finding (see
# scripts/fuzz.sh).
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) PKGS="$(PKGS)" ./scripts/fuzz.sh

# The whole product on loopback: a simulated network and backstream serving it.
demo: build
	./scripts/demo.sh

clean:
	rm -rf bin

# promtool over a live /metrics, deploy/prometheus.yml and deploy/alerts.yml
# (check + unit tests). Installs Debian's `prometheus` package (promtool) if
# missing. Not part of `make test`.
check-metrics: build
	BIN=$(BIN) ./deploy/check-metrics.sh

# Former name of `make bench`.
bench-system: bench

.PHONY: check-metrics bench-system

# Mutation check: every deliberate break in scripts/mutate/mutants.go must be
# caught. It edits files in place: run it on a tree nobody else edits (or a
# clone). See scripts/mutate.md.
.PHONY: mutate
mutate:
	$(GO) run ./scripts/mutate
