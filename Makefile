# The two commands of the README: `make demo` runs the main job against the
# simulated lab, `make test` runs every test.
GO ?= go
BIN := bin
KUBE_LDFLAGS := -X k8s.io/component-base/version.gitVersion=v1.36.3 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36
# Upstream's own controllers and CLI, built from their Go modules in
# lab/upstream (a module of its own: their dependency set is not the
# lab's), stamped with their versions as upstream's release builds are.
OPERATOR_VERSION := v0.28.0
CLUSTERCTL_VERSION := v1.12.10

.PHONY: all build deps test test-under-load vet bench demo lab-down clean

all: build

build:
	$(GO) build -o $(BIN)/mgmtctl ./cmd/mgmtctl
	cd lab && $(GO) build -o ../$(BIN)/labsim ./cmd/labsim && $(GO) build -ldflags "$(KUBE_LDFLAGS)" -o ../$(BIN)/k3s ./cmd/k3s && $(GO) build -ldflags "$(KUBE_LDFLAGS)" -o ../$(BIN)/kubectl ./cmd/kubectl
	cd lab/upstream && $(GO) build -ldflags "-X sigs.k8s.io/cluster-api-operator/version.gitVersion=$(OPERATOR_VERSION)" -o ../../$(BIN)/cluster-api-operator-$(OPERATOR_VERSION) sigs.k8s.io/cluster-api-operator/cmd \
		&& $(GO) build -ldflags "-X sigs.k8s.io/cluster-api/version.gitVersion=$(CLUSTERCTL_VERSION)" -o ../../$(BIN)/clusterctl sigs.k8s.io/cluster-api/cmd/clusterctl

vet:
	$(GO) vet ./...
	cd lab && $(GO) vet ./...
	cd lab/upstream && $(GO) mod verify >/dev/null

# Unit tests, then the lab's own tests, then the end-to-end tests of the
# phases against the lab (these need root; without it they skip, saying why).
test: vet
	$(GO) test -count=1 ./...
	cd lab && $(GO) test -count=1 -timeout 60m ./...

# The lab's tests with a CPU hog on every core beside them, RUNS times
# (default 3): what a busy shared CI runner does to timing.
test-under-load:
	RUNS=$${RUNS:-3} ./hack/under-load.sh sh -c 'cd lab && $(GO) test -count=1 -timeout 60m ./...'

# Benchmarks: the tool's own (real sshd on loopback), then a converged
# apply and status against the lab (needs root; one lab, about a minute to
# set up).
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
	cd lab && $(GO) test -run '^$$' -bench . -benchtime 10x -timeout 20m ./e2e/

deps:
	bash hack/install-deps.sh

demo: deps build
	./hack/demo.sh

clean:
	rm -rf $(BIN)

lab-down:
	bin/labsim down --dir .lab
