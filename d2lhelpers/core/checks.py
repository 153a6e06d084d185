"""One admission check before anything is allocated or started: types, ranges, memory, processes.

Every public experiment, panel and job calls these first, so a slider at its end or a typo is
refused in well under a second with a message that names the limit and the largest value that
fits, instead of growing until the machine swaps or a worker dies.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable

import psutil

from d2lhelpers.core.units import format_bytes, usable_cores

MEMORY_SHARE = 0.8  # of the memory available now: the rest is left for the kernel and the system
WORKERS_PER_CORE = 2  # at most this many worker processes per usable core, for one learner


def require_count(name: str, value, low: int = 1, high: int | None = None) -> int:
    """`value` as an int in [low, high], or a TypeError/ValueError naming `name` and the range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a whole number, got {value!r}")
    value = int(value)
    if value < low or (high is not None and value > high):
        upper = f" and at most {high}" if high is not None else ""
        fix = f": choose {high} or fewer" if high is not None and value > high else ""
        raise ValueError(f"{name} must be at least {low}{upper}, got {value}{fix}")
    return value


def require_sweep(name: str, values, low: int = 1, high: int | None = None) -> list[int]:
    """A non-empty sequence of counts, each checked by `require_count`."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a list of whole numbers, got {values!r}")
    values = list(values)
    if not values:
        raise ValueError(f"{name} must list at least one value")
    return [require_count(f"{name}[{i}]", v, low, high) for i, v in enumerate(values)]


CGROUP_LIMITS = (  # (limit, usage) of cgroup v2, then v1
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
)


def available_memory_bytes(system: int | None = None, cgroups=CGROUP_LIMITS) -> int:
    """Memory this process could still get: the system's available memory (psutil: Linux's
    MemAvailable, macOS's and Windows' own counts; `system` overrides it), or a cgroup's limit
    less its usage if that is lower (a container or a class server's per-learner limit)."""
    available = psutil.virtual_memory().available if system is None else system
    for limit_path, usage_path in cgroups:
        try:
            with open(limit_path) as f:
                limit = f.read().strip()
            if limit.isdigit():  # cgroup v2 writes "max" when there is no limit
                with open(usage_path) as f:
                    available = min(available, int(limit) - int(f.read().strip()))
        except (OSError, ValueError):
            pass
    return max(0, available)


def require_memory(
    what: str, needed_bytes: float, available: int | None = None, *, largest: str | None = None
) -> None:
    """Refuse `what` if it needs more than `MEMORY_SHARE` of the memory available now.

    `largest` names what would fit (e.g. "size 2048", from `largest_fitting`); without it the
    message asks for smaller values.
    """
    available = available_memory_bytes() if available is None else available
    allowed = MEMORY_SHARE * available
    if needed_bytes > allowed:
        fix = f"the largest that fits is {largest}" if largest else "choose smaller values"
        raise ValueError(
            f"{what} needs about {format_bytes(needed_bytes)}, but only {format_bytes(available)} "
            f"is available (at most {format_bytes(allowed)} may be used): {fix}"
        )


def largest_fitting(
    bytes_for: Callable[[int], float], low: int, high: int, available: int | None = None
) -> int | None:
    """The largest n in [low, high] whose `bytes_for(n)` fits `MEMORY_SHARE` of the available
    memory (`bytes_for` must grow with n), or None when not even `low` fits."""
    available = available_memory_bytes() if available is None else available
    allowed = MEMORY_SHARE * available
    if bytes_for(low) > allowed:
        return None
    while low < high:  # invariant: low fits
        middle = (low + high + 1) // 2
        low, high = (middle, high) if bytes_for(middle) <= allowed else (low, middle - 1)
    return low


def max_worker_processes(cores: int | None = None) -> int:
    """The cap on worker processes one learner may start: `WORKERS_PER_CORE` per usable core."""
    return WORKERS_PER_CORE * (usable_cores() if cores is None else cores)


def require_processes(what: str, count: int, cores: int | None = None) -> int:
    """Refuse starting more worker processes than the cap; the message names the cap."""
    cap = max_worker_processes(cores)
    count = require_count("the number of worker processes", count, 1)
    if count > cap:
        raise ValueError(
            f"{what} would start {count} worker processes, but at most {cap} may run "
            f"({WORKERS_PER_CORE} per usable CPU core): choose {cap} or fewer"
        )
    return count


def require_counts(**values) -> dict[str, int]:
    """Each value as an int >= 1, or a TypeError/ValueError naming it."""
    return {name: require_count(name, value) for name, value in values.items()}


def require_rate(name: str, value, allow_none: bool = True) -> float | None:
    """A rate or a time (a real number > 0), or None when allowed; else an error naming it."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number > 0, got {value!r}")
    if not value > 0:
        raise ValueError(f"{name} must be above 0, got {value!r}")
    return float(value)


MEASURE_COUNTS = ("warmup", "min_runs", "max_runs", "number")
MEASURE_OPTIONS = (*MEASURE_COUNTS, "budget_s", "clock", "sync")
MAX_BUDGET_S = 600.0


def require_measure_options(options: dict, budget_s: float | None = None) -> dict:
    """`measure`'s options checked now, before anything is allocated (a bad one would fail only
    after the model was built); `budget_s`, if given, is the default time budget."""
    options = dict(options) if budget_s is None else {"budget_s": budget_s, **options}
    unknown = sorted(set(options) - set(MEASURE_OPTIONS))
    if unknown:
        raise TypeError(f"unknown measure options {unknown}: choose from {list(MEASURE_OPTIONS)}")
    for name in MEASURE_COUNTS:
        if options.get(name) is not None:
            require_count(name, options[name], 0 if name == "warmup" else 1)
    if "budget_s" in options:
        require_rate("budget_s", options["budget_s"], allow_none=False)
        if options["budget_s"] > MAX_BUDGET_S:
            raise ValueError(f"budget_s must be at most {MAX_BUDGET_S:.0f} s")
    low, high = options.get("min_runs"), options.get("max_runs")
    if low is not None and high is not None and high < low:
        raise ValueError(f"max_runs ({high}) is below min_runs ({low})")
    return options
