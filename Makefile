# kdm build, test and demo entry points. `make test` is what CI runs; `make check` is the
# inner loop.
GO            ?= go
# staticcheck is pinned by the `tool` directive in go.mod (honnef.co/go/tools v0.8.2).
STATICCHECK   ?= $(GO) tool staticcheck
FUZZTIME      ?= 20000x
BENCHTIME     ?= 1s
BIN           ?= bin
PKGS          ?= ./...
# go-nvml's cgo bindings use NVML calls its header marks deprecated; keep builds readable.
export CGO_CFLAGS ?= -Wno-deprecated-declarations

.PHONY: all build check short test unit kubelet-stub kubebins lint fmt-check vet staticcheck fuzz bench bench-compare demo clean crashloop explore

all: build

build:
	$(GO) build $(PKGS)
	@mkdir -p $(BIN)
	@for c in $$(ls cmd 2>/dev/null); do $(GO) build -o $(BIN)/$$c ./cmd/$$c || exit 1; done

## check: the inner loop: formatting, vet, staticcheck and the race-enabled short tests, which
## skip what needs a kube-apiserver, a browser, the whole conformance suite or a crash loop.
## About 70 s warm; `make test` runs everything.
check: lint short

# The short tests mostly wait on sockets and child processes, not the CPU: run at least four
# test binaries at once, even on a 2-core machine (go test's default is one per core).
SHORT_P ?= $(shell n=$$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1); echo $$(( n < 4 ? 4 : n )))

short:
	$(GO) test -short -race -count=1 -p $(SHORT_P) -timeout 5m $(PKGS)

## test: everything CI requires: formatting, vet, staticcheck, race-enabled tests (the API
## server tests among them, against a real kube-apiserver and etcd), and the kubelet's own
## device-plugin stub against kdm (a nested module: test/kubeletstub).
test: lint kubebins unit kubelet-stub

## kubebins: build the test cluster's kube-apiserver, kube-scheduler, kube-controller-manager and
## etcd (nested module test/kubebins), cached by a hash of that module's files; minutes cold,
## instant when cached.
kubebins:
	$(GO) run ./e2e/kubecluster/kubebins

lint: fmt-check vet staticcheck

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

staticcheck:
	$(STATICCHECK) $(PKGS)

unit:
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

kubelet-stub:
	cd test/kubeletstub && $(GO) vet ./... && $(GO) test -count=1 -timeout 10m ./...

## fuzz: run every fuzz target for FUZZTIME each; the corpus lives in testdata/fuzz.
fuzz:
	@for spec in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
	  for f in $$(grep -h '^func Fuzz' $$spec/*_test.go | sed 's/func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
	    echo "fuzz $$spec $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$spec || exit 1; \
	  done; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

## bench-compare: every supported kubelet minor's own device manager (the rows of
## devicemanager/kubelets.go) and kdm through the same benchmarks, in interleaved rounds
## (nested module test/upstreambench for the newest, test/upstreambench/kubelet-<minor> for
## each older one); prints one table per kubelet and writes them into docs/benchmarks.md. BENCH_ROUNDS rounds (default 5) of BENCHTIME per benchmark.
bench-compare:
	cd test/upstreambench && $(GO) run ./cmd/benchcompare -rounds $${BENCH_ROUNDS:-5} -benchtime $(BENCHTIME) -out ../../docs/benchmarks.md

## explore: 100,000 random runs of the simulated node under --policy kdm, and every run of every
## story in testdata/scenarios under every policy (docs/explore.md). About two minutes.
EXPLORE_SEEDS ?= 100000
# Every policy name, from the table in devicemanager/kubelets.go (evaluated only when used).
EXPLORE_POLICIES ?= $(shell $(GO) run ./internal/policynames)
explore:
	$(GO) build -o $(BIN)/kdm ./cmd/kdm
	$(BIN)/kdm explore --policy kdm --seeds $(EXPLORE_SEEDS)
	@for s in testdata/scenarios/*.txt; do \
	  for p in $(EXPLORE_POLICIES); do \
	    out=$$($(BIN)/kdm explore --policy $$p --story $$s --exhaustive 2>&1 >/dev/null | tail -1); echo "$$s $$out"; \
	  done; \
	done

## crashloop: the crash-loop e2e check, 100 seeded rounds per policy (KDM_CRASHLOOP_SEED replays a run).
crashloop:
	KDM_CRASHLOOP_ROUNDS=100 $(GO) test -race -count=1 -timeout 30m -run TestCrashLoop ./e2e/

## demo: the tour on an embedded default: manager, mock GPUs, sample pods, checkpoint, restart.
demo:
	@echo "make demo: building kdm (a cold build cache compiles the dependencies first: minutes)"
	$(GO) run ./cmd/kdm demo

clean:
	rm -rf $(BIN)
