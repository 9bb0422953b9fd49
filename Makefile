# ina: the two commands of the README are `make train` and `make test`; each sets up what it
# needs on first use (a venv in .venv with the pinned dependencies).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NS3    := $(VENV)/.ns3-installed
WORKERS ?= 4

TOPO      ?= single_4
WORKLOAD  ?= none
TOPO_ARGS ?=

.PHONY: train run test test-fast bench bench-report experiment p4 topo topo-stop lint format clean help

help:
	@echo "make train   train a model with gradients summed in a simulated switch (main job)"
	@echo "make run     allreduce a tensor through a simulated switch, checked exactly"
	@echo "make test    the test suite"
	@echo "make test-fast  the edit-run loop's subset (about 1.5 min): protocol, P4 generation,"
	@echo "             pipeline, transport, runs, compression, simulator, workloads, layers"
	@echo "make bench   benchmarks (ina bench all: their tables on the terminal)"
	@echo "make bench-report  run them and write docs/benchmarks.md (ONLY=zoo,gpt2 for a subset)"
	@echo "make p4      compile the P4 program (needs p4c-bm2-ss)"
	@echo "make topo    Mininet network around the switch (root; TOPO=single_4 WORKLOAD=allreduce|train)"
	@echo "             TOPO=two_level_2x2: a spine over two leaf switches (hierarchical aggregation)"
	@echo "make topo-stop  remove what a previous make topo left behind"
	@echo "make lint    ruff"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch is pinned to the CPU build on this machine's disk; an open range pulls CUDA.
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The ns-3 backend (docs/simulation.md), for the tests only (make train does not wait for it):
# cppyy builds from source (g++, Python headers; several minutes); where it cannot, its tests
# skip with the reason and everything else runs.
$(NS3): $(STAMP)
	$(PY) -m pip install --quiet -e '.[ns3]' || echo "make: the ns3 extra did not install; ns-3 backend tests will skip"
	touch $(NS3)

venv: $(STAMP)

train: $(STAMP)
	$(PY) -m ina train --workers $(WORKERS)

run: $(STAMP)
	$(PY) -m ina allreduce --workers $(WORKERS)

# The whole suite, on every core (pytest-xdist; tests take their own ports, folders and
# interface names, so they run side by side); TEST_JOBS=0 runs it in one process.
TEST_JOBS ?= auto
test: $(STAMP) $(NS3)
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist worksteal --durations=20

# The edit-run loop: the pure-Python core of every layer (no Mininet, BMv2, ns-3 or training
# runs); make test is the whole suite and what CI runs.
FAST_TESTS := layers protocol p4_generated pipeline transport_core runs quantize sketch \
              homomorphic compressors dc2_laws sim step_model zoo workload_imports docs_links
test-fast: $(STAMP)
	$(PY) -m pytest -q $(addprefix tests/test_,$(addsuffix .py,$(FAST_TESTS)))

bench: $(STAMP)
	$(PY) -m ina bench all

# docs/benchmarks.md, regenerated (about 26 minutes on 2 cores); ONLY=NAME,... reruns some
# sections and keeps the rest.
ONLY ?=
bench-report: $(STAMP)
	$(PY) -m ina bench report $(if $(ONLY),--only $(ONLY))

# DC2 vs no compression vs fixed levels under low and high delay variation (runs/dc2);
# EXPERIMENT_ARGS=--long for the long run.
experiment: $(STAMP)
	$(PY) -m ina experiment dc2 $(EXPERIMENT_ARGS)

p4: $(STAMP)
	$(PY) -m ina.p4build

# BMv2 runs the compiled program when p4c-bm2-ss and simple_switch_grpc are on PATH;
# otherwise the switch model serves the switch node's interfaces.
topo: $(STAMP)
	@if command -v p4c-bm2-ss >/dev/null 2>&1; then $(MAKE) p4; fi
	$(PY) -m bmv2_topologies.launch --topo $(TOPO) --workload $(WORKLOAD) $(TOPO_ARGS)

topo-stop: $(STAMP)
	$(PY) -m bmv2_topologies.launch --stop

lint: $(STAMP)
	$(PY) -m ruff check ina tests bmv2_topologies
	$(PY) -m ruff format --check ina tests bmv2_topologies

format: $(STAMP)
	$(PY) -m ruff format ina tests bmv2_topologies

clean:
	rm -rf build .pytest_cache .ruff_cache
