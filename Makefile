# redlock-operator — developer entry points. `make test` is what CI runs (via .ci/run).
CARGO ?= cargo
BIN := target/debug/redlock-operator

.PHONY: test fmt fmt-check clippy unit build crds controlplane

## test: formatting, lints, and every test of the workspace (unit, CRD drift, integration)
test: fmt-check clippy
	$(CARGO) test --workspace --all-targets

fmt:
	$(CARGO) fmt --all

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## build: the operator binary (release)
build:
	$(CARGO) build --release --bin redlock-operator

## crds: regenerate crds/redlockcluster.yaml from the Rust types
crds:
	$(CARGO) run --quiet --bin redlock-operator -- crd > crds/redlockcluster.yaml

## controlplane: build (or reuse from ~/.cache) kube-apiserver, etcd, … into target/dev/bin
controlplane:
	tests/controlplane/build.sh
