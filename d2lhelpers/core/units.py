"""One home for what every module needs: the cores this process may use, units, formatting.

`usable_cores()` asks the operating system which cores *this process* may run on
(`os.sched_getaffinity`), and how much CPU time its cgroup may use (a container's or a
JupyterHub learner's `cpu_limit`), not how many the machine has: under `taskset -c 0`, in a
container or on a class server they differ, and every sentence about cores uses the first.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

KiB, MiB, GiB = 1024, 1024**2, 1024**3
GB = 1e9  # link rates are quoted in decimal gigabytes per second
BYTES_PER_FLOAT = 4  # float32, the only dtype the lessons use


# cgroup v2, then v1: "quota period" in one file, or the two in two files (quota -1: no limit).
CPU_QUOTA_FILES = (
    ("/sys/fs/cgroup/cpu.max",),
    ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us"),
)


def cpu_quota_cores(files=CPU_QUOTA_FILES) -> int | None:
    """The cores' worth of CPU time this process's cgroup may use (rounded up), or None."""
    for paths in files:
        try:
            words = " ".join(open(path).read().strip() for path in paths).split()
            quota, period = float(words[0]), float(words[1])
        except (OSError, ValueError, IndexError):  # "max": no limit; no such file
            continue
        if quota > 0 and period > 0:
            return max(1, math.ceil(quota / period))
    return None


def usable_cores(pid: int = 0) -> int:
    """How many CPU cores this process (or process `pid`, one it started: same cgroup) may use:
    its affinity mask, capped by its cgroup's CPU quota; at least 1."""
    try:
        cores = max(1, len(os.sched_getaffinity(pid)))
    except AttributeError:  # macOS and Windows have no affinity call
        cores = os.cpu_count() or 1
    quota = cpu_quota_cores()
    return min(cores, quota) if quota else cores


def cores_phrase(n: int | None = None) -> str:
    """'1 usable CPU core' / '2 usable CPU cores': the words every notebook uses for the count."""
    n = usable_cores() if n is None else n
    return f"{n} usable CPU core{'s' if n != 1 else ''}"


def the_cores(n: int) -> str:
    """'the core' on one usable core, else 'the cores' (read 157: 'the cores' on a 1-core run)."""
    return "the core" if n == 1 else "the cores"


SECONDS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}


def format_seconds(seconds: float, extra: int = 0) -> str:
    """'1.83 ms'; `extra` decimals past the usual ones where a verdict's digits need them."""
    if seconds >= 1:
        return f"{seconds:.{3 + extra}f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.{2 + extra}f} ms"
    if seconds >= 1e-6 or seconds <= 0:
        return f"{seconds * 1e6:.{1 + extra}f} µs"
    return f"{seconds * 1e9:.{1 + extra}f} ns"  # tiny messages: "0.0 µs" would say nothing


RATE_PREFIXES = (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))


def format_rate(rate: float, unit: str = "FLOP/s", decimals: int = 1) -> str:
    if math.isinf(rate):
        return f"unbounded {unit} (the time did not grow with the work)"
    for prefix, scale in RATE_PREFIXES:
        if rate >= scale:
            return f"{rate / scale:.{decimals}f} {prefix}{unit}"
    return f"{rate:.{decimals}f} {unit}"


def rate_and_share(total: float, k: float, unit: str = "FLOP/s") -> tuple[str, str]:
    """`total` and `total / k` as `format_rate` prints them, the share with as many decimals as
    it takes for k x its printed digits to print as the total does (read 154: a ceiling 347.9
    GFLOP/s beside '2 x 174.0')."""
    said = format_rate(total, unit)
    d = enough_digits(
        lambda d: format_rate(k * printed_value(format_rate(total / k, unit, d)), unit) == said,
        1, 4, 4,
    )  # fmt: skip
    return said, format_rate(total / k, unit, d)


