"""Benchmarks: `ina bench ...` / `make bench`. `ina bench report` writes their tables
into docs/benchmarks.md; tests never time."""
