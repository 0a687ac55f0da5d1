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

.PHONY: all build install install-files release demo-runtime check short test unit kubelet-stub kubebins lint fmt-check vet staticcheck fuzz bench bench-compare demo clean crashloop explore powercut powercut-kubelet lockstep fleet

all: build

# The build's version and commit, stamped into both binaries (`kdm version`): `git describe
# --tags`, else the VERSION file; the commit from git (with -dirty for a changed tree), else
# "unknown", so that a build from an exported tree is stamped too.
VERSION ?= $(shell git describe --tags --dirty 2>/dev/null || cat VERSION 2>/dev/null || echo unknown)
COMMIT  ?= $(shell c=$$(git rev-parse --short=12 HEAD 2>/dev/null) || c=unknown; \
             if [ "$$c" != unknown ] && ! git diff --quiet HEAD 2>/dev/null; then c=$$c-dirty; fi; echo $$c)
STAMP   := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

build:
	@echo "make build: compiling every package, then bin/kdm and bin/kdm-nvml-plugin (a cold build cache compiles the Kubernetes libraries first: minutes; -v lists each package)"
	$(GO) build $(PKGS)
	@mkdir -p $(BIN)
	@for c in $$(ls cmd 2>/dev/null); do $(GO) build -ldflags "$(STAMP)" -o $(BIN)/$$c ./cmd/$$c || exit 1; done

## release: static, stripped (-s -w), -trimpath, version-stamped binaries and their SHA256SUMS
## in $(RELEASE_DIR), each checked to be under 40 MB. kdm is linked fully static; the GPU plugin
## links Go statically but glibc dynamically, because it dlopen()s libnvidia-ml.so.1, which a
## static glibc cannot load (docs/install.md). grpcnotrace leaves out gRPC's x/net/trace, whose
## html/template keeps every exported method of every type in the binary (66 MB instead of 40).
## A cold build compiles everything again.
RELEASE_DIR ?= $(BIN)/release
RELEASE_MAX_BYTES ?= 41943040
RELEASE_FLAGS := -trimpath -tags netgo,osusergo,grpcnotrace
release:
	@rm -rf $(RELEASE_DIR) && mkdir -p $(RELEASE_DIR)
	@echo "make release: $(VERSION) (commit $(COMMIT)) into $(RELEASE_DIR); step 1 of 2: kdm"
	$(GO) build $(RELEASE_FLAGS) -ldflags "-s -w $(STAMP) -linkmode external -extldflags -static" -o $(RELEASE_DIR)/kdm ./cmd/kdm
	@echo "make release: step 2 of 2: kdm-nvml-plugin"
	$(GO) build $(RELEASE_FLAGS) -ldflags "-s -w $(STAMP)" -o $(RELEASE_DIR)/kdm-nvml-plugin ./cmd/kdm-nvml-plugin
	cd $(RELEASE_DIR) && sha256sum kdm kdm-nvml-plugin > SHA256SUMS
	@for f in $(RELEASE_DIR)/kdm $(RELEASE_DIR)/kdm-nvml-plugin; do \
	  n=$$(stat -c %s $$f); printf '%s: %d bytes (%d MiB)\n' $$f $$n $$((n / 1048576)); \
	  if [ $$n -ge $(RELEASE_MAX_BYTES) ]; then echo "make release: $$f is over $(RELEASE_MAX_BYTES) bytes" >&2; exit 1; fi; \
	done
	@cat $(RELEASE_DIR)/SHA256SUMS
	$(RELEASE_DIR)/kdm version

## install: the binaries into $(DESTDIR)$(PREFIX)/bin, then install-files. Then:
## systemctl daemon-reload && systemctl enable --now kdm (docs/install.md).
## install-files: the systemd units kdm.service and kdm-nvml-plugin.service into
## $(DESTDIR)$(UNITDIR), and their flags files into $(DESTDIR)$(SYSCONFDIR)/default/ (an existing
## flags file is kept; the new defaults are in deploy/).
PREFIX     ?= /usr/local
SYSCONFDIR ?= /etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
UNITS      := kdm kdm-nvml-plugin
install: install-files
	@mkdir -p $(BIN)
	@for c in $(UNITS); do echo "building $(BIN)/$$c $(VERSION) (commit $(COMMIT))"; \
	  $(GO) build $(RELEASE_FLAGS) -ldflags "-s -w $(STAMP)" -o $(BIN)/$$c ./cmd/$$c || exit 1; done
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN)/kdm $(BIN)/kdm-nvml-plugin $(DESTDIR)$(PREFIX)/bin/

