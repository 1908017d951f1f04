"""What ms_heron knows about the machine: Target facts (:mod:`.targets`), micro-benchmark kernels
(:mod:`.probes`) and the peaks measured with them (:mod:`.peak`). Nothing outside this package runs
a probe on the host."""
