"""The derivation of `ina.workload.calibration.EFFICIENCIES` from its measurements (see that
module): each measured step time against the roofline's layers at the step's batch and
precision, kinds in the stated order."""

from __future__ import annotations

import argparse

from ina.workload import zoo
from ina.workload.calibration import DEFAULT_EFFICIENCY, MEASUREMENTS, Measurement
from ina.workload.devices import device, layer_flops, roofline
from ina.workload.layers import KINDS
from ina.workload.memory import optimizer


def _step_times(m: Measurement, eff: dict[str, float]):
    """(roofline seconds per kind at efficiency 1, the optimizer's seconds at 1) of the
    measurement's step."""
    w = zoo.build(m.workload, m.batch, m.precision, m.seq_len)
    dev = device(m.device)
    per_kind = dict.fromkeys(KINDS, 0.0)
    for x in w.layers:
        for flops, moved in ((x.fwd_flops, x.fwd_bytes), (x.bwd_flops, x.bwd_bytes)):
            done = layer_flops(x.kind, flops, m.precision)
            per_kind[x.kind] += roofline(done, moved, dev, m.precision, 1.0)
    opt = w.params * optimizer(None, w).step_values * 4 / dev.memory_bps
    return per_kind, opt


def derive() -> tuple[dict[tuple[str, str], dict[str, float]], list[str]]:
    """The efficiencies the measurements give, and a line of derivation per measurement."""
    order = {"all": 0, "non-conv": 1, "conv": 2}
    table: dict[tuple[str, str], dict[str, float]] = {}
    lines = []
    for m in sorted(MEASUREMENTS, key=lambda m: order[m.sets]):
        eff = table.setdefault((m.device, m.precision), dict.fromkeys(KINDS, DEFAULT_EFFICIENCY))
        per_kind, opt = _step_times(m, eff)
        convs = ("conv", "conv3x3")
        kinds = {"all": KINDS, "non-conv": [k for k in KINDS if k not in convs], "conv": convs}[
            m.sets
        ]
        step = m.batch / m.throughput
        fixed = sum(t / eff[k] for k, t in per_kind.items() if k not in kinds)
        fixed += 0.0 if "other" in kinds else opt / eff["other"]
        free = sum(per_kind[k] for k in kinds) + (opt if "other" in kinds else 0.0)
        if step <= fixed:
            raise ValueError(f"{m.workload} on {m.device}: the fixed layers alone exceed the step")
        e = free / (step - fixed)
        for k in kinds:
            eff[k] = round(e, 4)
        lines.append(
            f"{m.device} {m.precision} {m.sets}: {m.workload} batch {m.batch}, "
            f"{m.throughput:g}/s = {step * 1e3:.2f} ms a step -> {e:.4f} ({m.source})"
        )
    return table, lines


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`ina sim calibrate` takes no options: the measurements are fixed in the code."""


def main(args: argparse.Namespace) -> int:
    from ina.workload.calibration import EFFICIENCIES

    table, lines = derive()
    print("Each measurement, in the order applied, and the efficiency it gives:")
    for line in lines:
        print(f"- {line}")
    drift = [
        k for k, v in table.items() if {**v, "conv3x3": 0} != {**EFFICIENCIES[k], "conv3x3": 0}
    ]
    print(
        "EFFICIENCIES in ina/workload/calibration.py: "
        + (
            "as derived"
            if not drift and set(table) == set(EFFICIENCIES)
            else f"DIFFERENT for {drift or sorted(set(table) ^ set(EFFICIENCIES))}"
        )
    )
    return 0 if not drift and set(table) == set(EFFICIENCIES) else 1
