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

.PHONY: setup demo test bench gpu-checks clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $@

demo: setup
	$(BIN)/jiyu gpu
	-$(BIN)/jiyu doctor
	$(BIN)/python scripts/run_notebook.py notebooks/01_quickstart.ipynb --out demo-output
	$(BIN)/python scripts/run_notebook.py notebooks/02_train_digits.ipynb --out demo-output

test: setup
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python benchmarks/gpu_status.py
	$(BIN)/python benchmarks/train_overhead.py
	$(BIN)/python benchmarks/dashboard_share.py

# On a GPU machine: every gpu-marked test and the benchmarks (see benchmarks/gpu_checks.sh).
gpu-checks:
	bash benchmarks/gpu_checks.sh

clean:
	rm -rf $(VENV) demo-output test-artifacts build dist
