# hostd's make targets. Each target is small; add yours below.

GO ?= go

# `make test` is the README's test command and what .ci/run runs:
# gofmt (fails on any diff), go vet, staticcheck (run as a tool, not in
# go.mod), the layer test, and the race-enabled test suite.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
TEST_TIMEOUT ?= 20m
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null)

.PHONY: test check fmt-check vet staticcheck layers race build
test: check

check: fmt-check vet staticcheck layers race

fmt-check:
	@echo "== gofmt"
	@out=$$(find . -name '*.go' -not -path './.git/*' -not -path '*/testdata/*' -print0 | xargs -0 gofmt -l); if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; gofmt -d $$out | head -50; exit 1; fi

vet:
	@echo "== go vet"
	$(GO) vet ./...

staticcheck:
	@echo "== staticcheck"
	$(GO) run $(STATICCHECK) ./...

layers:
	@echo "== layer test"
	$(GO) test -count=1 ./internal/layers/

race:
	@echo "== go test -race"
	$(GO) test -race -timeout $(TEST_TIMEOUT) ./...

# build writes bin/hostd with the version stamped in.
build:
	$(GO) build -o bin/hostd -ldflags "-X main.version=$(VERSION) -X main.commit=$(COMMIT)" ./cmd/hostd

.PHONY: plugins
# plugins builds every plugin in plugins/ to bin/plugins/<name>.wasm
# (the documented build line; built .wasm files are not committed).
plugins:
	@mkdir -p bin/plugins
	@set -e; for d in plugins/*/; do \
		n=$$(basename $$d); \
		echo "plugin $$n -> bin/plugins/$$n.wasm"; \
		(cd $$d && GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -o ../../bin/plugins/$$n.wasm .); \
	done

.PHONY: fuzz bench bench-full
# fuzz runs every native Go fuzz target of the main module for FUZZTIME
# each (targets found with `go test -list '^Fuzz'`); the corpus lives in
# each package's testdata/fuzz. FUZZMINIMIZETIME caps the minimization of
# each new interesting input: Go's default (60s) on a target whose inputs
# cost milliseconds (FuzzAPI runs a request and a probe broadcast through
# the whole daemon) keeps a worker at 0 execs/s for up to a minute per input.
FUZZTIME ?= 10s
FUZZMINIMIZETIME ?= 5s
fuzz:
	@set -e; for d in $$(grep -rl --include='*_test.go' '^func Fuzz' . | grep -v '^./bench/' | xargs -n1 dirname | sort -u); do \
		for f in $$($(GO) test -list '^Fuzz' $$d | grep '^Fuzz'); do \
			echo "== $$d $$f ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) $$d; \
		done; \
	done

# bench runs every benchmark in bench/ (short, a few minutes) and writes one
# Markdown table to stdout and bench/results/latest.md; bench-full runs the
# long versions. bench-deps first installs Debian's redis-server for
# bench/locks when it is missing and apt-get can (root or sudo -n); if it
# cannot, the report's Redis rows say "not measured" and why.
.PHONY: bench-deps
bench-deps:
	@command -v redis-server >/dev/null 2>&1 || { \
		s=""; [ "$$(id -u)" -ne 0 ] && s="sudo -n"; \
		if command -v apt-get >/dev/null 2>&1 && { [ -z "$$s" ] || sudo -n true 2>/dev/null; }; then \
			echo "installing redis-server for bench/locks"; \
			{ $$s apt-get update -qq && $$s env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; } || \
				echo "could not install redis-server: the report's Redis rows will say so"; \
		else \
			echo "redis-server is missing and apt-get cannot install it here: the report's Redis rows will say so"; \
		fi; }

bench: bench-deps
	cd bench && $(GO) run ./report/run

bench-full: bench-deps
	cd bench && $(GO) run ./report/run -full

.PHONY: soak
# soak runs the chaos soak (e2e TestSoak, docs/reliability.md) for
# SOAK_DURATION: the real binary SIGKILLed at random and at named
# failpoints under a mixed workload, then checked. `make test` runs a 40 s
# version (CI sets SOAK_DURATION=3m in .ci/run); SOAK_REPORT=<file> also
# writes the printed summary there.
# SOAK_CLUSTER=1 runs the cluster variant instead (e2e TestClusterSoak: 3
# replicas on 3 etcd members and 3 nats-server processes, the leader killed
# or paused, NATS servers killed and etcd members stopped at random).
SOAK_DURATION ?= 5m
SOAK_CLUSTER ?=
soak:
ifeq ($(SOAK_CLUSTER),1)
	SOAK_CLUSTER=1 SOAK_DURATION=$(SOAK_DURATION) $(GO) test -count=1 -run '^TestClusterSoak$$' -v -timeout 2h ./e2e/
else
	SOAK_DURATION=$(SOAK_DURATION) $(GO) test -count=1 -run '^TestSoak$$' -v -timeout 2h ./e2e/
endif

.PHONY: devcluster
# devcluster starts a local cluster-mode hostd on loopback: 3 etcd members
# (the real etcd server, in the hostd-devcluster process) and 3 hostd
# replicas (bin/hostd) on 127.0.0.1:7071-7073; Ctrl-C stops everything.
# State stays in ./devcluster (delete it for a fresh cluster).
# DEVCLUSTER_FLAGS passes flags (-replicas, -port, -dir, ...).
devcluster: build
	$(GO) build -o bin/hostd-devcluster ./cmd/hostd-devcluster
	./bin/hostd-devcluster -hostd bin/hostd $(DEVCLUSTER_FLAGS)
