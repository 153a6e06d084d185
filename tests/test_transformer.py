"""The decoder on one device: sizes from real tensors, slots independent, greedy decoding."""

import numpy as np
import pytest
import tensorflow as tf

from d2lhelpers.serving.decoder import (
    Layout,
    ModelConfig,
    empty_cache,
    greedy_tokens,
    model_weights,
)

CONFIG = ModelConfig(vocab=32, width=16, heads=2, layers=2, max_len=12)


def test_sizes_match_the_tensors_they_describe(devices):
    weights = model_weights(CONFIG)
    floats = sum(int(np.prod(w.shape)) for w in tf.nest.flatten(weights))
    assert CONFIG.weight_bytes == 4 * floats
    cache = empty_cache(CONFIG, 1, CONFIG.layers, CONFIG.width, devices[0])
    assert CONFIG.kv_bytes_per_sequence == sum(
        4 * int(np.prod(t.shape)) for kv in cache for t in kv
    )


def test_width_must_split_into_heads():
    with pytest.raises(ValueError, match="multiple of heads"):
        ModelConfig(width=10, heads=4)


def test_a_slot_does_not_see_the_others(devices):
    layout = Layout(CONFIG, devices[:1], slots_per_group=3)
    prompt = [1, 2, 3]
    alone = greedy_tokens(layout, [prompt, [0, 0, 0], [0, 0, 0]], 5)[0]
    layout = Layout(CONFIG, devices[:1], slots_per_group=3)
    crowded = greedy_tokens(layout, [prompt, [7, 8, 9], [30, 31, 4]], 5)[0]
    assert alone == crowded
    assert all(0 <= t < CONFIG.vocab for t in alone)


def test_warm_leaves_the_cache_as_it_was(devices):
    layout = Layout(CONFIG, devices[:1], slots_per_group=2)
    greedy_tokens(layout, [[1, 2], [3, 4]], 2)
    before = [t.numpy().copy() for kv in layout.cache for t in kv]
    layout.warm()
    after = [t.numpy() for kv in layout.cache for t in kv]
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    assert any(a.any() for a in after)
