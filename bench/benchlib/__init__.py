"""The benchmarks of bench/run-bench, by subject."""
