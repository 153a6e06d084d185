"""Measured peak matmul rates: each set-up device's, and the machine's fair baseline.

A speedup means little without the rate it starts from. Each device's peak is measured here, in
this runtime (a logical CPU device gets one thread). The baseline is the whole machine with
TensorFlow's default threading (all cores, oneDNN on), measured in a fresh subprocess because
this runtime's threading is fixed: it stops anyone mistaking "the second core" for "a second GPU".

A device's peak is a `MeasuredPeak`: when a workload's rate comes out above it, `measure` measures
the peak again before blaming the workload. The baseline is kept on disk by `core.cache` (written
whole, measured once however many kernels ask, never kept when measured on a busy machine or
noisy), which never stops a lesson: when the cache cannot keep it, it is measured all the same
and its line says it was not kept.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import tensorflow as tf

from d2lhelpers.core.cache import cache_dir, cached_measurement, machine_busy
from d2lhelpers.core.counts import chain_flops
from d2lhelpers.core.units import format_bytes, format_rate, usable_cores
from d2lhelpers.devices import Device, setup_devices
from d2lhelpers.timing.benchmark import NOISY_IQR, MeasuredPeak, measure
from d2lhelpers.workloads import (
    chains_in_one_graph,
    random_matrix,
)

CPU_SIZES, GPU_SIZES = (256, 512, 1024), (2048, 4096, 8192)
CHAIN_LENGTH = 4
CACHE_VERSION = 2  # bump when the baseline's measurement changes: older files are measured again
BASELINE_KEYS = ("device", "size", "flops_per_s", "measured_at")

_device_peaks: dict[str, float] = {}


def best_chain(device: Device | str, sizes) -> tuple[float, int, float]:
    """The best FLOP/s of a short matmul chain over `sizes` (caches favour some), its size, and
    that size's noise (IQR / median of its runs)."""
    best = (0.0, 0, 0.0)
    for size in sizes:
        x = random_matrix(size, device)
        run = chains_in_one_graph([device], CHAIN_LENGTH)
        m = measure(lambda run=run, x=x: run(x), "peak", min_runs=5, max_runs=20, budget_s=1.0)
        noise = m.iqr / m.median if m.median > 0 else float("inf")
        best = max(best, (chain_flops(size, CHAIN_LENGTH) / min(m.times), size, noise))
    return best


def best_chain_rate(device: Device | str, sizes) -> tuple[float, int]:
    """The best FLOP/s of a short matmul chain over `sizes`, and its size."""
    rate, size, _ = best_chain(device, sizes)
    return rate, size


def device_peak_rate(device: Device) -> MeasuredPeak:
    """Best FLOP/s of a matmul chain on `device` alone (measured once, then kept in memory).

    Logical CPUs are identical and so are virtual GPUs of one chip: one measurement serves all.
    The result can `remeasure()` itself; a higher re-measured peak replaces the kept one.
    """
    key = device.kind if device.kind in ("logical CPU", "virtual GPU") else device.name
    sizes = CPU_SIZES if device.kind == "logical CPU" else GPU_SIZES
    if key not in _device_peaks:
        _device_peaks[key] = best_chain_rate(device, sizes)[0]

    def remeasure() -> float:
        _device_peaks[key] = max(_device_peaks[key], best_chain_rate(device, sizes)[0])
        return _device_peaks[key]

    return MeasuredPeak(_device_peaks[key], remeasure)


_BASELINE_SCRIPT = """
import json, tensorflow as tf
from d2lhelpers.timing.peaks import CPU_SIZES, GPU_SIZES, best_chain
gpu = bool(tf.config.list_physical_devices("GPU"))
device, sizes = ("/GPU:0", GPU_SIZES) if gpu else ("/CPU:0", CPU_SIZES)
rate, size, noise = best_chain(device, sizes)
print(json.dumps({"device": device, "size": size, "flops_per_s": rate, "noise": noise}))
"""


def machine_baseline_rate(refresh: bool = False) -> dict:
    """The machine's best matmul rate with TensorFlow's default threading (a subprocess).

    Cached per machine in `cache_dir()` (see `core.cache`); returns {'device', 'size',
    'flops_per_s', 'measured_at', ...} and 'not_cached' when it was measured but not kept.
    """
    key = f"{platform.node()}-{usable_cores()}cores-tf{tf.__version__}".replace("/", "_")
    path = cache_dir() / f"baseline-{key}.json"
    return cached_measurement(
        path,
        _measure_baseline,
        version=CACHE_VERSION,
        keys=BASELINE_KEYS,
        refresh=refresh,
        busy=machine_busy,
        noisy_above=NOISY_IQR,
    )


def _measure_baseline() -> dict:
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
    return json.loads(out.stdout.strip().splitlines()[-1])


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
        f"{baseline['size']} matmul chain (measured {baseline['measured_at']}"
        + (f"; {baseline['not_cached']}" if baseline.get("not_cached") else "")
        + ")."
    )
    return "\n".join(lines)
