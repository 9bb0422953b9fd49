"""The INA P4_16 program for BMv2 (v1model) and its control-plane entity definitions."""
