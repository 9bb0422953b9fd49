"""The virtual-time simulator: the real worker transport, the real switch pipeline and real
training, with the clock and the network simulated (docs/simulation.md)."""
