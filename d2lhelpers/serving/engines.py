"""Engines: one server's model on its devices, its KV cache, and its step as two tf.functions.

`decode` advances every slot by one token; `prefill` reads one prompt in one pass into one slot.
`build_engines` makes the engines of a layout from the notebook's functions (`ServingCode`):
one engine per replica (each behind its own server loop), or one engine for a whole group
(replicas in lock step, tensor parallel, pipeline).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from d2lhelpers.core.units import device_names
from d2lhelpers.serving import decoder, server
from d2lhelpers.serving.config import LAYOUTS, ModelConfig


@dataclasses.dataclass(frozen=True)
class ServingCode:
    """The functions a run uses: the saved modules' by default, or the ones a notebook defined
    (so an edited and re-run cell changes what the experiments and the panel run)."""

    model_weights: Callable = decoder.model_weights
    model_step: Callable = decoder.model_step
    replicas_step: Callable = decoder.replicas_step
    tensor_parallel_shards: Callable = decoder.tensor_parallel_shards
    tensor_parallel_step: Callable = decoder.tensor_parallel_step
    pipeline_stages: Callable = decoder.pipeline_stages
    pipeline_step: Callable = decoder.pipeline_step
    server_loop: Callable = server.server_loop


class Engine:
    """A model on `devices` with `slots` sequences in flight: `step(params, cache, tokens, slots,
    positions)` returns each row's next token and the new cache. Records each call's time."""

    def __init__(self, name, devices, slots, config, params, cache, step, clock=time.perf_counter):
        self.name, self.devices, self.slots, self.config = name, list(devices), slots, config
        self.params, self.cache, self.clock = params, cache, clock
        placed = on_device(step, self.devices[0]) if len(devices) == 1 else step
        # one tf.function per shape: calls that alternate between two traces of one function
        # were measured 4x slower than calls of one trace each
        self._step, self._prefill = tf.function(placed), tf.function(placed)
        self._all_slots = tf.range(slots, dtype=tf.int32)
        self.lost = False  # set when a device is lost: the server loop stops at its next pass
        # (end, seconds, "decode" or "prefill") of each call
        self.calls: list[tuple[float, float, str]] = []
        # (end, seconds, seconds its thread ran) of each gap between two calls: a thread's CPU
        # clock stops while it waits (for a core, for Python's lock, for a request)
        self.gaps: list[tuple[float, float, float]] = []
        self._last: tuple[float, float] | None = None

    def _timed(self, kind, step, *args):
        start, ran = self.clock(), time.thread_time()
        if self._last is not None:
            self.gaps.append((start, start - self._last[0], ran - self._last[1]))
        out, cache = step(*args)
        out = out.numpy()
        end = self.clock()
        self.calls.append((end, end - start, kind))
        self._last = (end, time.thread_time())
        return out, cache

    def decode(self, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Every slot's next token (idle slots compute too: the shapes stay fixed)."""
        args = (tf.constant(tokens, tf.int32), self._all_slots, tf.constant(positions, tf.int32))
        out, self.cache = self._timed("decode", self._step, self.params, self.cache, *args)
        return out

    def prefill(self, slot: int, prompt: Sequence[int]) -> int:
        """The prompt's keys and values into `slot`'s cache in one pass; its first token."""
        n = len(prompt)
        args = (tf.constant(prompt, tf.int32), tf.fill([n], slot), tf.range(n, dtype=tf.int32))
        out, self.cache = self._timed("prefill", self._prefill, self.params, self.cache, *args)
        return int(out[-1])

    def warm(self, prompt_len: int) -> None:
        """Trace both shapes (decode, prefill) once, leaving the cache as it was."""
        cache = self.cache
        self.decode(np.zeros(self.slots, np.int32), np.zeros(self.slots, np.int32))
        self.prefill(0, [0] * prompt_len)
        self.cache, self.calls, self.gaps, self._last = cache, [], [], None


