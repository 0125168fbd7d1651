# podlab: see README.md. Root targets (demo, test, bench) need sudo.
GO       ?= go
BIN      := bin
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
PREFIX   ?= /usr/local
LDFLAGS  := -s -w -X main.version=$(VERSION)
# seccomp: libcontainer loads seccomp filters through libseccomp (cgo,
# libseccomp-dev from setup). Without the tag podlab refuses a container
# that asks for a profile rather than run it unconfined. Every build and
# test of podlab and its shim uses these tags (root tests build the shim
# with the tags of their own test binary).
GOTAGS   ?= seccomp
export PATH := $(PATH):/usr/local/go/bin

.PHONY: all build setup setup-demo install demo kubelet kubelet-demo bench-kubelet cluster-bins cluster-demo test-cluster test unit-test fuzz flake soak bench lint clean docs check-docs critest

all: build

build:
	$(GO) build -tags '$(GOTAGS)' -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/podlab ./cmd/podlab
	$(GO) build -tags '$(GOTAGS)' -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/podlab-shim ./cmd/podlab-shim
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o $(BIN)/podlab-pause ./pause

# setup installs what the tests need; setup-demo only what the demo needs;
# critest's own target adds critest (see scripts/setup.sh).
setup:
	./scripts/setup.sh test

setup-demo:
	./scripts/setup.sh demo

install: build
	install -m 0755 $(BIN)/podlab $(BIN)/podlab-shim $(BIN)/podlab-pause $(PREFIX)/bin/

demo: setup-demo build
	./scripts/setup.sh demo
	./scripts/demo.sh

# Unit tests need no root; root tests run when root (and fail when CI=true
# without it). -p 1: root tests of different packages share the host, and
# each one's leak check must not see another's pods.
# The real kubelet (built from the module proxy by scripts/build-kubelet.sh,
# cached in /var/cache/podlab) drives podlab serve with a static pod.
kubelet-demo: setup build
	./scripts/kubelet-demo.sh

# A kubeadm node on podlab (scripts/cluster.sh up), workloads, kubectl's
# streaming verbs, then scripts/cluster.sh down and a leak check. The
# Kubernetes binaries, etcd and CoreDNS are built once (tens of minutes
# cold) and cached under /var/cache/podlab.
cluster-demo: setup build cluster-bins
	./scripts/cluster-demo.sh

# The kubeadm node e2e test alone (builds the cluster's binaries first).
test-cluster: setup build cluster-bins
	$(GO) test -tags '$(GOTAGS)' -count=1 -timeout 30m -run '^TestClusterKubeadm$$' -v ./test/e2e

cluster-bins: kubelet
	./scripts/build-k8s.sh >/dev/null
	./scripts/build-etcd-coredns.sh >/dev/null

# The kubelet e2e test drives the real kubelet: built (or found in its
# cache outside the clone) before the tests, not inside one under go
# test's timeout. The timeout covers the whole root suite on 2 cores.
test: setup build cluster-bins
	$(GO) test -tags '$(GOTAGS)' -p 1 -count=1 -timeout 30m ./...

kubelet:
	./scripts/build-kubelet.sh >/dev/null

unit-test:
	$(GO) test -tags '$(GOTAGS)' ./...

# Fuzz each target for FUZZTIME (CI: a short bounded run; longer by hand).
# Go minimizes every input that finds new coverage, for up to 60 s each by
# default: a 15 s run then spends its time minimizing, not fuzzing
# (FuzzUnpackLayer made 131 executions in 15 s). FUZZMINIMIZE bounds that.
FUZZTIME ?= 15s
FUZZMINIMIZE ?= 100x
FUZZFLAGS = -tags '$(GOTAGS)' -run '^$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE)
fuzz:
	$(GO) test $(FUZZFLAGS) -fuzz '^FuzzParse$$' ./internal/manifest
	$(GO) test $(FUZZFLAGS) -fuzz '^FuzzExpand$$' ./runtime/env
	$(GO) test $(FUZZFLAGS) -fuzz '^FuzzUnpackLayer$$' ./rootfs
	$(GO) test $(FUZZFLAGS) -fuzz '^FuzzCRIToOCI$$' ./runtime
	$(GO) test $(FUZZFLAGS) -fuzz '^FuzzGrammar$$' ./rootfs

# The unit tests many times under CPU and I/O load (stress-ng): any failure
# is a flaky test. CI runs this short version; the long one is
# `make flake PAUSE_RUNS=500 UNIT_RUNS=50`.
PAUSE_RUNS ?= 30
UNIT_RUNS ?= 2
flake:
	GOTAGS='$(GOTAGS)' PAUSE_RUNS=$(PAUSE_RUNS) UNIT_RUNS=$(UNIT_RUNS) ./scripts/flake.sh

# docs/*.md from docs/src/*.md.in, with real (masked) podlab output.
docs: setup build
	./scripts/setup.sh test
	./scripts/gen-docs.sh

# What CI checks: the docs have not drifted, and every example runs.
check-docs: setup build
	./scripts/setup.sh test
	./scripts/check-docs.sh

# 1,000 cycles sequentially and at concurrency 4, then a leak check, then
# the CRI load: 8 gRPC clients × CRI_CYCLES pod cycles (tens of minutes).
soak: setup build
	GOTAGS='$(GOTAGS)' ./scripts/soak.sh -n $(or $(N),1000) -c 4 -l $(or $(CRI_CYCLES),200)

# critest (cri-tools' CRI validation suite) against podlab and containerd,
# docs/conformance.md from that run; fails when podlab passes fewer specs
# than test/critest-target. CRITEST_FLAGS=--benchmark adds critest
# -benchmark and the "Through the CRI" section of docs/benchmarks.md.
critest: setup build
	./scripts/setup.sh critest
	./scripts/critest.sh $(CRITEST_FLAGS)

bench: setup build
	$(GO) test -tags '$(GOTAGS)' -run '^$$' -bench . -benchtime 200x ./...

lint:
	$(GO) vet -tags '$(GOTAGS)' ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 -tags '$(GOTAGS)' ./...

clean:
	rm -rf $(BIN)
