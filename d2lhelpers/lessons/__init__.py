"""One module per notebook, in notebook order: experiment -> result -> plot -> panel.

Lessons import the mechanisms below them (devices, timing, workloads, schemes, workers);
no mechanism imports a lesson (an import-linter contract, `make lint`).
"""
