"""DC2: delay-aware compression control (after Abdelmoniem & Canini, INFOCOM'21).

Workers measure the round-trip time of every aggregated chunk (`monitor.DelayMonitor`), a
control law turns the delay statistics into a sparsifier density (`laws`), and the density
travels as an 8-bit ladder index in the INA header's ``level`` field, which the switch
MAX-combines so that all workers use the hardest compression any of them asked for.
The paper's code is not public: the laws here are our own design, described in docs/dc2.md.
"""

from ina.control.dc2.controller import DC2Controller, Decision
from ina.control.dc2.laws import (
    LAWS,
    AIMDLaw,
    ControlLaw,
    DelayTargetLaw,
    FixedLevel,
    MeasuredCostLaw,
    OwnQueueLaw,
    index_to_density,
    level_to_index,
    make_law,
)
from ina.control.dc2.monitor import DelayMonitor, DelayStats

__all__ = [
    "LAWS",
    "AIMDLaw",
    "ControlLaw",
    "DC2Controller",
    "Decision",
    "DelayMonitor",
    "DelayStats",
    "DelayTargetLaw",
    "FixedLevel",
    "MeasuredCostLaw",
    "OwnQueueLaw",
    "index_to_density",
    "level_to_index",
    "make_law",
]
