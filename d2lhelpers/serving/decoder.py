"""A small decoder-only transformer that decodes one token per step, with a KV cache.

The model (pre-norm, as GPT-2): x = E[token] + P[position]; per layer
    x = x + Attention(norm(x)) W_o        (causal, H heads, keys and values cached)
    x = x + relu(norm(x) W_1) W_2
and the next token is argmax(norm(x) U): greedy decoding, random weights from a fixed seed.

One decoding step advances every *slot* of a batch by one position. Slot s holds one sequence: its
token and position come in, its keys and values are written into its own rows of the cache, and
it attends to cache positions 0..position only, so slots never see each other: a request's tokens
do not depend on what else is in the batch (what lets a server add and remove requests between
steps: continuous batching).

`Layout` runs the model on one device; `transformer_layouts` spreads it over several, the three
layouts of the lesson *Splitting Work Across GPUs*, each one `tf.function` per step:
- replicas: a whole model per device, each with its own slots; no communication;
- tensor parallel: heads and MLP columns cut across devices (Megatron), so each layer ends its
  attention and its MLP with an all-reduce of a [slots, width] block: 2 per layer per step;
- pipeline: layers cut into stages, one per device; the slots cut into microbatches that flow
  through the stages, so stage 2 works on microbatch 1 while stage 1 works on microbatch 2.
    # ref: Shoeybi et al., Megatron-LM (arXiv:1909.08053); Huang et al., GPipe (arXiv:1811.06965);
    # Yu et al., Orca (OSDI 2022) for iteration-level (continuous) batching.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from d2lhelpers.core.units import BYTES_PER_FLOAT, device_name, device_names

EPSILON = 1e-6


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Sizes of the model: vocabulary, width, heads, layers, and the longest sequence."""

    vocab: int = 128
    width: int = 64
    heads: int = 4
    layers: int = 2
    max_len: int = 32

    def __post_init__(self):
        if self.width % self.heads:
            raise ValueError(f"width {self.width} must be a multiple of heads {self.heads}")

    @property
    def ffn(self) -> int:
        return 4 * self.width

    @property
    def weight_bytes(self) -> int:
        per_layer = 4 * self.width**2 + 2 * self.width * self.ffn
        embeddings = 2 * self.vocab * self.width + self.max_len * self.width
        return BYTES_PER_FLOAT * (self.layers * per_layer + embeddings)

    @property
    def kv_bytes_per_sequence(self) -> int:
        """Keys and values of every layer for one sequence of `max_len` tokens."""
        return BYTES_PER_FLOAT * 2 * self.layers * self.max_len * self.width

    def flops_per_token(self, context: int | None = None) -> int:
        """Multiply-adds x 2 of one decoding step for one sequence (attention over `context`)."""
        context = self.max_len if context is None else context
        per_layer = 4 * self.width**2 + 2 * self.width * self.ffn + 2 * context * self.width
        return 2 * (self.layers * per_layer + self.width * self.vocab)


def model_weights(config: ModelConfig, seed: int = 0) -> dict:
    """Random weights, the same for every layout: stateless draws from `seed`."""
    c, counter = config, iter(range(1000))

    def draw(shape, fan_in):
        return tf.random.stateless_normal(shape, seed=(seed, next(counter))) / fan_in**0.5

    layers = [
        {
            "wq": draw((c.width, c.width), c.width),
            "wk": draw((c.width, c.width), c.width),
            "wv": draw((c.width, c.width), c.width),
            "wo": draw((c.width, c.width), c.width),
            "w1": draw((c.width, c.ffn), c.width),
            "w2": draw((c.ffn, c.width), c.ffn),
        }
        for _ in range(c.layers)
    ]
    return {
        "embed": draw((c.vocab, c.width), 1.0),
        "position": draw((c.max_len, c.width), 1.0),
        "unembed": draw((c.width, c.vocab), c.width),
        "layers": layers,
    }


def rms_norm(x):
    return x * tf.math.rsqrt(tf.reduce_mean(tf.square(x), axis=-1, keepdims=True) + EPSILON)


def write_cache(cache, values, positions, max_len):
    """Cache rows [slot, position] := values[slot]: a one-hot blend keeps shapes static."""
    hot = tf.one_hot(positions, max_len, dtype=cache.dtype)[:, :, None]
    return cache * (1.0 - hot) + hot * values[:, None, :]


