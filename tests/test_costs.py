"""Cost models against hand-worked numbers: the seed's table, break-even, bubble, replicas, α-β."""

import math
from pathlib import Path

import pytest

from d2lhelpers.collectives.costs import (
    AlphaBeta,
    Residual,
    alpha_beta_time_s,
    break_even_comm_ms,
    bus_bandwidth_bound_s,
    efficiency_table,
    fit_alpha_beta,
    fit_prediction_noise_s,
    layout,
    pipeline_bubble_fraction,
    pipeline_step_time,
    replicas_vs_one_group,
    tensor_parallel_efficiency,
    tensor_parallel_speedup,
    tensor_parallel_time_ms,
)

GO_OUTPUT = (Path(__file__).parent / "seeds" / "004_allreduce_go_output.txt").read_text()


def test_seed_table_by_hand():
    # 40/2 + 1.5 = 21.5 ms -> 40/21.5; 10 + 3 = 13; 5 + 6 = 11; 5 + 60 = 65.
    rows = efficiency_table()
    assert [r.n_devices for r in rows] == [2, 4, 8, 8]
    assert [r.per_token_ms for r in rows] == [21.5, 13.0, 11.0, 65.0]
    assert [round(r.speedup, 2) for r in rows] == [1.86, 3.08, 3.64, 0.62]
    assert rows[0].speedup == pytest.approx(40 / 21.5)
    assert rows[3].efficiency == pytest.approx(5 / 65)
    for r in rows:
        assert r.efficiency == pytest.approx(r.speedup / r.n_devices)


def test_table_text_is_the_go_programs():
    table = str(efficiency_table())
    assert GO_OUTPUT.endswith("\n" + table)
    assert table.splitlines()[1] == "   2        20.0 ms      1.5 ms      1.86x"


def test_table_takes_other_rows():
    (row,) = efficiency_table(compute_ms=12.0, rows=((3, 0.0),))
    assert (row.compute_ms, row.speedup, row.efficiency) == (4.0, 3.0, 1.0)
    assert row.line() == "   3         4.0 ms      0.0 ms      3.00x"


def test_tensor_parallel_formulas():
    assert tensor_parallel_time_ms(40, 4, 3) == 13
    assert tensor_parallel_speedup(40, 1, 0) == 1
    assert tensor_parallel_efficiency(40, 4, 10) == pytest.approx(0.5)


def test_break_even_try_it_2():
    # 2 GPUs at 1.5 ms: 21.5 ms per token; 4 GPUs compute 10 ms, so 11.5 ms of comm ties.
    c = break_even_comm_ms(40, 2, 1.5, 4)
    assert c == pytest.approx(11.5)
    assert tensor_parallel_time_ms(40, 4, c) == pytest.approx(tensor_parallel_time_ms(40, 2, 1.5))
    assert tensor_parallel_speedup(40, 4, c + 0.1) < tensor_parallel_speedup(40, 2, 1.5)
    assert break_even_comm_ms(40, 4, 3, 2) < 0  # 2 GPUs never beat 4 at 3 ms


def test_pipeline_bubble():
    assert pipeline_bubble_fraction(1, 1) == 0
    assert pipeline_bubble_fraction(4, 1) == pytest.approx(3 / 4)
    assert pipeline_bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert pipeline_step_time([2.0] * 4, 8) == 22.0  # (m + p - 1) t for equal stages
    # Uneven stages: the first microbatch passes all of them, then the slowest sets the pace.
    assert pipeline_step_time([3, 3, 2, 2], 5) == 10 + 4 * 3
    assert pipeline_step_time([5.0], 1) == 5.0
    with pytest.raises(ValueError, match="stage time"):
        pipeline_step_time([1.0, -1.0], 2)
    with pytest.raises(ValueError, match="number of pipeline stages"):
        pipeline_step_time([], 2)
    for p, m in [(0, 1), (1, 0), (-2, 3)]:
        with pytest.raises(ValueError, match=">= 1"):
            pipeline_bubble_fraction(p, m)


def test_replicas_vs_one_group_try_it_3():
    c = replicas_vs_one_group(8, 2, 40, comm_ms_group=1.5, comm_ms_all=6)
    assert c.one_group.tokens_per_s == pytest.approx(1000 / 11)  # 90.9
    assert c.replicas.tokens_per_s == pytest.approx(4 * 1000 / 21.5)  # 186.0
    assert c.throughput_ratio == pytest.approx(4 * 11 / 21.5)  # 2.05x
    assert (c.one_group.lost_on_failure, c.replicas.lost_on_failure) == (1.0, 0.25)
    assert c.one_group.speedup == pytest.approx(40 / 11)
    assert c.replicas.label == "4 replicas of 2-way groups"
    assert c.one_group.label == "one 8-way group"


