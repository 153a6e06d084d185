"""Notebook 04's lesson: the three schemes' validation, estimate, result, plot and panel; the
cost model's verdicts and plot; the traced pipeline's idle share."""

import dataclasses
import math

import matplotlib
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from IPython.lib.pretty import pretty

import d2lhelpers as d2l
from d2lhelpers.core.verdicts import compare
from d2lhelpers.lessons.l04_splitting_work import (
    PipelineTraceResult,
    ThreeSchemesResult,
    check_three_schemes,
    compare_bubbles,
    estimate_three_schemes,
    parallelism_panel,
    plot_speedup_model,
    plot_three_scheme_speedups,
    plot_three_schemes,
    run_three_schemes,
    speedup_model,
    speedup_model_panel,
)
from d2lhelpers.lessons.l04_splitting_work import three_schemes as three_schemes_module
from d2lhelpers.lessons.l04_splitting_work.three_schemes import graph_ops
from d2lhelpers.parallel.model import (
    dense_stack,
    input_batch,
    mlp,
    mlp_weights,
    on_one_device,
    stack_weights,
)
from d2lhelpers.parallel.pipeline_parallel import pipeline_in_one_graph
from d2lhelpers.parallel.pipeline_runs import PipelineResult
from d2lhelpers.parallel.replicas import replicas_in_one_graph
from d2lhelpers.parallel.result import ParallelResult
from d2lhelpers.parallel.tensor_parallel import tensor_parallel_in_one_graph
from d2lhelpers.parallel.tensor_parallel_runs import TensorParallelResult
from d2lhelpers.timing.benchmark import Measurement
from d2lhelpers.timing.estimate import trace_seconds
from d2lhelpers.tracing.timeline import OpEvent, Trace
from tests.conftest import builds_nothing
from tests.notebook_runs import run_edited

matplotlib.use("Agg")
FAST = {"min_runs": 3, "max_runs": 3, "budget_s": 0.05}


def _m(label, t):
    return Measurement(label, [t, t, t])


def _common(scheme, time_s, error=0.0, one_device=1.0):
    return {
        "scheme": scheme,
        "devices": ["/device:CPU:0", "/device:CPU:1"],
        "kind": "logical CPU",
        "samples": 64,
        "measurement": _m(scheme, time_s),
        "reference": _m("one device", one_device),
        "ideal_speedup": 2.0,
        "max_error": error,
        "cores": 2,
    }


def _schemes(replicas=0.55, tensor=0.8, pipeline=0.7, busy=1.0, error=0.0):
    return ThreeSchemesResult(
        [
            ParallelResult(**_common("replicas", replicas, error)),
            TensorParallelResult(
                **_common("tensor parallel", tensor),
                width=8,
                hidden=32,
                shard_widths=[16, 16],
                allreduces=1,
            ),
            PipelineResult(
                **_common("pipeline parallel", pipeline),
                width=8,
                stage_layers=[4, 4],
                microbatches=4,
                hand_overs=4,
                microbatched_reference=_m("busy", busy),
            ),
        ]
    )


def test_the_pipelines_bubble_carries_its_noise_and_reading_in_the_table():
    (table,) = _schemes(pipeline=0.7, busy=1.0).tables()
    # bubble = 1 - 1.0 / (2 x 0.7) = 29%, noise (1 - 0.29) x (5% + 5%) / (1 - 5%) = 7.5%;
    # model 1/5 = 20%; and the busy time and its noise it is made from are printed (read 61)
    assert table.rows[2][8] == (
        "[4, 4] layers, 4 microbatches; bubble 28.6% -7.5%/+6.8% = 1 - busy / (2 x the time per "
        "batch), busy (the 4 microbatches on one device) 1.000 s ±5% (floor) (model 20.0%)"
    )
    # read 60: each speedup's band needs the one-device time and its noise beside the scheme's
    assert table.rows[2][1:3] == ("700.00 ms ±5% (floor)", "1.000 s ±5% (floor)")
    # each time against its reachable's (0.50 s) within both noises: replicas' 0.55 s within
    # 0.0275 + 0.025 s; tensor parallel's 0.8 s and the pipeline's 0.7 s beyond them
    assert [row[6] for row in table.rows] == [
        "within the noise: held",
        "slower beyond the noise: missed",
        "slower beyond the noise: missed",
    ]
    (reading,) = [n for n in table.verdicts if n.startswith("pipeline's bubble: ")]
    assert reading.endswith(_schemes(pipeline=0.7, busy=1.0).runs[2].bubble_reading)


