"""Every layout generates exactly the tokens one device generates, for the same prompts."""

import numpy as np
import pytest
import tensorflow as tf

import d2lhelpers as d2l
from d2lhelpers.parallel.tensor_parallel import count_allreduces
from d2lhelpers.serving.decoder import ModelConfig, greedy_tokens
from d2lhelpers.serving.layouts import (
    cache_bytes_per_device,
    head_split,
    make_layout,
)

CONFIG = ModelConfig(vocab=64, width=32, heads=4, layers=3, max_len=14)
PROMPTS = [list(np.random.default_rng(i).integers(0, 64, 6)) for i in range(4)]


@pytest.fixture(scope="module")
def reference():
    return greedy_tokens(make_layout("one device", CONFIG, d2l.setup_devices()[:1], 4), PROMPTS, 8)


@pytest.mark.parametrize("name", ["replicas", "tensor parallel", "pipeline"])
@pytest.mark.parametrize("n", [2, 3])
def test_layout_tokens_equal_one_device(devices, reference, name, n):
    layout = make_layout(name, CONFIG, devices[:n], 2 * n)
    prompts = [PROMPTS[i % 4] for i in range(layout.slots)]
    tokens = greedy_tokens(layout, prompts, 8)
    assert tokens == [reference[i % 4] for i in range(layout.slots)]


def test_tensor_parallel_pays_two_allreduces_per_layer(devices):
    layout = make_layout("tensor parallel", CONFIG, devices[:2], 2)
    zeros = np.zeros(2, np.int32)
    args = (tf.constant(zeros), tf.constant(zeros), layout.params, layout.cache)
    graph = layout._step.get_concrete_function(*args).graph
    assert count_allreduces(graph) == 2 * CONFIG.layers


def test_replicas_survivors_keep_their_sequences(devices):
    layout = make_layout("replicas", CONFIG, devices[:2], 2)
    ref = make_layout("one device", CONFIG, devices[:1], 1)
    prompt = PROMPTS[0]
    seqs = [list(prompt), list(prompt)]
    for position in range(3):  # half the prompt, then lose device 1
        layout.step(np.array([s[position] for s in seqs], np.int32), np.full(2, position, np.int32))
    survivors = layout.without_last_device()
    assert survivors.slots == 1 and survivors.devices == layout.devices[:1]
    out = []
    seq = list(prompt)
    for position in range(3, len(prompt) + 4):
        t = survivors.step(np.array([seq[position]], np.int32), np.array([position], np.int32))
        if position >= len(prompt) - 1:
            seq.append(int(t[0]))
            out.append(int(t[0]))
    assert out == greedy_tokens(ref, [prompt], 5)[0]


def test_head_split_and_refusals(devices):
    assert head_split(4, 3) == [2, 1, 1]
    with pytest.raises(ValueError, match="heads cannot be split"):
        head_split(2, 3)
    with pytest.raises(ValueError, match="layers cannot fill"):
        make_layout("pipeline", ModelConfig(layers=1), devices[:2], 2)
    with pytest.raises(ValueError, match="layout must be one of"):
        make_layout("ring", CONFIG, devices[:2], 2)
    with pytest.raises(ValueError, match="evenly"):
        make_layout("replicas", CONFIG, devices[:2], 3)


def test_split_layouts_hold_less_per_device_than_one_device():
    one = cache_bytes_per_device("one device", CONFIG, 1, 8)
    for name in ("replicas", "tensor parallel", "pipeline"):
        assert cache_bytes_per_device(name, CONFIG, 2, 8) < one
