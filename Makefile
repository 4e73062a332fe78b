# The two commands of the README: `make demo` runs the main job against the
# simulated lab, `make test` runs every test.
GO ?= go
export GO

.PHONY: all build deps drop-points test test-under-load vet bench demo lab-down clean

all: build

# mgmtctl, the lab, upstream's cluster-api-operator and clusterctl (built
# from their Go modules in lab/upstream, a module of its own: their
# dependency set is not the lab's) and upstream's cert-manager (lab/
# certmanager), one line per step (hack/build.sh).
build:
	@bash hack/build.sh

vet:
	$(GO) vet ./...
	cd lab && $(GO) vet ./...
	cd lab/upstream && $(GO) mod verify >/dev/null
	cd lab/certmanager && $(GO) vet ./... && for m in v*.mod; do $(GO) vet -modfile=$$m ./... || exit 1; done

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

# Every step boundary of a fresh apply with each host it talks to dropped
# off the network (about an hour; DROP_POINTS=regexp narrows it).
drop-points:
	cd lab && MGMTCTL_DROP_POINTS=1 $(GO) test -count=1 -timeout 240m -run 'TestDropPoints$$|TestHADropDuringRollingUpgrade' -v ./e2e/

deps:
	@bash hack/install-deps.sh

demo: deps build
	@./hack/demo.sh

clean:
	rm -rf $(BIN)

lab-down:
	bin/labsim down --dir .lab
