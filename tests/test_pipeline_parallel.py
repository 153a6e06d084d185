import os

import numpy as np
import pytest

from d2lhelpers.parallelism import input_batch, split_sizes
from d2lhelpers.pipeline_parallel import (
    count_hand_overs,
    dense_stack,
    measured_bubble,
    pipeline_in_one_graph,
    run_pipeline_parallel,
    split_stages,
    stack_weights,
)

FAST = {"min_runs": 3, "max_runs": 3, "budget_s": 0.05}


def test_split_stages_places_consecutive_layers(devices):
    layers = stack_weights(4, 7, devices[0])
    stages = split_stages(layers, devices[:3])
    assert [len(s) for s in stages] == [3, 2, 2]
    for k, stage in enumerate(stages):
        assert all(w.device.endswith(devices[k].name) for w, _ in stage)
    np.testing.assert_array_equal(stages[1][0][0].numpy(), layers[3][0].numpy())
    with pytest.raises(ValueError, match="2 layers cannot be split into 3"):
        split_stages(layers[:2], devices[:3])


@pytest.mark.parametrize("p", [1, 2, 3, 4])
@pytest.mark.parametrize("m", [1, 3, 4])
def test_microbatch_outputs_equal_one_device_in_order(devices, p, m):
    layers = stack_weights(6, 7, devices[0], seed=p)  # 7 layers: uneven stages for p = 2, 3, 4
    x = input_batch(10, 6, devices[0])  # 10 rows: uneven microbatches for m = 3, 4
    outputs = pipeline_in_one_graph(devices[:p], m)(x, split_stages(layers, devices[:p]))
    assert len(outputs) == m
    start = 0
    for y, rows in zip(outputs, split_sizes(10, m), strict=True):
        expected = dense_stack(x[start : start + rows], layers)
        np.testing.assert_allclose(y.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
        start += rows


def test_graph_puts_each_stage_on_its_device_and_serialises_it(devices):
    layers = stack_weights(4, 6, devices[0])
    x = input_batch(8, 4, devices[0])
    p, m = 3, 4
    run = pipeline_in_one_graph(devices[:p], m)
    assert run is pipeline_in_one_graph(devices[:p], m)
    graph = run.get_concrete_function(x, split_stages(layers, devices[:p])).graph
    ops = graph.get_operations()
    matmuls = [op.device for op in ops if op.type == "MatMul"]
    # Two layers per stage, each once per microbatch, on the stage's own device.
    assert {d: matmuls.count(d) for d in set(matmuls)} == {d.name: m * 2 for d in devices[:p]}
    assert count_hand_overs(graph) == (p - 1) * m
    # Each stage waits for its previous microbatch: one control edge per (stage, later microbatch).
    assert sum(bool(op.control_inputs) for op in ops) == p * (m - 1)


def test_measured_bubble_matches_gpipe_for_equal_stages():
    t, p, m = 2e-3, 4, 8
    step_time = (m + p - 1) * t  # GPipe: fill, then one microbatch per stage time
    busy_time = m * p * t  # every microbatch through every stage, one after the other
    assert measured_bubble(step_time, busy_time, p) == pytest.approx((p - 1) / (m + p - 1))
    assert measured_bubble(busy_time, busy_time, 1) == 0.0
    assert measured_bubble(busy_time / 2, busy_time, 2) == 0.0  # perfect overlap on 2
    with pytest.raises(ValueError, match="positive"):
        measured_bubble(0.0, 1.0, 2)


def test_run_pipeline_parallel_small(devices, monkeypatch):
    calls = []
    run = run_pipeline_parallel(
        8, 12, 3, 4, n_layers=6, progress=lambda d, t: calls.append((d, t)), **FAST
    )
    assert calls == [(1, 3), (2, 3), (3, 3)]
    assert run.scheme == "pipeline parallel" and run.stages == 4 and run.microbatches == 3
    assert run.stage_layers == [2, 2, 1, 1] and run.hand_overs == 3 * 3
    assert run.time > 0 and run.reference_time > 0 and run.microbatched_reference.median > 0
    assert run.max_error < 1e-5 and run.throughput == 12 / run.time
    assert run.model_bubble == pytest.approx((4 - 1) / (3 + 4 - 1))
    assert run.measured_bubble < 1
    assert run.ideal_speedup == pytest.approx(3 * 6 / (6 + 2 * 2))  # slowest stage: 2 layers
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    text = str(run)
    assert "GPipe model (p-1)/(m+p-1) = 50%" in text and "busy time" in text
    assert "cannot fall below 50% here" in text


def test_run_pipeline_parallel_refuses_bad_input(devices):
    with pytest.raises(ValueError, match="3 layers cannot be split into 4"):
        run_pipeline_parallel(8, 8, 2, 4, n_layers=3)
    with pytest.raises(ValueError, match="4 rows cannot be split into 8"):
        run_pipeline_parallel(8, 4, 8, 2)
    with pytest.raises(ValueError, match="microbatches=0"):
        run_pipeline_parallel(8, 4, 0, 2)
    with pytest.raises(ValueError, match="choose 1 to 4"):
        run_pipeline_parallel(8, 8, 2, 5)
    with pytest.raises(ValueError, match="is free"):
        run_pipeline_parallel(2**18, 2**10, 2, 4)  # 2 TiB of weights: refused before allocating


def test_bubble_from_trace_counts_each_stage_device_own_work_only():
    from d2lhelpers.pipeline_parallel import bubble_from_trace
    from d2lhelpers.timeline import OpEvent

    rows = [
        OpEvent("/device:CPU:0", "MatMul", "matmul", 0.0, 2.0),
        OpEvent("/device:CPU:1", "MatMul", "matmul", 1.0, 3.0),
        # a hand-over is not a stage's work, even though it lands on the stage's device
        OpEvent("/device:CPU:1", "x", "copy", 2.0, 2.5, lane="copy from /device:CPU:0"),
    ]
    # span 3 s, busy 2 + 2 s on 2 stages: idle 1 - 4 / 6
    assert bubble_from_trace(rows, ["/device:CPU:0", "/device:CPU:1"]) == pytest.approx(1 / 3)
