"""Notebook 07's experiments at tiny sizes: real serving runs, refusals, failure, the panel."""

import time

import matplotlib.pyplot as plt
import pytest

from d2lhelpers.lessons.l07_serving import (
    decoder_config,
    largest_batch,
    plot_latency_throughput,
    plot_requests,
    run_load_sweep,
    run_serving,
    run_serving_failure,
    runs,
    serving_panel,
)
from d2lhelpers.serving.layouts import cache_bytes_per_device

TINY = {"width": 16, "layers": 2, "prompt_len": 3, "n_out": 4}


@pytest.mark.parametrize("layout", ["replicas", "tensor parallel", "pipeline"])
def test_a_serving_run_finishes_every_request(devices, layout):
    run = run_serving(layout, 2, rate=200.0, n_requests=6, slots_per_device=2, **TINY)
    assert len(run.finished) == 6 and not run.failed
    assert all(len(r.tokens) == 4 for r in run.finished)
    assert 0 < run.ttft(50) <= run.latency(50) <= run.latency(99)
    assert run.log.throughput == pytest.approx(24 / run.log.wall_s)
    assert "6 of 6 requests finished" in run.verdict
    assert "<table>" in run._repr_html_() and "latency p50" in str(run)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"layout": "ring"}, "layout must be one of"),
        ({"width": 10}, "multiple of 4 heads"),
        ({"width": 16.5}, "whole number"),
        ({"n_requests": 0}, "requests must be at least 1"),
        ({"rate": 0}, "offered load"),
        ({"n_devices": 99}, "devices asked for"),
        ({"slots_per_device": 10**6}, "at most"),
        ({"width": 4096, "layers": 64, "slots_per_device": 100}, "needs"),
    ],
)
def test_bad_values_are_refused_at_once(devices, kwargs, message):
    started = time.perf_counter()
    with pytest.raises((ValueError, TypeError), match=message):
        run_serving(**{"n_requests": 4, **TINY, **kwargs})
    assert time.perf_counter() - started < 1.0


def test_one_device_lost(devices):
    result = run_serving_failure(2, n_requests=8, width=16, n_out=4)
    replicas, group = result.runs
    assert len(replicas.finished) == 8 and not replicas.failed
    assert group.failed and not any(r.rerouted for r in group.log.requests)
    assert len(group.finished) + len(group.failed) == 8
    assert "replicas: 8 of 8 finished" in result.verdict
    assert "refused after" in str(result)


def test_the_largest_batch_is_the_last_that_fits(devices, monkeypatch):
    config = decoder_config(64, 2, 8, 16)
    free = 100 * 2**20
    monkeypatch.setattr(runs, "free_memory_bytes", lambda device: free)
    n = largest_batch("tensor parallel", config, devices[:2])
    assert n > 0 and n % 2 == 0
    assert 2 * cache_bytes_per_device("tensor parallel", config, 2, n) <= 0.8 * free
    assert 2 * cache_bytes_per_device("tensor parallel", config, 2, n + 2) > 0.8 * free


def test_the_sweep_and_its_plots(devices):
    sweep = run_load_sweep(2, ["replicas"], [0.5, 1.2], n_requests=6, slots_per_device=2, **TINY)
    (s,) = sweep.sweeps
    assert len(s.runs) == 2 and s.saturation > 0
    assert s.model_capacity > 0 and sweep.ideal_capacity > 0
    assert 0 < sweep.compute_share
    assert sweep.regime().startswith(("A step here", "one step"))
    figure = plot_latency_throughput(sweep)
    assert figure.axes[0].get_xlim()[1] >= sweep.ideal_capacity
    plt.close(figure)
    figure = plot_requests(s.runs[-1])
    assert figure.axes[1].get_ylabel() == "requests queued (line)"  # the queue over time
    plt.close(figure)


def test_the_panel_runs_from_its_sliders(devices):
    panel = serving_panel()
    panel.sliders["width"].value = 16
    panel.sliders["n_out"].value = 3
    panel.sliders["load_percent"].value = 100
    result = panel.run()
    assert panel.error is None, panel.error
    assert len(result.sweeps[0].runs) == 4
    assert panel.estimate(**panel.values()) > 0
