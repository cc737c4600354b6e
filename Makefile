# txinbox — every target does its own set-up: tools are pinned in tools/*/go.mod and built through the
# Go module proxy into ./bin. PostgreSQL: DATABASE_URL / TXINBOX_TEST_DATABASE_URL, else 127.0.0.1:5432,
# else (tests) testcontainers; see README.

SHELL      := /bin/bash
GO         ?= go
BIN        := $(CURDIR)/bin
GOOSE_TAGS := no_clickhouse,no_libsql,no_mssql,no_azuresql,no_mysql,no_sqlite3,no_vertica,no_ydb
DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
SCHEMA     ?= public
# Modules other than the root one keep their dependencies apart: broker adapters, the Redis seen-key
# cache, benchmarks (River), the ledger and notifier examples (which use the adapters), the chaos run and
# the console's browser tests (chromedp; they need Chromium: Debian's chromium package), so that the
# root go.mod names no broker or browser client. (The public test kit txinboxtest is in the root
# module: its go.mod names testcontainers, which only the kit's last choice of server links.)
SUBMODULES := adapters seenredis bench examples/ledger examples/notifier chaos console/e2e

.PHONY: all tools generate check-generated fmt-check vet lint test test-go test-submodules screenshot demo wrk-ledger migrate bench chaos fuzz mutants citus clean

all: test

$(BIN)/sqlc: tools/sqlc/go.mod tools/sqlc/go.sum
	cd tools/sqlc && $(GO) build -o $(BIN)/sqlc github.com/sqlc-dev/sqlc/cmd/sqlc

$(BIN)/goose: tools/goose/go.mod tools/goose/go.sum
	cd tools/goose && GOFLAGS=-tags=$(GOOSE_TAGS) $(GO) build -o $(BIN)/goose github.com/pressly/goose/v3/cmd/goose

# nats-server: the private NATS JetStream server of make demo and of the two-service test of
# examples/ledger (found in PATH: those targets put ./bin first).
$(BIN)/nats-server: tools/nats-server/go.mod tools/nats-server/go.sum
	cd tools/nats-server && $(GO) build -o $(BIN)/nats-server github.com/nats-io/nats-server/v2

$(BIN)/golangci-lint: tools/golangci-lint/go.mod tools/golangci-lint/go.sum
	cd tools/golangci-lint && $(GO) build -o $(BIN)/golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint

tools: $(BIN)/sqlc $(BIN)/goose $(BIN)/golangci-lint $(BIN)/nats-server

## generate: regenerate internal/sqlc from queries/ and migrations/ (pinned sqlc).
generate: $(BIN)/sqlc
	$(BIN)/sqlc generate

## check-generated: fail if internal/sqlc is not what sqlc generates from queries/ and migrations/.
check-generated: $(BIN)/sqlc
	$(BIN)/sqlc diff || { echo "internal/sqlc is out of date: run 'make generate' and commit it" >&2; exit 1; }

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	@for m in $(SUBMODULES); do [ -f $$m/go.mod ] || continue; echo "go vet ($$m)"; (cd $$m && $(GO) vet ./...) || exit 1; done

## lint: golangci-lint (.golangci.yml at the root) on the root module, every module in SUBMODULES and
## tools/mutants (a run waits for another one on this machine to end).
lint: $(BIN)/golangci-lint
	$(BIN)/golangci-lint run --allow-serial-runners --config '$(CURDIR)/.golangci.yml' ./...
	@for m in $(SUBMODULES) tools/mutants; do [ -f $$m/go.mod ] || continue; echo "golangci-lint ($$m)"; (cd $$m && $(BIN)/golangci-lint run --allow-serial-runners --config '$(CURDIR)/.golangci.yml' ./...) || exit 1; done

## test: the whole suite (README's test command): vet, gofmt, golangci-lint, generated code, go test -race
## of every module.
test: fmt-check vet lint check-generated $(BIN)/goose test-go test-submodules

test-go: $(BIN)/goose
	TXINBOX_GOOSE=$(BIN)/goose $(GO) test -race -count=1 -timeout 20m ./...

# Adapters run their tests against the real brokers, seenredis against redis-servers it starts itself;
# benchmarks are compiled (tests and benchmarks) but not run: performance is measured by 'make bench' only.
test-submodules: $(BIN)/nats-server
	@if [ -f adapters/go.mod ]; then echo "go test (adapters)"; cd adapters && $(GO) test -race -count=1 -timeout 15m ./...; fi
	@if [ -f seenredis/go.mod ]; then echo "go test (seenredis)"; cd seenredis && $(GO) test -race -count=1 -timeout 10m ./...; fi
	@if [ -f bench/go.mod ]; then echo "go test -run '^$$' (bench: compile only)"; cd bench && $(GO) test -count=1 -run '^$$' ./...; fi
	@if [ -f examples/ledger/go.mod ]; then echo "go test (examples/ledger)"; cd examples/ledger && PATH='$(BIN)':"$$PATH" $(GO) test -race -count=1 -timeout 15m ./...; fi
	@if [ -f examples/notifier/go.mod ]; then echo "go test (examples/notifier)"; cd examples/notifier && $(GO) test -race -count=1 -timeout 10m ./...; fi
	@if [ -f chaos/go.mod ]; then echo "go test (chaos)"; cd chaos && $(GO) test -race -count=1 -timeout 20m ./...; fi
	@if [ -f console/e2e/go.mod ]; then echo "go test (console/e2e: headless Chromium)"; cd console/e2e && $(GO) test -race -count=1 -timeout 15m ./...; fi
	@echo "go test (tools/mutants: the mutant list parses and applies)"; cd tools/mutants && $(GO) test -count=1 ./...

## screenshot: the console's overview, taken by its browser test, into docs/console.png.
screenshot:
	cd console/e2e && TXINBOX_UPDATE_SCREENSHOT=1 $(GO) test -count=1 -run TestOverviewCounts ./...

## demo: the ledger example end to end (finds or starts PostgreSQL itself), then the two services: the
## ledger's outbox relayed to a private NATS JetStream server (nats-server) and consumed by the notifier
## example, with processes SIGKILLed, connections cut and the broker restarted. It ends by naming what it
## leaves (the schemas ledger_demo and ledger_demo_notifier) and the command that drops them;
## DEMO_FLAGS=--drop drops them instead.
demo: $(BIN)/nats-server
	cd examples/ledger && PATH='$(BIN)':"$$PATH" $(GO) run . demo $(DEMO_FLAGS)

## wrk-ledger: the ledger's POST /v1/events under wrk, coalescing off vs on (DURATION, ROUNDS, CONNS; not in make test).
wrk-ledger:
	examples/ledger/wrk/run.sh

## migrate: apply txinbox's migrations to DATABASE_URL, schema SCHEMA.
migrate:
	$(GO) run ./cmd/txinbox migrate up --database-url '$(DATABASE_URL)' --schema '$(SCHEMA)'

## bench: benchmarks against River and raw SQL; BENCH_QUICK=1 for a 2-minute run. Writes bench/RESULTS.md.
bench:
	cd bench && $(GO) run ./cmd/txbench --database-url '$(DATABASE_URL)' $(if $(BENCH_QUICK),--quick,)

## chaos: the 5-minute chaos run (killed workers, cut connections, poison messages).
chaos:
	cd chaos && $(GO) run ./cmd/txchaos --database-url '$(DATABASE_URL)' --duration 5m

## fuzz: run every fuzz target for FUZZTIME each (seed corpora already run in 'make test').
FUZZTIME ?= 1m
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

## mutants: apply each mutation of a guarantee listed in tools/mutants/mutants.txt to a temporary copy,
## run the tests that guard it, and fail if any mutant survives (MUTANTS=regexp runs only those;
## MUTANTS_JOBS=N runs N at once, each in its own copy; MUTANTS_VERBOSE=1 shows the killing tests' output).
MUTANTS_JOBS ?= 1
mutants: $(BIN)/sqlc $(BIN)/nats-server
	cd tools/mutants && PATH='$(BIN)':"$$PATH" $(GO) run . -root '$(CURDIR)' -sqlc '$(BIN)/sqlc' -j $(MUTANTS_JOBS) $(if $(MUTANTS_VERBOSE),-v,) $(if $(MUTANTS),-run '$(MUTANTS)',)

## citus: the acceptance run on a Citus coordinator (SCALING.md, "Beyond one node: Citus"): the tests of
## inbox, worker, admin and retention with every test schema distributed, the routing check and the
## migration tests. CITUS_URL names the coordinator (required); CITUS_TIMEOUT bounds the whole run
## (a run took 11 to 17 minutes on a busy 2-core machine). Not part of make test.
CITUS_TIMEOUT ?= 45m
citus:
	@if [ -z '$(CITUS_URL)' ]; then echo "make citus needs CITUS_URL=postgres://... (a Citus coordinator; SCALING.md)" >&2; exit 1; fi
	TXINBOX_CITUS_URL='$(CITUS_URL)' $(GO) test -race -count=1 -v -timeout $(CITUS_TIMEOUT) ./internal/citus

clean:
	rm -rf $(BIN)

## bench-retention: the retention benchmarks: old layout vs generations, side by side in
## two throwaway PostgreSQL 15 clusters (needs root and /usr/lib/postgresql/15/bin; about 25 minutes).
.PHONY: bench-retention
bench-retention:
	bench/retention.sh
