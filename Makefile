# ina: the two commands of the README are `make train` and `make test`; each sets up what it
# needs on first use (a venv in .venv with the pinned dependencies).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
WORKERS ?= 4

.PHONY: train run test bench p4 lint format clean help

help:
	@echo "make train   train a model with gradients summed in a simulated switch (main job)"
	@echo "make run     allreduce a tensor through a simulated switch, checked exactly"
	@echo "make test    the test suite"
	@echo "make bench   benchmarks (tables for the README)"
	@echo "make p4      compile the P4 program (needs p4c-bm2-ss)"
	@echo "make lint    ruff"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch is pinned to the CPU build on this machine's disk; an open range pulls CUDA.
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

train: $(STAMP)
	$(PY) -m ina train --workers $(WORKERS)

run: $(STAMP)
	$(PY) -m ina allreduce --workers $(WORKERS)

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) -m ina bench all

p4: $(STAMP)
	$(PY) -m ina.p4build

lint: $(STAMP)
	$(PY) -m ruff check ina tests bmv2_topologies
	$(PY) -m ruff format --check ina tests bmv2_topologies

format: $(STAMP)
	$(PY) -m ruff format ina tests bmv2_topologies

clean:
	rm -rf build .pytest_cache .ruff_cache
