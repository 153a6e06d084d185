"""How many independent jobs compute at once, and how long k of them take: the one model.

On logical CPU devices (each op on one thread, from a pool they share) and c usable cores, k
independent jobs on k devices take max(1, k / c) times one job: up to c run at once, the rest
share the cores. Separate GPUs each bring their own chip (k at once, time 1). Virtual GPUs share
one chip's compute: no model is claimed for them.
"""

from __future__ import annotations

from d2lhelpers.core.units import usable_cores


def concurrency_model(k: int, cores: int) -> float:
    """Time of k jobs on k logical CPU devices, relative to one job: max(1, k / cores)."""
    return max(1.0, k / cores)


def slowdown_model(k: int, kind: str, cores: int) -> float | None:
    """The model's time of k devices at once over one: max(1, k/c) on logical CPUs, 1 on GPUs,
    None on virtual GPUs (they share one chip)."""
    if kind == "logical CPU":
        return concurrency_model(k, cores)
    return 1.0 if kind == "GPU" else None


def devices_at_once(k: int, kind: str, cores: int) -> int:
    """How many of k devices can compute at the same time: min(k, cores) on logical CPUs."""
    return min(k, cores) if kind == "logical CPU" else k


def at_once_here(k: int, kind: str) -> int:
    """`devices_at_once` on the cores this process may use: the one small-machine rule."""
    return devices_at_once(k, kind, usable_cores())
