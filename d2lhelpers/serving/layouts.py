"""The decoder of `transformer` spread over devices: replicas, tensor parallel, pipeline.

Each layout computes exactly what one device computes for every slot (tested token for token);
only where the arithmetic happens, and what crosses between devices, differs.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from d2lhelpers.parallel.tensor_parallel import allreduce_sum  # the seed's all-reduce, as TF ops
from d2lhelpers.serving.decoder import (
    Layout,
    ModelConfig,
    attend,
    decoder_layer,
    embed,
    empty_cache,
    next_token,
    place_weights,
    rms_norm,
    write_cache,
)


class Replicas(Layout):
    """A whole model per device, each with its own slots: slots [r*k, (r+1)*k) on device r."""

    name = "replicas"

    @property
    def groups(self) -> list[list[int]]:
        k = self.slots_per_group
        return [list(range(r * k, (r + 1) * k)) for r in range(len(self.devices))]

    def groups_devices(self) -> list[list[str]]:
        return [[d] for d in self.devices]

    def without_last_device(self) -> Replicas:
        """The survivors when the last device is lost: their weights and caches, a new graph."""
        survivors = copy.copy(self)
        survivors.devices = self.devices[:-1]
        survivors.params, survivors.cache = self.params[:-1], self.cache[:-1]
        survivors._step = tf.function(survivors._graph_step)
        survivors.warm()
        return survivors

    def _build(self):
        c, k = self.config, self.slots_per_group
        self.params = [place_weights(self.weights, d) for d in self.devices]
        self.cache = [empty_cache(c, k, c.layers, c.width, d) for d in self.devices]

    def _graph_step(self, tokens, positions, params, cache):
        k, c = self.slots_per_group, self.config
        outs, caches = [], []
        for r, device in enumerate(self.devices):
            with tf.device(device):
                t, p = tokens[r * k : (r + 1) * k], positions[r * k : (r + 1) * k]
                x = embed(params[r], t, p)
                new_cache = []
                for layer, layer_cache in zip(params[r]["layers"], cache[r], strict=True):
                    x, kv = decoder_layer(x, layer, layer_cache, p, c.heads, c.max_len)
                    new_cache.append(kv)
                outs.append(next_token(params[r], x))
                caches.append(new_cache)
        with tf.device(self.devices[0]):
            return tf.concat(outs, axis=0), caches


def head_split(heads: int, n: int) -> list[int]:
    """Heads per device, differing by at most one: 4 heads on 3 devices -> 2, 1, 1."""
    if heads < n:
        raise ValueError(f"{heads} heads cannot be split over {n} devices: choose <= {heads}")
    small, extra = divmod(heads, n)
    return [small + 1] * extra + [small] * (n - extra)


class TensorParallel(Layout):
    """Heads and MLP columns cut across devices; two all-reduces per layer per step."""

    name = "tensor parallel"

    def _build(self):
        c, n = self.config, len(self.devices)
        head = c.width // c.heads
        cols = np.cumsum([0] + [h * head for h in head_split(c.heads, n)])
        ffn = np.cumsum([0] + [c.ffn // n + (i < c.ffn % n) for i in range(n)])
        self.params, self.cache = [], []
        for i, device in enumerate(self.devices):
            a, b, f, g = int(cols[i]), int(cols[i + 1]), int(ffn[i]), int(ffn[i + 1])
            layers = [
                {
                    "wq": L["wq"][:, a:b],
                    "wk": L["wk"][:, a:b],
                    "wv": L["wv"][:, a:b],
                    "wo": L["wo"][a:b, :],
                    "w1": L["w1"][:, f:g],
                    "w2": L["w2"][f:g, :],
                }
                for L in self.weights["layers"]
            ]
            shard = {**{k: v for k, v in self.weights.items() if k != "layers"}, "layers": layers}
            self.params.append(place_weights(shard, device))
            self.cache.append(empty_cache(c, self.slots_per_group, c.layers, b - a, device))
        self.local_heads = head_split(c.heads, n)

    def _graph_step(self, tokens, positions, params, cache):
        c, devices = self.config, self.devices
        with tf.device(devices[0]):
            x0 = embed(params[0], tokens, positions)
        xs = [x0 if i == 0 else _copy(x0, d) for i, d in enumerate(devices)]
        new_caches = [[] for _ in devices]
        for layer in range(c.layers):
            partials = []
            for i, device in enumerate(devices):
                with tf.device(device):
                    p, (kc, vc) = params[i]["layers"][layer], cache[i][layer]
                    h = rms_norm(xs[i])
                    keys = write_cache(kc, tf.linalg.matmul(h, p["wk"]), positions, c.max_len)
                    values = write_cache(vc, tf.linalg.matmul(h, p["wv"]), positions, c.max_len)
                    q = tf.linalg.matmul(h, p["wq"])
                    out = attend(q, keys, values, positions, self.local_heads[i])
                    partials.append(tf.linalg.matmul(out, p["wo"]))
                    new_caches[i].append((keys, values))
            summed = allreduce_sum(partials, devices)
            xs = [x + s for x, s in zip(xs, summed, strict=True)]
            partials = []
            for i, device in enumerate(devices):
                with tf.device(device):
                    p = params[i]["layers"][layer]
                    hidden = tf.nn.relu(tf.linalg.matmul(rms_norm(xs[i]), p["w1"]))
                    partials.append(tf.linalg.matmul(hidden, p["w2"]))
            summed = allreduce_sum(partials, devices)
            xs = [x + s for x, s in zip(xs, summed, strict=True)]
        with tf.device(devices[0]):
            return next_token(params[0], xs[0]), new_caches


def _copy(x, device):
    with tf.device(device):
        return tf.identity(x)


class Pipeline(Layout):
    """Layers cut into stages, one per device; the slots cut into one microbatch per stage."""

    name = "pipeline"

    def _build(self):
        c, n = self.config, len(self.devices)
        if c.layers < n:
            raise ValueError(f"{c.layers} layers cannot fill {n} stages: choose <= {c.layers}")
        bounds = np.cumsum([0] + [c.layers // n + (i < c.layers % n) for i in range(n)])
        self.stages = [list(range(int(bounds[i]), int(bounds[i + 1]))) for i in range(n)]
        self.params, self.cache = [], []
        for device, stage in zip(self.devices, self.stages, strict=True):
            shard = {**self.weights, "layers": [self.weights["layers"][i] for i in stage]}
            self.params.append(place_weights(shard, device))
            # every stage keeps the cache of its own layers, for every slot of every microbatch
            self.cache.append(empty_cache(c, self.slots, len(stage), c.width, device))

    def _graph_step(self, tokens, positions, params, cache):
        c, k = self.config, self.slots_per_group
        outs = []
        parts = [[[] for _ in stage] for stage in self.stages]  # [stage][layer] -> per microbatch
        for m in range(len(self.devices)):  # microbatch m holds slots [m*k, (m+1)*k)
            t, p = tokens[m * k : (m + 1) * k], positions[m * k : (m + 1) * k]
            with tf.device(self.devices[0]):
                x = embed(params[0], t, p)
            for s, device in enumerate(self.devices):
                with tf.device(device):
                    x = tf.identity(x)  # the hand-over to this stage
                    for j, layer in enumerate(params[s]["layers"]):
                        keys, values = cache[s][j]
                        rows = (keys[m * k : (m + 1) * k], values[m * k : (m + 1) * k])
                        x, kv = decoder_layer(x, layer, rows, p, c.heads, c.max_len)
                        parts[s][j].append(kv)
            with tf.device(self.devices[-1]):
                outs.append(next_token(params[-1], x))
        new_cache = []
        for s, device in enumerate(self.devices):
            with tf.device(device):
                new_cache.append(
                    [
                        (
                            tf.concat([kv[0] for kv in layer], 0),
                            tf.concat([kv[1] for kv in layer], 0),
                        )
                        for layer in parts[s]
                    ]
                )
        with tf.device(self.devices[-1]):
            return tf.concat(outs, axis=0), new_cache

    @property
    def slots(self) -> int:
        return self.slots_per_group * len(self.devices)


LAYOUTS = {cls.name: cls for cls in (Layout, Replicas, TensorParallel, Pipeline)}


def make_layout(name: str, config: ModelConfig, devices: Sequence, slots: int, seed=0) -> Layout:
    """The layout `name` on `devices` with `slots` sequences in flight (split among groups)."""
    if name not in LAYOUTS:
        raise ValueError(f"layout must be one of {sorted(LAYOUTS)}, got {name!r}")
    cls = LAYOUTS[name]
    groups = len(devices) if cls in (Replicas, Pipeline) else 1
    if slots % groups:
        raise ValueError(f"{slots} slots cannot be split evenly over {groups} {cls.name} groups")
    return cls(config, devices if cls is not Layout else devices[:1], slots // groups, seed)


def cache_bytes_per_device(name: str, config: ModelConfig, n_devices: int, slots: int) -> int:
    """Weights plus KV cache that the busiest device of layout `name` holds (before allocating)."""
    kv, weights = config.kv_bytes_per_sequence, config.weight_bytes
    if name == "replicas":
        return weights + -(-slots // n_devices) * kv
    if name in ("tensor parallel", "pipeline"):
        return -(-weights // n_devices) + weights // config.layers + -(-slots * kv // n_devices)
    return weights + slots * kv
