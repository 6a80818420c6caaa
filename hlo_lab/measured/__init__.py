"""Models measured with XLA: the host's micro-benchmarks and per-opcode profile, XLA:GPU's
own per-fusion estimates and its priority-fusion log. Above the bridge, since they compile."""
