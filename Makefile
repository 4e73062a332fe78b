# The two commands of the README: `make demo` runs the main job against the
# simulated lab, `make test` runs every test.
GO ?= go
BIN := bin

.PHONY: all build test vet bench demo clean

all: build

build:
	$(GO) build -o $(BIN)/mgmtctl ./cmd/mgmtctl

vet:
	$(GO) vet ./...

test: vet
	$(GO) test -count=1 ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

demo: build
	./hack/demo.sh

clean:
	rm -rf $(BIN)