def test_plain_replicas_scale_perfectly():
    replicas = layout(8, 1, 40, 0)
    assert replicas.speedup == 8 and replicas.tokens_per_s == 200
    with pytest.raises(ValueError, match="do not split"):
        layout(8, 3, 40, 1)


@pytest.mark.parametrize(
    "call, message",  # each refusal names what it refuses (anchored: the whole name)
    [
        (lambda: tensor_parallel_time_ms(40, 0, 1), "^device count must be a whole number >= 1"),
        (lambda: tensor_parallel_time_ms(40, 2.5, 1), "^device count must be"),
        (lambda: tensor_parallel_time_ms(40, True, 1), "^device count must be"),
        (lambda: tensor_parallel_time_ms(-1, 2, 1), "^compute per token must be a time >= 0 ms"),
        (lambda: tensor_parallel_time_ms(40, 2, -0.5), "^communication per token must be a time"),
        (lambda: tensor_parallel_time_ms(40, 2, math.nan), "^communication per token must be"),
        (
            lambda: tensor_parallel_speedup(0, 2, 1),
            "^compute per token must be > 0 ms for a speedup",
        ),
        (lambda: break_even_comm_ms(40, 2, 1.5, 0), "^device count must be"),
        (lambda: layout(0, 1, 40, 1), "^device count must be"),
        (lambda: layout(4, 0, 40, 1), "^group size must be a whole number >= 1"),
        (lambda: layout(4, 2, 0, 0), "^compute and communication are both 0 ms: throughput is"),
        (lambda: efficiency_table(rows=((0, 1.0),)), "^device count must be"),
        (lambda: pipeline_bubble_fraction(0, 4), "^number of pipeline stages must be a whole"),
        (lambda: pipeline_bubble_fraction(2, 0), "^number of microbatches must be a whole"),
        (lambda: pipeline_step_time([], 2), "^number of pipeline stages must be"),
        (lambda: pipeline_step_time([1.0], 0), "^number of microbatches must be"),
        (lambda: pipeline_step_time([1.0, -1.0], 2), "^stage time must be a time >= 0 ms"),
    ],
)
def test_bad_input_is_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_efficiency_at_its_edges():
    assert tensor_parallel_efficiency(0, 2, 0) == 1.0  # nothing to do: nothing wasted
    assert tensor_parallel_efficiency(0.4, 2, 0.3) == pytest.approx(0.2 / 0.5)  # 0.5 ms a token
    assert tensor_parallel_efficiency(0, 2, 1) == 0.0  # all communication


def test_a_layout_reports_its_time_per_token():
    four = layout(8, 2, 40, 1.5)
    assert four.per_token_ms == 21.5 and four.n_groups == 4 and four.group_size == 2


def test_alpha_beta_time_and_bound():
    assert alpha_beta_time_s(14, 7000, 1e-6, 1e9) == pytest.approx(14e-6 + 7e-6)
    assert bus_bandwidth_bound_s(8, 8e9, 1e9) == pytest.approx(14.0)
    assert bus_bandwidth_bound_s(2, 8e9, 1e9) == pytest.approx(8.0)  # 2(n-1)/n = 1
    assert bus_bandwidth_bound_s(1, 8e9, 1e9) == 0


def test_alpha_beta_time_at_its_edges():
    # Zero rounds, zero bytes and a zero alpha are all allowed; one below any of them is not.
    assert alpha_beta_time_s(0, 7000, 1e-6, 1e9) == pytest.approx(7e-6)
    assert alpha_beta_time_s(3, 0, 1e-6, 1e9) == pytest.approx(3e-6)
    assert alpha_beta_time_s(3, 7000, 0.0, 1e9) == pytest.approx(7e-6)
    assert alpha_beta_time_s(1, 1, 0.0, 0.5) == 2.0  # a beta below 1 byte/s is still a rate
    for rounds, nbytes in [(-1, 7000), (3, -1), (-1, -1)]:
        with pytest.raises(ValueError, match="^need rounds >= 0 and bytes >= 0"):
            alpha_beta_time_s(rounds, nbytes, 1e-6, 1e9)
    for alpha, beta in [(-1e-9, 1e9), (1e-6, 0.0), (1e-6, -1.0), (math.nan, 1e9), (1e-6, math.nan)]:
        with pytest.raises(ValueError, match="^need alpha >= 0 s and beta > 0 bytes/s"):
            alpha_beta_time_s(3, 7000, alpha, beta)


