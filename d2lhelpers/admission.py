"""One admission check before anything is allocated or started: types, ranges, memory, processes.

Every public experiment, panel and job calls these first, so a slider at its end or a typo is
refused in well under a second with a message that names the limit and the largest value that
fits, instead of growing until the machine swaps or a worker dies.
"""

from __future__ import annotations

import numbers
import os

from d2lhelpers.units import format_bytes, usable_cores

MEMORY_SHARE = 0.8  # of the memory available now: the rest is left for the kernel and the system
WORKERS_PER_CORE = 2  # at most this many worker processes per usable core, for one learner


def require_count(name: str, value, low: int = 1, high: int | None = None) -> int:
    """`value` as an int in [low, high], or a TypeError/ValueError naming `name` and the range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a whole number, got {value!r}")
    value = int(value)
    if value < low or (high is not None and value > high):
        upper = f" and at most {high}" if high is not None else ""
        raise ValueError(f"{name} must be at least {low}{upper}, got {value}")
    return value


def require_sweep(name: str, values, low: int = 1, high: int | None = None) -> list[int]:
    """A non-empty sequence of counts, each checked by `require_count`."""
    values = list(values) if not isinstance(values, (str, bytes)) else None
    if not values:
        raise ValueError(f"{name} must list at least one value")
    return [require_count(f"{name}[{i}]", v, low, high) for i, v in enumerate(values)]


def available_memory_bytes() -> int:
    """Memory this process could still get: MemAvailable, or a cgroup's limit if lower."""
    available = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except OSError:
        pass
    if available is None:
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            limit = open(path).read().strip()
            used_path = path.replace("memory.max", "memory.current").replace(
                "limit_in_bytes", "usage_in_bytes"
            )
            if limit.isdigit():
                available = min(available, int(limit) - int(open(used_path).read().strip()))
        except (OSError, ValueError):
            pass
    return max(0, available)


def require_memory(what: str, needed_bytes: float, available: int | None = None) -> None:
    """Refuse `what` if it needs more than `MEMORY_SHARE` of the memory available now."""
    available = available_memory_bytes() if available is None else available
    allowed = MEMORY_SHARE * available
    if needed_bytes > allowed:
        raise ValueError(
            f"{what} needs about {format_bytes(needed_bytes)}, but only {format_bytes(available)} "
            f"is available (at most {format_bytes(allowed)} may be used): choose smaller values"
        )


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
