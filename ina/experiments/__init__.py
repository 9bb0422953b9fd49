"""End-to-end experiments: `ina experiment NAME` (see `ina.experiments.cli`).

* ``dc2`` (`ina.experiments.dc2`): time to accuracy of DC2's delay-aware compression against
  no compression and fixed compression levels, under low and high delay variation.
"""
