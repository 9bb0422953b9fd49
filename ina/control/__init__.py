"""Control plane of `ina`: switch configuration and counters over P4Runtime, and the DC2
delay-aware compression controller (`ina.control.dc2`).

Each concern lives in its own submodule; this package module holds no logic.
"""
