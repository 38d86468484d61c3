# jiyu_magics: `make demo` sets up and runs the quickstart headless; `make test` sets up and runs every test.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# 2 cores shared by torchrun ranks, kernels and BLAS threads: one thread each keeps runs fast and steady.
export OMP_NUM_THREADS ?= 1
export MKL_NUM_THREADS ?= 1
export OMP_WAIT_POLICY ?= PASSIVE
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# `make test`'s pytest-xdist workers: CI's two cores sat half idle under one worker (tests wait on
# kernels, ranks, Slurm and browsers), about 15 % idle under two. Three of the same kind kept them
# 98 % busy and took longer (1,710 s against 1,587 s). The third is now a waiting lane that runs
# only the Slurm and browser modules: pytest took 1,576 s against 1,822 s under two workers
# (tests/work_units.py keeps a module, and what exists once per machine, on one worker).
TEST_WORKERS ?= 3

.PHONY: setup demo gpu-report test lint-ts docs image-check test-slurm test-system-deps browser bench gpu-checks gpu-wheels screenshots \
	options-doc readme api-schema api-types clean

setup: $(STAMP)

PY_SOURCES := jiyu_magics tests benchmarks scripts docs

# `pip install -e` also builds the JupyterLab front-end (labextension/, with the jlpm that comes
# with jupyterlab) and installs it with the server-extension config: re-run when it changes.
# pip copies the built front-end into the venv once; `labextension develop` replaces that copy with
# a link to jiyu_magics/labextension, so a rebuild (`jlpm build` in labextension/) is what Lab serves
# (tests/test_lab_frontend.py fails on a stale copy).
FRONTEND := $(shell find labextension/src labextension/style labextension/schema -type f 2>/dev/null) \
	labextension/package.json labextension/yarn.lock
# uv installs what pip would, from pip's own configuration (scripts/uv_with_pip_config.py: a machine's local
# wheels, constraints and indexes), in half of pip's time: a fresh venv took 96 s, bytecode included, against 202 s.
# --compile-bytecode, as pip does: where PYTHONDONTWRITEBYTECODE is set (CI's machines) no import writes a
# .pyc, and every process would compile what it imports (torch: 4.4 CPU-s a process against 2.1).
UV_PIP = $(PYTHON) scripts/uv_with_pip_config.py $(BIN)/uv pip install -q --compile-bytecode -p $(BIN)/python
$(STAMP): pyproject.toml $(FRONTEND)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q uv
	$(UV_PIP) torch==2.13.0
	$(UV_PIP) -e '.[test]'
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/jupyter labextension develop --overwrite . >/dev/null
	touch $@

demo: gpu-report
	$(BIN)/python scripts/run_notebook.py notebooks/01_quickstart.ipynb --out demo-output

# The GPUs and the doctor's findings. A CPU box is no failure of the demo: the doctor says why
# CUDA is not usable (its exit code 1), and the demo goes on on the CPU (no "Error 1 (ignored)").
gpu-report: setup
	$(BIN)/jiyu gpu
	@echo "$(BIN)/jiyu doctor"; $(BIN)/jiyu doctor || echo "(no usable GPU here: the demo trains on the CPU)"

# The layers (pyproject.toml [tool.importlinter]) first: a broken contract fails in a second, before
# the ~30-minute suite; ruff's lints (pyflakes catches an undefined name a merge left) and its
# formatter's check ([tool.ruff] in pyproject.toml); the documentation. mypy ([tool.mypy]) and the
# TypeScript lint run as tests (test_architecture, test_lab_frontend), beside the others on the
# cores the suite leaves idle, not before it. JIYU_REQUIRE_SERVICES=1: a test whose real service
# (Slurm, Prometheus, podman) is missing fails instead of skipping.
# compileall: the package's and the tests' bytecode once, not in each of the suite's thousands of processes
# (a rank's imports of jiyu_magics take 0.45 CPU-s less) where PYTHONDONTWRITEBYTECODE keeps imports from it.
test: setup browser test-system-deps docs
	$(BIN)/python -m compileall -q jiyu_magics tests
	$(BIN)/lint-imports --no-logo
	$(BIN)/ruff check --no-cache $(PY_SOURCES)
	$(BIN)/ruff format --check --no-cache $(PY_SOURCES)
	JIYU_REQUIRE_SERVICES=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) --no-loadscope-reorder

# The TypeScript lint of the JupyterLab extension template: prettier (formatting) and eslint
# (typescript-eslint rules), from the committed yarn.lock (CI=true: yarn will not write one).
lint-ts: setup
	cd labextension && PATH="$(abspath $(BIN)):$$PATH" jlpm install --immutable >/dev/null && \
	  PATH="$(abspath $(BIN)):$$PATH" jlpm lint:check

# The documentation site (docs/, Sphinx + MyST + the PyData theme) into build/docs/html. -W: a warning fails it,
# -n: so does every reference that resolves nowhere; with MyST that covers every internal link, anchor and image
# (external links are not fetched). The reference pages are generated from the code (docs/_ext/jiyu_reference.py).
docs: setup
	rm -rf build/docs
	$(BIN)/sphinx-build -W --keep-going -n -q -b html docs build/docs/html

# The container image built with podman on a debootstrap Debian with CPU torch standing in for the CUDA base, then
# run and checked (tests/test_image_build.py; the stand-in bases are cached in podman's storage).
image-check: setup test-system-deps
	JIYU_REQUIRE_SERVICES=1 $(BIN)/python -m pytest -m image

