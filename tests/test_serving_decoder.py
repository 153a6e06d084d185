"""The decoder and its layouts (the notebook's saved cells): sizes from real tensors, prefill in
one pass equal to reading the prompt a token at a time, every layout equal to one device."""

import numpy as np
import pytest
import tensorflow as tf

import d2lhelpers as d2l
from d2lhelpers.parallel.tensor_parallel import count_allreduces
from d2lhelpers.serving import decoder
from d2lhelpers.serving.config import LAYOUTS, ModelConfig, bytes_per_device
from d2lhelpers.serving.engines import build_engines, empty_cache, greedy_tokens

CONFIG = ModelConfig(vocab=64, width=32, heads=4, layers=3, max_len=14)
PROMPTS = [[int(t) for t in np.random.default_rng(i).integers(0, 64, 6)] for i in range(4)]


@pytest.fixture(scope="module")
def reference():
    [one] = build_engines("one device", CONFIG, d2l.setup_devices()[:1], 4)
    return greedy_tokens(one, PROMPTS, 8)


def test_sizes_match_the_tensors_they_describe(devices):
    weights = decoder.model_weights(CONFIG)
    floats = sum(int(np.prod(w.shape)) for w in tf.nest.flatten(weights))
    assert CONFIG.weight_bytes == 4 * floats
    cache = empty_cache(1, CONFIG.max_len, CONFIG.width, CONFIG.layers, devices[0].name)
    assert CONFIG.kv_bytes_per_sequence == sum(
        4 * int(np.prod(t.shape)) for kv in cache for t in kv
    )


def test_prefill_in_one_pass_equals_one_token_a_step(devices):
    """The prompt's rows in one step write the same cache and give the same next token as
    feeding them one position a step: causal attention over the slot's own positions."""
    [engine] = build_engines("one device", CONFIG, devices[:1], 2)
    start = engine.cache
    prompt = PROMPTS[0]
    first = engine.prefill(1, prompt)
    one_pass = engine.cache
    engine.cache = start
    for position, token in enumerate(prompt):
        tokens, positions = np.zeros(2, np.int32), np.zeros(2, np.int32)
        tokens[1], positions[1] = token, position
        out = engine.decode(tokens, positions)
    assert int(out[1]) == first
    for (k1, v1), (k2, v2) in zip(one_pass, engine.cache, strict=True):
        np.testing.assert_allclose(k1[1, : len(prompt)], k2[1, : len(prompt)], atol=1e-5)
        np.testing.assert_allclose(v1[1, : len(prompt)], v2[1, : len(prompt)], atol=1e-5)


def test_slots_do_not_see_each_other(devices):
    [engine] = build_engines("one device", CONFIG, devices[:1], 4)
    alone = greedy_tokens(engine, PROMPTS[:1], 6)
    [engine] = build_engines("one device", CONFIG, devices[:1], 4)
    together = greedy_tokens(engine, PROMPTS, 6)
    assert together[0] == alone[0]


@pytest.mark.parametrize("name", LAYOUTS)
@pytest.mark.parametrize("n", [2, 3])
def test_layout_tokens_equal_one_device(devices, reference, name, n):
    engines = build_engines(name, CONFIG, devices[:n], 2)
    prompts = [PROMPTS[i % 4] for i in range(2 * n)]
    share = len(prompts) // len(engines)
    tokens = [
        t
        for i, engine in enumerate(engines)
        for t in greedy_tokens(engine, prompts[i * share : (i + 1) * share], 8)
    ]
    assert tokens == [reference[i % 4] for i in range(2 * n)]


def test_tensor_parallel_pays_two_allreduces_per_layer(devices):
    [engine] = build_engines("tensor parallel", CONFIG, devices[:2], 1)
    zeros = tf.zeros(2, tf.int32)
    args = (engine.params, engine.cache, zeros, tf.range(2), zeros)
    graph = engine._step.get_concrete_function(*args).graph
    assert count_allreduces(graph) == 2 * CONFIG.layers


def test_pipeline_cuts_rows_into_microbatches(devices):
    """More microbatches, more hand-overs between stages in the traced step."""
    counts = []
    for m in (1, 4):
        [engine] = build_engines("pipeline", CONFIG, devices[:2], 1, microbatches=m)
        zeros = tf.zeros(m, tf.int32)
        graph = engine._step.get_concrete_function(
            engine.params, engine.cache, zeros, tf.range(m), zeros
        ).graph
        counts.append(
            sum(
                op.type == "Identity" and "device:CPU:1" in op.device
                for op in graph.get_operations()
            )
        )
    assert counts[1] > counts[0]


def test_refusals(devices):
    with pytest.raises(ValueError, match="heads cannot be split"):
        build_engines("tensor parallel", ModelConfig(width=8, heads=2), devices[:3], 1)
    with pytest.raises(ValueError, match="layers cannot fill"):
        build_engines("pipeline", ModelConfig(layers=1), devices[:2], 1)
    with pytest.raises(ValueError, match="layout must be one of"):
        build_engines("ring", CONFIG, devices[:2], 1)
    with pytest.raises(ValueError, match="multiple of heads"):
        ModelConfig(width=10, heads=4)


def test_split_layouts_hold_less_per_device_than_one_device():
    one = bytes_per_device("one device", CONFIG, 1, 8)
    for name in LAYOUTS:
        assert bytes_per_device(name, CONFIG, 2, 8) < one


def test_a_split_device_holds_half_the_layers_and_every_embedding_at_their_real_shapes():
    config = ModelConfig(width=64, heads=4, layers=2, max_len=24)
    embeddings = 4 * (2 * config.vocab * 64 + 24 * 64)  # embed, unembed, positions (float32)
    layers = 4 * 2 * (4 * 64**2 + 2 * 64 * 256)
    assert config.embedding_bytes == embeddings and config.layer_bytes == layers
    kv = config.kv_bytes_per_sequence
    split = bytes_per_device("tensor parallel", config, 2, 8)
    assert split == layers // 2 + embeddings + 4 * kv
    assert bytes_per_device("replicas", config, 2, 8) == layers + embeddings + 4 * kv
