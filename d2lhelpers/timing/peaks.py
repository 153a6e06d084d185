"""Measured peak matmul rates: each set-up device's, and the machine's fair baseline.

A speedup means little without the rate it starts from. Each device's peak is measured here, in
this runtime (a logical CPU device gets one thread). The baseline is every core this process may
use with TensorFlow's default threading (oneDNN on), measured in a fresh subprocess because
this runtime's threading is fixed: it stops anyone mistaking "the second core" for "a second GPU".

A device's peak is measured once per run with its noise (the IQR of its runs) and handed out as a
`MeasuredPeak` tied to one record: when a workload's rate comes out above it beyond the noise,
`measure` measures the peak again before blaming the workload, and the higher peak is the one
every later cell uses. The baseline, too, is measured once per run. It is kept on disk by
`core.cache` (written whole, measured once however many kernels ask, never kept when measured on a
busy machine or noisy), which never stops a lesson: when the cache cannot keep it, it is measured
all the same and its line says it was not kept.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import tensorflow as tf

from d2lhelpers.core.cache import cache_dir, cached_measurement, machine_busy
from d2lhelpers.core.counts import chain_flops
from d2lhelpers.core.units import (
    cores_phrase,
    format_bytes,
    format_rate,
    percent_beside,
    usable_cores,
)
from d2lhelpers.core.verdicts import LIKELY_CAUSES, NOISE_FLOOR, above_limit, numbered
from d2lhelpers.devices import Device, setup_devices
from d2lhelpers.timing.benchmark import NOISY_IQR, MeasuredPeak, Measurement, PeakRecord, measure
from d2lhelpers.workloads import (
    chains_in_one_graph,
    random_matrix,
)

CPU_SIZES, GPU_SIZES = (256, 512, 1024), (2048, 4096, 8192)
CHAIN_LENGTH = 4
CACHE_VERSION = 2  # bump when the baseline's measurement changes: older files are measured again
BASELINE_KEYS = ("device", "size", "flops_per_s", "measured_at")

_device_peaks: dict[str, PeakRecord] = {}
_baselines: dict[Path, dict] = {}  # one baseline per cache file per run


def baseline_chain(baseline: dict) -> str:
    """' (one 1024x1024 matmul chain)': what the baseline ran, printed beside its rate, since a
    rate depends on the matrix size and the runs read against it need not share it."""
    size = baseline.get("size")
    return f" (one {size}x{size} matmul chain)" if size else ""


def baseline_noise(baseline: dict) -> float:
    """The baseline's relative noise as every reading against it counts it: its own spread,
    never less than the floor every measured time gets (read 58: 3% here, 5% in notebook 03)."""
    return max(baseline.get("noise", 0.0), NOISE_FLOOR)


def baseline_not_kept(baseline: dict) -> list[str]:
    """The line that says a baseline measured now was not kept on disk, and why (a busy machine,
    noisy runs, a folder that cannot be written): [] when it was kept or read from the cache."""
    if not baseline.get("not_cached"):
        return []
    return [
        f"the baseline itself: {baseline['not_cached']} (a rough yardstick for any line above "
        "read against it)"
    ]


def below_own_peak(
    m: Measurement, baseline: dict, times: int = 1, pronoun: str = "its", why: str = ""
) -> str:
    """When `m`'s own measured peak is below `times` x the usable cores' baseline beyond both
    noises, the clause that says so: a rate 'below' the baseline then says little about how the
    work ran (`why`: what makes the two differ); else ''."""
    peak, base = m.peak_now, baseline["flops_per_s"]
    noise = max(m.peak_noise_now, NOISE_FLOOR) + baseline_noise(baseline)  # as below
    if not peak or peak >= times * base * (1 - noise):
        return ""
    again = " (as measured again since)" if peak != m.best_peak else ""
    return (
        f" (but {pronoun} own measured peak{again} allows only {peak / base:.2f} of it{why}, so "
        "'below' here says little)"
    )


def baseline_below_peak(m: Measurement, baseline: dict, whose: str) -> str | None:
    """The flag when `m`'s measured peak (one device's) beats the usable cores' baseline beyond
    both noises, each at least the noise floor: the baseline, which one device (one thread) is
    expected at best to roughly match, was likely measured low, so no rate is read against it.
    None when the peak is within the noises, unknown, or a peak of k devices (k x one device's:
    a ceiling that devices computing at once need not reach, not a measurement)."""
    peak, base = m.peak_now, baseline["flops_per_s"]  # read 179: as measured again since
    peak_noise = max(m.peak_noise_now, NOISE_FLOOR)
    base_noise = baseline_noise(baseline)
    noise = peak_noise + base_noise
    k = m.peak_factor if m.peak_factor != 1 else getattr(m.peak, "factor", 1)
    if not peak or not above_limit(peak, base, noise) or k != 1:
        return None  # a peak of k devices (k x one's) is a ceiling, not a measurement of one
    causes = ("the baseline was measured low", *LIKELY_CAUSES[:1])
    if baseline.get("from_cache"):
        causes = (f"the baseline is {baseline['measured_at']}'s, from the cache", *causes)
    listed = numbered(causes)
    # not "impossible": one thread at best roughly matching every usable core is an
    # expectation (read 57), so the yardstick is set aside, not the peak called false
    return (
        f"{whose} measured peak {format_rate(peak)}"
        + (" (as measured again since)" if peak != m.best_peak else "")
        + f" is {peak / base:.2f} of the usable cores' "
        f"baseline, above it beyond both noises (±{noise:.0%}: the peak's {peak_noise:.0%} + "
        f"the baseline's {base_noise:.0%}, each at least the {NOISE_FLOOR:.0%} floor). One "
        "device, one thread, is expected at best to roughly match every usable core on one "
        "chain (expected, not measured), so the baseline is not a yardstick in this run: no "
        "rate here is read against it, not a result "
        "(d2l.machine_baseline_rate(refresh=True) measures it again). "
        "Possible causes, not measured here: "
        f"{listed}"
    )


def best_of(measurements: dict[int, Measurement]) -> tuple[float, int, float]:
    """The best rate of chains timed at several sizes (a peak is a best rate: each size's fastest
    run), its size, and the noise of that size's runs (IQR / median)."""
    rates = {size: m.work / min(m.times) for size, m in measurements.items()}
    size = max(rates, key=rates.get)
    best = measurements[size]
    return rates[size], size, best.iqr / best.median if best.median > 0 else float("inf")


