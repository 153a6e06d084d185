"""Measured peak matmul rates: each set-up device's, and the machine's fair baseline.

A speedup means little without the rate it starts from. Each device's peak is measured here, in
this runtime (a logical CPU device gets one thread). The baseline is the whole machine with
TensorFlow's default threading (all cores, oneDNN on), measured in a fresh subprocess because
this runtime's threading is fixed: it stops anyone mistaking "the second core" for "a second GPU".

A device's peak is a `MeasuredPeak`: when a workload's rate comes out above it, `measure` measures
the peak again before blaming the workload. The baseline is cached on disk safely: written whole
(a temporary file, then `os.replace`), measured once under a lock however many kernels ask at
once, measured again when the file is corrupt, empty, too old or of another version, and never
kept when it was measured on a busy machine or came out noisy.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import tensorflow as tf

from d2lhelpers.core.counts import chain_flops
from d2lhelpers.core.units import cores_phrase, format_bytes, format_rate, usable_cores
from d2lhelpers.devices import Device, setup_devices
from d2lhelpers.timing.benchmark import NOISY_IQR, MeasuredPeak, measure
from d2lhelpers.workloads import (
    chains_in_one_graph,
    random_matrix,
)

CPU_SIZES, GPU_SIZES = (256, 512, 1024), (2048, 4096, 8192)
CHAIN_LENGTH = 4
CACHE_VERSION = 2  # bump when the baseline's measurement changes: older files are measured again
CACHE_MAX_AGE_S = 30 * 24 * 3600  # a month: drivers, TensorFlow and the machine's load change
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


def cache_dir() -> Path:
    """`$D2LHELPERS_CACHE`, else `$XDG_CACHE_HOME/d2lhelpers`, else `~/.cache/d2lhelpers`."""
    if os.environ.get("D2LHELPERS_CACHE"):
        return Path(os.environ["D2LHELPERS_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"  # the spec: absolute only
    return base / "d2lhelpers"


def machine_busy(cores: int | None = None) -> str | None:
    """Why this machine is too busy to measure a baseline worth keeping, or None when it is not:
    the 1-minute load average above the usable cores."""
    cores = usable_cores() if cores is None else cores
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this system: nothing to tell
        return None
    if load > cores:
        return f"the machine was busy (load average {load:.1f} on {cores_phrase(cores)})"
    return None


def read_cache(path: Path, max_age_s: float = CACHE_MAX_AGE_S, now: float | None = None):
    """The cached dict at `path`, or None when it is missing, empty, corrupt, of another
    version, lacks a key or is older than `max_age_s`: each of those is measured again."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return None
    if not all(k in data for k in BASELINE_KEYS) or not isinstance(data.get("saved_at"), float):
        return None
    now = time.time() if now is None else now
    return data if 0 <= now - data["saved_at"] <= max_age_s else None


def write_atomically(path: Path, data: dict) -> None:
    """Write `data` as JSON so that a reader sees the old file or the new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False
    ) as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.replace(f.name, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(f.name)
        raise


@contextlib.contextmanager
def cache_lock(path: Path):
    """An exclusive lock beside `path` (`<name>.lock`): one measurement at a time per file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def cached_measurement(
    path: Path,
    measure_now: Callable[[], dict],
    refresh: bool = False,
    busy: Callable[[], str | None] | None = None,
) -> dict:
    """The measurement cached at `path`, else `measure_now()` under the lock (a caller that
    waited for the lock finds the value another caller measured). A value measured while
    `busy()` names a reason, or whose 'noise' is above `NOISY_IQR`, is returned but not kept:
    it carries 'not_cached' saying why."""
    if not refresh and (hit := read_cache(path)) is not None:
        return hit
    with cache_lock(path):
        if not refresh and (hit := read_cache(path)) is not None:
            return hit
        reason = (machine_busy if busy is None else busy)()
        result = dict(measure_now())
        if reason is None and result.get("noise", 0.0) > NOISY_IQR:
            reason = f"the measurement was noisy (IQR {result['noise']:.0%} of the median)"
        result.update(
            version=CACHE_VERSION,
            measured_at=datetime.datetime.now().isoformat(timespec="seconds"),
            saved_at=time.time(),
        )
        if reason is not None:
            result["not_cached"] = f"not kept: {reason}"
            return result
        write_atomically(path, result)
        return result


def machine_baseline_rate(refresh: bool = False) -> dict:
    """The machine's best matmul rate with TensorFlow's default threading (a subprocess).

    Cached per machine in `cache_dir()` (see `cached_measurement`); returns {'device', 'size',
    'flops_per_s', 'measured_at', ...} and 'not_cached' when it was measured but not kept.
    """
    key = f"{platform.node()}-{usable_cores()}cores-tf{tf.__version__}".replace("/", "_")
    path = cache_dir() / f"baseline-{key}.json"
    return cached_measurement(path, _measure_baseline, refresh)


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
