"""Measured peak matmul rates: each set-up device's, and the machine's fair baseline.

A speedup means little without the rate it starts from. Each device's peak is measured here, in
this runtime (a logical CPU device gets one thread). The baseline is the whole machine with
TensorFlow's default threading (all cores, oneDNN on), measured in a fresh subprocess because
this runtime's threading is fixed: it stops anyone mistaking "the second core" for "a second GPU".
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import tensorflow as tf

from d2lhelpers.benchmark import measure
from d2lhelpers.devices import Device, setup_devices
from d2lhelpers.units import format_bytes, format_rate, usable_cores
from d2lhelpers.workloads import chain_flops, chains_in_one_graph, random_matrix

CPU_SIZES, GPU_SIZES = (256, 512, 1024), (2048, 4096, 8192)
CHAIN_LENGTH = 4

_device_peaks: dict[str, float] = {}


def best_chain_rate(device: Device | str, sizes) -> tuple[float, int]:
    """The best FLOP/s of a short matmul chain over `sizes` (caches favour some), and its size."""
    best = (0.0, 0)
    for size in sizes:
        x = random_matrix(size, device)
        run = chains_in_one_graph([device], CHAIN_LENGTH)
        m = measure(lambda run=run, x=x: run(x), "peak", min_runs=5, max_runs=20, budget_s=1.0)
        best = max(best, (chain_flops(size, CHAIN_LENGTH) / min(m.times), size))
    return best


def device_peak_rate(device: Device) -> float:
    """Best FLOP/s of a matmul chain on `device` alone (measured once, then cached).

    Logical CPUs are identical and so are virtual GPUs of one chip: one measurement serves all.
    """
    key = device.kind if device.kind in ("logical CPU", "virtual GPU") else device.name
    if key not in _device_peaks:
        sizes = CPU_SIZES if device.kind == "logical CPU" else GPU_SIZES
        _device_peaks[key] = best_chain_rate(device, sizes)[0]
    return _device_peaks[key]


_BASELINE_SCRIPT = """
import json, tensorflow as tf
from d2lhelpers.peaks import CPU_SIZES, GPU_SIZES, best_chain_rate
gpu = bool(tf.config.list_physical_devices("GPU"))
device, sizes = ("/GPU:0", GPU_SIZES) if gpu else ("/CPU:0", CPU_SIZES)
rate, size = best_chain_rate(device, sizes)
print(json.dumps({"device": device, "size": size, "flops_per_s": rate}))
"""


def cache_dir() -> Path:
    return Path(os.environ.get("D2LHELPERS_CACHE", Path.home() / ".cache" / "d2lhelpers"))


def machine_baseline_rate(refresh: bool = False) -> dict:
    """The machine's best matmul rate with TensorFlow's default threading (a subprocess).

    Cached per machine in `cache_dir()`; returns {'device', 'size', 'flops_per_s', 'measured_at'}.
    """
    key = f"{platform.node()}-{usable_cores()}cores-tf{tf.__version__}".replace("/", "_")
    path = cache_dir() / f"baseline-{key}.json"
    if path.exists() and not refresh:
        return json.loads(path.read_text())
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run(
        [sys.executable, "-c", _BASELINE_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the baseline measurement failed:\n{out.stderr[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["measured_at"] = datetime.datetime.now().isoformat(timespec="seconds")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))
    return result


def describe_devices(devices: list[Device] | None = None) -> str:
    """A table: each device, what it really is, its memory and measured peak, and the baseline."""
    devices = devices or setup_devices()
    lines = []
    for d in devices:
        memory = format_bytes(d.memory_bytes) if d.memory_bytes else "shares host memory"
        lines.append(
            f"{d.name}\n    {d.note}\n    memory: {memory}; "
            f"measured peak: {format_rate(device_peak_rate(d))}"
        )
    baseline = machine_baseline_rate()
    lines.append(
        f"Fair baseline: the whole machine ({baseline['device']}, TensorFlow's default threading) "
        f"reaches {format_rate(baseline['flops_per_s'])} on one {baseline['size']}x"
        f"{baseline['size']} matmul chain (measured {baseline['measured_at']})."
    )
    return "\n".join(lines)
