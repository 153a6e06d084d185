"""The parts every scheme shares: the model, its placement, the one-device check, the result."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from d2lhelpers.core.checks import require_counts, require_measure_options, require_rate
from d2lhelpers.core.counts import mlp_bytes, mlp_flops
from d2lhelpers.parallel.model import (
    input_batch,
    max_difference,
    mlp,
    mlp_weights,
    offsets,
    on_one_device,
    place,
    split_sizes,
)
from d2lhelpers.parallel.result import ParallelResult, communication_note
from d2lhelpers.timing.benchmark import Measurement


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
    with pytest.raises(ValueError, match="parts must be at least 1, got 0"):
        split_sizes(3, 0)


def test_require_sizes_names_the_bad_size_and_refuses_wrong_types():
    assert require_counts(a=1, b=7) == {"a": 1, "b": 7}
    with pytest.raises(ValueError, match="b must be at least 1, got 0"):
        require_counts(a=1, b=0, c=-2)
    for bad in (2.5, "3", True, None):
        with pytest.raises(TypeError, match="a must be a whole number"):
            require_counts(a=bad)


def test_measure_options_and_peak_are_checked_before_anything_runs():
    require_measure_options({"min_runs": 3, "max_runs": 3, "budget_s": 0.05, "warmup": 0})
    with pytest.raises(ValueError, match="max_runs must be at least 1"):
        require_measure_options({"max_runs": 0})
    with pytest.raises(ValueError, match="budget_s"):
        require_measure_options({"budget_s": 0})
    with pytest.raises(TypeError, match="unknown measure options"):
        require_measure_options({"repeats": 3})
    require_rate("device_peak", None)
    require_rate("device_peak", 1e9)
    with pytest.raises(ValueError, match="device_peak"):
        require_rate("device_peak", -1.0)


def test_weights_are_deterministic_and_placed(devices):
    a = mlp_weights(6, 10, devices[1], seed=3)
    b = mlp_weights(6, 10, devices[0], seed=3)
    c = mlp_weights(6, 10, devices[0], seed=4)
    assert a.w1.shape == (6, 10) and a.w2.shape == (10, 6)
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
    assert mlp_flops(4, 5, 7) == 560  # worked by hand: 2 matmuls x 2 FLOPs x 4·5·7
    assert mlp_bytes(4, 5, 7) == 600  # 4 B x (70 weights + 12 biases + 68 activations)


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
    # read 182: the hand-over's bytes are an expectation, bounded in notebook 02, not a design
    said = communication_note("logical CPU")
    assert "is expected to copy few or none (not measured here; notebook 02 times one" in said
    assert "one GPU" in communication_note("virtual GPU")
    assert "NVLink" in communication_note("GPU")


def _m(label, *times, warnings=()):
    return Measurement(label, list(times), warnings=list(warnings))


def _run(
    kind="logical CPU",
    n=2,
    times=(0.5, 0.5, 0.5),
    reference=(1.0, 1.0, 1.0),
    ideal=2.0,
    cores=4,
    error=1e-7,
    warnings=(),
):
    return ParallelResult(
        scheme="replicas",
        devices=[f"/device:CPU:{i}" for i in range(n)],
        kind=kind,
        samples=100,
        measurement=_m("parallel", *times),
        reference=_m("one", *reference, warnings=warnings),
        ideal_speedup=ideal,
        max_error=error,
        cores=cores,
    )


def test_parallel_run_derives_throughput_and_speedup():
    run = _run(times=(0.5, 0.52, 0.5))
    assert run.n_devices == 2 and run.time == 0.5 and run.reference_time == 1.0
    assert run.throughput == 200 and run.reference_throughput == 100 and run.speedup == 2.0
    # Both noises are the 5% floor, over this run's time: (0.025 + 0.05) / 0.5 = 0.15.
    assert run.speedup_noise == pytest.approx(0.15)
    assert run.reachable_speedup == 2.0 and run.trusted


def test_parallel_run_verdict_follows_the_data(monkeypatch):
    from d2lhelpers.core import cache

    monkeypatch.setattr(cache.os, "getloadavg", lambda: (0.4, 0.0, 0.0), raising=False)
    faster = _run(times=(0.6,) * 3)
    assert faster.verdict.startswith("replicas on 2 logical CPU devices is 1.67x faster")
    assert "reachable here: 2.00x" in faster.verdict
    assert "sits at it" not in faster.verdict
    # 2.02x against 2.00x reachable, inside the floor: at it, the model held (read 100), the excess
    # not read (read 54)
    edge = _run(times=(0.495,) * 3)
    assert edge.trusted and edge.above_reachable is None
    assert edge.verdict.endswith(
        "reachable here: 2.00x (a model: hand-overs free, no other program on the usable cores) "
        "(the 2.02x measured sits at it, within the noise: the model held, and the part above "
        "it is noise, not a result)"
    )
    # read 86: the same, beside a one-device run spread over 10%: not tested, as everywhere
    spread = _run(times=(0.495,) * 3, reference=(0.9, 1.0, 1.15))
    assert spread.trusted and spread.above_reachable is None and spread.speedup > 2
    assert spread.verdict.endswith(
        "measured sits at it, within the noise, but not tested: one device's runs spread by more "
        "than 10% of their median, and the reachable is scaled from it)"
    )
    # read against the reachable by the rule every notebook reads a model by (read 56: 0.65x
    # against 2.00x reachable was read only against one device): 0.60 s against 0.50 s, with
    # both noises 0.03 + 0.025 s, is a miss; 0.51 s is within them
    assert faster.reachable_test == "missed"
    assert faster.verdict.endswith(
        "(its time, 600.00 ms, against the reachable's 500.00 ms, with both noises 55.00 ms: "
        "slower beyond the noise, so the model missed (it leaves out the hand-overs and all the "
        "devices share; what the split lost is not measured here))"
    )
    # read 82: two programs spinning on both cores went unnamed; the load average names them
    monkeypatch.setattr(cache.os, "getloadavg", lambda: (4.9, 0.0, 0.0), raising=False)
    assert faster.verdict.endswith(  # this run's 4 usable cores
        "what the split lost is not measured here; the load average, 4.9, was above 4 usable CPU "
        "cores (it counts the whole machine and this run's own threads): another program on the "
        "cores is a candidate too))"
    )
    near = _run(times=(0.51,) * 3)
    assert near.verdict.endswith("with both noises 50.50 ms: within the noise, so the model held)")
    shaky = _run(times=(0.45, 0.55, 0.6))  # within the noise, but its runs spread by 30%
    assert shaky.reachable_test == "noisy" and "but not tested (its runs spread" in shaky.verdict
    # read 66: a quiet split against a noisy one-device run (the reachable's source): not held
    shaky_reference = _run(times=(0.51,) * 3, reference=(0.8, 1.0, 1.3))
    assert shaky_reference.reachable_test == "noisy"
    assert shaky_reference.verdict.endswith(  # read 81: the noisy run named, not the quiet one
        "within the noise, but not tested (one device's runs spread by more than 10% of their "
        "median, and the reachable is scaled from it))"
    )
    # slower than one device, and so below the reachable by far: missed, however noisy the runs
    slower = _run(times=(1.5,) * 3)
    assert "1.50x slower than one device" in slower.verdict
    assert _run(times=(1.0, 1.5, 2.0)).reachable_test == "missed"
    same = _run(times=(0.98,) * 3)
    assert same.verdict.startswith("no measurable difference")
    text = str(faster)
    assert "replicas: a batch of 100 rows" in text and "1.67x" in text
    assert "reachable here (a model: hand-overs free, no other program on the usable cores)" in text
    assert "WARNING" not in text


def test_parallel_run_flags_beating_the_reachable_and_wrong_output():
    # 4 devices on 2 cores: at most 2x reachable, so 0.25 s against 1 s is not a result.
    capped = _run(n=4, times=(0.25,) * 3, ideal=4.0, cores=2)
    assert capped.core_limited and capped.reachable_speedup == 2.0
    assert not capped.trusted and "flagged, not a result" in capped.verdict
    (flag,) = [f for f in capped.flags() if "above the 2.00x reachable" in f]
    assert "beyond the noise (±0.25): not read as a result. The reachable is a model" in flag
    # read 53: causes this run speaks against go last, with why (quiet runs, matching outputs)
    assert flag.endswith(
        "(1) the one-device time was measured slow (the machine was busier during it); (2) the "
        "split's smaller matmuls ran faster per FLOP than one device's (the model assumes the "
        "same rate: a cache effect would break it; a hypothesis, not measured); (3) the runs were "
        "too noisy (unlikely: these runs were not noisy); (4) work was skipped, or the clock "
        "stopped before the devices finished (unlikely for the values: the outputs match one "
        "device's)"
    )
    assert "impossible" not in flag
    assert "at most 2 compute at once" in str(capped)
    # The same times on a GPU, or on enough cores, are within the ideal.
    assert _run(kind="GPU", n=4, times=(0.25,) * 3, ideal=4.0, cores=2).trusted
    assert _run(n=4, times=(0.26,) * 3, ideal=4.0, cores=4).trusted
    wrong = _run(error=0.5)
    assert not wrong.trusted and any("computed something else" in f for f in wrong.flags())
    # read 76: its row's speedup says so too, not only the verdict under the table
    (table,) = wrong.tables()
    assert table.rows[1][4].endswith(" (flagged, not a result)")
    assert not _run().tables()[0].rows[1][4].endswith("not a result)")
    noisy = _run(warnings=["noisy: test"])
    assert noisy.flags() == ["one: noisy: test"] and "WARNING: one: noisy: test" in str(noisy)
    assert "<table>" in noisy._repr_html_()


def test_virtual_gpus_say_the_reachable_speedup_assumes_separate_chips():
    assert "share one chip's compute" in str(_run(kind="virtual GPU"))
    assert "share one chip's compute" not in str(_run(kind="GPU"))


def test_two_runs_of_one_experiment_are_read_against_each_other():
    first, again = _run(times=(0.5, 0.5, 0.5)), _run(times=(0.52, 0.52, 0.52))
    assert first.against_rerun(again).endswith("they agree within their noise")  # 2.00 vs 1.92
    # read 73: within each other's noise, yet one held its model and the other missed it
    edge = _run(times=(0.56, 0.56, 0.56))  # 1.79x; 0.56 s against the reachable 0.5 s: missed
    assert (first.reachable_test, edge.reachable_test) == ("held", "missed")
    assert first.against_rerun(edge).endswith(
        "they agree within their noise, though the reachable model held in one and was missed in "
        "the other: each sits on its side of that model's band, within the noise of the other run"
    )
    # read 75: 'held' beside 'noisy' is not two sides of a band: one run is too noisy to read it
    wobbly = _run(times=(0.45, 0.5, 0.56))  # IQR 55 ms: 11% of the 0.5 s median
    assert (first.reachable_test, wobbly.reachable_test) == ("held", "noisy")
    assert first.against_rerun(wobbly).endswith(
        "though the reachable model held in one and was not tested (too noisy) in the other: the "
        "untested run does not read the model, as its runs spread by more than 10% of their "
        "median (its time is inside the model's band as well)"
    )
    # read 77: a run above the reachable beyond the noise is flagged, not 'missed'
    fast = _run(times=(0.45, 0.45, 0.45))  # 2.22x against the reachable 2.00x
    assert fast.beats_reachable and fast.reachable_test == "missed"  # model_test's bare word
    said = fast.against_rerun(first)
    # read 175: nor compared with the other run
    assert said.endswith(
        "2.22x (flagged, not a result) in one run, 2.00x in the other: a speedup that is not a "
        "result is not compared"
    )
    slower = _run(times=(1.0, 1.0, 1.0))  # 1.00x against 2.00x, bands 0.15 + 0.1
    said = first.against_rerun(slower)
    assert "2.00x in one run, 1.00x in the other (band ±0.25)" in said
    assert "something changed between the runs that neither" in said
    other = _run(n=3)
    assert first.against_rerun(other).endswith("not the same experiment, so not compared")


def test_two_cells_one_device_times_are_read_against_each_other():
    """Read 50: notebook 04's replicas cell timed one device at 17.29 ms, the tensor-parallel
    cell the same MLP at 13.80 ms, beyond both noises, and nothing said so."""
    first = _run(reference=(1.0, 1.0, 1.0))
    same = _run(reference=(1.04, 1.04, 1.04))  # inside 5% + 5%
    assert first.one_device_against(same).endswith("both speedups share one yardstick")
    # read 76: agreeing within ±88% and ±71% shows too little to share a yardstick
    wide = _run(reference=(0.5, 0.7, 1.0, 1.4, 1.6))  # IQR 70% of its median
    assert first.one_device_against(wide).endswith(
        "they agree within their noise, but a run among them spread by more than 10% of its "
        "median: too noisy to tell whether both speedups share one yardstick"
    )
    moved = _run(reference=(1.25, 1.25, 1.25))
    said = first.one_device_against(moved)
    assert said.startswith("one device: 1.000 s ±5% (floor) beside replicas, 1.250 s")
    assert "(0.80x): they differ beyond both noises" in said and "hypothesis" in said
    other = dataclasses.replace(moved, samples=200)
    assert first.one_device_against(other).endswith("not the same one-device work, so not compared")


def test_the_speedups_band_holds_one_exactly_when_the_verdict_finds_no_difference():
    # The band and the verdict read the two times alike: 1 inside the band, no measurable
    # difference; outside it, faster or slower (printed "1.60x faster" beside "1.60x ± 0.62"
    # once, when the band weighed the noises another way).
    for median in (0.5, 0.6, 0.625, 0.9, 0.95, 1.0, 1.05, 1.12, 1.3, 1.6):
        for spread in (0.0, 0.05, 0.1, 0.25):
            run = _run(times=(median - spread, median, median + spread))
            inside = abs(run.speedup - 1) <= run.speedup_noise
            assert inside == run.verdict.startswith("no measurable difference"), (median, spread)


def test_the_speedups_band_is_printed_on_the_side_of_1_its_verdict_read():
    """Read 113: '1.33x ± 0.33 ... faster', whose printed band reaches 1.00."""
    run = _run(times=(0.5, 0.5, 0.5))
    assert run.speedup_text() == f"{run.speedup:.2f}x ± {run.speedup_noise:.2f}"
    edge = _run(times=(0.75, 0.75, 0.75), reference=(1.0, 1.0, 1.0))
    edge.reference.times = [0.83132] * 3  # 1.11x ± 0.11 at two decimals: 1.00 reached
    s, b = edge.speedup, edge.speedup_noise
    assert round(round(s, 2) - round(b, 2), 2) <= 1 < s - b  # faster, though 2 digits hide it
    text = edge.speedup_text()
    low = float(text.split("x ± ")[0]) - float(text.split("x ± ")[1])
    assert low > 1 and len(text.split("x ± ")[1]) > 4
