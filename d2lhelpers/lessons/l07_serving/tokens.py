"""Notebook 07: every layout generates exactly one device's tokens, and what fits in memory."""

from __future__ import annotations

import dataclasses

import numpy as np

from d2lhelpers.core import checks
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import format_bytes
from d2lhelpers.devices import free_memory_bytes, select_devices
from d2lhelpers.lessons.l07_serving.points import check_layout_fits
from d2lhelpers.serving.config import LAYOUTS, ModelConfig, bytes_per_device, decoder_config
from d2lhelpers.serving.engines import ServingCode, build_engines, greedy_tokens


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class TokenCheckResult(Reported):
    """Greedy tokens of each layout beside one device's, for the same prompts."""

    reference: list[list[int]]
    layouts: dict[str, list[list[int]]]

    @property
    def verdict(self) -> str:
        differ = [name for name, tokens in self.layouts.items() if tokens != self.reference]
        if not differ:
            return f"every layout generated exactly one device's tokens ({', '.join(self.layouts)})"
        return f"{', '.join(differ)} generated other tokens than one device: a bug, not a result"

    def tables(self) -> list[Table]:
        rows = [["one device", " ".join(map(str, self.reference[0]))]] + [
            [name, " ".join(map(str, tokens[0]))] for name, tokens in self.layouts.items()
        ]
        # read 94: the verdict over every prompt, printed (the table shows the first only)
        title = f"tokens of the first of {len(self.reference)} prompts"
        return [Table(title, ["layout", "tokens"], rows, [self.verdict])]


def check_layout_tokens(
    n_devices: int = 2,
    width: int = 64,
    layers: int = 2,
    prompt_len: int = 8,
    n_out: int = 16,
    code: ServingCode | None = None,
) -> TokenCheckResult:
    """Generate from the same prompts on one device and on each layout (prefill in one pass)."""
    config = decoder_config(width, layers, prompt_len, n_out)
    devices = select_devices(checks.require_count("devices", n_devices, 2))
    per_device = 2
    slots = per_device * n_devices
    for name in LAYOUTS:
        check_layout_fits(name, config, devices, slots)
    rng = np.random.default_rng(0)
    prompts = [[int(t) for t in rng.integers(0, config.vocab, prompt_len)] for _ in range(slots)]
    [one] = build_engines("one device", config, devices, slots, code)
    reference = greedy_tokens(one, prompts, n_out)
    found = {}
    for name in LAYOUTS:
        engines = build_engines(name, config, devices, per_device, code)
        share = len(prompts) // len(engines)  # independent replicas: each serves its share
        found[name] = [
            tokens
            for i, engine in enumerate(engines)
            for tokens in greedy_tokens(engine, prompts[i * share : (i + 1) * share], n_out)
        ]
    return TokenCheckResult(reference, found)


def largest_batch(layout: str, config: ModelConfig, devices, cap: int = 1 << 24) -> int:
    """The most sequences in flight whose weights and KV cache still fit (computed, not tried).

    A multiple of the device count, against the free memory of the busiest device (the host's,
    summed over logical CPU devices, which share it); 0 when not even one per device fits.
    """
    n = len(devices)
    shared = devices[0].memory_bytes is None  # logical CPUs share the host's memory

    def needed(groups: int) -> float:
        per_device = bytes_per_device(layout, config, n, groups * n)
        return per_device * n if shared else per_device

    free = min(free_memory_bytes(d) for d in devices)
    groups = checks.largest_fitting(needed, 1, cap // n, available=free)
    return 0 if groups is None else groups * n


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class MemoryResult(Reported):
    """What one sequence keeps, and how many fit in each layout (computed, not tried)."""

    config: ModelConfig
    n_devices: int
    shared: bool
    fits: dict[str, int]

    def _pool_words(self) -> str:
        """Read 135: 'fits about the same number (the KV cache, not the weights, fills it)' was a
        fixed string; now from the counts and the bytes."""
        counts = [n for n in self.fits.values() if n]
        if not counts:
            return ": none fits"
        low, high = min(counts), max(counts)
        said = (
            f" and fits about the same number ({low} to {high})"
            if high <= 1.1 * low
            else f" and fits {low} to {high}"
        )
        c = self.config
        cache = high * c.kv_bytes_per_sequence
        which = (
            "the KV cache, not the weights, fills it"
            if cache > c.weight_bytes
            else "the weights fill more of it"
        )
        return (
            f"{said}; at {high} sequences their KV cache is {format_bytes(cache)} against "
            f"{format_bytes(c.weight_bytes)} of weights: {which}"
        )

    def tables(self) -> list[Table]:
        c = self.config
        rows = [
            [name, format_bytes(bytes_per_device(name, c, self.n_devices, self.n_devices)), n]
            for name, n in self.fits.items()
        ]
        where = (
            "These devices are logical CPUs: they share the host's memory, so every layout draws "
            f"on the same pool{self._pool_words()}."
            if self.shared
            else "Each device has its own memory: the busiest device decides."
        )
        notes = [
            f"weights: {format_bytes(c.weight_bytes)}; KV cache per sequence of {c.max_len} "
            f"tokens: {format_bytes(c.kv_bytes_per_sequence)}",
            where,
            f"most in flight: computed, not tried: the most sequences whose weights and KV cache "
            f"fit {checks.MEMORY_SHARE:.0%} of the free memory, read again for each row (so rows "
            "can differ by what else the machine did meanwhile)",
        ]
        columns = ["layout", f"busiest device, {self.n_devices} sequences", "most in flight"]
        return [Table(f"memory on {self.n_devices} devices", columns, rows, notes)]


def memory_fit(config: ModelConfig, n_devices: int = 2) -> MemoryResult:
    devices = select_devices(checks.require_count("devices", n_devices, 1))
    fits = {name: largest_batch(name, config, devices) for name in LAYOUTS}
    return MemoryResult(config, n_devices, devices[0].memory_bytes is None, fits)