def best_chain(device: Device | str, sizes) -> tuple[float, int, float]:
    """The best FLOP/s of a short matmul chain over `sizes` (caches favour some), its size, and
    that size's noise."""
    measurements = {}
    for size in sizes:
        x = random_matrix(size, device)
        run = chains_in_one_graph([device], CHAIN_LENGTH)
        flops = chain_flops(size, CHAIN_LENGTH)
        measurements[size] = measure(
            lambda run=run, x=x: run(x), "peak", flops=flops, min_runs=5, max_runs=20, budget_s=1
        )
    return best_of(measurements)


def device_peak_rate(device: Device) -> MeasuredPeak:
    """Best FLOP/s of a matmul chain on `device` alone, with its noise: measured once per run.

    Logical CPUs are identical and so are virtual GPUs of one chip: one measurement serves all.
    Every call returns a peak tied to the same `PeakRecord`, so a re-measured peak (higher, kept
    by the record) is the one every later measurement compares with.
    """
    key = device.kind if device.kind in ("logical CPU", "virtual GPU") else device.name
    sizes = CPU_SIZES if device.kind == "logical CPU" else GPU_SIZES
    if key not in _device_peaks:

        def measure_again() -> tuple[float, float]:
            rate, _, noise = best_chain(device, sizes)
            return rate, noise

        rate, noise = measure_again()
        _device_peaks[key] = PeakRecord(rate, noise, measure_again)
    return MeasuredPeak(_device_peaks[key])


_BASELINE_SCRIPT = """
import json, tensorflow as tf
from d2lhelpers.timing.peaks import CPU_SIZES, GPU_SIZES, best_chain
gpu = bool(tf.config.list_physical_devices("GPU"))
device, sizes = ("/GPU:0", GPU_SIZES) if gpu else ("/CPU:0", CPU_SIZES)
rate, size, noise = best_chain(device, sizes)
print(json.dumps({"device": device, "size": size, "flops_per_s": rate, "noise": noise}))
"""