def printed_value(text: str) -> float:
    """The value a reader reads back from `format_rate`'s or `format_seconds`' text ('3.1
    ktok/s' -> 3100.0, '1.83 ms' -> 0.00183)."""
    number, unit = text.split()[:2]
    if unit in SECONDS:
        return float(number) * SECONDS[unit]
    return float(number) * (dict(RATE_PREFIXES).get(unit[0], 1.0) if unit[1:] else 1.0)


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def enough_digits(shows: Callable[[int], bool], least: int, most: int, past=None):
    """The fewest decimals from `least` to `most` at which `shows(decimals)` holds, `past` where
    none do: the one rule behind every number printed with as many digits as a reader needs to
    see from them what its sentence says (a share beside its limit, a verdict's gap and noise)."""
    return next((d for d in range(least, most + 1) if shows(d)), past)


def percent_beside(share: float, limit: float, least: int = 0) -> str:
    """`share` as a percent with as many decimals (`least` up to 5) as it takes not to print
    `limit` itself: read 97, 10.04% printed '10%' under 'above 10%'; read 102, '10.00%'. A
    share above 0 takes a decimal where a whole percent would print it as 0% (read 169)."""

    def shows(d: int) -> bool:
        return f"{share:.{d}%}" != f"{limit:.{d}%}" and (share <= 0 or round(share * 100, d) > 0)

    d = enough_digits(shows, least, 5)
    if d is None and 0 < share < limit:
        return "less than 0.00001%"
    if d is None:
        return f"{limit:.{least}%} (at the limit, above it by less than 0.00001 points)"
    return f"{share:.{d}%}"


def ratio_beside(ratio: float, limit: float = 1.0, least: int = 2) -> str:
    """`ratio` with as many decimals (`least` up to 6) as it takes not to print `limit` itself
    (read 113: '1.00x' beside 'above 1'), as `percent_beside` does for shares."""
    return ratio_and_decimals(ratio, limit, least)[0]


def ratio_and_decimals(ratio: float, limit: float = 1.0, least: int = 2) -> tuple[str, int]:
    """`ratio_beside`'s text and its decimals, to print what stands beside it alike."""
    d = enough_digits(lambda d: f"{ratio:.{d}f}" != f"{limit:.{d}f}", least, 6)
    return (f"{limit:.{least}f} (to 6 decimals)", least) if d is None else (f"{ratio:.{d}f}", d)


def noise_percent(noise: float) -> str:
    """A relative noise to one decimal, a whole percent without it ('7.7%', '5%'): read 133,
    'its noise of 8%' and '(7.7%)' for one noise in one warning."""
    return f"{noise:.1%}".replace(".0%", "%")


def ratio_past_noise(ratio: float, noise: float) -> tuple[str, str]:
    """('1.069x', 'above the 1.066x its noise of 7% allows'): `ratio` and its edge 1 + `noise`
    with as many decimals as it takes to print them apart (read 116: '1.1x … beyond the noise
    of 7%' for 1.069 past 1.066)."""
    edge = 1 + noise
    shown, digits = ratio_and_decimals(ratio, edge)
    side = "above" if ratio > edge else "within"
    return f"{shown}x", f"{side} the {edge:.{digits}f}x its noise of {noise_percent(noise)} allows"


def plural(n: int, word: str) -> str:
    """'1 matmul', '20 matmuls', '3 branches'."""
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word}{'es' if word.endswith(('ch', 'sh', 's', 'x')) else 's'}"


def device_name(device) -> str:
    """The full TensorFlow name of a `Device` or of a name string."""
    return device if isinstance(device, str) else device.name


def device_names(devices) -> tuple[str, ...]:
    return tuple(device_name(d) for d in devices)


def short_device_name(name: str) -> str:
    """'CPU:1' for this process's devices, 'worker:0 CPU:0' for task 0 of job 'worker'."""
    name = device_name(name)
    if not name.startswith("/job:"):
        return name.removeprefix("/device:")
    parts = dict(p.split(":", 1) for p in name.strip("/").split("/") if ":" in p)
    device = parts.get("device", "")
    if parts.get("job") == "localhost" and parts.get("task", "0") == "0":
        return device
    return f"{parts.get('job')}:{parts.get('task', '0')} {device}".strip()
