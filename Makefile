# The two commands README.md promises: `make demo` and `make test`.
GO ?= go
BIN := bin/ratebatch

.PHONY: all build demo test test-setup test-wait test-cpu test-go test-race test-race-cpu test-race-rest test-race-wait test-norace test-timing test-soak test-long test-triton test-triton-bulk test-triton-timing test-deploy setup-go-tests lint fuzz fuzz-ci bench clean generate proto-tools

all: build

build:
	$(GO) build -buildvcs=auto -o $(BIN) ./cmd/ratebatch

## demo: the embedded default (emulator + proxy + load, then a report)
demo: build
	./$(BIN) demo

## test: everything CI runs, in three phases:
##   1. test-setup: what the checks need installed (each step idempotent).
##   2. two chains side by side (make -j2), each one target at a time:
##      test-wait, what mostly waits or needs little CPU (the Triton tests
##      that measure no time, two pytest workers; the race run of the
##      packages that wait, RACE_WAIT; fuzzing, one worker; lint; the
##      deploy checks), and test-cpu, the CPU-bound checks that measure no
##      time (the rest of the race run, the no-race packages) and the
##      soak. The two take about as long; the host's two cores are busy
##      throughout, so a check saves time only by costing less CPU.
##      Each target's output is printed whole when it ends.
##   3. alone, one after the other: server/timing, the replay of a
##      production load and the Triton tests marked timing, which hold the
##      proxy to latencies and need a quiet host.
test:
	$(MAKE) test-setup
	$(MAKE) -j2 --output-sync=target test-wait test-cpu
	$(MAKE) test-timing
	$(MAKE) test-triton-timing

test-setup: setup-go-tests
	scripts/validate-deploy.sh --install

# Phase 2's chains, each a make of its own without -j, so that each keeps
# one of the parent's two job slots: under one -j2 the CPU targets took
# both slots and the Triton tests, the longest target, waited minutes for
# one. go test ./deploy runs in the race run, so the deploy checks here
# are the Python ones (--no-go).
test-wait:
	$(MAKE) -j1 --no-print-directory PYTEST_WORKERS=2 DEPLOY_FLAGS=--no-go test-triton-bulk test-race-wait fuzz-ci lint test-deploy
test-cpu:
	$(MAKE) -j1 --no-print-directory test-race-cpu test-race-rest test-norace test-soak

## test-deploy: Dockerfile, docker-compose.yml, Kubernetes manifests, Prometheus and Grafana, checked offline
test-deploy:
	scripts/validate-deploy.sh $(DEPLOY_FLAGS)

## test-triton: real Triton (PyTriton) and Triton's own clients, direct and through the proxy
## (make test runs it in two parts: test-triton-bulk beside other checks, test-triton-timing alone)
test-triton: build
	RATEBATCH_BIN=$(CURDIR)/$(BIN) tests/triton/run.sh
# PYTEST_WORKERS: pytest-xdist's workers, each its own servers (a test
# file stays on one worker); make test runs two.
test-triton-bulk: build
	RATEBATCH_BIN=$(CURDIR)/$(BIN) tests/triton/run.sh -m 'not timing' $(if $(PYTEST_WORKERS),-n $(PYTEST_WORKERS) --dist loadfile)
test-triton-timing: build
	RATEBATCH_BIN=$(CURDIR)/$(BIN) tests/triton/run.sh -m timing

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

## test-go: the Go tests: test-race, test-norace, test-timing, test-soak
test-go: test-race test-norace test-timing test-soak

# In CI the generated-code check must run, not skip: install protoc first.
# Headless Chromium (scripts/setup-chromium.sh) tests the live page /ui.
# The docs test runs README's perf_analyzer commands: it needs the venv.
# bin/testprogress prints each package's result as it finishes and, every
# 20 s, which packages still run.
setup-go-tests:
	@if [ "$$CI" = true ]; then GO=$(GO) scripts/setup-proto.sh >/dev/null; fi
	scripts/setup-chromium.sh
	scripts/setup-python.sh >/dev/null
	$(GO) build -o bin/testprogress ./lab/testprogress