def test_bus_bandwidth_bound_at_its_edges():
    assert bus_bandwidth_bound_s(4, 0, 1e9) == 0  # no bytes, no time
    assert bus_bandwidth_bound_s(4, 1, 0.5) == pytest.approx(2 * 3 / 4 * 1 / 0.5)
    for nbytes, bandwidth in [(-1, 1e9), (1, 0.0), (1, -1.0), (1, math.nan)]:
        with pytest.raises(ValueError, match="^need bytes >= 0 and bandwidth > 0"):
            bus_bandwidth_bound_s(4, nbytes, bandwidth)
    for ranks in (0, -1):
        with pytest.raises(ValueError, match="^number of ranks must be a whole number >= 1"):
            bus_bandwidth_bound_s(ranks, 1, 1e9)
    with pytest.raises(ValueError, match="number of ranks"):
        bus_bandwidth_bound_s(True, 1, 1e9)


def test_a_whole_ring_all_reduce_gives_one_links_values():
    # 4 ranks: 6 rounds share alpha; each link carries 6/4 of S, so B = beta * 1.5.
    link = AlphaBeta(6e-3, 1e9).ring_link(4)
    assert link == AlphaBeta(pytest.approx(1e-3), pytest.approx(1.5e9))
    assert AlphaBeta(2e-3, 1e9).ring_link(2) == AlphaBeta(1e-3, 1e9)
    with pytest.raises(ValueError, match="^a ring of one rank has no link: need 2 ranks or more$"):
        AlphaBeta(1e-3, 1e9).ring_link(1)
    with pytest.raises(ValueError, match="^number of ranks must be"):
        AlphaBeta(1e-3, 1e9).ring_link(0)


def test_fit_recovers_alpha_beta_and_predicts_held_out_sizes():
    truth = AlphaBeta(20e-6, 2e9)
    fit_sizes = [1e3, 1e4, 1e5, 1e6]
    fit = fit_alpha_beta(fit_sizes, [truth.predict(s) for s in fit_sizes])
    assert fit.alpha_s == pytest.approx(20e-6, rel=1e-9)
    assert fit.beta_bytes_per_s == pytest.approx(2e9, rel=1e-9)
    held_out = [3e6, 1e7]
    noisy = [truth.predict(s) * 1.1 for s in held_out]  # measured 10% slower than the model
    residuals = fit.residuals(held_out, noisy)
    assert [r.nbytes for r in residuals] == held_out
    assert [r.relative for r in residuals] == pytest.approx([0.1] * 2)  # 10% over predicted


def test_a_fits_prediction_moves_with_its_samples_noise():
    # Two sizes: the fit passes through both, so the prediction between them moves by the
    # two noises weighted by where it lies, combined as independent: at 1/4 of the way,
    # sqrt((3/4 * 40 us)^2 + (1/4 * 80 us)^2) (their worst-case sum would be 50 us).
    sizes, times = [0, 4e6], [1e-3, 3e-3]
    assert fit_prediction_noise_s(sizes, times, [40e-6, 80e-6], 1e6) == pytest.approx(
        math.hypot(30e-6, 20e-6)
    )
    assert fit_prediction_noise_s(sizes, times, [40e-6, 80e-6], 4e6) == pytest.approx(80e-6)
    assert fit_prediction_noise_s(sizes, times, [0, 0], 1e6) == 0
    # More sizes: a noisier sample widens the band, and a prediction far beyond the fitted
    # sizes moves more than one among them.
    sizes = [1e3, 1e4, 1e5, 1e6]
    times = [AlphaBeta(1e-3, 1e8).predict(s) for s in sizes]
    quiet = fit_prediction_noise_s(sizes, times, [0.05 * t for t in times], 3e5)
    loud = fit_prediction_noise_s(sizes, times, [0.2 * t for t in times], 3e5)
    assert loud == pytest.approx(4 * quiet, rel=0.05) and quiet > 0  # first order: not exact
    # Independent noises: the band of four sizes each at 5% is not the worst case of four.
    alone = [
        fit_prediction_noise_s(
            sizes, times, [0.05 * t if i == j else 0 for i, t in enumerate(times)], 3e5
        )
        for j in range(4)
    ]
    assert quiet == pytest.approx(math.sqrt(sum(a * a for a in alone)), rel=1e-6)
    assert quiet < sum(alone)
    far = fit_prediction_noise_s(sizes, times, [0.05 * t for t in times], 1e8)
    assert far / AlphaBeta(1e-3, 1e8).predict(1e8) > quiet / AlphaBeta(1e-3, 1e8).predict(3e5)
    with pytest.raises(ValueError, match="one noise >= 0 s for each"):
        fit_prediction_noise_s(sizes, times, [1e-6], 3e5)
    with pytest.raises(ValueError, match="one noise >= 0 s for each"):
        fit_prediction_noise_s(sizes, times, [-1e-6] * 4, 3e5)