class LockstepEngine(Engine):
    """Replicas in lock step: one tf.function decodes every replica at once; a prefill runs on
    the replica that holds the slot while the others wait."""

    def __init__(self, devices, slots, config, replicas, caches, code: ServingCode):
        step = functools.partial(code.replicas_step, heads=config.heads, devices=devices)
        super().__init__("replicas in lock step", devices, slots, config, replicas, caches, step)
        one = functools.partial(code.model_step, heads=config.heads)
        self._prefills = [tf.function(on_device(one, device)) for device in devices]
        self.per_replica = slots // len(devices)

    def prefill(self, slot: int, prompt: Sequence[int]) -> int:
        r, n = slot // self.per_replica, len(prompt)
        local = slot - r * self.per_replica
        args = (tf.constant(prompt, tf.int32), tf.fill([n], local), tf.range(n, dtype=tf.int32))
        out, cache = self._timed("prefill", self._prefills[r], self.params[r], self.cache[r], *args)
        self.cache = [cache if i == r else c for i, c in enumerate(self.cache)]
        return int(out[-1])


def on_device(step: Callable, device: str) -> Callable:
    """`step` with its ops on `device` (ops outside a device scope would go to device 0)."""

    def placed(*args):
        with tf.device(device):
            return step(*args)

    return placed


def empty_cache(slots: int, max_len: int, width: int, layers: int, device: str) -> list:
    """(keys, values) of `layers` layers for `slots` sequences, zeros on `device`."""
    with tf.device(device):
        return [
            (tf.zeros((slots, max_len, width)), tf.zeros((slots, max_len, width)))
            for _ in range(layers)
        ]


def _placed(weights, device: str):
    with tf.device(device):
        return tf.nest.map_structure(tf.identity, weights)


def build_engines(
    layout: str,
    config: ModelConfig,
    devices: Sequence,
    slots_per_device: int,
    code: ServingCode | None = None,
    seed: int = 0,
    microbatches: int | None = None,
) -> list[Engine]:
    """The engines of `layout` on `devices`, `slots_per_device` sequences in flight per device.

    "one device" and "replicas" give one engine per device (each its own server); the others one
    engine for the whole group. A pipeline cuts its rows into `microbatches` (default: one per
    stage), each of `slots_per_device` sequences.
    """
    code = code or ServingCode()
    names, c = device_names(devices), config
    weights = code.model_weights(config, seed)
    one = functools.partial(code.model_step, heads=c.heads)

    def one_device(name):
        cache = empty_cache(slots_per_device, c.max_len, c.width, c.layers, name)
        return Engine("one device", [name], slots_per_device, c, _placed(weights, name), cache, one)

    if layout == "one device":
        return [one_device(names[0])]
    if layout == "replicas":
        engines = [one_device(name) for name in names]
        for engine in engines:
            engine.name = "replicas"
        return engines
    slots = slots_per_device * len(names)
    if layout == "replicas in lock step":
        caches = [empty_cache(slots_per_device, c.max_len, c.width, c.layers, n) for n in names]
        replicas = [_placed(weights, name) for name in names]
        return [LockstepEngine(names, slots, c, replicas, caches, code)]
    if layout == "tensor parallel":
        shards = code.tensor_parallel_shards(weights, c.heads, names)
        caches = [
            empty_cache(slots, c.max_len, int(s["layers"][0]["wq"].shape[1]), c.layers, name)
            for s, name in zip(shards, names, strict=True)
        ]
        step = functools.partial(code.tensor_parallel_step, heads=c.heads, devices=names)
        return [Engine(layout, names, slots, c, shards, caches, step)]
    if layout == "pipeline":
        m = microbatches or len(names)
        slots = slots_per_device * m
        stages = code.pipeline_stages(weights, names)
        caches = [
            empty_cache(slots, c.max_len, c.width, len(s["layers"]), name)
            for s, name in zip(stages, names, strict=True)
        ]
        step = functools.partial(code.pipeline_step, heads=c.heads, devices=names, microbatches=m)
        return [Engine(layout, names, slots, c, stages, caches, step)]
    raise ValueError(f"layout must be one of {['one device', *LAYOUTS]}, got {layout!r}")


def greedy_tokens(engine: Engine, prompts: list[list[int]], n_out: int) -> list[list[int]]:
    """Each prompt into its own slot in one pass, then `n_out` - 1 decoding steps for all."""
    tokens = [[engine.prefill(slot, prompt)] for slot, prompt in enumerate(prompts)]
    pad = engine.slots - len(prompts)
    for k in range(1, n_out):
        last = np.array([t[-1] for t in tokens] + [0] * pad, np.int32)
        positions = np.array([len(p) + k - 1 for p in prompts] + [0] * pad, np.int32)
        out = engine.decode(last, positions)
        for t, token in zip(tokens, out, strict=False):
            t.append(int(token))
    return tokens