def test_the_bubble_is_above_a_level_beyond_its_noise_exactly_when_the_times_are():
    """Read 75: 54.55% ± 4.55% read 'above 50% beyond its noise' on one core, while the step
    time and the busy time it came from (6.55 and 5.96 ms, 5% each) were within both noises."""
    run = _schemes(pipeline=0.656, busy=0.596).runs[2]
    run.cores = 1  # two stages on one core: the least possible is 1 - 1/p = 50%
    assert (
        run.bubble_floor == 0.5
        and not compare(run.measurement, run.microbatched_reference).measurable
    )
    assert run.measured_bubble - 0.5 > (1 - run.measured_bubble) * 0.10  # the old band: 'above'
    assert "beyond its noise" not in run.bubble_reading
    assert run.bubble_reading.startswith("within the bubble's noise of the least possible 50%")
    slower = _schemes(pipeline=0.67, busy=0.596).runs[2]  # 0.67 x 95% > 0.596 x 105%
    slower.cores = 1
    assert compare(slower.measurement, slower.microbatched_reference).measurable
    assert "above 50% = 1 - 1/p beyond its noise: slower than the 2 stages" in slower.bubble_reading


def test_the_seeds_picture_draws_the_seeds_three_schemes():
    figure = plot_three_schemes()
    replicas, tensor, pipeline = figure.axes
    assert [ax.get_title() for ax in figure.axes] == [
        "Replicas: independent copies",
        "Tensor parallel: every layer split",
        "Pipeline parallel: layers split",
    ]

    def boxes(ax):
        return sorted(t.get_text() for t in ax.texts if t.get_bbox_patch() is not None)

    def arrows(ax):
        drawn = [a for a in ax.texts if getattr(a, "arrow_patch", None) is not None]
        return [a.arrow_patch.get_arrowstyle().__class__.__name__ for a in drawn]

    assert boxes(replicas) == ["GPU 0\nwhole model", "GPU 1\nwhole model", "load\nbalancer"]
    assert arrows(replicas) == ["CurveB", "CurveB"]  # the balancer sends to each copy
    assert boxes(tensor) == ["GPU 0\nhalf of each layer", "GPU 1\nhalf of each layer"]
    assert arrows(tensor) == ["CurveAB"] and "all-reduce per\nsplit MLP" in _texts(tensor)
    assert boxes(pipeline) == ["GPU 0\nlayers 1 to 40", "GPU 1\nlayers 41 to 80"]
    assert arrows(pipeline) == ["CurveB"] and "hand over at\nthe boundary" in _texts(pipeline)


def _texts(ax):
    return [t.get_text() for t in ax.texts]


@pytest.mark.parametrize(
    "values, message",
    [
        ((64, 16, 32, 2), "pipeline microbatches: at most 16 for batch 16"),
        ((64, 3, 2, 4), "batch: at least 4 for 4 devices .* or devices: at most 3"),
        ((64, 64, 4, 9), "devices: at most 4"),
        ((0, 64, 4, 2), "model width must be at least 1"),
        ((2**18, 1024, 2, 2), "is free .* Move 'model width' or 'batch' down"),
    ],
)
def test_three_schemes_are_all_validated_before_any_runs(devices, values, message):
    with builds_nothing():
        with pytest.raises(ValueError, match=message):
            run_three_schemes(*values)


def test_wrong_types_name_the_slider(devices):
    with pytest.raises(TypeError, match="pipeline microbatches must be a whole number"):
        check_three_schemes(64, 64, 2.5, 2)
    assert check_three_schemes(64, 64, 4, 2) == 8  # layers: 8, or one per device if more