def test_fit_weighs_relative_error():
    # Plain least squares would let the 1 GB sample decide alpha; relative error keeps it.
    sizes, times = [8, 1e9], [10e-6, 0.5 + 10e-6]
    fit = fit_alpha_beta(sizes, times)
    assert fit.alpha_s == pytest.approx(10e-6, rel=1e-3)
    assert fit.beta_bytes_per_s == pytest.approx(2e9, rel=1e-3)


def test_fit_constraints_and_refusals():
    flat = fit_alpha_beta([1e3, 1e6], [1e-3, 1e-3])  # size does not matter here
    assert flat.beta_bytes_per_s == math.inf and flat.alpha_s == pytest.approx(1e-3)
    through_zero = fit_alpha_beta([1e3, 1e6, 2e6], [0.5e-6, 1e-3, 2e-3])  # would fit alpha < 0
    assert through_zero.alpha_s == 0
    # With alpha = 0: 1/beta = sum(S/t) / sum((S/t)^2), S/t = 2, 1, 1 GB/s: beta = 6/4 GB/s.
    assert through_zero.beta_bytes_per_s == pytest.approx(1.5e9)
    assert fit_alpha_beta([0, 1e6], [1e-3, 2e-3]) == AlphaBeta(
        pytest.approx(1e-3), pytest.approx(1e9)
    )  # a size of 0 bytes is a size
    with pytest.raises(ValueError, match="^need at least two different sizes to separate alpha"):
        fit_alpha_beta([1e3, 1e3], [1e-3, 2e-3])
    with pytest.raises(ValueError, match=r"^need at least 2 \(bytes, seconds\) samples, got 1$"):
        fit_alpha_beta([1e3], [1e-3])
    with pytest.raises(ValueError, match="^sizes must be >= 0 bytes and times > 0 s$"):
        fit_alpha_beta([1e3, 2e3], [1e-3, 0])
    with pytest.raises(ValueError, match="^sizes must be >= 0 bytes and times > 0 s$"):
        fit_alpha_beta([-1, 2e3], [1e-3, 2e-3])
    with pytest.raises(ValueError, match="shorter than"):  # zip(strict=True): one time per size
        fit_alpha_beta([1e3, 2e3, 3e3], [1e-3, 2e-3])


def test_alpha_beta_from_two_measurements():
    model = AlphaBeta.from_measurements(tiny_s=5e-6, large_nbytes=1e8, large_s=0.05 + 5e-6)
    assert model.alpha_s == 5e-6 and model.beta_bytes_per_s == pytest.approx(2e9)
    assert AlphaBeta.from_measurements(0.0, 1e8, 0.05) == AlphaBeta(0.0, pytest.approx(2e9))
    assert AlphaBeta.from_measurements(1e-3, 0.5, 2e-3).beta_bytes_per_s == pytest.approx(500)
    for tiny, nbytes, large in [
        (1e-3, 1e8, 1e-4),
        (1e-3, 1e8, 1e-3),
        (-1e-9, 1e8, 1e-3),
        (0, 0, 1),
    ]:
        with pytest.raises(ValueError, match="^need 0 <= tiny time < large time and a large size"):
            AlphaBeta.from_measurements(tiny, nbytes, large)


def test_residuals_of_a_single_size():
    (one,) = AlphaBeta(1e-3, 1e9).residuals([1e6], [2.5e-3])
    assert one == Residual(1e6, 2.5e-3, pytest.approx(2e-3))
    assert one.relative == pytest.approx(0.25)  # 2.5 ms against 2 ms predicted


def test_the_noise_refusal_says_what_it_needs_word_for_word():
    # Two samples, one noise.
    with pytest.raises(
        ValueError, match=r"^need one noise >= 0 s for each \(bytes, seconds\) sample$"
    ):
        fit_prediction_noise_s([0, 4e6], [1e-3, 3e-3], [40e-6], 1e6)
