# The two commands README.md promises: `make demo` and `make test`.
GO ?= go
BIN := bin/ratebatch

.PHONY: all build demo test test-go test-long test-triton test-deploy lint fuzz fuzz-ci bench clean generate proto-tools

all: build

build:
	$(GO) build -buildvcs=auto -o $(BIN) ./cmd/ratebatch

## demo: the embedded default (emulator + proxy + load, then a report)
demo: build
	./$(BIN) demo

## test: everything CI runs
test: lint test-go fuzz-ci test-triton test-deploy

## test-deploy: Dockerfile, docker-compose.yml, Kubernetes manifests, Prometheus and Grafana, checked offline
test-deploy:
	scripts/validate-deploy.sh

## test-triton: real Triton (PyTriton) and Triton's own clients, direct and through the proxy
test-triton: build
	RATEBATCH_BIN=$(CURDIR)/$(BIN) tests/triton/run.sh

## lint: gofmt, go vet, staticcheck (pinned, installed by scripts/setup-go-tools.sh), a tidy go.mod
## and govulncheck (scripts/vulncheck.sh)
TOOLS := $(CURDIR)/bin/tools
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GO=$(GO) scripts/setup-go-tools.sh staticcheck >/dev/null
	$(TOOLS)/staticcheck ./...
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run 'go mod tidy'"; exit 1; }
	@# govulncheck ./... with the vulnerability database built from the
	@# golang.org/x/vulndb module (Go module proxy), not vuln.go.dev: it runs
	@# offline. It fails on a vulnerable module the code reaches; findings in
	@# the standard library (fixed by a newer Go release) are printed, and fail
	@# only with VULNCHECK_STRICT=1. Without the module proxy it is skipped
	@# with a message: lint never fails for want of the network.
	GO=$(GO) scripts/vulncheck.sh

# In CI the generated-code check must run, not skip: install protoc first.
# Headless Chromium (scripts/setup-chromium.sh) tests the live page /ui.
# bin/testprogress prints each package's result as it finishes and, every
# 20 s, which packages still run.
test-go:
	@if [ "$$CI" = true ]; then GO=$(GO) scripts/setup-proto.sh >/dev/null; fi
	scripts/setup-chromium.sh
	@# The docs test runs README's perf_analyzer commands: it needs the venv.
	scripts/setup-python.sh >/dev/null
	$(GO) build -o bin/testprogress ./lab/testprogress
	RATEBATCH_REQUIRE_CHROMIUM=1 bash -o pipefail -c '$(GO) test -race -count=1 -json ./... | bin/testprogress'
	@# The end-to-end tests whose assertions are timings live in one package,
	@# server/timing; they skip under -race (the detector slows the proxy
	@# several times over) and run here without it. Among them the budget's
	@# promise, live (TestBudgetLivePoissonBound, TestBudgetLiveOnPaper300:
	@# concurrent pairs of ad-hoc and budget on their own proxy and emulator).
	$(GO) test -count=1 -timeout 20m ./server/timing
	@# A production load's bursts exported and replayed, and the what-if on
	@# them: the shape a load keeps is a timing too.
	$(GO) test -count=1 -run '^TestArrivalsReplayWithLoadAndWhatIf$$' ./cmd/ratebatch
	@# The default policy's promise on every preset: constrained optima
	@# near saturation, minutes under the race detector.
	$(GO) test -count=1 -short -run '^TestDefaultPolicyNeverHurts$$' ./lab/sim

## test-long: every RATEBATCH_LONG-gated test, the figures of docs/LEARNING.md
## and docs/results/ (Go: the packages whose tests read RATEBATCH_LONG or
## servertest.Long; Python: the long tests of tests/triton); without -race.
## Not in `make test` (CI): it is the figures' longer versions. The tests of
## the product's promises run in `make test` in their short form: the
## budget's live bound and paper300 (server/timing) and README's joules
## table (docs, TestReadmeJoulesTableIsReproduced).
LONG_PY_K = $(shell grep -l RATEBATCH_LONG tests/triton/test_*.py | xargs -n1 basename | sed 's/\.py$$//' | paste -sd' ' - | sed 's/ / or /g')
LONG_GO_PKGS = $(sort $(dir $(shell grep -rl --include='*_test.go' -e RATEBATCH_LONG -e 'servertest.Long()' .)))
test-long: build
	@status=0; \
	RATEBATCH_LONG=1 $(GO) test -count=1 -timeout 60m -v $(LONG_GO_PKGS) || status=1; \
	RATEBATCH_LONG=1 RATEBATCH_BIN=$(CURDIR)/$(BIN) tests/triton/run.sh -k '$(LONG_PY_K)' || status=1; \
	exit $$status

## generate: regenerate the committed gRPC code from kserve/inference/inference.proto
generate: proto-tools
	cd kserve/inference && PATH="$(TOOLS):$$PATH" protoc -I. \
	  --go_out=. --go_opt=paths=source_relative \
	  --go-grpc_out=. --go-grpc_opt=paths=source_relative inference.proto

proto-tools:
	GO=$(GO) scripts/setup-proto.sh >/dev/null

## fuzz: run every fuzz target for FUZZTIME each (default 30s)
FUZZTIME ?= 30s
fuzz:
	scripts/fuzz.sh $(FUZZTIME)

## fuzz-ci: every fuzz target briefly, as CI runs them (about 2 minutes)
fuzz-ci:
	scripts/fuzz.sh 5s

## bench: the Go benchmarks recorded in docs/results/benchmarks.md
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin
