"""What runs inside an MWMS worker: its memory model, and the same worker on real hosts."""

import json
import os
import subprocess
import sys

import pytest

from d2lhelpers.core.units import KiB, MiB
from d2lhelpers.processes import mwms, real_cluster
from d2lhelpers.processes import worker_memory as memory
from d2lhelpers.processes.group import PROJECT_ROOT, free_ports, tf_config
from tests.conftest import started_by_this_process


def test_parameter_count_is_the_two_dense_layers():
    # Dense(64 -> 32): 64*32 + 32; Dense(32 -> 1): 32 + 1
    assert memory.parameter_count(32) == 64 * 32 + 32 + 32 + 1


def test_memory_models_grow_with_the_message_and_the_model():
    assert memory.worker_memory_bytes(0) == memory.WORKER_BYTES
    assert (
        memory.worker_memory_bytes(16 * MiB) == memory.WORKER_BYTES + memory.RING_COPIES * 16 * MiB
    )
    small, wide = (
        memory.training_memory_bytes(256, 256),
        memory.training_memory_bytes(3 * 10**7, 256),
    )
    assert memory.WORKER_BYTES < small < memory.WORKER_BYTES + 50 * MiB
    assert wide > 70 * 1024 * MiB  # ten copies of 2e9 floats


def test_real_cluster_tf_config_is_the_loopback_config_with_other_hosts():
    ports = [5001, 5002]
    loopback = real_cluster.real_cluster_tf_config([f"127.0.0.1:{p}" for p in ports])
    assert loopback.configs == [tf_config(ports, i) for i in range(2)]
    plan = real_cluster.real_cluster_tf_config(["gpu-node-1:12345", "gpu-node-2:12345"])
    assert plan.configs[1] == {
        "cluster": {"worker": ["gpu-node-1:12345", "gpu-node-2:12345"]},
        "task": {"type": "worker", "index": 1},
    }
    text = str(plan)
    assert 'gpu-node-1  TF_CONFIG=\'{"cluster": {"worker": ["gpu-node-1:12345"' in text
    assert (
        'python -m d2lhelpers.processes.real_cluster allreduce_worker \'{"sizes"'
        in plan.commands[0]
    )
    assert "Kubernetes" in text and "<table>" in plan._repr_html_()
    with pytest.raises(ValueError, match="target"):
        real_cluster.real_cluster_tf_config(["a:1"], target="rm -rf")
    with pytest.raises(ValueError, match="at least one"):
        real_cluster.real_cluster_tf_config([])


def test_the_printed_real_cluster_command_runs_the_same_worker_code():
    # The command printed for real hosts, run here against a one-host loopback "cluster".
    (port,) = free_ports(1)
    plan = real_cluster.real_cluster_tf_config(
        [f"127.0.0.1:{port}"], args={"sizes": [4 * KiB, 8 * KiB], "repeats": 2}
    )
    venv = os.path.dirname(sys.executable)
    finished = subprocess.run(
        ["bash", "-c", plan.commands[0]],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=PROJECT_ROOT,
        env={**os.environ, "PATH": f"{venv}:{os.environ['PATH']}"},
        start_new_session=True,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    messages = [json.loads(line) for line in finished.stdout.splitlines() if line.startswith("{")]
    assert messages[0] == {"ready": {"replicas": 1}}
    result = messages[-1]["result"]
    assert result["sums_correct"] is True and len(result["medians_s"]) == 2
    assert 100 * MiB < result["peak_rss_bytes"] < memory.WORKER_BYTES * 2  # the model's scale
    assert f'"timeout_s": {mwms.COLLECTIVE_TIMEOUT_S}' in plan.commands[0]
    assert started_by_this_process() == []