def test_estimate_follows_measures_rules_for_every_measurement():
    # width 256, batch 512: the MLP is 2 x 2 x 512 x 256 x 1024 = 2**29 FLOPs, the 8-layer stack
    # 2 x 512 x 256 x 256 x 8 = 2**29 too; at a peak of 2**29 FLOP/s one call takes 1 s.
    # Each run is measured in 2 turns (rounds), each turn with half of measure's 2 s budget and
    # at least 3 blocks: a 1 s call takes a warm-up, a sizing call and 3 blocks per turn, 10 s;
    # a 0.5 s call, (1 + 3 blocks) x 0.5 per turn, 5 s. Replicas and tensor parallel measure one
    # device (10 s) and the split on 2 (5 s); the pipeline one device, its microbatches on one
    # device and the split (10 + 10 + 5 s). Each scheme's outputs compared once: 4.5 s.
    traced = sum(trace_seconds(k) for k in graph_ops(2, 8, 8))
    expected = 10 + 5 + 10 + 5 + 10 + 10 + 5 + 4.5 + traced
    assert estimate_three_schemes(256, 512, 8, 2, peak=2**29, at_once=2) == pytest.approx(expected)
    # One device: the replicas' split is the reference itself (one fewer measurement); no
    # speedup, so the splits take the one device's 10 s.
    one = estimate_three_schemes(256, 512, 8, 1, peak=2**29, at_once=1)
    assert one == pytest.approx(6 * 10 + 6 + sum(trace_seconds(k) for k in graph_ops(1, 8, 8)))


@pytest.mark.parametrize(("n", "m"), [(2, 2), (4, 8), (3, 32)])
def test_the_estimates_op_counts_are_the_traced_graphs(devices, n, m):
    names = [d.name for d in devices[:n]]
    weights, layers = mlp_weights(8, 32, names[0]), stack_weights(8, 8, names[0])
    x = input_batch(2 * m, 8, names[0])
    graphs = [
        on_one_device(mlp, names[0]).get_concrete_function(x, weights),
        replicas_in_one_graph(weights, names).get_concrete_function(x),
        tensor_parallel_in_one_graph(weights, names).get_concrete_function(x),
        on_one_device(dense_stack, names[0]).get_concrete_function(x, layers),
        pipeline_in_one_graph(layers, names[:1], m).get_concrete_function(x),
        pipeline_in_one_graph(layers, names, m).get_concrete_function(x),
    ]
    traced = [len(g.graph.get_operations()) for g in graphs]
    counted = graph_ops(n, m, 8)
    counted = counted[:2] + counted[3:]  # the one-device MLP is traced once, for both schemes
    for real, estimated in zip(traced, counted, strict=True):
        assert 0.67 * real <= estimated <= 1.5 * real, (traced, counted)


def test_three_schemes_verdicts_follow_the_data():
    ahead = _schemes(replicas=0.55, tensor=0.8, pipeline=0.7)
    assert ahead.verdict == (
        "On 2 logical CPU devices, replicas (550.00 ms a batch, 1.82x its one device) was "
        "fastest, measurably ahead of tensor parallel (800.00 ms, 1.25x) and pipeline parallel "
        "(700.00 ms, 1.43x); ranked by time per batch (each speedup is against its own "
        "one-device time)"
    )
    tied = _schemes(replicas=0.55, tensor=0.56, pipeline=0.9)
    assert tied.verdict == (
        "On 2 logical CPU devices, replicas (550.00 ms a batch, 1.82x its one device) was the "
        "fastest measured but not measurably ahead of tensor parallel (560.00 ms, 1.79x): the "
        "noise cannot rank the two; replicas is measurably ahead of pipeline parallel (900.00 "
        "ms, 1.11x); ranked by time per batch (each speedup is against its own one-device time)"
    )
    # the microbatches on one device within both noises of the whole batch (0.95 s against 1 s)
    three = _schemes(replicas=0.55, tensor=0.56, pipeline=0.56, busy=0.95)
    assert three.verdict.startswith(
        "On 2 logical CPU devices, replicas (550.00 ms a batch, 1.82x its one device) was the "
        "fastest measured but not measurably ahead of tensor parallel (560.00 ms, 1.79x) and "
        "pipeline parallel (560.00 ms, 1.79x): the noise cannot rank them"
    )
    # read 129: tied with the fastest, yet apart from each other beyond both noises
    spread = _schemes(replicas=0.5, tensor=0.49, pipeline=0.6, busy=0.95)
    spread.runs[1].measurement = Measurement("tensor parallel", [0.3, 0.49, 0.8], 1e9)
    assert spread.verdict.startswith(
        "On 2 logical CPU devices, tensor parallel (490.00 ms a batch, 2.04x its one device) was "
        "the fastest measured but not measurably ahead of replicas (500.00 ms, 2.00x) and "
        "pipeline parallel (600.00 ms, 1.67x): the noise cannot rank tensor parallel against "
        "either; replicas is measurably ahead of pipeline parallel; ranked by time per batch"
    )
    none = _schemes(replicas=0.98, tensor=1.5, pipeline=1.02)
    assert (
        none.verdict == "On 2 logical CPU devices, no scheme was measurably faster than one device"
    )
    flagged = _schemes(replicas=0.3, error=0.0)  # 3.3x on 2 devices: impossible
    assert flagged.verdict.endswith("flagged, not results: replicas (see the warnings)")
    assert "replicas (" not in flagged.verdict.split(";")[0]