# NORACE_PKGS start no goroutine, in their code or their tests: a
# simulator and a solver on one goroutine (`go test -trace` shows only the
# testing package's goroutines; docs' TestNoRacePackagesStartNoGoroutine
# keeps `go` statements out of them). The race detector, which finds races
# between goroutines, has nothing to find there and slows their simulations
# many times over, so test-norace runs them without it; test-race runs every
# other package, each of which starts goroutines or may. A package joins the
# list only when it starts none.
NORACE_PKGS := lab/sim policy/smdp
# RACE_CPU: race-run packages whose tests are mostly computation and
# measure no time (simulations, the documents' commands); RACE_WAIT: those
# whose tests mostly wait (a kubelet's probe periods). make test runs
# them in phase 2's chains (test-race-cpu, test-race-wait) and the others
# (test-race-rest) in the CPU chain after them.
RACE_CPU := docs lab/compare cmd/ratebatch policy
RACE_WAIT := deploy
# Each race run starts the packages that take longest first, so that none
# of them is left running alone at the end (go test runs two at a time on
# two cores); the rest follow in go list's order.
RACE_FIRST := server docs lab/compare deploy cmd/ratebatch dispatcher
MODULE = $(shell $(GO) list -m)
race_all = $(addprefix $(MODULE)/,$(RACE_FIRST)) \
	$(filter-out $(addprefix $(MODULE)/,$(RACE_FIRST) $(NORACE_PKGS)),$(shell $(GO) list ./...))
race_cpu = $(filter $(addprefix $(MODULE)/,$(RACE_CPU)),$(race_all))
race_wait = $(filter $(addprefix $(MODULE)/,$(RACE_WAIT)),$(race_all))
# -ldflags=-w: test binaries without DWARF, which only a debugger reads
# (stack traces and the race detector's reports use the symbol table):
# linking a race binary per package is a large share of a race run.
race = RATEBATCH_REQUIRE_CHROMIUM=1 bash -o pipefail -c '$(GO) test -race -count=1 -ldflags=-w -json $(1) | bin/testprogress'

## test-race: every package but NORACE_PKGS under the race detector (in
## make test: test-race-cpu, test-race-wait and test-race-rest)
test-race: setup-go-tests
	$(call race,$(race_all))
test-race-cpu: setup-go-tests
	$(call race,$(race_cpu))
test-race-wait: setup-go-tests
	$(call race,$(race_wait))
test-race-rest: setup-go-tests
	$(call race,$(filter-out $(race_cpu) $(race_wait),$(race_all)))

# TestDefaultPolicyNeverHurts: the default policy's promise on every preset,
# in its short form (the long one is docs/LEARNING.md's figure).
test-norace:
	$(GO) test -count=1 -skip '^TestDefaultPolicyNeverHurts$$' $(addprefix ./,$(NORACE_PKGS))
	$(GO) test -count=1 -short -run '^TestDefaultPolicyNeverHurts$$' ./lab/sim

# The end-to-end tests whose assertions are timings live in one package,
# server/timing; they skip under -race (the detector slows the proxy
# several times over) and run here without it, with nothing else running.
# Among them the budget's promise, live (TestBudgetLivePoissonBound,
# TestBudgetLiveOnPaper300: concurrent pairs of ad-hoc and budget on their
# own proxy and emulator).
test-timing:
	$(GO) test -count=1 -timeout 20m ./server/timing
	@# A production load's bursts exported and replayed, and the what-if on
	@# them: the shape a load keeps is a timing too.
	$(GO) test -count=1 -run '^TestArrivalsReplayWithLoadAndWhatIf$$' ./cmd/ratebatch

## test-soak: a minute of faults, policy switches and hostile clients,
## judged by errors outside the fault windows and the footprint's growth
## (without the race detector, whose shadow memory would be the growth).
test-soak:
	$(GO) test -count=1 -run '^TestSoak$$' ./server

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

## fuzz-ci: every fuzz target briefly, as CI runs them: 4 s each with one
## worker (make test runs it beside other checks; two workers would double
## its CPU for twice the executions, which make fuzz is for)
fuzz-ci:
	scripts/fuzz.sh 4s 1

## bench: the Go benchmarks recorded in docs/results/benchmarks.md
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin
