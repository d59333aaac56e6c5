# queenside: `make run` starts a sidecar (with its own PostgreSQL), `make test` runs every test.

GO      ?= go
BIN     := bin/queenside
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/queenside/queenside/sidecar.Version=$(VERSION)

.DEFAULT_GOAL := help

.PHONY: help build run test test-go lint fuzz bench clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-9s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build the binary at bin/queenside
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./sidecar/cmd/queenside

run: build ## run a sidecar on ./.queenside/queenside.sock, with a throwaway PostgreSQL under ./.queenside/
	./$(BIN) dev

test: lint test-go ## run every test (starts its own PostgreSQL unless TEST_DATABASE_URL is set)

test-go: ## run the Go tests with the race detector
	$(GO) test -race -count=1 -timeout 15m ./...

lint: ## check formatting and vet the code
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

fuzz: ## fuzz the frame and envelope decoders for a while (FUZZTIME=30s each)
	$(GO) test ./protocol -run XXX -fuzz FuzzReadFrame -fuzztime $(or $(FUZZTIME),30s)
	$(GO) test ./protocol -run XXX -fuzz FuzzDecodeRequest -fuzztime $(or $(FUZZTIME),30s)
	$(GO) test ./protocol -run XXX -fuzz FuzzDecodeArgs -fuzztime $(or $(FUZZTIME),30s)

bench: build ## measure throughput, latency, CPU and memory with a throwaway PostgreSQL and sidecar (writes bench.json)
	./$(BIN) bench

clean: ## remove build output (not ./.queenside, which holds the dev database)
	rm -rf bin