def test_the_table_says_whether_the_schemes_yardsticks_agree():
    """Read 72: each scheme times its own one-device run; the panel's three speedups share one
    yardstick only when those agree within their noise, and the table says which."""
    (same,) = _schemes().tables()
    assert any("agree within their noise, so the 3 speedups share one yardstick" in n
               for n in same.verdicts)  # fmt: skip
    (note,) = [n for n in same.verdicts if n.startswith("one device: ")]
    assert note.count(" beside ") == 3  # read 85: the pipeline's yardstick, read too
    moved = _schemes()
    moved.runs[2].reference = _m("one device", 0.8)  # 0.8 s +-5% against 1 s +-5%: beyond
    (table,) = moved.tables()
    (note,) = [n for n in table.verdicts if n.startswith("one device: ")]
    assert note.startswith("one device: 1.000 s ±5% (floor) beside replicas, 1.000 s")
    # read 180: the pipeline's one device runs its stack of layers (as many FLOPs), said
    assert (
        ", 800.00 ms ±5% (floor) beside pipeline parallel (its stack of layers, the same FLOPs) "
        "(replicas / pipeline parallel: " in note
    )
    assert "they differ beyond both noises" in note
    # the ends apart, each neighbour within (1 s, 0.92 s, 0.84 s at the floor): every pair read
    middle = _schemes()
    middle.runs[1].reference, middle.runs[2].reference = _m("one", 0.92), _m("one", 0.84)
    (table,) = middle.tables()
    (note,) = [n for n in table.verdicts if n.startswith("one device: ")]
    assert "they differ beyond both noises" in note


def test_three_schemes_print_the_verdict_once_and_show_one_table():
    result = _schemes(pipeline=0.45)  # bubble 1 - 1/0.9 < 0: flagged
    text = str(result)
    assert text.count(result.verdict) == 1 and text.startswith(result.verdict)
    assert "bubble flagged" in text and "measured bubble -" not in text
    assert "at most 2 compute at once" not in text  # 2 devices on 2 cores: no cap
    html = result._repr_html_()
    assert html.count("<table>") == 1 and result.verdict not in html


def test_three_scheme_plot_marks_flagged_runs():
    figure = plot_three_scheme_speedups(_schemes(replicas=0.3))
    ax = figure.axes[0]
    assert ax.get_title() == "2 logical CPU devices"
    assert [t.get_text() for t in ax.texts] == ["flagged"]
    assert ax.get_ylim()[1] >= 1 / 0.3  # the flagged bar is drawn whole


def test_run_three_schemes_small_reports_progress_with_status(devices):
    calls = []
    result = run_three_schemes(16, 16, 4, 2, progress=lambda *a: calls.append(a), **FAST)
    assert [r.scheme for r in result.runs] == ["replicas", "tensor parallel", "pipeline parallel"]
    assert all(total == 6 for _, total, _ in calls) and calls[-1][:2] == (6, 6)  # 2 rounds each
    done = [d for d, _, _ in calls]
    assert done == sorted(done)
    assert calls[0][2].startswith("replicas: measuring one device (round 1 of 2), repeat ")
    # read 129: its name (which a noisy warning quotes) says which microbatch count it ran
    assert any(
        s.startswith("pipeline parallel: measuring pipeline on 2, 4 microbatches")
        for *_, s in calls
    )
    assert result.runs[2].measurement.label == "pipeline on 2, 4 microbatches"