FROM_AN_EARLIER_RUN = (
    "read from the cache: an earlier run measured it, on the machine as it was then; "
    "`d2l.machine_baseline_rate(refresh=True)` measures it again"
)


def machine_baseline_rate(refresh: bool = False) -> dict:
    """The machine's best matmul rate with TensorFlow's default threading (a subprocess).

    Cached per machine in `cache_dir()` (see `core.cache`) and kept for the rest of this run, so
    every cell that asks gets the same measurement; returns {'device', 'size', 'flops_per_s',
    'noise', 'measured_at', ...} and 'not_cached' when it was measured but not kept on disk.
    """
    key = f"{platform.node()}-{usable_cores()}cores-tf{tf.__version__}".replace("/", "_")
    path = cache_dir() / f"baseline-{key}.json"
    if refresh or path not in _baselines:  # one measurement per run, even when it was not kept
        _baselines[path] = _cached_baseline(path, refresh)
        stale = _below_a_peak(_baselines[path]) if _baselines[path].get("from_cache") else None
        if stale:  # a cached baseline this run's own peak beats: the machine has changed since
            _baselines[path] = {**_cached_baseline(path, True), "replaced": stale}
    return _baselines[path]


def _cached_baseline(path: Path, refresh: bool) -> dict:
    return cached_measurement(
        path,
        _measure_baseline,
        version=CACHE_VERSION,
        keys=BASELINE_KEYS,
        refresh=refresh,
        busy=machine_busy,
        noisy_above=NOISY_IQR,
    )


def _below_a_peak(baseline: dict) -> str | None:
    """Why `baseline` cannot stand: a device peak measured in this run is above it beyond both
    noises (each at least the floor), which no logical device can be. None when none is."""
    base = baseline["flops_per_s"]
    for record in _device_peaks.values():
        noise = max(record.noise, NOISE_FLOOR) + baseline_noise(baseline)
        if above_limit(record.rate, base, noise):
            return (
                f"the cached baseline, {format_rate(base)} measured {baseline['measured_at']}, "
                f"was below this run's device peak {format_rate(record.rate)} beyond both noises "
                f"({noise:.0%}), so it was measured again"
            )
    return None


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
    lines, first_of = [], {}
    for d in devices:
        memory = format_bytes(d.memory_bytes) if d.memory_bytes else "shares host memory"
        peak = device_peak_rate(d)
        if id(peak.record) in first_of:  # one measurement serves identical logical devices
            said = (
                f"the peak measured on {first_of[id(peak.record)]} (identical devices, assumed "
                "to share it: not measured on this one)"
            )
        else:
            first_of[id(peak.record)] = d.name
            noisy = (  # read 70: a 326% spread printed beside the peak with no word
                f": noisy (above {NOISY_IQR:.0%}), a rough reference, and a rate within its noise "
                "says the peak is too noisy to judge it"
                if peak.noise > NOISY_IQR
                else ""
            )
            said = (
                f"measured peak: {format_rate(peak.current)} (noise "
                f"{percent_beside(peak.noise, NOISY_IQR)} within this "
                f"measurement{noisy}; a later rate above it beyond both noises has it measured "
                "again, and its noise becomes the larger of the kept reading's spread and the gap "
                "between the readings)"
            )
        lines.append(f"{d.name}\n    {d.note}\n    memory: {memory}; {said}")
    baseline = machine_baseline_rate()
    lines.append(
        f"Fair baseline: the usable cores ({cores_phrase(usable_cores())}, {baseline['device']}, "
        f"TensorFlow's default threading) reach {format_rate(baseline['flops_per_s'])} "
        # digits that set it apart from the noisy line (read 117: '10%' for a kept baseline)
        f"(noise {percent_beside(baseline.get('noise', 0), NOISY_IQR)}) "
        f"on one {baseline['size']}x{baseline['size']} matmul chain (measured "
        + ("" if baseline.get("from_cache") else "in this run, at ")  # read 86: say which
        + f"{baseline['measured_at']}"
        + (f"; {baseline['not_cached']}" if baseline.get("not_cached") else "")
        + (f"; {FROM_AN_EARLIER_RUN}" if baseline.get("from_cache") else "")
        + (f"; {baseline['replaced']}" if baseline.get("replaced") else "")
        + ")."
    )
    return "\n".join(lines)
