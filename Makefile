# The two commands of the README: `make demo` runs the main job against the
# simulated lab, `make test` runs every test.
GO ?= go
export GO

.PHONY: all build deps drop-points test test-unit test-race-e2e test-under-load vet bench demo lab-down clean

all: build

# mgmtctl, the lab, upstream's cluster-api-operator and clusterctl (built
# from their Go modules in lab/upstream, a module of its own: their
# dependency set is not the lab's) and upstream's cert-manager (lab/
# certmanager) and versitygw, the lab's S3 (lab/s3gw), one line per step
# (hack/build.sh).
build:
	@bash hack/build.sh

vet:
	bash hack/modules-aligned.sh
	@out=$$(gofmt -l cmd internal hack lab); [ -z "$$out" ] || { echo "gofmt would change:"; echo "$$out"; exit 1; }
	$(GO) vet ./...
	cd lab && $(GO) vet ./...
	cd lab/upstream && $(GO) mod verify >/dev/null
	cd lab/s3gw && $(GO) mod verify >/dev/null
	cd lab/certmanager && $(GO) vet ./... && for m in v*.mod; do $(GO) vet -modfile=$$m ./... || exit 1; done

# How many of a test binary's lab tests run at once (t.Parallel): each
# lab test runs in a lab of its own, and much of a lab test's time is
# waiting. At 2 the lab's packages left the 2 cores 29 % idle; at 3 they
# kept them about 88 % busy and took a sixth less time; at 4 (up to
# eight labs, with two packages) the suite ran them 97.6 % busy for 36
# minutes, and a lab of three servers starved of CPU lost its k3s leases
# mid-apply. docs/testing.md has the figures.
PARALLEL ?= 3
export PARALLEL

# Unit tests, then the lab's own tests, then the end-to-end tests of the
# phases against the lab, with the binaries make build put in bin/. These
# need root and OpenSSH's server: where they cannot run, make test fails
# saying so rather than pass having tested nothing (make test-unit runs
# the unit tests alone). TestHA and TestHARestore run mgmtctl built with
# Go's race detector (test-race-e2e, below): a data race in the checks
# run side by side fails them. go test's own vet is off: make vet, which
# test depends on, has run every analyzer of go vet on every package.
# The lab's test binaries are linked without their symbol table and DWARF
# (-s -w, as the lab's binaries are): a test binary is linked on every
# run, and a dozen of them hold Kubernetes' libraries. MGMTCTL_BIN_BUILT
# tells the lab's tests that bin/ was just brought up to date (labtest).
# PARALLEL labs of a package run at once, handed out longest test first
# by labtest's own queue (MGMTCTL_LAB_SLOTS): go test's -parallel is set
# above it, as go test starts its parallel tests in no set order.
test: vet
	@[ "$$(id -u)" = 0 ] || { echo "make test runs the lab's tests, which need root: run hack/install-deps.sh as root, then make test as root (make test-unit runs the unit tests alone)" >&2; exit 1; }
	@bash hack/build.sh all
	@bash hack/build.sh race
	$(GO) test -race -vet=off -count=1 ./...
	cd lab && MGMTCTL_BIN_BUILT=$(CURDIR) MGMTCTL_E2E_RACE=1 MGMTCTL_LAB_SLOTS=$(PARALLEL) $(GO) test -vet=off -ldflags='-s -w' -count=1 -timeout 60m -parallel 64 ./...

# The unit tests alone (-short: every test that needs a lab skips).
test-unit: vet
	$(GO) test -count=1 -short ./...
	cd lab && $(GO) test -count=1 -short ./...

# The end-to-end tests of a cluster of servers (TestHA: a first apply, the
# build of the haBackedUp template they both start from, a rolling change
# behind the quorum gate; TestHARestore: restores from S3 and from the
# laptop, their rejoins, a restore killed and redone) with mgmtctl built with Go's race
# detector: a race it reports fails the test. make test runs them so too,
# beside the others; this runs them alone.
test-race-e2e:
	@bash hack/build.sh all
	@bash hack/build.sh race
	cd lab && MGMTCTL_E2E_RACE=1 $(GO) test -count=1 -timeout 60m -run 'TestHA$$|TestHARestore$$' -v ./e2e/

# The lab's tests with a CPU hog on every core beside them, RUNS times
# (default 3): what a busy shared CI runner does to timing.
test-under-load:
	@bash hack/build.sh all
	RUNS=$${RUNS:-3} ./hack/under-load.sh sh -c 'cd lab && $(GO) test -count=1 -timeout 60m -parallel $(PARALLEL) ./...'

# Benchmarks: the tool's own (real sshd on loopback), then a converged
# apply and status against the lab (needs root; one lab, about a minute to
# set up).
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
	cd lab && MGMTCTL_BENCH_BASELINE=$(BASELINE) $(GO) test -run '^$$' -bench . -benchtime 10x -timeout 30m ./e2e/

# Every step boundary of a fresh apply with each host it talks to dropped
# off the network (about an hour; DROP_POINTS=regexp narrows it), and a
# restore of three servers killed as each of its steps starts.
drop-points:
	cd lab && MGMTCTL_DROP_POINTS=1 $(GO) test -count=1 -timeout 240m -run 'TestDropPoints$$|TestHADropDuringRollingUpgrade|TestRestoreKillPoints' -v ./e2e/

deps:
	@bash hack/install-deps.sh

# The demo builds only what it runs, not what only the tests need: mgmtctl
# and the lab first (hack/build.sh lab), then upstream's cert-manager and
# operator beside the lab as it starts (hack/demo.sh).
demo: deps
	@bash hack/build.sh lab
	@./hack/demo.sh

clean:
	rm -rf bin

lab-down:
	bin/labsim down --dir .lab
