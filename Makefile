# queenside: `make run` starts a sidecar (with its own PostgreSQL), `make test` runs every test.

GO      ?= go
BIN     := bin/queenside
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/queenside/queenside/sidecar.Version=$(VERSION)

.DEFAULT_GOAL := help

.PHONY: help build image run test generate deps test-go test-citus test-python test-node test-dashboard screenshots bench-dashboard lint fuzz bench soak verify clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build the binary at bin/queenside
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./sidecar/cmd/queenside

# The release image (sidecar/release.Dockerfile): FROM scratch, so building it
# pulls nothing. Its context is staged under build/image/: the binary, static
# (CGO_ENABLED=0) for a base with no libc, this machine's CA bundle (on Debian
# the ca-certificates package) and an empty directory for the volumes' mount
# points. IMAGE_LATEST= (empty) leaves queenside:latest alone.
IMAGE        ?= queenside:$(VERSION)
IMAGE_LATEST ?= queenside:latest
IMAGE_DIR    := build/image
CA_BUNDLE    ?= /etc/ssl/certs/ca-certificates.crt
image: ## build the release image queenside:<version> and queenside:latest FROM scratch, with podman or docker (IMAGE=, IMAGE_LATEST=); prints its size
	@engine=$$(command -v podman || command -v docker) || { \
		echo "make image needs podman or docker: apt-get install -y podman"; exit 1; }; \
	test -s $(CA_BUNDLE) || { echo "make image: no CA bundle at $(CA_BUNDLE): apt-get install -y ca-certificates"; exit 1; }; \
	rm -rf $(IMAGE_DIR) && mkdir -p $(IMAGE_DIR)/empty && \
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $(IMAGE_DIR)/queenside ./sidecar/cmd/queenside && \
	cp $(CA_BUNDLE) $(IMAGE_DIR)/ca-certificates.crt && \
	$$engine build --quiet -f sidecar/release.Dockerfile --build-arg VERSION=$(VERSION) \
		-t $(IMAGE) $(if $(IMAGE_LATEST),-t $(IMAGE_LATEST)) $(IMAGE_DIR) >/dev/null && \
	size=$$($$engine image inspect --format '{{.Size}}' $(IMAGE)) && \
	echo "built $(IMAGE) with $$(basename $$engine): $$((size / 1048576)).$$((size % 1048576 * 10 / 1048576)) MiB"

HTTP_ADDR ?= 127.0.0.1:8080
run: build ## run a sidecar on ./.queenside/queenside.sock, with a throwaway PostgreSQL under ./.queenside/ and its dashboard on http://127.0.0.1:8080/ (HTTP_ADDR=)
	./$(BIN) dev --http-addr $(HTTP_ADDR)

generate: ## write the Python and Node clients' tables of error codes and queue options from protocol/, and schema/current.sql from a freshly migrated database (the tests fail when either differs)
	$(GO) run ./protocol/internal/gen
	$(GO) test ./schema -run '^TestCurrentSQLIsTheMigratedSchema$$' -count=1 -write-current

test: deps lint test-go test-citus test-python test-node test-dashboard ## run every test: Go, Python, Node and the dashboard in a browser (each starts its own PostgreSQL)

