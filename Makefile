# redlock-operator — developer entry points. `make test` is what CI runs (via .ci/run).
CARGO ?= cargo
DEV := target/dev
# Where cargo puts binaries (CI keeps it outside the clone via CARGO_TARGET_DIR).
BIN := $(or $(CARGO_TARGET_DIR),target)/debug

PREFIX ?= $(HOME)/.local

.PHONY: check soak version-matrix plugin nodes test fmt fmt-check clippy build crds chart controlplane redis-libc promtool clients dev-binaries demo dev-up dev-down bench bench-env bench-scale safety safety-load safety-real-nodes test-real-nodes model-check model-mutations

## test: formatting, lints, and every test of the workspace (unit, CRD drift, real control plane),
## inside the run's own namespaces (in-namespaces) with real nodes as every control plane's
## default: each control plane's nodes get a network namespace of their own, so the tests of a
## binary run TEST_THREADS (2) at a time, each with its own control plane and nodes; how many
## control planes run at once on the machine is one budget for every binary (one per core,
## REDLOCK_TEST_CONTROL_PLANES; the rest queue). Tests that need the process kubelet say so
## (docs/development.md "Real nodes").
## The test binaries themselves run TEST_BINARIES (2) at a time (tests/tools/run-test-binaries.sh),
## the longest (TEST_FIRST) first. Three at a time shortened the test phase by only about 5 %:
## each binary ran 15-25 % slower.
TEST_THREADS ?= 2
TEST_BINARIES ?= 2
TEST_FIRST ?= safety everyday_operations real_nodes hardening publishing
test: check controlplane nodes chart redis-libc promtool clients
	$(CARGO) test --workspace --lib --bins --tests --no-run
	$(CARGO) build --workspace --bins
	$(BIN)/in-namespaces env REDLOCK_TEST_NODES=real RUST_TEST_THREADS=$(TEST_THREADS) \
	  BINARIES=$(TEST_BINARIES) FIRST="$(TEST_FIRST)" CARGO="$(CARGO)" tests/tools/run-test-binaries.sh

## check: the fast loop before every commit, no control plane and no Go build: formatting,
## clippy, every unit and table test (the operator's and the test crates'), the CRD drift
## test and the CRD schema checks (tests/crd.rs), and the docs' links and anchors
## (tests/docs.rs), and that the pure folders of src/ do no I/O (tests/tools/pure-check.sh).
## `make test` runs it first.
check: fmt-check clippy
	tests/tools/pure-check.sh
	$(CARGO) test --workspace --lib --bins
	$(CARGO) test --test crd --test docs

## soak: the integration suite RUNS (5) times with LOAD (1) busy processes per core, on real
## nodes as `make test` runs it; prints per test how many runs it passed (tests/tools/soak.sh;
## TESTS="lifecycle partitions" for some binaries; logs in target/soak/)
RUNS ?= 5
LOAD ?= 1
soak: controlplane nodes redis-libc promtool
	$(CARGO) test --workspace --lib --bins --tests --no-run
	$(CARGO) build --workspace --bins
	$(BIN)/in-namespaces env REDLOCK_TEST_NODES=real RUST_TEST_THREADS=$(TEST_THREADS) \
	  BINARIES=$(TEST_BINARIES) FIRST="$(TEST_FIRST)" CARGO="$(CARGO)" RUNS=$(RUNS) LOAD=$(LOAD) tests/tools/soak.sh

## test-real-nodes: some integration test binaries on real nodes (kubelet, containerd, CNI,
## kube-proxy; Redis in containers), as `make test` runs them, inside the run's own namespaces.
## REAL_NODE_TESTS chooses the binaries, FILTER the tests, TEST_THREADS how many at once.
REAL_NODE_TESTS ?= lifecycle publishing leader_election password_rotation hardening partitions rollout everyday_operations
test-real-nodes: dev-binaries nodes
	$(CARGO) test --no-run $(addprefix --test ,$(REAL_NODE_TESTS))
	$(BIN)/in-namespaces env REDLOCK_TEST_NODES=real $(CARGO) test --offline --no-fail-fast \
	  $(addprefix --test ,$(REAL_NODE_TESTS)) -- --test-threads=$(TEST_THREADS) $(FILTER)

## chart: helm lint --strict and helm template of charts/redlock-operator (tests/chart.rs
## additionally checks the rendered objects and that bad values are refused)
chart: controlplane
	$(DEV)/bin/helm lint --strict charts/redlock-operator
	$(DEV)/bin/helm template rl charts/redlock-operator --namespace redlock-system > /dev/null

fmt:
	$(CARGO) fmt --all

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## plugin: kubectl-redlock (release) installed into $(PREFIX)/bin, where kubectl finds it as
## `kubectl redlock` (PREFIX defaults to ~/.local)
plugin:
	$(CARGO) build --release --bin kubectl-redlock
	install -D -m 0755 $(or $(CARGO_TARGET_DIR),target)/release/kubectl-redlock $(PREFIX)/bin/kubectl-redlock
	@echo "installed $(PREFIX)/bin/kubectl-redlock; try: kubectl redlock --help"

