"""Notebook 06, multi-process: worker processes, MultiWorkerMirroredStrategy, failures.

In notebook order, one module each: `jobs` (admission, the machine's defaults, one job running
the notebook's worker function), `allreduce` (the all-reduce sweep, its fit and plot), `training`
(data-parallel training and its cost model), `break_even` (the Try-it answer), `failure` (losing
a worker of replicas or of a group), `replicas_vs_group` (both in one run), `panels` (the two
panels), `hosts` (the committed results of `make hosts` beside the learner's loopback run). The
code that runs inside each worker is the notebook's: `d2lhelpers.processes.mwms`, saved from its
cells.
"""

from d2lhelpers.lessons.l06_multi_process.allreduce import (
    AllReduceJobResult,
    plot_allreduce_job,
    run_allreduce_job,
)
from d2lhelpers.lessons.l06_multi_process.break_even import (
    BreakEvenResult,
    break_even,
    break_even_step_s,
)
from d2lhelpers.lessons.l06_multi_process.failure import (
    WorkerLossResult,
    plot_failure,
    run_failure,
)
from d2lhelpers.lessons.l06_multi_process.hosts import HostsReferenceResult, hosts_reference
from d2lhelpers.lessons.l06_multi_process.jobs import MachineDefaults, machine_defaults
from d2lhelpers.lessons.l06_multi_process.panels import ClusterResult, cluster_panel, failure_panel
from d2lhelpers.lessons.l06_multi_process.replicas_vs_group import (
    ReplicasVsGroupResult,
    plot_replicas_vs_group,
    run_replicas_vs_group,
)
from d2lhelpers.lessons.l06_multi_process.training import (
    TrainingJobResult,
    TrainingSweepResult,
    plot_training_sweep,
    predict_step_s,
    run_training,
    run_training_sweep,
)

__all__ = [
    "AllReduceJobResult",
    "BreakEvenResult",
    "ClusterResult",
    "HostsReferenceResult",
    "MachineDefaults",
    "ReplicasVsGroupResult",
    "TrainingJobResult",
    "TrainingSweepResult",
    "WorkerLossResult",
    "break_even",
    "break_even_step_s",
    "cluster_panel",
    "failure_panel",
    "hosts_reference",
    "machine_defaults",
    "plot_allreduce_job",
    "plot_failure",
    "plot_replicas_vs_group",
    "plot_training_sweep",
    "predict_step_s",
    "run_allreduce_job",
    "run_failure",
    "run_replicas_vs_group",
    "run_training",
    "run_training_sweep",
]