# What the tests need beyond Go, as Debian packages. As root with apt, deps
# installs what is missing; otherwise it prints the one command that would,
# and fails.
PYTHON   ?= /usr/bin/python3
CHROMIUM ?= chromium
deps: ## install what the tests need and this machine lacks (as root, with apt), or say how
	@missing=""; \
	{ command -v initdb || ls /usr/lib/postgresql/*/bin/initdb; } >/dev/null 2>&1 || missing="$$missing postgresql"; \
	$(PYTHON) -c 'import msgpack, pytest' >/dev/null 2>&1 || missing="$$missing python3-msgpack python3-pytest"; \
	$(PYTHON) -c 'import psycopg' >/dev/null 2>&1 || missing="$$missing python3-psycopg"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing nodejs npm"; \
	{ command -v pgbouncer || test -x /usr/sbin/pgbouncer; } >/dev/null 2>&1 || missing="$$missing pgbouncer"; \
	command -v pg_autoctl >/dev/null 2>&1 || missing="$$missing postgresql-15-auto-failover"; \
	command -v $(CHROMIUM) >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v podman >/dev/null 2>&1 || missing="$$missing podman"; \
	test -s /etc/ssl/certs/ca-certificates.crt || missing="$$missing ca-certificates"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "make: installing$$missing"; \
			DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing || exit 1; \
		else \
			echo "make test needs what this machine lacks:$$missing"; \
			echo "install it with:  sudo apt-get install -y$$missing"; \
			exit 1; \
		fi; \
	fi
	@# Installed again when the lock file changed since (npm writes its copy on each install).
	@test clients/node/node_modules/.package-lock.json -nt clients/node/package-lock.json || npm ci --prefix clients/node --no-audit --no-fund
	@test sidecar/dashboard/browser/node_modules/.package-lock.json -nt sidecar/dashboard/browser/package-lock.json || npm ci --prefix sidecar/dashboard/browser --no-audit --no-fund
	@# The README tests build their programs in new modules with GOPROXY off,
	@# where go mod tidy reads every module of the graph, not only the ones
	@# built: those come to the module cache here (through copies of go.mod
	@# and go.sum, which the download would add to).
	@tmp=$$(mktemp -d) && cp go.mod go.sum "$$tmp"/ && $(GO) mod download -modfile="$$tmp/go.mod" all; \
		status=$$?; rm -rf "$$tmp"; exit $$status

test-go: ## run the Go tests with the race detector, then each fuzz target for a short while
	$(GO) test -race -count=1 -timeout 15m ./...
	$(MAKE) --no-print-directory fuzz FUZZTIME=500000x

# The suites of the guarantees again, on a Citus cluster the harness starts
# (sidecar/pgtest): where Citus is not installed this says so in one line
# and skips.
CITUS_PACKAGES ?= ./sidecar/store ./sidecar/janitor ./sidecar
test-citus: ## run the store, janitor and sidecar suites on a local Citus cluster (skipped where Citus is not installed)
	@why="$$($(GO) run ./sidecar/citustest/missing)"; \
	if [ -n "$$why" ]; then echo "test-citus: skipped: $$why"; \
	else echo "QUEENSIDE_TEST_CITUS=1 $(GO) test -count=1 -timeout 30m $(CITUS_PACKAGES)"; \
		QUEENSIDE_TEST_CITUS=1 $(GO) test -count=1 -timeout 30m $(CITUS_PACKAGES); fi

test-python: build ## run the Python client's tests and examples against a real sidecar (needs python3-msgpack, python3-pytest, python3-psycopg)
	QUEENSIDE_TEST_BIN=$(CURDIR)/$(BIN) $(PYTHON) -m pytest -q clients/python

test-node: ## run the Node client's tests and examples against a real sidecar (installs its one dependency first)
	@test -d clients/node/node_modules || npm ci --prefix clients/node --no-audit --no-fund
	npm test --prefix clients/node

test-dashboard: build ## drive the dashboard in headless Chromium against a real sidecar (needs chromium)
	@test -d sidecar/dashboard/browser/node_modules || npm ci --prefix sidecar/dashboard/browser --no-audit --no-fund
	npm test --prefix sidecar/dashboard/browser

screenshots: build ## run the dashboard's browser tests, saving a screenshot of each page into docs/dashboard/
	@test -d sidecar/dashboard/browser/node_modules || npm ci --prefix sidecar/dashboard/browser --no-audit --no-fund
	QUEENSIDE_SCREENSHOTS=$(CURDIR)/docs/dashboard npm test --prefix sidecar/dashboard/browser

bench-dashboard: build ## fill a queue with 10,000 partitions and 1,000,000 messages, then time the dashboard's pages in Chromium
	@test -d sidecar/dashboard/browser/node_modules || npm ci --prefix sidecar/dashboard/browser --no-audit --no-fund
	npm run big --prefix sidecar/dashboard/browser

lint: ## check formatting and vet the code
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

# FUZZTIME counts inputs (2000000x) rather than time: a duration races Go
# 1.26's fuzzing coordinator at its end, which then fails a target with
# "context deadline exceeded" and no input at fault (go.dev/issue/75804).
fuzz: ## fuzz the frame and envelope decoders for a while (FUZZTIME=2000000x inputs each)
	$(GO) test ./protocol -run XXX -fuzz FuzzReadFrame -fuzztime $(or $(FUZZTIME),2000000x)
	$(GO) test ./protocol -run XXX -fuzz FuzzDecodeRequest -fuzztime $(or $(FUZZTIME),2000000x)
	$(GO) test ./protocol -run XXX -fuzz FuzzDecodeArgs -fuzztime $(or $(FUZZTIME),2000000x)

bench: build ## measure throughput, latency, CPU and memory with a throwaway PostgreSQL and sidecar (writes bench.json)
	./$(BIN) bench

soak: build ## 10 minutes at 5,000 msg/s with retention on, printing table sizes and dead tuples (writes bin/soak.json)
	./$(BIN) bench --scenarios soak --out bin/soak.json

verify: build ## check exactly-once, in-order delivery through 4 stages for 10 minutes while sidecars and PostgreSQL are killed, frozen and cut off (writes verify.json; VERIFY_FLAGS to change it)
	./$(BIN) verify $(VERIFY_FLAGS)

clean: ## remove build output (not ./.queenside, which holds the dev database)
	rm -rf bin build