# Programs the tests drive for real, as PATH:package: sshd (the image's entrypoint), Slurm and munge
# (tests/slurm_cluster.py starts a one-node and a two-node cluster as root; the nodes' namespaces need
# util-linux's unshare and nsenter), kubectl (answers without a cluster), prometheus and promtool
# (tests/test_monitoring.py: the shipped config and alerts, a real scrape), podman with debootstrap and runc
# (tests/test_image_build.py builds and runs the image).
# A temporary policy-rc.d keeps apt from starting system-wide services (sshd on port 22, munged).
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
SYSTEM_DEPS := /usr/sbin/sshd:openssh-server /usr/sbin/slurmctld:slurm-wlm /usr/sbin/slurmd:slurm-wlm \
	/usr/sbin/munged:munge /usr/bin/kubectl:kubernetes-client /usr/bin/prometheus:prometheus \
	/usr/bin/promtool:prometheus /usr/bin/podman:podman /usr/sbin/debootstrap:debootstrap /usr/sbin/runc:runc \
	/usr/bin/buildah:buildah /usr/bin/newuidmap:uidmap /usr/lib/cni/bridge:containernetworking-plugins \
	/usr/bin/unshare:util-linux /usr/bin/nsenter:util-linux
test-system-deps:
	@missing=$$(for dep in $(SYSTEM_DEPS); do test -x "$${dep%%:*}" || echo "$${dep##*:}"; done | sort -u); \
	test -z "$$missing" || { \
	  added=; if [ ! -e /usr/sbin/policy-rc.d ]; then added=1; \
	    printf '#!/bin/sh\nexit 101\n' | $(SUDO) tee /usr/sbin/policy-rc.d >/dev/null; \
	    $(SUDO) chmod +x /usr/sbin/policy-rc.d; fi; \
	  $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends $$missing; rc=$$?; \
	  if [ -n "$$added" ]; then $(SUDO) rm -f /usr/sbin/policy-rc.d; fi; exit $$rc; }

# The Slurm part of the suite alone, against the real one-node and two-node clusters.
test-slurm: setup test-system-deps
	JIYU_REQUIRE_SERVICES=1 $(BIN)/python -m pytest -m slurm

# The browser tests drive Chromium from apt (Playwright cannot download its own here).
CHROMIUM ?= /usr/bin/chromium
browser: $(CHROMIUM)
$(CHROMIUM):
	$(SUDO) apt-get update && $(SUDO) apt-get install -y chromium

bench: setup
	$(BIN)/python benchmarks/gpu_status.py
	$(BIN)/python benchmarks/panel_server.py
	$(BIN)/python benchmarks/scheduler_poll.py
	$(BIN)/python benchmarks/export.py
	$(BIN)/python benchmarks/startup.py
	$(BIN)/python benchmarks/listing_history.py
	$(BIN)/python benchmarks/fit_fixed_cost.py
	$(BIN)/python benchmarks/submit_latency.py
	$(BIN)/python benchmarks/nproc_startup.py
	$(BIN)/python benchmarks/train_overhead.py
	$(BIN)/python benchmarks/dashboard_share.py
	$(BIN)/python benchmarks/panel_gpus.py
	$(BIN)/python benchmarks/queue_latency.py
	$(BIN)/python benchmarks/ckpt_check.py
	$(BIN)/python benchmarks/ckpt_dcp.py --repeat 3
	$(BIN)/python benchmarks/metrics_scrape.py

# On a GPU machine: every gpu-marked test and the benchmarks (see benchmarks/gpu_checks.sh).
gpu-checks:
	bash benchmarks/gpu_checks.sh

# Wheels of the notebook stack for a GPU machine whose Python (3.12) has torch but not IPython & co.
GPU_PY ?= 3.12
gpu-wheels: setup
	$(BIN)/pip download -q --only-binary=:all: --python-version $(GPU_PY) --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  --platform any -d .whl ipython ipykernel ipywidgets nbformat nbclient jupyter_server prometheus_client \
	  pyyaml pytest-timeout 'pytest-jupyter[server]'

# The REST API's JSON Schema (the client's run record, its summary, event kinds and fields),
# generated from the Python types, and the panel's TypeScript types generated from it
# (json-schema-to-typescript); tests/test_panel_types.py fails when api.generated.ts is stale.
api-schema: setup
	mkdir -p build
	$(BIN)/python -m jiyu_magics.server.rest_schema build/rest-api.schema.json

api-types: api-schema lint-ts
	cd labextension && node scripts/api-types.mjs ../build/rest-api.schema.json src/api.generated.ts

# The documentation's screenshots, as the browser tests last produced them.
screenshots:
	cp test-artifacts/lab_train_dashboard.png test-artifacts/lab_panel_light.png test-artifacts/jobs_table.png \
	  test-artifacts/slurm_jobs_table.png test-artifacts/lab_panel_slurm.png test-artifacts/lab_gpu_owners.png \
	  test-artifacts/lab_panel_stall.png test-artifacts/tensorboard_run.png \
	  test-artifacts/mlflow_run.png test-artifacts/lab_run_stopped.png test-artifacts/lab_panel_stalled_row.png test-artifacts/notebook7_compare.png test-artifacts/lab_run_checkpoints.png \
	  test-artifacts/lab_compare_grouped.png test-artifacts/lab_run_lineage.png test-artifacts/lab_panel_ranks.png \
	  test-artifacts/lab_train_summary_dark.png test-artifacts/lab_compare.png test-artifacts/lab_compare_dark.png \
	  test-artifacts/lab_run_page.png docs/img/

# The %%train option list of docs/guide/train.md, from FitOptions and the magic's own options (the tests check it).
options-doc: setup
	$(BIN)/python scripts/option_docs.py
readme: options-doc

clean:
	rm -rf $(VENV) .mypy_cache demo-output test-artifacts build dist jiyu_magics/labextension labextension/node_modules labextension/lib