def test_parallelism_panel_runs_and_refuses_before_running(devices, monkeypatch):
    monkeypatch.setattr(three_schemes_module, "device_peak_rate", lambda device: 1e10)
    panel = parallelism_panel()
    assert panel.sliders["n_devices"].max == len(devices)
    values = {"width": 32, "batch": 16, "microbatches": 32, "n_devices": 2}
    for name, value in values.items():
        panel.sliders[name].value = value
    assert panel.run() is None
    assert "pipeline microbatches: at most 16 for batch 16" in str(panel.error)
    assert panel.progress.value == 0  # nothing ran
    with pytest.raises(ValueError, match="pipeline microbatches"):
        panel.estimate(**panel.values())
    panel.sliders["microbatches"].value = 2
    assert panel.estimate(**panel.values()) > 0
    result = panel.run()
    assert panel.error is None and isinstance(result, ThreeSchemesResult)


def test_speedup_model_verdicts_are_the_arithmetic():
    seed = speedup_model(40, 0.75, 16)  # the seed's rows: 1.5, 3, 6 ms at 2, 4, 8 GPUs
    assert seed.speedups[1] == pytest.approx(40 / 21.5) and seed.speedups[7] == pytest.approx(
        40 / 11
    )
    assert seed.best == 7 and seed.slower == []
    assert (
        seed.verdict
        == "fastest at N = 7: 3.65x one device; never slower than one device up to N = 16"
    )
    slow = speedup_model(40, 12, 8)  # 20 + 24 > 40 at N = 2, and worse after
    assert slow.best == 1 and slow.slower == list(range(2, 9))
    assert slow.verdict.endswith("slower than one device at N = 2..8")
    text = str(seed)
    assert "93%" in text  # efficiency at N = 2: 20 / 21.5
    with pytest.raises(ValueError):
        speedup_model(40, -1, 8)
    with pytest.raises(TypeError, match="largest device count"):
        speedup_model(40, 1, 8.5)


def test_speedup_plot_shows_the_whole_curve_and_separate_seed_labels():
    model = speedup_model(40, 0, 16)  # no communication: the curve climbs to 16x
    figure = plot_speedup_model(model, d2l.efficiency_table())
    ax = figure.axes[0]
    assert ax.get_xlim()[1] >= 16 and ax.get_ylim()[1] >= 16
    figure.canvas.draw()
    boxes = [t.get_window_extent() for t in ax.texts]
    assert len(boxes) == 4
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    small = plot_speedup_model(speedup_model(40, 0.75, 4), d2l.efficiency_table())
    assert len(small.axes[0].texts) == 2  # only the seed's rows within 1..4 devices


def test_speedup_model_panel_shows_the_model_of_its_sliders():
    panel = speedup_model_panel()
    for name, value in {"compute_ms": 20, "comm_per_device_ms": 8.0, "max_devices": 8}.items():
        panel.sliders[name].value = value
    result = panel.run()
    assert panel.error is None and result == speedup_model(20, 8, 8)
    verdict, figure, table = panel.output.outputs  # in this order
    assert verdict["text"].strip() == result.verdict
    assert result.verdict.endswith("slower than one device at N = 2..8")
    assert "8" in table["data"]["text/plain"] and figure["data"]["image/png"]


def _trace(*calls, microbatches=4, cores=8):
    return PipelineTraceResult(
        list(calls), ["/device:CPU:0", "/device:CPU:1"], microbatches, "logical CPU", cores
    )


def _gpipe(delay):
    """4 microbatches of 1 s on 2 stages; stage 1 starts `delay` s after stage 0's first."""
    return [
        *(OpEvent("/device:CPU:0", "MatMul", "matmul", i, i + 1) for i in range(4)),
        *(OpEvent("/device:CPU:1", "MatMul", "matmul", i + delay, i + delay + 1) for i in range(4)),
    ]


