"""Notebook 07's experiments and results: one serving run, a load sweep, a failure, the memory.

Every number is measured here; the model beside it is stated in `capacity_model`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from d2lhelpers.core import checks as admission
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import format_rate, format_seconds
from d2lhelpers.devices import check_fits, free_memory_bytes, select_devices
from d2lhelpers.serving.decoder import Layout, ModelConfig, greedy_tokens
from d2lhelpers.serving.layouts import LAYOUTS, cache_bytes_per_device, make_layout
from d2lhelpers.serving.server import Request, ServeLog, Server, make_requests
from d2lhelpers.timing.benchmark import Measurement, measure

SPLIT_LAYOUTS = ("replicas", "tensor parallel", "pipeline")
MAX_REQUESTS = 400
MAX_WALL_S = 120.0
MAX_SLOTS = 256


def percentile(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def decoder_config(width: int, layers: int, prompt_len: int, n_out: int, heads: int = 4):
    """The model for these sizes: its positions hold the prompt and the output."""
    admission.require_count("model width", width, heads, 4096)
    admission.require_count("layers", layers, 1, 64)
    admission.require_count("prompt length", prompt_len, 1, 512)
    admission.require_count("output length", n_out, 1, 512)
    if width % heads:
        raise ValueError(f"model width must be a multiple of {heads} heads, got {width}")
    return ModelConfig(width=width, heads=heads, layers=layers, max_len=prompt_len + n_out)


def check_layout_fits(layout: str, config: ModelConfig, devices, slots: int) -> None:
    """Refuse, before allocating, a layout whose weights and KV cache would not fit."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {sorted(LAYOUTS)}, got {layout!r}")
    admission.require_count("sequences in flight (slots)", slots, 1, MAX_SLOTS)
    needed = cache_bytes_per_device(layout, config, len(devices), slots)
    what = f"{layout} with {slots} sequences of {config.max_len} tokens"
    check_fits(needed, devices if layout != "one device" else devices[:1], what)