## build: the operator binary (release)
build:
	$(CARGO) build --release --bin redlock-operator

## crds: regenerate crds/redlockcluster.yaml from the Rust types (and the chart's copy)
crds:
	$(CARGO) run --quiet --bin redlock-operator -- crd > crds/redlockcluster.yaml
	cp crds/redlockcluster.yaml charts/redlock-operator/crds/redlockcluster.yaml

## controlplane: kube-apiserver, controller-manager, scheduler, kubectl, etcd, helm from their
## pinned Go modules, cached in ~/.cache/redlock-operator and linked into target/dev/bin
controlplane:
	tests/controlplane/build.sh

## nodes: what real nodes need (tests/real_nodes.rs): kubelet and kube-proxy (with the control
## plane), containerd, runc and the CNI plugins from their pinned Go modules, and the pause,
## Redis and Valkey images from Debian packages, the test image redis:7.0-faketime (redis-libc
## under libfaketime, following its node's clock), the operator image (Dockerfile's recipe);
## cached in ~/.cache/redlock-operator
nodes: controlplane redis-libc
	tests/nodes/build.sh
	tests/nodes/images.sh > /dev/null
	tests/nodes/images.sh operator > /dev/null

## redis-libc: a redis-server built with MALLOC=libc from the Debian source package, which runs
## under libfaketime (tests that jump a member's clock); cached in ~/.cache/redlock-operator
redis-libc:
	tests/tools/build-redis-libc.sh

## promtool: promtool from the pinned Prometheus Go module (tests/alerts/promtool), cached in
## ~/.cache/redlock-operator and linked into target/dev/bin; tests/alerts.rs checks and unit-tests
## the chart's alert rules with it
promtool:
	tests/alerts/build.sh

## clients: the Python lock clients (pottery, redlock-py) whose printed snippets
## tests/client_snippets.rs runs, pinned in tests/clients/requirements.txt and installed from
## PyPI into a virtualenv cached in ~/.cache/redlock-operator (target/dev/bin/clients-python)
clients:
	tests/clients/build.sh

dev-binaries: controlplane
	$(CARGO) build --workspace --bins

## demo: local control plane with 5 real nodes (kubelet, containerd, CNI, kube-proxy, in namespaces
## of their own; the API server forwarded to this machine's loopback) + CRD + operator +
## examples/redlockcluster.yaml; Ctrl-C stops it. DEMO_ARGS=--process-kubelet: the process kubelet
demo: dev-binaries nodes
	$(BIN)/devenv $(DEMO_ARGS)

## dev-up: the same in the background; kubeconfig in target/dev/kubeconfig. dev-down stops it.
dev-up: dev-binaries nodes
	@if [ -f $(DEV)/devenv.pid ] && kill -0 $$(cat $(DEV)/devenv.pid) 2>/dev/null; then \
	  echo "dev environment already up (pid $$(cat $(DEV)/devenv.pid)); KUBECONFIG=$(DEV)/kubeconfig"; \
	else \
	  rm -f $(DEV)/ready; \
	  nohup $(BIN)/devenv --ready-file $(DEV)/ready $(DEMO_ARGS) > $(DEV)/devenv.log 2>&1 & echo $$! > $(DEV)/devenv.pid; \
	  for i in $$(seq 1 1500); do \
	    [ -f $(DEV)/ready ] && break; \
	    kill -0 $$(cat $(DEV)/devenv.pid) 2>/dev/null || { cat $(DEV)/devenv.log; rm -f $(DEV)/devenv.pid; exit 1; }; \
	    sleep 0.2; \
	  done; \
	  [ -f $(DEV)/ready ] || { echo "dev environment did not come up in 300s"; cat $(DEV)/devenv.log; exit 1; }; \
	  cat $(DEV)/devenv.log; \
	fi

dev-down:
	@if [ -f $(DEV)/devenv.pid ]; then \
	  pid=$$(cat $(DEV)/devenv.pid); \
	  if kill $$pid 2>/dev/null; then \
	    for i in $$(seq 1 450); do kill -0 $$pid 2>/dev/null || break; sleep 0.2; done; \
	    kill -9 $$pid 2>/dev/null || true; \
	  fi; \
	  rm -f $(DEV)/devenv.pid $(DEV)/ready; echo "dev environment stopped"; \
	else echo "dev environment not running"; fi

## bench-scale: K clusters x 3 members (BENCH_CLUSTERS=10,50,200): time to Available, operator
## RSS and CPU, API requests per minute by verb and resource (audit log), detection latency and
## release lateness while all K run (release build; prints, asserts nothing)
bench-scale: controlplane
	$(CARGO) bench --bench scale

## bench-env: build/start times of the environment (process kubelet and real nodes), pod-start
## latency, and the last cold and warm .ci/run with its make test (recorded by .ci/run), printed
bench-env: dev-binaries nodes
	$(CARGO) bench -p redlock-testenv --bench env