def test_traced_idle_share_is_read_against_the_model_within_the_calls_spread():
    on_time, late = _gpipe(1), _gpipe(2)  # spans 5 s and 6 s, 8 s busy: 20% and 33% idle
    within = _trace(on_time, late, on_time)
    assert within.verdict == (
        "idle share in the traces: 20% (3 traced calls: 20% to 33%); the GPipe model "
        "(p-1)/(m+p-1) = 20% lies within that spread; every call below 50% = 1 - 1/p: the "
        "stages were in flight at the same time in every traced call (a trace cannot show "
        "whether each had a core); the first two stages had ops in flight at the same time for "
        "50% to 75% of the shorter's busy time (0% would be one after the other)"
    )  # read 64: an idle share alone cannot say whether the stages overlapped; this share can
    assert within.rows is on_time and not within.flags()
    above = _trace(late, late, late)
    assert "more than the GPipe model (p-1)/(m+p-1) = 20% in every call;" in above.verdict
    taking_turns = _gpipe(4)  # stage 1 starts when stage 0 has finished: 8 s of 16, 50% idle
    serial = _trace(taking_turns, taking_turns).verdict
    assert serial.endswith(
        "no traced call shows time gained from overlapping them; the first two stages had ops in "
        "flight at the same time for 0% of the shorter's busy time: in every traced call they "
        "took turns"
    )
    assert "50% =" in serial
    at_once = [OpEvent(f"/device:CPU:{d}", "MatMul", "matmul", 0, 4) for d in (0, 1)]
    flagged = _trace(at_once, at_once, late)  # 0%, 0%, 33%: one call is above the floor
    assert not flagged.flags()
    flagged = _trace(at_once, at_once)
    assert flagged.flags() and "flagged" in flagged.verdict and "below the least" in str(flagged)
    one_core = str(_trace(on_time, cores=1))
    assert (
        "2 stages on 1 usable CPU core: at most 1 stage computes at a time, so the time idle "
        in (one_core)
    )
    assert (
        "cannot fall below 50% here while no two stages have ops in flight together (a bar runs "
        "from an op's start to its end, so it is expected to count any wait for a core inside it "
        "as busy: not measured here); a trace may count an op busy while it waits its turn "
        in one_core
    )
    assert (  # 20% < 50%: said why, as a hypothesis (read 81)
        "so a traced share can read lower (20% here; a hypothesis: the trace does not show which "
        "op held a core)" in one_core
    )
    assert "read lower" not in str(_trace(taking_turns, cores=1))  # 50%: at the floor, nothing


def test_an_incomplete_trace_gives_its_sentence_not_an_idle_share():
    lost = [OpEvent("/device:CPU:0", "MatMul", "matmul", i, i + 1) for i in range(4)]
    traced = _trace(Trace(lost, "This trace is incomplete (no matmul on CPU:1 in 3 tries), so ..."))
    assert traced.bubble is None  # not 50% idle from a stage whose rows are missing
    assert traced.verdict == traced.rows.incomplete and traced.flags() == []
    assert str(traced).startswith(traced.rows.incomplete)


def _pipeline(m, step, busy=1.0):
    return PipelineResult(
        **{**_common("pipeline parallel", step), "ideal_speedup": 2.0, "cores": 8},
        width=8,
        stage_layers=[4, 4],
        microbatches=m,
        hand_overs=m,
        microbatched_reference=_m("busy", busy),
    )


def test_a_bubble_change_prints_the_digits_that_show_its_verdict():
    """Read 141: '37% -> 19%' read 'measurably shrank' beside bands of -7% and +11%."""
    from types import SimpleNamespace as Run

    from d2lhelpers.lessons.l04_splitting_work.pipeline_trace import BubbleComparisonResult

    def words(few, many):
        runs = [
            Run(measured_bubble=b, bubble_noise=d, bubble_noise_up=u) for b, d, u in (few, many)
        ]
        return BubbleComparisonResult(runs)._change_words()

    edge = words((0.374, 0.066, 0.06), (0.189, 0.14, 0.112))  # 18.5 points past 17.8
    assert edge == (
        "more microbatches measurably shrank the bubble: 37.4% -> 18.9%, down 18.5 points, more "
        "than the 17.8 the two bands allow (the first's down, the second's up)"
    )
    plain = words((0.40, 0.05, 0.05), (0.10, 0.05, 0.05))
    assert plain.startswith("more microbatches measurably shrank the bubble: 40% -> 10%, down 30")
    inside = words((0.374, 0.10, 0.06), (0.189, 0.14, 0.112))  # 18.5 points inside 21.2
    assert inside == (
        "no measurable difference between the two bubbles (37% -> 19%: down 18 points, within the "
        "21 the two bands allow for a drop)"
    )
    # read 147: a band reaching below 0 stops there, in the allowance as in the table
    clipped = words((0.34, 0.24, 0.12), (0.44, 0.65, 0.34))  # up 10 points: 12 + 44, not 12 + 65
    assert clipped == (
        "no measurable difference between the two bubbles (34% -> 44%: up 10 points, within the "
        "56 the two bands allow for a rise)"
    )
    # read 158: 'down 25 points, within the 25' printed a tie: a decimal more shows it within
    tie = words((0.42, 0.12, 0.06), (0.1701, 0.10, 0.1312))  # 24.99 points inside 25.12
    assert "(42.0% -> 17.0%: down 25.0 points, within the 25.1 the two bands allow" in tie
    grew = words((0.10, 0.02, 0.02), (0.30, 0.02, 0.02))
    assert grew.startswith("more microbatches measurably grew the bubble here: 10% -> 30%, up 20")


