# schedd: `make dev` starts a local cluster, `make test` runs the checks and the tests.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: dev test lint typecheck pytest proto bench bench-cluster clean etcd venv test-soak

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

# etcd's server binary; Debian's etcd-server package when it is not on PATH. The tests also
# use faketime (a node with a skewed clock), postgresql (the outbox's tests start a private
# server), openssl (certificates for TLS to etcd) and
# promtool (Debian's prometheus package: checks cluster/prometheus) and chromium (the
# dashboard's browser test, driven by Playwright): installed too when missing, but not required.
etcd:
	@command -v etcd >/dev/null 2>&1 || { \
	  echo "installing etcd-server (apt-get)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq etcd-server >/dev/null; }
	@command -v etcd >/dev/null 2>&1 || { echo "etcd is not on PATH after install" >&2; exit 1; }
	@command -v faketime >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq faketime >/dev/null 2>&1 || \
	  { $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq faketime >/dev/null 2>&1; } || \
	  echo "faketime not installed: the clock-skew cluster test will be skipped"; }
	@ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || command -v postgres >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends postgresql >/dev/null 2>&1 || \
	  { $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends postgresql >/dev/null 2>&1; } || \
	  echo "postgresql not installed: the outbox's PostgreSQL tests will be skipped (outside CI)"; }
	@command -v openssl >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq openssl >/dev/null 2>&1 || \
	  echo "openssl not installed: the etcd TLS tests will be skipped"; }
	@command -v promtool >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 || \
	  { $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1; } || \
	  echo "promtool not installed: the Prometheus rule tests will be skipped (outside CI)"; }
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 || \
	  { $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; } || \
	  echo "chromium not installed: the dashboard browser test will be skipped (outside CI)"; }

proto: $(STAMP)
	PYTHON=$(PY) scripts/gen_proto.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts
	$(VENV)/bin/ruff format --check src tests scripts

typecheck: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP) etcd
	$(PY) -m pytest $(PYTEST_ARGS)

test: $(STAMP) etcd lint typecheck pytest

# Random faults on a real 3-node cluster for SCHEDD_SOAK seconds (default 600);
# SCHEDD_SOAK_SEED=<n> replays a run's sequence of faults.
test-soak: $(STAMP) etcd
	SCHEDD_SOAK=$${SCHEDD_SOAK:-600} $(PY) -m pytest -p no:cacheprovider -s tests/cluster/test_cluster_chain.py -k soak

# The embedded store: no etcd, no root. DEV_ARGS="--store etcd" runs it on a local etcd
# (then `make etcd` first, which installs etcd-server).
dev: $(STAMP)
	$(VENV)/bin/schedd dev $(DEV_ARGS)

# The local production-shaped cluster: 3 etcd members, 3 nodes, 2 workers on loopback, in the
# background (cluster/local.ini, SCHEDD_CLUSTER_* overrides; docs/operations.md, "Local
# clusters"). CLUSTER_ARGS go to the script: make cluster-status CLUSTER_ARGS="-o json".
.PHONY: cluster-up cluster-down cluster-status
cluster-up: $(STAMP) etcd
	SCHEDD_PYTHON=$(abspath $(PY)) scripts/cluster-up $(CLUSTER_ARGS)

cluster-status: $(STAMP)
	SCHEDD_PYTHON=$(abspath $(PY)) scripts/cluster-status $(CLUSTER_ARGS)

# No venv (re)install first: stopping must not wait for pip, nor change what runs.
cluster-down:
	SCHEDD_PYTHON=$(abspath $(PY)) scripts/cluster-down $(CLUSTER_ARGS)

bench: $(STAMP) etcd
	$(PY) scripts/bench/schedule.py
	$(PY) scripts/bench/timerwheel.py
	$(PY) scripts/bench/worker.py
	$(PY) scripts/bench/node_cost.py
	$(PY) scripts/bench/e2e.py
	$(PY) scripts/bench/cluster.py

# 3 nodes, 2 workers, one etcd: throughput, failover, rebalance, cost as the store grows
# (docs/performance.md, "Cluster"). BENCH_ARGS=--quick for a small run.
bench-cluster: $(STAMP) etcd
	$(PY) scripts/bench/cluster.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .schedd-dev .pytest_cache .mypy_cache .ruff_cache
