# The two commands of the README: `make demo` runs the main job against the
# simulated lab, `make test` runs every test.
GO ?= go
BIN := bin

.PHONY: all build test vet bench demo lab-down clean

all: build

build:
	$(GO) build -o $(BIN)/mgmtctl ./cmd/mgmtctl
	cd lab && $(GO) build -o ../$(BIN)/labsim ./cmd/labsim && $(GO) build -o ../$(BIN)/k3s ./cmd/k3s

vet:
	$(GO) vet ./...
	cd lab && $(GO) vet ./...

# Unit tests, then the lab's own tests, then the end-to-end tests of the
# phases against the lab (these need root; without it they skip, saying why).
test: vet
	$(GO) test -count=1 ./...
	cd lab && $(GO) test -count=1 ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

demo: build
	./hack/demo.sh

clean:
	rm -rf $(BIN)

lab-down:
	bin/labsim down --dir .lab