def test_bubble_comparison_is_computed_from_both_runs():
    # p = 2: m = 2 -> model 33%; m = 16 -> 6%. Steps giving bubbles of 40% and 10%.
    few, many = _pipeline(2, 1 / (2 * 0.6)), _pipeline(16, 1 / (2 * 0.9))
    shrank = compare_bubbles(few, many)
    assert shrank.verdict.startswith(
        "more microbatches measurably shrank the bubble: 40% -> 10%, down 30 points, more than the "
    )
    # 40% at m = 2 is above the model's 33% beyond its noise (±6%): the model missed there.
    assert "2 microbatches: above the least possible 33% beyond its noise" in shrank.verdict
    assert (
        "16: within the bubble's noise of the least possible 6%: the model held" in shrank.verdict
    )
    same = compare_bubbles(_pipeline(2, 1 / (2 * 0.6)), _pipeline(16, 1 / (2 * 0.62)))
    assert same.verdict.startswith("no measurable difference between the two bubbles")
    flagged = compare_bubbles(few, _pipeline(16, 0.4))  # bubble below zero
    assert "cannot be compared" in flagged.verdict and "flagged" in str(flagged)
    with pytest.raises(ValueError, match="fewer microbatches first"):
        compare_bubbles(many, few)
    # A run flagged for another reason (its output differs from one device's), though its bubble
    # is not itself impossible: the row gives no bubble to read.
    beyond = dataclasses.replace(few, max_error=1.0)
    assert not beyond.trusted and not beyond.bubble_flags
    rows = compare_bubbles(beyond, many).tables()[0].rows
    assert rows[0][1] == "flagged" and rows[1][1] != "flagged"
    # read 91: a run whose one-device yardstick is in doubt still has a bubble to read (the
    # bubble reads the microbatches' own time, as the yardstick's warning says)
    doubted = _pipeline(2, 1 / (2 * 0.6), busy=0.5)  # its microbatches beat one device's time
    assert doubted.yardstick_flag and not doubted.trusted and doubted.bubble_trusted
    read = compare_bubbles(doubted, many)
    assert "cannot be compared" not in read.verdict
    assert read.tables()[0].rows[0][1] != "flagged"
    # read 80: 26% ± 118% beside a least possible 33%, and a step spread beyond its median
    wide = Measurement("pipeline parallel", [0.45, 1 / (2 * 0.74), 0.95])
    below = dataclasses.replace(few, measurement=wide)
    assert below.trusted and below.below_floor
    huge = dataclasses.replace(many, measurement=Measurement("pipeline parallel", [0.1, 0.6, 3.0]))
    assert math.isinf(huge.bubble_noise)
    compared = compare_bubbles(below, huge)
    (first, second) = compared.tables()[0].rows
    assert first[1].endswith(", below the least possible 33%: not a result")
    assert second[1] == "17% (no band: the step's runs spread by more than their median)"
    assert compared.verdict.startswith(
        "too noisy to compare the two bubbles (26% -> 17%: one has no band); 2 microbatches: "
        "below the least possible 33%, inside its noise: not a result"
    )
    assert "inf" not in str(compared)
    # read 94: a bubble below its least possible is not a result, so it is not compared
    assert compare_bubbles(below, many).verdict.startswith(
        "a bubble below its least possible is not a result, so not compared (26% -> 10%)"
    )


def test_results_show_their_tables_in_ipython_not_their_fields():
    result = _schemes()
    for run in result.runs:
        assert pretty(run) == str(run) and "Measurement(" not in pretty(run)
    assert pretty(result) == str(result).split("\n\n", 1)[1]  # the panel prints the verdict
    assert pretty(speedup_model(40, 1, 4)) == str(speedup_model(40, 1, 4))


