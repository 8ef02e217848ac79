"""The parts of bench/gpu-check that need no GPU and no run of it: workloads and references."""