## bench: hold detection latency and release lateness over 24 kills (BENCH_KILLS=n to change),
## then rolling-replacement time for N = 3, 5, 7 against N x hold
bench: controlplane
	$(CARGO) bench --bench lifecycle
	$(CARGO) bench --bench rollout

## model-check: the exhaustive model check of the hold rule over the operator's own decide
## (tests/model, docs/model-check.md) at MODEL_BOUND (full; small is what `make test` runs,
## or a rule's focused bound): prints the bounds, states explored, depth, time; fails on a
## property violation, printing its trace as actions.
MODEL_BOUND ?= full
model-check:
	$(CARGO) build -p redlock-model --bin model-check
	$(BIN)/model-check $(MODEL_BOUND)

## model-mutations: each rule of tests/model/mutations/ turned off in turn (the patch applied
## to src/, reverted afterwards): the model check of its focused bound must find a
## counterexample; prints the rule, the property violated and the trace's length.
model-mutations:
	CARGO="$(CARGO)" tests/model/mutations/run.sh

## safety: the full safety suite: rslock, go-redsync and node-redlock against a RedlockCluster
## under >= 200 seeded faults, then the same faults against unfenced servers (the control).
## SAFETY_FAULTS=n and SAFETY_SEED=n (replay) change it, SAFETY_KINDS=a,b deals only those
## kinds; results in target/safety/. Redis runs under libfaketime (member clock jumps).
## Fails unless the operator run has 0 violations and kept getting locks (never 10 min without
## one), and the control run has at least 1 violation.
## (`make test` runs the short version, tests/safety.rs.) Debug profile: the harness, not the
## operator's speed, is what takes the time.
## Load: LOAD=n (here and on safety-real-nodes; SAFETY_LOAD=n does the same) runs n busy
## processes per core (`nproc` × n, at nice 0) in each phase from before its first fault to
## its end, killed and reaped then (also on an error or a panic), so that the operator and the
## control plane are starved as on a loaded CI machine; the report states how many and the
## load average measured (/proc/loadavg at the start, every 10 s, at the end: max and mean).
## `make safety-load` is `make safety LOAD=1` (LOAD=n there too).
## Every run also counts the operator's ClockJump events no member-clock-jump fault explains
## (its member, injection to heal + 10 s), sets those within 5 s of a step of this machine's
## own clock (read every 100 ms; steps > 5 ms in host-clock-steps.jsonl) apart as true jumps,
## and fails on any other (false positives), listing them.
## (LOAD's default of 1 above is soak's: here only a LOAD given on the command line or in
## the environment turns the load on.)
SAFETY_LOAD_ENV = $(if $(filter command environment,$(firstword $(origin LOAD))),SAFETY_LOAD=$(LOAD))
safety: controlplane redis-libc
	$(SAFETY_LOAD_ENV) $(CARGO) test --bench safety_full

safety-load: controlplane redis-libc
	SAFETY_LOAD=$(LOAD) $(CARGO) test --bench safety_full

## version-matrix: the lifecycle, client-ACL hardening and short safety tests once per image
## of docs/development.md "Tested versions", on real nodes (REDLOCK_TEST_IMAGE names each cluster's image;
## the safety run deals every fault kind but a member's clock jump, which needs the faketime
## image). MATRIX_IMAGES chooses the images. Not part of `make test`: `make test` runs them on
## redis:7.0, and tests/real_nodes.rs runs kill -9 -> held -> released and the ACL basics on
## every image; this is the long form (about 15 minutes per image).
MATRIX_IMAGES ?= redis:6.2 redis:7.0 redis:8.0 valkey/valkey:8.1 valkey/valkey:9.1
MATRIX_SAFETY_KINDS ?= kill-one,kill-minority,kill-majority,delete-pod,stop-cont,operator-kill,node-loss,ttl-lower,recreate,operator-skew,partition,partition-delete-node,resize,hand-fence,writes-refused,two-operators
version-matrix: dev-binaries nodes
	$(CARGO) test --no-run --test lifecycle --test hardening --test safety
	failed=""; for image in $(MATRIX_IMAGES); do \
	  echo "== version matrix: $$image"; \
	  $(BIN)/in-namespaces env REDLOCK_TEST_NODES=real REDLOCK_TEST_IMAGE=$$image \
	    SAFETY_KINDS=$(MATRIX_SAFETY_KINDS) SAFETY_OUT=$(CURDIR)/target/version-matrix/$$(echo $$image | tr /: --) \
	    $(CARGO) test --offline --no-fail-fast --test lifecycle --test hardening --test safety \
	    -- --test-threads=$(TEST_THREADS) || failed="$$failed $$image"; \
	done; \
	if [ -n "$$failed" ]; then echo "version matrix failed on:$$failed"; exit 1; fi

## safety-real-nodes: the same on real nodes (kubelet, containerd, kube-proxy; Redis in
## containers of the redis:7.0-faketime image, so member clock jumps step a node's clock).
safety-real-nodes: controlplane nodes redis-libc
	$(SAFETY_LOAD_ENV) SAFETY_NODES=real $(CARGO) test --bench safety_full