BAD_VALUES = st.one_of(
    st.integers(max_value=0),
    st.integers(min_value=2**40, max_value=2**60),
    st.floats(allow_nan=True),
    st.text(max_size=3),
    st.none(),
    st.booleans(),
)
ENTRY_POINTS = {  # small valid arguments; one of them is replaced by a bad value
    "run_replicas": (d2l.run_replicas, {"width": 8, "batch": 8, "n_devices": 2}),
    "run_tensor_parallel": (d2l.run_tensor_parallel, {"width": 8, "batch": 8, "n_devices": 2}),
    "run_pipeline_parallel": (
        d2l.run_pipeline_parallel,
        {"width": 8, "batch": 8, "microbatches": 2, "n_devices": 2, "n_layers": 4},
    ),
    "run_three_schemes": (
        run_three_schemes,
        {"width": 8, "batch": 8, "microbatches": 2, "n_devices": 2},
    ),
}


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.sampled_from(sorted(ENTRY_POINTS)), st.data(), BAD_VALUES)
def test_every_entry_point_refuses_bad_values_before_building(devices, name, data, bad):
    function, arguments = ENTRY_POINTS[name]
    argument = data.draw(st.sampled_from(sorted(arguments)))
    with builds_nothing():
        with pytest.raises((ValueError, TypeError)):
            function(**{**arguments, argument: bad})


def test_the_panel_runs_the_notebooks_edited_cell():
    """An all-reduce that doubles every part but the first: the panel's tensor parallel is off."""
    edits = {
        "(256, 512)": "(32, 16)",
        "total = total + part": "total = total + 2 * part",
        "result = panel.run()": (
            "with panel.values_set(width=32, batch=16, microbatches=2):\n"
            "    result = panel.run()\n"
            "print([run.matches for run in result.runs])"
        ),
    }
    outputs = run_edited("04_splitting_work", edits, until="result = panel.run()")
    assert outputs[-1].strip() == "[True, False, True]"  # replicas, tensor, pipeline parallel


def test_a_speedup_above_the_reachable_inside_the_noise_is_not_read_as_a_result():
    # tensor parallel at 1/0.4 = 2.50x against 2.00x reachable: its 0.4 s run spread widely
    wide = Measurement("tensor parallel", [0.2, 0.3, 0.4, 0.5, 0.6])
    schemes = _schemes(replicas=0.55, tensor=0.8, pipeline=0.7)
    tensor = schemes.runs[1]
    tensor.measurement = wide
    assert tensor.above_reachable == "inside" and tensor.trusted and not tensor.flags()
    (table,) = schemes.tables()
    assert table.rows[1][7].startswith("above the reachable, within its noise (±")
    assert table.rows[1][7].endswith("): not a result")
    assert table.rows[1][6] == "not read (above it)"
    # read 69: just above it, inside the 5% floor (2.04x against 2.00x): the row says so too
    (edge,) = _schemes(tensor=0.49).tables()
    assert edge.rows[1][6].endswith("(measured just above it: that part is noise, not a result)")
    assert "just above" not in edge.rows[0][6]  # replicas at 1.82x: below it
    assert tensor.verdict.endswith(
        "above the 2.00x reachable here within its noise (±0.62): not a result"
    )
    assert "tensor parallel" not in schemes.verdict.split(";")[0]  # never the fastest
    assert schemes.verdict.endswith(
        "above the reachable within the noise, not results: tensor parallel"
    )
    # Beyond the noise it is flagged, as before.
    tensor.measurement = _m("tensor parallel", 0.4)
    assert tensor.above_reachable == "beyond" and not tensor.trusted and tensor.flags()


def test_the_fastest_is_the_lowest_time_of_every_trusted_scheme():
    """Read 113: replicas at 3.87 ms 'the fastest measured' beside tensor parallel at 3.86 ms,
    because only schemes measurably faster than their own one device were ranked."""
    result = _schemes(replicas=0.55, tensor=0.549, pipeline=0.7)
    tensor = result.runs[1]
    tensor.reference.times = [0.56] * len(tensor.reference.times)  # not measurably faster
    said = result.verdict
    assert said.startswith(
        "On 2 logical CPU devices, tensor parallel (549.00 ms a batch, 1.02x its one device, "
        "though not measurably faster than it) was the fastest measured"
    )
