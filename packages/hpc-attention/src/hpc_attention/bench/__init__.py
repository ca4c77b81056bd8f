"""The attention benchmarks (decode, prologue) and their hpc-bench suites; GPU only, except the case tables."""