def attend(q, keys, values, positions, heads):
    """Causal attention of each slot's query over its cached positions 0..position."""
    slots, max_len, width = keys.shape[0], keys.shape[1], keys.shape[2]
    head = width // heads
    q = tf.reshape(q, (slots, heads, head))
    k = tf.reshape(keys, (slots, max_len, heads, head))
    v = tf.reshape(values, (slots, max_len, heads, head))
    scores = tf.einsum("shd,sthd->sht", q, k) / head**0.5
    visible = tf.sequence_mask(positions + 1, max_len)[:, None, :]
    scores = tf.where(visible, scores, tf.fill(tf.shape(scores), -1e9))
    out = tf.einsum("sht,sthd->shd", tf.nn.softmax(scores, axis=-1), v)
    return tf.reshape(out, (slots, width))


def decoder_layer(x, layer, cache, positions, heads, max_len):
    """One layer on one device for every slot: returns the new x and the layer's new cache."""
    h = rms_norm(x)
    keys = write_cache(cache[0], tf.linalg.matmul(h, layer["wk"]), positions, max_len)
    values = write_cache(cache[1], tf.linalg.matmul(h, layer["wv"]), positions, max_len)
    attended = attend(tf.linalg.matmul(h, layer["wq"]), keys, values, positions, heads)
    x = x + tf.linalg.matmul(attended, layer["wo"])
    x = x + tf.linalg.matmul(tf.nn.relu(tf.linalg.matmul(rms_norm(x), layer["w1"])), layer["w2"])
    return x, (keys, values)


def empty_cache(config: ModelConfig, slots: int, layers: int, width: int, device) -> list:
    with tf.device(device_name(device)):
        zeros = tf.zeros((slots, config.max_len, width))
        return [(tf.identity(zeros), tf.identity(zeros)) for _ in range(layers)]


def embed(weights, tokens, positions):
    return tf.gather(weights["embed"], tokens) + tf.gather(weights["position"], positions)


def next_token(weights, x):
    return tf.argmax(
        tf.linalg.matmul(rms_norm(x), weights["unembed"]), axis=-1, output_type=tf.int32
    )


def place_weights(weights: dict, device) -> dict:
    """A copy of every weight on `device`."""
    with tf.device(device_name(device)):
        return tf.nest.map_structure(tf.identity, weights)


class Layout:
    """A model spread over devices. `step(tokens, positions)` advances every slot by one token.

    `groups` lists, for each independent group of devices, the slots it serves: one group per
    replica; one group for the whole tensor-parallel or pipeline layout (one device lost loses it).
    """

    name = "one device"

    def __init__(self, config: ModelConfig, devices: Sequence, slots_per_group: int, seed=0):
        self.config, self.devices = config, device_names(devices)
        self.slots_per_group = slots_per_group
        self.weights = model_weights(config, seed)
        self._build()
        self._step = tf.function(self._graph_step)

    @property
    def groups(self) -> list[list[int]]:
        return [list(range(self.slots))]

    @property
    def slots(self) -> int:
        return self.slots_per_group * len(self.groups_devices())

    def groups_devices(self) -> list[list[str]]:
        return [list(self.devices)]

    def _build(self):
        self.params = place_weights(self.weights, self.devices[0])
        c = self.config
        self.cache = empty_cache(c, self.slots_per_group, c.layers, c.width, self.devices[0])

    def _graph_step(self, tokens, positions, params, cache):
        with tf.device(self.devices[0]):
            x = embed(params, tokens, positions)
            new_cache = []
            for layer, layer_cache in zip(params["layers"], cache, strict=True):
                x, kv = decoder_layer(
                    x, layer, layer_cache, positions, self.config.heads, self.config.max_len
                )
                new_cache.append(kv)
            return next_token(params, x), new_cache

    def warm(self) -> None:
        """Trace and run the step once, keeping the cache as it was (before any clock starts)."""
        zeros = tf.zeros(self.slots, tf.int32)
        self._step(zeros, zeros, self.params, self.cache)[0].numpy()

    def step(self, tokens: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Next token of every slot; the cache keeps each slot's keys and values."""
        tokens = tf.constant(tokens, tf.int32)
        positions = tf.constant(positions, tf.int32)
        out, self.cache = self._step(tokens, positions, self.params, self.cache)
        return out.numpy()


def greedy_tokens(layout: Layout, prompts: list[list[int]], n_out: int) -> list[list[int]]:
    """Each slot's prompt fed one position a step, then `n_out` greedy tokens (all prompts of
    one length): what a server does for a batch that starts together."""
    seqs = [list(p) for p in prompts]
    for position in range(len(prompts[0]) + n_out - 1):
        tokens = np.array([s[position] for s in seqs], np.int32)
        out = layout.step(tokens, np.full(len(seqs), position, np.int32))
        if position >= len(prompts[0]) - 1:
            for seq, token in zip(seqs, out, strict=True):
                seq.append(int(token))
    return [s[len(prompts[0]) :] for s in seqs]