install-files:
	install -d $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/default
	@for u in $(UNITS); do \
	  sed -e 's|@BINDIR@|$(PREFIX)/bin|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' deploy/$$u.service > $(DESTDIR)$(UNITDIR)/$$u.service && \
	  chmod 0644 $(DESTDIR)$(UNITDIR)/$$u.service && echo "installed $(DESTDIR)$(UNITDIR)/$$u.service" || exit 1; \
	  if [ -e $(DESTDIR)$(SYSCONFDIR)/default/$$u ]; then \
	    echo "kept $(DESTDIR)$(SYSCONFDIR)/default/$$u (the new defaults: deploy/$$u.env)"; \
	  else install -m 0644 deploy/$$u.env $(DESTDIR)$(SYSCONFDIR)/default/$$u && echo "installed $(DESTDIR)$(SYSCONFDIR)/default/$$u" || exit 1; fi; \
	done

## check: the inner loop: formatting, vet, staticcheck and the race-enabled short tests, which
## skip what needs a kube-apiserver, a browser, the whole conformance suite or a crash loop.
## About three minutes warm; `make test` runs everything.
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

## powercut: the power-cut suite alone (also part of `make test`, through `unit`): the
## internal/powercut file system's own tests, and kdm's Allocate, garbage collection, health
## flips, spares and restore cut at every file-system op under every policy. Needs /dev/fuse;
## the tests skip without it unless KDM_REQUIRE_FUSE is set (CI sets it). About 30 s.
powercut:
	$(GO) test -race -count=1 -timeout 5m ./internal/powercut
	$(GO) test -race -count=1 -timeout 5m -run 'TestPowerCut' -v ./devicemanager

## powercut-kubelet: the newest kubelet's own device manager (test/upstreambench's own module) and kdm under every policy through
## the same power cuts (nested module test/upstreambench); prints, per manager, how many cut
## points lose an allocation whose Allocate returned (docs/defects.md quotes it). Compiles a
## large part of k8s.io/kubernetes on a cold build cache.
powercut-kubelet:
	cd test/upstreambench && $(GO) test -count=1 -timeout 10m -run 'TestPowerCutKubelet' -v .

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

## crashloop: the crash-loop e2e check, KDM_CRASHLOOP_ROUNDS seeded rounds per policy (300 unless
## given; KDM_CRASHLOOP_SEED replays a run). The timeout scales with the rounds.
KDM_CRASHLOOP_ROUNDS ?= 300
crashloop:
	KDM_CRASHLOOP_ROUNDS=$(KDM_CRASHLOOP_ROUNDS) $(GO) test -race -count=1 -v -timeout $$(( 10 + $(KDM_CRASHLOOP_ROUNDS) / 2 ))m -run TestCrashLoop ./e2e/

## fleet: FLEET_NODES kdm agents (real processes, mock GPUs) on one real kube-apiserver, etcd,
## kube-scheduler and kube-controller-manager; ten GPU pods per node through Deployments and
## Jobs; a steady window; an apiserver restart, an etcd restart, a tenth of the nodes killed and
## a node cut off in its own network namespace (as root), each checked for nothing lost. Writes
## the figures of docs/fleet.md and docs/fleet-*.svg. About 15 minutes with 100 nodes.
FLEET_NODES ?= 100
fleet: kubebins
	nice -n 10 $(GO) run ./e2e/fleet/cmd/kdm-fleet --nodes $(FLEET_NODES) --out docs

## demo: the tour on an embedded default: manager, mock GPUs, sample pods, checkpoint, restart.
demo:
	@$(GO) run ./internal/buildprogress -- $(GO) build -ldflags "$(STAMP)" -o $(BIN)/kdm ./cmd/kdm
	$(BIN)/kdm demo

## demo-runtime: a GPU pod as a real container. Installs Debian's containerd and runc when they
## are missing, starts a private containerd, builds the probe image locally (no registry), makes
## device nodes for the mock GPUs, runs kdm and the GPU plugin, prints what the container saw
## and that its GPUs are free again, and stops everything. Needs root.
demo-runtime:
	@$(GO) run ./internal/buildprogress -- $(GO) build -ldflags "$(STAMP)" -o $(BIN)/ ./cmd/kdm ./cmd/kdm-nvml-plugin ./internal/demoruntime
	$(BIN)/demoruntime --bin $(BIN)

clean:
	rm -rf $(BIN)

## lockstep: the lockstep check of the simulator against the real manager (docs/explore.md):
## LOCKSTEP_SEEDS random runs per policy (default 10,000), each replayed step for step through
## the real manager over real sockets, comparing what both show after every step.
LOCKSTEP_SEEDS ?= 10000
lockstep:
	LOCKSTEP_SEEDS=$(LOCKSTEP_SEEDS) $(GO) test -count=1 -timeout 0 -run '^TestLockstep$$' -v ./explore/
