import os

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

import d2lhelpers as d2l
from d2lhelpers.parallelism import (
    ParallelRun,
    communication_note,
    input_batch,
    max_difference,
    mlp,
    mlp_bytes,
    mlp_flops,
    mlp_weights,
    offsets,
    on_one_device,
    place,
    require_positive,
    split_sizes,
)


def test_split_sizes_uneven_larger_first():
    assert split_sizes(10, 4) == [3, 3, 2, 2]
    assert split_sizes(8, 4) == [2, 2, 2, 2]
    assert split_sizes(5, 1) == [5]
    assert offsets([3, 3, 2]) == [(0, 3), (3, 6), (6, 8)]


@given(st.integers(1, 64), st.integers(0, 500))
def test_split_sizes_cover_total_within_one(parts, extra):
    total = parts + extra
    sizes = split_sizes(total, parts)
    assert sum(sizes) == total and len(sizes) == parts
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_split_sizes_refuses_empty_parts():
    with pytest.raises(ValueError, match="3 columns cannot be split into 4 non-empty parts"):
        split_sizes(3, 4, "columns")
    with pytest.raises(ValueError, match="parts=0"):
        split_sizes(3, 0)


def test_require_positive_names_the_bad_sizes():
    require_positive(a=1, b=7)
    with pytest.raises(ValueError, match="b=0, c=-2"):
        require_positive(a=1, b=0, c=-2)


def test_weights_are_deterministic_and_placed(devices):
    a = mlp_weights(6, 10, devices[1], seed=3)
    b = mlp_weights(6, 10, devices[0], seed=3)
    c = mlp_weights(6, 10, devices[0], seed=4)
    assert (a.width, a.hidden) == (6, 10)
    assert all(t.device.endswith(devices[1].name) for t in a)
    np.testing.assert_array_equal(a.w1.numpy(), b.w1.numpy())
    assert not np.allclose(a.w2.numpy(), c.w2.numpy())
    assert np.abs(a.b2.numpy()).max() > 0  # biases are not zero: a doubled bias would show
    moved = a.to(devices[2])
    assert all(t.device.endswith(devices[2].name) for t in moved)


def test_mlp_matches_numpy(devices):
    weights = mlp_weights(5, 7, devices[0])
    x = input_batch(4, 5, devices[0])
    w1, b1, w2, b2 = (t.numpy().astype(np.float64) for t in weights)
    expected = np.maximum(x.numpy() @ w1 + b1, 0) @ w2 + b2
    np.testing.assert_allclose(mlp(x, weights).numpy(), expected, rtol=1e-5, atol=1e-6)
    assert mlp_flops(4, 5, 7) == 2 * 2 * 4 * 5 * 7
    assert mlp_bytes(4, 5, 7) == 4 * (2 * 5 * 7 + 7 + 5 + 4 * (2 * 5 + 7))


def test_on_one_device_places_every_op(devices):
    weights = mlp_weights(4, 6, devices[0])
    x = input_batch(3, 4, devices[0])
    run = on_one_device(mlp, devices[2])
    assert run is on_one_device(mlp, devices[2])
    graph = run.get_concrete_function(x, weights).graph
    placed = {op.device for op in graph.get_operations() if op.type in ("MatMul", "Relu")}
    assert placed == {devices[2].name}


def test_max_difference_accepts_row_blocks(devices):
    whole = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    blocks = [place(whole[:2], devices[1]), place(whole[2:] + 0.5, devices[3])]
    assert max_difference(whole, whole) == 0.0
    assert max_difference(blocks, whole) == 0.5


def test_communication_note_says_what_a_hand_over_is():
    assert "one process" in communication_note("logical CPU")
    assert "one GPU" in communication_note("virtual GPU")
    assert "NVLink" in communication_note("GPU")


def _run(kind="logical CPU", n=2, times=(0.5,), reference=(1.0,), ideal=2.0):
    return ParallelRun(
        scheme="replicas",
        devices=[f"/device:CPU:{i}" for i in range(n)],
        kind=kind,
        samples=100,
        measurement=d2l.Measurement("parallel", list(times)),
        reference=d2l.Measurement("one", list(reference), warnings=["noisy: test"]),
        ideal_speedup=ideal,
        max_error=1e-7,
        communication="NOTE",
    )


def test_parallel_run_derives_throughput_and_speedup():
    run = _run()
    assert run.n_devices == 2 and run.time == 0.5 and run.reference_time == 1.0
    assert run.throughput == 200 and run.reference_throughput == 100 and run.speedup == 2.0
    text = str(run)
    assert "200 samples/s" in text and "speedup 2.00x (ideal 2.00x)" in text
    assert "1.00x ideal" in text and "WARNING (one): noisy: test" in text
    assert text.endswith("NOTE")


def test_parallel_run_flags_better_than_ideal_and_too_few_cores(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    text = str(_run(n=4, times=(0.1,), ideal=4.0))
    assert "faster than the ideal" in text  # 0.1 s against an ideal of 0.25 s
    assert "4 logical devices on 2 CPU cores" in text
    assert "CPU cores" not in str(_run(kind="GPU", n=4))
