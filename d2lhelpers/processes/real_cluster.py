"""Notebook 06's workers on real machines: the TF_CONFIG and command of each host, and the entry
point those commands run.

`real_cluster_tf_config(hosts)` prints, for each 'host:port', the TF_CONFIG of task i of job
'worker' and the command that runs a worker of `d2lhelpers.processes.mwms` there: exactly what a
loopback job's worker i runs, with its TF_CONFIG naming 127.0.0.1 (`group.tf_config`) swapped for
real hosts. `python -m d2lhelpers.processes.real_cluster TARGET 'ARGS_JSON'` is that command: one
worker with no parent; ready, progress and the result go to stdout as JSON lines, as under a
`WorkerGroup`. A launcher's timeouts and restarts then replace the group's.

Caveats: TF's gRPC servers listen on 0.0.0.0:PORT whatever TF_CONFIG says; MWMS's constructor
waits for the whole cluster with no timeout of its own.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys

from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import KiB, MiB
from d2lhelpers.processes import mwms
from d2lhelpers.processes.group import tf_config
from d2lhelpers.processes.worker_main import WorkerContext

ALLREDUCE_ARGS = {"sizes": [4 * KiB, 256 * KiB, 4 * MiB, 16 * MiB], "repeats": 10, "warmup": 2}
TRAINING_ARGS = {
    "width": 256,
    "batch": 256,
    "steps": 100,
    "warmup": 5,
    "learning_rate": 0.02,
    "seed": 0,
}
DEFAULT_ARGS = {"allreduce_worker": ALLREDUCE_ARGS, "training_worker": TRAINING_ARGS}


@dataclasses.dataclass
class RealClusterResult(Reported):
    """The TF_CONFIG and the command line for each host of a real cluster (printed, not run)."""

    hosts: list[str]
    configs: list[dict]
    commands: list[str]

    def tables(self) -> list[Table]:
        rows = [
            (host.rsplit(":", 1)[0], command)
            for host, command in zip(self.hosts, self.commands, strict=True)
        ]
        launcher = (
            "From here a launcher takes over: Kubernetes (Kubeflow's TFJob) or Vertex AI writes "
            "each worker's TF_CONFIG and starts, restarts and ends the processes, and the worker "
            "code stays this one; on Slurm no TF_CONFIG is written: TensorFlow's "
            "SlurmClusterResolver reads Slurm's own variables, and the strategy is given it "
            "(`cluster_resolver=`), one line of the worker code changed. (From those tools' "
            "documentation: no launcher is run here.)"
        )
        return [Table("what each host runs", ("host", "command"), rows, verdicts=[launcher])]


def real_cluster_tf_config(
    hosts, target: str = "allreduce_worker", args: dict | None = None
) -> RealClusterResult:
    """Per host 'name:port': the TF_CONFIG of task i of job 'worker', and the command that runs
    `target` of `d2lhelpers.processes.mwms` there (nothing runs here)."""
    hosts = list(hosts)
    if not hosts:
        raise ValueError("hosts must name at least one 'host:port'")
    if target not in DEFAULT_ARGS:
        raise ValueError(f"target must be one of {sorted(DEFAULT_ARGS)}, got {target!r}")
    args = {**DEFAULT_ARGS[target], "timeout_s": mwms.COLLECTIVE_TIMEOUT_S, **(args or {})}
    names = [host.rsplit(":", 1)[0] for host in hosts]
    ports = [int(host.rsplit(":", 1)[1]) for host in hosts]
    configs = [tf_config(ports, i, hosts=names) for i in range(len(hosts))]
    commands = [
        f"TF_CONFIG={shlex.quote(json.dumps(c))} python -m d2lhelpers.processes.real_cluster "
        f"{target} {shlex.quote(json.dumps(args))}"
        for c in configs
    ]
    return RealClusterResult(hosts, configs, commands)


def main(argv=None) -> int:
    """`TF_CONFIG=... python -m d2lhelpers.processes.real_cluster TARGET 'ARGS_JSON'`."""
    target, args = (sys.argv[1:] if argv is None else argv)[:2]
    if target not in DEFAULT_ARGS:
        raise SystemExit(f"TARGET must be one of {sorted(DEFAULT_ARGS)}, got {target!r}")
    config = json.loads(os.environ["TF_CONFIG"])
    ports = [int(address.rsplit(":", 1)[1]) for address in config["cluster"]["worker"]]
    context = WorkerContext(config["task"]["index"], ports, json.loads(args), sys.stdout)
    context.send("result", getattr(mwms, target)(context))
    return 0


if __name__ == "__main__":
    sys.exit(main())
