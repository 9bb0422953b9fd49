"""The differential fuzzer (`differential.fuzz`): seeded random steps, control plane and
packets, on the switch model in this process and on a second target, compared after every
step; a difference is shrunk to a minimal list of steps and saved under
``tests/differential/regressions/``, which every run replays.

- ``test_fuzz_*_against_the_model``: `STEPS` steps of each of `SEEDS` seeds against the model
  as a process on veths (root) and BMv2 (root, ``p4c-bm2-ss`` and ``simple_switch_grpc`` on
  PATH); ``INA_FUZZ_STEPS``, ``INA_FUZZ_SEEDS`` and ``INA_FUZZ_FIRST_SEED`` run it longer;
- ``test_saved_difference_*``: every saved regression, on the same targets;
- ``test_the_fuzzer_*``: the harness on two models in this process: no difference between
  equal ones (reading one over P4Runtime), and each deliberately changed model (`MUTANTS`)
  caught and shrunk to a few steps, which is what shows that it finds differences.

docs/testing.md, "The fuzzer", has the commands.
"""

from __future__ import annotations

import os

import pytest
from differential.fuzz import REGRESSIONS, Differential, fuzz, load, replay, save, summary
from differential.targets import ModelTarget, veth_target_for
from differential.traces import default_topology

from ina.switch_model.replica_order import insert_group

STEPS = int(os.environ.get("INA_FUZZ_STEPS", "500"))  # per seed; the goal: 2,000
SEEDS = int(os.environ.get("INA_FUZZ_SEEDS", "1"))  # the goal: 5
FIRST_SEED = int(os.environ.get("INA_FUZZ_FIRST_SEED", "0"))
TOPO = default_topology()
SAVED = [pytest.param(p, id=p.stem) for p in sorted(REGRESSIONS.glob("*.json"))] or [
    pytest.param(None, marks=pytest.mark.skip(reason=f"no saved differences in {REGRESSIONS}"))
]


@pytest.fixture(scope="module")
def model():
    target = ModelTarget()
    yield target
    target.close()


@pytest.fixture(scope="module", params=["model-veth", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def other(request, tmp_path_factory):
    """A switch on veths: the model as a process (root), or BMv2 (root, tools on PATH)."""
    target = veth_target_for(request.param, TOPO, request.config, tmp_path_factory)
    yield target
    target.close()


def report(failure, who: str, path) -> str:
    lines = [
        f"seed {failure.seed}: {who} differs from the model after {failure.found_after} "
        f"steps; shrunk to {len(failure.steps)} steps ({failure.shrink_runs} replays), "
        f"saved as {path} (replayed by test_saved_difference_on_veths from now on):",
        *(f"  {summary(s)}" for s in failure.steps),
        *failure.differences,
    ]
    return "\n".join(lines)


# -- against a second target --------------------------------------------------------------------


@pytest.mark.network
@pytest.mark.root
@pytest.mark.parametrize("seed", range(FIRST_SEED, FIRST_SEED + SEEDS))
def test_fuzz_on_veths_against_the_model(seed, model, other):
    failure = fuzz(Differential(TOPO, model, other), seed, STEPS)
    if failure is not None:
        path = save(failure, other.name)
        pytest.fail(report(failure, other.name, path))


@pytest.mark.network
@pytest.mark.root
@pytest.mark.parametrize("path", SAVED)
def test_saved_difference_on_veths(path, model, other):
    """A difference the fuzzer found once, replayed: it must be gone."""
    assert replay(Differential(TOPO, model, other), path) == []


@pytest.mark.network
@pytest.mark.root
def test_the_fuzzer_catches_a_changed_model_on_veths(other):
    """The same teeth through frames on veths and reads over P4Runtime: a reference whose
    copies leave in (port, rid) order differs from the other target after one round of
    job 5, shrunk to its three contributions."""
    changed = ModelTarget()
    try:
        ascending_replicas(changed)
        failure = fuzz(Differential(TOPO, changed, other), seed=0, steps=400)
        assert failure is not None and len(failure.steps) <= 3
        assert any(d.startswith("port 2") for d in failure.differences)
    finally:
        changed.close()


# -- the harness, on two models in this process ----------------------------------------------


def test_the_fuzzer_sees_no_difference_between_equal_models(model):
    """The other model read over P4Runtime, the reference in process: the harness itself
    (reads, the generator's steps) makes no difference."""
    twin = ModelTarget()
    try:
        assert fuzz(Differential(TOPO, model, twin), seed=0, steps=150) is None
    finally:
        twin.close()


def ascending_replicas(target: ModelTarget) -> None:
    """Copies leave in (port, rid) order, not BMv2's (issue 11's difference)."""
    tables = target.frames.pipeline.tables
    tables.replicas = lambda group: sorted(tables.mcast_groups.get(group, ()))


def modify_as_insert(target: ModelTarget) -> None:
    """A group MODIFY orders its copies like a fresh INSERT (issue 32's difference)."""
    tables = target.frames.pipeline.tables

    def write_group(group, replicas):
        tables.mcast_groups[group] = insert_group(replicas)
        return tables.mcast_groups[group]

    tables.write_group = write_group


def parent_delete_ignored(target: ModelTarget) -> None:
    """A deleted parent_table entry still sends the job's runs and slots up."""
    target.frames.pipeline.remove_parent = lambda job_id: None


MUTANTS = {  # a changed model, and the most steps its shrunk difference may take
    "ascending_replicas": (ascending_replicas, 3),
    "modify_as_insert": (modify_as_insert, 4),
    "parent_delete_ignored": (parent_delete_ignored, 6),
}


@pytest.mark.parametrize("name", MUTANTS)
def test_the_fuzzer_catches_a_changed_model_and_shrinks_it(name, model, tmp_path):
    change, most = MUTANTS[name]
    mutant, twin = ModelTarget(), ModelTarget()
    try:
        change(mutant)
        mutant.name = f"mutant {name}"
        pair = Differential(TOPO, model, mutant, other_in_process=True)
        failure = next((f for seed in range(5) if (f := fuzz(pair, seed, 400)) is not None), None)
        assert failure is not None, f"{name}: no difference in 5 seeds of 400 steps"
        assert len(failure.steps) <= most, report(failure, name, "-")
        path = save(failure, name, tmp_path)
        assert load(path) == failure.steps
        assert replay(pair, path), f"{name}: the saved steps no longer differ"
        fixed = Differential(TOPO, model, twin, other_in_process=True)
        assert replay(fixed, path) == [], "the saved steps differ between equal models"
    finally:
        mutant.close()
        twin.close()