def largest_batch(layout: str, config: ModelConfig, devices, cap: int = 1 << 24) -> int:
    """The most sequences in flight whose weights and KV cache still fit (computed, not tried).

    A multiple of the device count, against the free memory of the busiest device (the host's,
    summed over logical CPU devices, which share it); 0 when not even one per device fits.
    """
    n = len(devices)
    shared = devices[0].memory_bytes is None  # logical CPUs share the host's memory

    def needed(groups: int) -> float:
        per_device = cache_bytes_per_device(layout, config, n, groups * n)
        return per_device * n if shared else per_device

    free = min(free_memory_bytes(d) for d in devices)
    groups = admission.largest_fitting(needed, 1, cap // n, available=free)
    return 0 if groups is None else groups * n


@dataclasses.dataclass
class ServingRun(Reported):
    """One serving run: latencies, throughput, queue, beside the offered load."""

    log: ServeLog
    rate: float  # offered requests per second
    config: ModelConfig

    @property
    def finished(self) -> list[Request]:
        return [r for r in self.log.requests if r.done]

    @property
    def failed(self) -> list[Request]:
        return [r for r in self.log.requests if r.failed]

    @property
    def failed_in_flight(self) -> list[Request]:
        """Failed while a slot held them (their group lost a device), not refused later."""
        return [r for r in self.failed if r.finished_s is not None]

    def latency(self, q: float) -> float | None:
        return percentile([r.latency_s for r in self.finished], q)

    def ttft(self, q: float) -> float | None:
        return percentile([r.ttft_s for r in self.finished], q)

    @property
    def verdict(self) -> str:
        log, n = self.log, len(self.log.requests)
        text = (
            f"{self.log.layout} on {len(log.devices)} device(s): {len(self.finished)} of {n} "
            f"requests finished, {format_rate(log.throughput, 'tokens/s')}"
        )
        if self.failed:
            text += f"; {len(self.failed)} failed"
        if log.timed_out:
            text += " (stopped at the time limit: the server could not keep up)"
        return text

    def tables(self) -> list[Table]:
        def ms(x):
            return "-" if x is None else format_seconds(x)

        rows = [
            ["offered load", f"{self.rate:.1f} requests/s"],
            ["throughput", format_rate(self.log.throughput, "tokens/s")],
            ["time to first token p50 / p99", f"{ms(self.ttft(50))} / {ms(self.ttft(99))}"],
            ["latency p50 / p99", f"{ms(self.latency(50))} / {ms(self.latency(99))}"],
            [
                "finished / failed / re-routed",
                f"{len(self.finished)} / {len(self.failed)} / "
                f"{sum(r.rerouted for r in self.log.requests)}",
            ],
            ["longest queue", max((q for _, q, _ in self.log.queue), default=0)],
            ["decoding steps", self.log.steps],
        ]
        return [Table(self.verdict, ["quantity", "measured"], rows)]


def run_serving(
    layout: str = "replicas",
    n_devices: int = 2,
    rate: float = 20.0,
    n_requests: int = 24,
    prompt_len: int = 8,
    n_out: int = 16,
    width: int = 64,
    layers: int = 2,
    slots_per_device: int = 4,
    fail_at_s: float | None = None,
    max_wall_s: float = 20.0,
    progress: Callable | None = None,
    seed: int = 0,
) -> ServingRun:
    """Serve `n_requests` arriving at `rate` per second on `layout`, timed for real."""
    config = decoder_config(width, layers, prompt_len, n_out)
    admission.require_count("requests", n_requests, 1, MAX_REQUESTS)
    admission.require_count("sequences per device", slots_per_device, 1, MAX_SLOTS)
    if not 0 < rate <= 1e6:
        raise ValueError(f"offered load must be above 0 requests/s, got {rate}")
    if not 0 < max_wall_s <= MAX_WALL_S:
        raise ValueError(f"the time limit must be within (0, {MAX_WALL_S:.0f}] s")
    devices = select_devices(admission.require_count("devices", n_devices, 1))
    slots = slots_per_device * n_devices
    check_layout_fits(layout, config, devices, slots)
    built = make_layout(layout, config, devices, slots, seed)
    built.warm()
    requests = make_requests(n_requests, rate, prompt_len, n_out, config.vocab, seed)
    log = Server(built).serve(requests, max_wall_s, fail_at_s, progress)
    return ServingRun(log, rate, config)


def step_time(layout: Layout, **measure_options) -> Measurement:
    """One decoding step with every slot busy, synced and repeated."""
    tokens = np.ones(layout.slots, np.int32)
    positions = np.full(layout.slots, layout.config.max_len - 1, np.int32)
    layout.warm()
    return measure(lambda: layout.step(tokens, positions), f"{layout.name} step", **measure_options)


def capacity_model(
    one_device_step_s: float, n: int, layers: int, allreduce_s: float, cores: int, gpus: bool
) -> dict[str, float]:
    """Predicted step time of each layout with n devices and n times the slots of one device.

    The seed's model, fed with this machine's numbers: a device's share of the compute is the
    one-device step time (`one_device_step_s`, for one device's worth of slots); devices that share
    `cores` CPU cores run at most `cores` at once. Tensor parallel adds 2 all-reduces per layer
    (`allreduce_s` each, measured); a pipeline of n stages and n microbatches pays the bubble
    (n + n - 1) / n stage times (GPipe).
    """
    at_once = n if gpus else max(1, min(n, cores))
    compute = one_device_step_s * n / at_once  # n devices' worth of work, `at_once` at a time
    return {
        "replicas": compute,
        "tensor parallel": compute + 2 * layers * allreduce_s,
        "pipeline": compute * (2 * n - 1) / n,
    }


@dataclasses.dataclass
class TokenCheck(Reported):
    """Greedy tokens of each layout beside one device's, for the same prompts."""

    reference: list[list[int]]
    layouts: dict[str, list[list[int]]]

    @property
    def verdict(self) -> str:
        same = [name for name, tokens in self.layouts.items() if tokens == self.reference]
        differ = [name for name in self.layouts if name not in same]
        if not differ:
            return f"every layout generated exactly one device's tokens ({', '.join(same)})"
        return f"{', '.join(differ)} generated other tokens than one device: a bug, not a result"

    def tables(self) -> list[Table]:
        rows = [["one device", " ".join(map(str, self.reference[0]))]] + [
            [name, " ".join(map(str, tokens[0]))] for name, tokens in self.layouts.items()
        ]
        return [Table(self.verdict, ["layout", "tokens of the first prompt"], rows)]


def check_layout_tokens(
    n_devices: int = 2, width: int = 64, layers: int = 2, prompt_len: int = 8, n_out: int = 16
) -> TokenCheck:
    """Generate from the same prompts on one device and on each split layout; compare."""
    config = decoder_config(width, layers, prompt_len, n_out)
    devices = select_devices(admission.require_count("devices", n_devices, 2))
    slots = 2 * n_devices
    for name in SPLIT_LAYOUTS:
        check_layout_fits(name, config, devices, slots)
    rng = np.random.default_rng(0)
    prompts = [[int(t) for t in rng.integers(0, config.vocab, prompt_len)] for _ in range(slots)]
    one = make_layout("one device", config, devices[:1], slots)
    reference = greedy_tokens(one, prompts, n_out)
    layouts = {
        name: greedy_tokens(make_layout(name, config, devices, slots), prompts, n_out)
        for name in SPLIT_LAYOUTS
    }
    return TokenCheck(reference, layouts)
