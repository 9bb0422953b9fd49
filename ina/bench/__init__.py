"""Benchmarks: `ina bench ...` / `make bench`. Numbers go to the README; tests never time."""
