"""Shared pieces of the differential and PTF tests: named packet traces over a small topology
(`traces`) and the targets that replay them, the switch model and BMv2 (`targets`).
See docs/testing.md."""
