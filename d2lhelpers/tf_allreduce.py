"""Moved: TF's all-reduce graphs to `tf_collectives`, notebook 05's runs to `lessons/l05_*`.

Kept only for two importers outside this change (lessons/l06_multi_process.py and
benchmarks/run_all.py); delete it once they import from `tf_collectives`.
"""

from d2lhelpers.tf_collectives import allreduce_in_one_graph, allreduce_inputs, sizes_up_to

__all__ = ["allreduce_in_one_graph", "allreduce_inputs", "sizes_up_to"]
