"""Notebook 06's lesson: MWMS jobs on loopback (right sums, a fit, training in sync), failures
measured, every refusal before any process starts, and verdicts computed from the numbers.

Each cluster start costs seconds (TensorFlow's import in every worker), so the real jobs run once
per module and several tests read each. After every test the process table must hold nothing
that a worker group of this process started.
"""

import dataclasses
import json
import math
import re
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from d2lhelpers.collectives.algorithms import allreduce_time_s
from d2lhelpers.collectives.costs import AlphaBeta, fit_alpha_beta
from d2lhelpers.collectives.tf_allreduce import sizes_up_to
from d2lhelpers.core.units import GiB, KiB, MiB, cores_phrase, format_bytes, format_seconds
from d2lhelpers.core.verdicts import relative_noise
from d2lhelpers.lessons import l06_multi_process as l06
from d2lhelpers.lessons.l06_multi_process import allreduce, failure, hosts, jobs, panels, training
from d2lhelpers.processes.failures import WorkerError
from tests.conftest import builds_nothing, started_by_this_process, wait_until_gone

SIZES = (4 * KiB, 256 * KiB, 4 * MiB)
WIDTH, BATCH, STEPS = 32, 64, 40


@pytest.fixture(autouse=True)
def no_process_left():
    yield
    assert wait_until_gone(started_by_this_process(), timeout=2.0) == []


@pytest.fixture(scope="module")
def allreduce_run():
    calls = []
    job = l06.run_allreduce_job(
        2, SIZES, repeats=5, timeout_s=60, progress=lambda *call: calls.append(call)
    )
    return job, calls


@pytest.fixture(scope="module")
def sweep(allreduce_run):
    return l06.run_training_sweep(
        (1, 2), link=allreduce_run[0].link, width=WIDTH, batch_per_worker=BATCH, steps=STEPS
    )


# --- real jobs ------------------------------------------------------------------------------------


def test_allreduce_job_sums_exactly_and_times_every_size(allreduce_run):
    job, calls = allreduce_run
    assert job.n_workers == 2 and job.sizes == list(SIZES)
    assert job.sums_correct == [True, True]  # checked inside each worker, every element
    assert all(len(m) == len(SIZES) and min(m) > 0 for m in job.worker_medians_s)
    assert job.times == [max(a, b) for a, b in zip(*job.worker_medians_s, strict=True)]
    assert 0 < job.start_s < job.wall_s < 60
    assert "the sums were exact on every worker" in job.verdict
    assert "the sums were exact on every worker" in str(job)  # under the table, too


def test_progress_names_each_worker_and_ends_at_the_total(allreduce_run):
    _, calls = allreduce_run
    assert calls[0][:2] == (0, 6) and "worker 0: all-reduce (2 workers) starting" in calls[0][2]
    assert calls[-1][:2] == (6, 6)
    assert any("worker 1: all-reduce (2 workers) size 3/3" in status for *_, status in calls)
    assert all(done <= total for done, total, _ in calls)


def test_allreduce_job_table_has_every_size_and_the_memory(allreduce_run):
    job, _ = allreduce_run
    sizes_table, memory = job.tables()
    assert [row[0] for row in sizes_table.rows] == ["4.0 KiB", "256.0 KiB", "4.0 MiB"]
    assert all(row[-1].endswith("%)") and row[-2].endswith("%)") for row in sizes_table.rows)
    assert [row[0] for row in memory.rows] == ["worker 0", "worker 1", "this kernel"]
    # read 69: the kernel's peak as the job recorded it, not read again when shown later
    assert memory.rows[-1][1] == format_bytes(job.kernel_peak_rss_bytes)
    for worker in job.workers:
        assert 200 * MiB < worker["peak_rss_bytes"] < 3 * GiB  # TensorFlow is in there
        assert 0 < worker["pss_bytes"] <= worker["peak_rss_bytes"]
    assert "least squares on relative error: alpha = " in str(job)
    assert "<table>" in job._repr_html_()


def test_allreduce_plot_is_log_log(allreduce_run):
    import matplotlib.pyplot as plt

    figure = l06.plot_allreduce_job(allreduce_run[0])
    ax = figure.axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert len(ax.lines) == 2 + 2 + 1  # two models, two workers, the all-reduce
    plt.close(figure)


def test_two_workers_train_in_sync_and_the_loss_falls(sweep):
    one, two = sweep.jobs
    assert two.n_workers == 2 and two.weights_identical
    assert len({w["weights_sha256"] for w in one.workers + two.workers}) == 2
    for worker in two.workers:
        assert len(worker["losses"]) == STEPS + 5 and len(worker["step_s"]) == STEPS
        assert worker["losses"][-1] < worker["losses"][0] / 3
    assert two.gradient_bytes == 4 * (64 * WIDTH + WIDTH + WIDTH + 1)
    assert two.throughput == pytest.approx(2 * BATCH / two.step_s)
    assert sweep.predicted_s(one) == one.step_s
    ring = allreduce_time_s(
        "ring", 2, two.gradient_bytes, sweep.link.alpha_s, sweep.link.beta_bytes_per_s
    )
    compute = one.step_s * max(1, 2 / sweep.cores)
    assert sweep.predicted_s(two) == pytest.approx(compute + ring)
    assert sweep.verdict.startswith("2 workers: ")
    (table,) = sweep.tables()
    assert [row[-1] for row in table.rows] == ["yes", "yes"]
    answer = l06.break_even(sweep)
    assert answer.ring_s == pytest.approx(ring) and answer.one_step_s == one.step_s
    assert "check against this run: 2 workers" in str(answer)


def test_both_layouts_are_measured_before_and_after_the_kill():
    calls = []
    both = l06.run_replicas_vs_group(2, progress=lambda *c: calls.append(c), collective_timeout_s=5)
    replicas, group = both.replicas, both.group
    assert (
        replicas.errors[0].startswith("worker 0 of 1") and "killed by SIGKILL" in replicas.errors[0]
    )
    assert replicas.finished == [False, True] and not replicas.failed_as_whole
    assert replicas.measured_before and replicas.measured_after  # both sides of the kill
    assert replicas.rate_before > 0 and replicas.rate_after > 0
    assert replicas.verdict.startswith("1 of 2 workers finished their run: lost ")
    assert len(group.errors) == 2 and not any(group.finished)
    assert group.errors[0].startswith("worker 1 of 2") and "killed by SIGKILL" in group.errors[0]
    assert group.errors[1].startswith("worker 0 of 2")  # its peer fails too, never hangs
    assert all(e.endswith(".") and "{{node" not in e and "[Op:" not in e for e in group.errors)
    # How soon each error came is a measurement (make bench: the failure demo's detection row);
    # what holds anywhere: both were seen after the kill, the lost worker's first, both inside the
    # run. A peer that hung would fail the run's own wait with another message than errors[1]'s.
    first, peer = group.error_after_s
    assert 0 <= first <= peer < group.wall_s
    assert group.measured_before and group.rate_after == 0 and group.lost_share == 1.0
    assert group.verdict.startswith("the job failed as a whole: all 2 workers stopped")
    assert both.verdict == f"replicas: {replicas.verdict}; one group: {group.verdict}"
    assert any("worker 1: replicas demo (2 workers) step" in c[2] for c in calls)
    assert any("worker 0: group demo (2 workers) step" in c[2] for c in calls)
    assert calls[-1][0] == calls[-1][1] == 2 * 2 * 100  # both stages' hundredths, all done


def test_a_failed_run_is_one_sentence_naming_the_worker_and_the_cause():
    panel = l06.cluster_panel(allreduce_worker=_broken_worker)
    panel.sliders["largest_kib"].value = panel.sliders["largest_kib"].min
    panel.run()
    message = str(panel.error)
    assert isinstance(panel.error, WorkerError) and "\n" not in message
    assert message.startswith("worker 0 of 2") or message.startswith("worker 1 of 2")
    assert message.endswith("RuntimeError: the edited cell broke it.")


def _broken_worker(context):  # a learner's edit that fails: shipped to the workers
    raise RuntimeError("the edited cell broke it")


def test_stop_button_mid_job_ends_every_worker_at_once():
    def stop(done, total, status):  # what the notebook's Stop raises, once the workers are busy
        if "size" in status:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        l06.run_allreduce_job(2, SIZES, repeats=50, timeout_s=60, progress=stop)
    # no_process_left checks the process table


# --- admission: refused in well under a second, before any process starts ---------------------


@pytest.fixture
def no_worker_may_start(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a worker group was started")

    monkeypatch.setattr(jobs, "WorkerGroup", refuse)
    monkeypatch.setattr(failure, "WorkerGroup", refuse)


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: l06.run_allreduce_job(2, [4096, 2**33]), ValueError, "largest message that fits"),
        (lambda: l06.run_allreduce_job(64, SIZES), ValueError, "at most"),
        (lambda: l06.run_allreduce_job(1, SIZES), ValueError, "n_workers must be at least 2"),
        (lambda: l06.run_allreduce_job(2, SIZES, repeats=0), ValueError, "repeats"),
        (lambda: l06.run_allreduce_job(2, [4096, 4097]), ValueError, "multiples of 4"),
        (lambda: l06.run_allreduce_job(2, [4096, 4096]), ValueError, "two or more"),
        (lambda: l06.run_allreduce_job(2.5, SIZES), TypeError, "whole number"),
        (lambda: l06.run_training(2, width=3 * 10**7), ValueError, "widest model that fits"),
        (lambda: l06.run_training(2, steps=0), ValueError, "steps"),
        (lambda: l06.run_training(2, width=0), ValueError, "width"),
        (lambda: l06.run_training(2, batch_per_worker=0), ValueError, "batch_per_worker"),
        (lambda: l06.run_training(64), ValueError, "at most"),
        (lambda: l06.run_training_sweep(()), ValueError, "at least one"),
        (lambda: l06.run_training_sweep((1, 64)), ValueError, "at most"),
        (lambda: l06.run_failure("ring"), ValueError, "layout"),
        (lambda: l06.run_failure("group", n_workers=1), ValueError, "at least 2"),
        (lambda: l06.run_failure("group", window_s=0), ValueError, "window_s"),
        (lambda: l06.run_failure("group", kill_after_s=3, window_s=2), ValueError, "less than"),
        (lambda: l06.run_failure(cut_link=print), ValueError, "replicas do not use the link"),
    ],
)
def test_bad_values_are_refused_before_anything_is_built_naming_the_limit(
    call, error, words, no_worker_may_start
):
    with builds_nothing():
        with pytest.raises(error, match=words) as caught:
            call()
    assert started_by_this_process() == []
    if "fits" in words:  # the largest value that fits is named
        assert any(ch.isdigit() for ch in str(caught.value).rsplit("fits", 1)[1])


def test_too_many_workers_names_the_cap_of_two_per_core(monkeypatch, no_worker_may_start):
    monkeypatch.setattr("d2lhelpers.core.checks.usable_cores", lambda: 1)
    with pytest.raises(ValueError, match="at most 2 may run .2 per usable CPU core.: choose 2"):
        l06.run_allreduce_job(3, SIZES)


def test_memory_for_no_worker_at_all_says_how_many_fit(monkeypatch, no_worker_may_start):
    monkeypatch.setattr(jobs, "available_memory_bytes", lambda: 1 * GiB)
    with pytest.raises(ValueError, match="at most 1 workers fit"):
        l06.run_allreduce_job(2, SIZES)


# --- no processes: the numbers, the models and the sentences --------------------------------------


def _fake_allreduce(times_per_worker, sizes) -> l06.AllReduceJobResult:
    memory = {"peak_rss_bytes": 700 * MiB, "pss_bytes": 400 * MiB}
    workers = [{"medians_s": t, "sums_correct": True, **memory} for t in times_per_worker]
    return l06.AllReduceJobResult(
        len(workers), list(sizes), times_per_worker, [True] * len(workers), workers, 4.0, 9.0
    )


def test_fit_on_exact_data_recovers_alpha_beta_and_the_link_values():
    alpha, beta, n = 2e-3, 3e8, 4
    sizes = [4 * KiB, 256 * KiB, 4 * MiB, 16 * MiB]
    exact = [alpha + s / beta for s in sizes]
    job = _fake_allreduce([exact, [t * 0.9 for t in exact], exact, exact], sizes)
    assert job.times == exact  # the slowest worker decides
    assert job.fitted.alpha_s == pytest.approx(alpha) and job.two_point.alpha_s == exact[0]
    assert job.fitted.beta_bytes_per_s == pytest.approx(beta)
    link = job.link  # per link, the ring's closed form gives back the whole all-reduce's time
    for size in sizes:
        ring = allreduce_time_s("ring", n, size, link.alpha_s, link.beta_bytes_per_s)
        assert ring == pytest.approx(job.fitted.predict(size))
    with pytest.raises(ValueError, match="nobody"):
        _ = _fake_allreduce([exact], sizes).link


def test_the_tables_title_says_how_many_op_threads_each_worker_had():
    # read 121: '1 op thread each' was a constant beside a group that may start more
    job = _fake_allreduce([[1e-3, 2e-3], [1e-3, 2e-3]], [4 * KiB, 8 * KiB])
    assert job.tables()[0].title.endswith("on loopback, 1 op thread each")
    job.op_threads = 2
    assert job.tables()[0].title.endswith("on loopback, 2 op threads each")


def test_the_fits_misses_are_read_against_each_sizes_noise_and_the_fits_band():
    # read 129: '+28%' beside '±10%' was printed with no word, where notebook 05 reads each
    alpha, beta = 2e-3, 3e8
    sizes = [4 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB]
    exact = [alpha + s / beta for s in sizes]
    job = _fake_allreduce([exact, exact], sizes)
    assert job.fit_reading() is None  # no noise kept: nothing to read against
    job.worker_iqrs_s = [[0.01 * t for t in exact]] * 2  # 1% each: the 5% floor is the noise
    assert job.fit_reading().endswith(
        "beyond its noise plus the fit's own band there: within it at all 5 sizes read"
    )
    off = [*exact[:3], exact[3] * 1.3, exact[4]]  # 4 MiB 30% slow
    job = _fake_allreduce([off, off], sizes)
    job.worker_iqrs_s = [[0.01 * t for t in off]] * 2
    said = job.fit_reading()
    assert ": misses at 4.0 MiB (+" in said and said.endswith("; within it at the other 4")
    assert said in job.tables()[0].verdicts
    # read 147: '5 sizes read' of 7 named the two left out, and why
    quick = [exact[0], exact[0] * 0.9, *exact[1:]]  # 16 KiB faster than 4 KiB: not read
    job = _fake_allreduce([quick, quick], [4 * KiB, 16 * KiB, *sizes[1:]])
    job.worker_iqrs_s = [[0.01 * t for t in quick]] * 2
    assert (
        "within it at all 5 sizes read (16.0 KiB not read: faster than the smallest size, "
        "4.0 KiB, by more than 5%; the least squares on relative error fit still takes it in, "
        "and so do the cells that use its alpha and beta)"
    ) in job.fit_reading()
    # read 167: a size past its own noise, within only by the fit's band, prints that band
    assert job.fit_reading().endswith(
        "; past its own noise but within that band, nearest its edge: 4.0 KiB, 2.01 ms against "
        "the fit's 1.90 ms, within ±163.5 µs"
    )
    # within the 5% floor a size is read, as notebook 05 reads one within it of alpha
    near = [exact[0], exact[0] * 0.97, *exact[1:]]
    job = _fake_allreduce([near, near], [4 * KiB, 16 * KiB, *sizes[1:]])
    job.worker_iqrs_s = [[0.01 * t for t in near]] * 2
    assert "not read" not in job.fit_reading() and "less than this alpha" not in str(job)
    assert job.fit_reading().endswith("within it at all 6 sizes read")


def test_the_memory_table_reads_the_admission_estimate_against_the_workers_peak():
    # read 130: '2 workers need about 1.6 GiB' was printed before the run, never compared
    from d2lhelpers.processes.worker_memory import worker_memory_bytes

    job = _fake_allreduce([[1e-3, 2e-3], [1e-3, 2e-3]], [4 * KiB, 8 * KiB])  # 700 MiB each
    estimate = 2 * worker_memory_bytes(8 * KiB)
    memory = job.tables()[1]
    assert memory.verdicts[1] == (
        f"the memory check admitted the workers on an estimate of {estimate / MiB:.1f} MiB "
        f"summed; the workers' peak RSS summed 1400.0 MiB (this kernel not counted), "
        f"{1400 * MiB / estimate:.2f}x it: within it"
    )
    assert memory.flags == []
    for worker in job.workers:
        worker["peak_rss_bytes"] = estimate  # both together: twice the estimate
    (flag,) = job.tables()[1].flags
    assert flag.endswith("2.00x it: above the estimate, so the check under-counts on this machine")


def test_wrong_sums_are_flagged_not_fitted():
    job = _fake_allreduce([[1e-3, 2e-3], [1e-3, 2e-3]], [4 * KiB, 8 * KiB])
    job.sums_correct = [True, False]
    assert "WRONG on worker(s) [1]" in job.verdict
    assert job.tables()[0].flags == [job.verdict]


def test_a_noisy_size_is_flagged_as_every_table_flags_a_noisy_run():
    # read 54: sizes at ±33-39% were printed with no "noisy" warning
    job = _fake_allreduce([[1e-3, 2e-3], [1e-3, 2e-3]], [4 * KiB, 8 * KiB])
    job.worker_iqrs_s = [[0.05e-3, 0.7e-3], [0.05e-3, 0.7e-3]]  # 5% and 35% of the median
    (flag,) = job.tables()[0].flags
    assert flag.startswith(
        "noisy: the slowest worker's IQR is above 10% of its median at 8.0 KiB (35%); possible "
        "causes, not measured here"
    )
    job.worker_iqrs_s = [[0.05e-3, 0.1e-3], [0.05e-3, 0.1e-3]]
    assert job.tables()[0].flags == []
    # read 97: 10.04% printed as '(10%)' under 'above 10%'
    job.worker_iqrs_s = [[0.05e-3, 0.2008e-3], [0.05e-3, 0.2008e-3]]
    assert "at 8.0 KiB (10.04%); possible" in job.tables()[0].flags[0]


def test_alpha_and_the_rings_time_carry_the_fits_band():
    # Two sizes: the fit passes through both, alpha (at 0 bytes) moves with the first time, less
    # with the second: w = -4 KiB / 4 KiB = -1, so alpha's band is hypot(2 x n1, 1 x n2).
    sizes = [4 * KiB, 8 * KiB]
    job = _fake_allreduce([[2e-3, 3e-3], [2e-3, 3e-3]], sizes)
    assert job.alpha_band_s is None and "alpha = 1.00 ms per call" in job.verdict  # no noise kept
    job.worker_iqrs_s = [[0.2e-3, 0.3e-3]] * 2  # 10% each
    assert job.alpha_band_s == pytest.approx(math.hypot(2 * 0.2e-3, 0.3e-3))  # 0.5 ms
    assert "alpha = 1.00 ms ±500.0 µs per call" in job.verdict
    # The ring of 2 at the largest size is the fit's prediction there: its band is the time's.
    ring, band = job.ring_time_s(2, 8 * KiB)
    assert ring == pytest.approx(3e-3) and band == pytest.approx(0.3e-3)
    job.worker_iqrs_s = [[0.6e-3, 0.3e-3]] * 2  # 30% at 4 KiB: alpha's band reaches 0
    assert "its band reaches 0: the times' noise hides the latency" in job.verdict


def test_a_larger_message_faster_than_the_smallest_is_flagged_not_read():
    # read 66: 64 KiB in 6.45 ms beside 4 KiB in 8.21 ms, printed as an ordinary residual
    job = _fake_allreduce([[8.21e-3, 6.45e-3, 9e-3]] * 2, [4 * KiB, 64 * KiB, 1 * MiB])
    (flag,) = job.tables()[0].flags
    assert flag.startswith("64.0 KiB took 6.45 ms, less than the 4.0 KiB all-reduce's 8.21 ms")
    assert "took less than this alpha" not in str(job)  # flagged: not said twice
    job.worker_iqrs_s = [[2e-3, 1e-3, 0.5e-3]] * 2  # within both noises: nothing to flag
    assert not any("less than the" in f for f in job.tables()[0].flags)
    # but the two-point alpha (the 4 KiB time alone) says so (read 68)
    assert "(1.0 MiB); 64.0 KiB took less than this alpha by more than 5%, within both " in (
        str(job)
    )
    assert "which spread ±24%, a rough value" in str(job)


def test_two_point_model_of_flat_times_is_all_latency():
    job = _fake_allreduce([[1e-3, 1e-3], [1e-3, 0.9e-3]], [4 * KiB, 8 * KiB])
    assert job.two_point == AlphaBeta(1e-3, math.inf)
    assert "unbounded" in str(job)


def _fake_training(n_workers, step_s, spread=0.0) -> l06.TrainingJobResult:
    worker = {
        "step_s": [step_s * (1 - spread), step_s, step_s * (1 + spread)],
        "losses": [4.0, 1.0],
        "weights_sha256": "same",
        "gradient_bytes": 4000,
        "peak_rss_bytes": 700 * MiB,
        "pss_bytes": 400 * MiB,
    }
    return l06.TrainingJobResult(n_workers, 8, 100, [worker] * n_workers, 3.0, 4.0)


def test_sweep_verdicts_follow_the_numbers_and_their_noise():
    link = AlphaBeta(1e-3, 1e9)
    slower = l06.TrainingSweepResult(
        [_fake_training(1, 1e-3), _fake_training(2, 3.004e-3)], link, 2
    )
    assert slower.verdict.startswith(
        "2 workers: fewer samples/s than one worker (1.50x the time per sample; beyond ±"
    )
    text = str(slower)
    assert "2 workers: the model puts the all-reduce at 2.00 ms per step" in text
    (table,) = slower.tables()
    assert table.rows[1][3:5] == ("3.00 ms", "+0%")  # 1 ms + 2 alpha + 2 * 2000 B / beta
    assert table.rows[0][3:5] == ("1.00 ms", "its input")  # read 72: not a prediction
    assert table.rows[1][2] == "±5%"  # steady steps: the floor
    faster = l06.TrainingSweepResult([_fake_training(1, 1e-3), _fake_training(2, 1.1e-3)], None, 2)
    assert faster.verdict.startswith(
        "2 workers: 1.82x the samples/s of one worker (ideal 2x; beyond ±"
    )
    # The sentence prints the tables' samples/s (median step), not the blocks' that decide it.
    uneven = _fake_training(2, 1.1e-3)
    steps = [1.0, 1.0, 3.0, 3.0] * 3 + [1.0, 1.0, 1.0, 3.0] * 2 + [3.0] * 20  # ms
    uneven.workers = [{**uneven.workers[0], "step_s": [t * 1e-3 for t in steps]}] * 2
    said = l06.TrainingSweepResult([_fake_training(1, 0.2e-3), uneven], None, 2).verdict
    # the median step, 3 ms for 16 samples, is 7.50x one worker's time per sample (0.2 ms for
    # 8); the blocks' median, 2.5 ms, would say 6.25x
    assert said.startswith("2 workers: fewer samples/s than one worker (7.50x the time per sample;")
    # and its band rebuilds from the table's printed noises at that ratio (read 61: it did not,
    # being the blocks' noise at the blocks' ratio): one worker's ± + the 2 workers' ± x 7.50
    rows = l06.TrainingSweepResult([_fake_training(1, 0.2e-3), uneven], None, 2).tables()[0].rows
    one_noise, two_noise = (float(row[2].strip("±%")) / 100 for row in rows)
    band = float(re.search(r"beyond ±(\d+)%", said).group(1)) / 100
    assert band == pytest.approx(one_noise + two_noise * 7.5, abs=0.01 + 0.005 * 7.5)
    # read 156: and the sentence prints that rule's parts, so its ± rebuilds from them
    parts = re.search(r"2 workers' ±([\d.]+)% x 7.50 \+ one worker's ±([\d.]+)%\)", said)
    assert parts, said
    two, one = (float(p) / 100 for p in parts.groups())
    assert f"±{two * 7.5 + one:.0%}" == f"±{band:.0%}"
    noisy = l06.TrainingSweepResult(
        [_fake_training(1, 1e-3, 0.5), _fake_training(2, 1.9e-3, 0.5)], None, 2
    )
    assert "no measurable difference" in noisy.verdict
    # the band the comparison used is printed (read 52: "within the noise", no number)
    assert re.search(r"\(\d\.\d\dx, within ±\d+% of one worker's time per sample", noisy.verdict)
    four = l06.TrainingSweepResult([_fake_training(1, 1e-3), _fake_training(4, 6e-3)], link, 2)
    assert "4 workers on 2 usable CPU cores: they take turns" in str(four)


def test_predict_step_s_adds_the_ring_and_shares_the_cores():
    link = AlphaBeta(1e-3, 1e9)
    assert l06.predict_step_s(1, 2e-3, 1000, link, cores=2) == 2e-3
    two = 2e-3 + 2 * 1e-3 + 2 * 500 / 1e9  # 2(K-1) alpha + 2(K-1) ceil(G/K) / beta
    assert l06.predict_step_s(2, 2e-3, 1000, link, cores=2) == pytest.approx(two)
    four = 2e-3 * 4 / 2 + 6 * 1e-3 + 6 * 250 / 1e9  # 4 workers take turns on 2 cores
    assert l06.predict_step_s(4, 2e-3, 1000, link, cores=2) == pytest.approx(four)


def test_break_even_is_never_on_one_core():
    assert l06.break_even_step_s(2, 3e-3, cores=2) == pytest.approx(3e-3)  # t1 > T_ring
    assert l06.break_even_step_s(4, 3e-3, cores=2) == pytest.approx(3e-3 / 2)  # 4 - 4/2
    assert l06.break_even_step_s(2, 3e-3, cores=1) is None
    sweep = l06.TrainingSweepResult(
        [_fake_training(1, 1e-3), _fake_training(2, 4e-3)], AlphaBeta(1e-3, 1e9), cores=1
    )
    answer = l06.break_even(sweep)
    assert answer.needed_s is None and "never beat one here: on 1 usable CPU core" in answer.verdict
    assert ("compute per step needed to win", "never") in answer.tables()[0].rows
    # read 170: the model's premise, not a measured fact (a step near the all-reduce alone)
    assert answer.verdict.endswith("the model has each step compute 2x as long (its "
                                   "premise, not measured), and puts the all-reduce on top (it "
                                   "assumes no overlap of compute and communication; the "
                                   "sentence under the sweep's table says whether its step "
                                   "held)")  # fmt: skip
    # review: that sentence exists, and says how the model's step did (here, beside its band)
    assert sweep.model_sentence(sweep.jobs[1]) is not None
    assert "the model agrees in direction (both: lose)" in str(answer)  # it said never; slower


def test_the_model_step_is_read_against_the_noise_of_both_step_times():
    link = AlphaBeta(1e-3, 1e9)  # on 2 cores, 2 workers: 1 ms compute + 2 ms + 4 us all-reduce
    on = l06.TrainingSweepResult([_fake_training(1, 1e-3), _fake_training(2, 3.004e-3)], link, 2)
    assert on.model_sentence(on.one) is None
    assert on.model_sentence(on.jobs[1]).endswith("within the step times' noise (±7% in all)")
    off = l06.TrainingSweepResult([_fake_training(1, 1e-3), _fake_training(2, 2.2e-3)], link, 2)
    said = off.model_sentence(off.jobs[1])
    assert "-27% from the model, outside the noise of the step times" in said
    assert "the alpha-beta fit's own band is not counted here (no all-reduce job given)" in said
    assert "so this is not read as the model missing" in said  # read 102
    assert said in str(off)
    assert "shorter than the model's all-reduce alone" not in said  # 2.2 ms holds 2.004 ms
    # read 95: a step shorter than the modelled all-reduce it should hold says so
    short = l06.TrainingSweepResult([_fake_training(1, 1e-3), _fake_training(2, 1.5e-3)], link, 2)
    assert short.model_sentence(short.jobs[1]).endswith(
        "; the step is shorter than the model's all-reduce alone (2.00 ms) beyond the step's noise "
        "(the fit's band not counted), so it cannot hold that all-reduce as fitted: either the "
        "fitted all-reduce is off at this size, or the step's all-reduce costs less than the "
        "sweep's (hypotheses, not told apart here)"
    )
    # read 101: 1.95 ms, 5% floor: 2.05 ms reaches the 2.00 ms all-reduce, within the noise
    near = l06.TrainingSweepResult([_fake_training(1, 1e-3), _fake_training(2, 1.95e-3)], link, 2)
    assert "shorter than the model's all-reduce" not in near.model_sentence(near.jobs[1])
    two_cores = l06.break_even(
        l06.TrainingSweepResult(
            [_fake_training(1, 1e-3), _fake_training(2, 0.8e-3)], AlphaBeta(1e-3, 1e9), cores=2
        )
    )
    assert (
        "2.00 ms (a point value from the fitted alpha and beta, whose inputs' noise the "
        "sweep's table prints): 2.0x this run's 1.00 ms" in two_cores.verdict
    )
    assert "the model disagrees" in str(two_cores)  # two workers won, the model said they lose


def test_break_even_carries_the_fits_band_and_says_when_it_holds_the_step():
    # The all-reduce run the sweep's link came from: 2 ms at 4 KiB, 3 ms at 8 KiB, 10% noise.
    job = _fake_allreduce([[2e-3, 3e-3], [2e-3, 3e-3]], [4 * KiB, 8 * KiB])
    job.worker_iqrs_s = [[0.2e-3, 0.3e-3]] * 2
    ring, band = job.ring_time_s(2, 4000)  # the sweep's gradients: 4000 bytes, near 4 KiB
    steps = [_fake_training(1, 1e-3), _fake_training(2, 4e-3)]  # two workers lose
    sweep = l06.TrainingSweepResult(steps, job.link, cores=2)
    answer = l06.break_even(sweep, job)
    assert answer.ring_s == pytest.approx(ring) and answer.ring_band_s == pytest.approx(band)
    low, high = answer.needed_range_s  # 2 cores, 2 workers: t1 > T_ring, at both ends
    assert (low, high) == (pytest.approx(ring - band), pytest.approx(ring + band))
    assert answer.model_says == "lose" and "the model agrees in direction (both: lose)" in str(
        answer
    )
    assert "within the fit's band: each all-reduce size's time moved by its noise): " in (
        answer.verdict
    )
    # A one-worker step inside the band: the model cannot say, and is not checked.
    inside = l06.break_even(
        l06.TrainingSweepResult(
            [_fake_training(1, ring), _fake_training(2, 3 * ring)], job.link, cores=2
        ),
        job,
    )
    assert inside.model_says is None and "the model cannot say whether 2 workers win" in (
        inside.verdict
    )
    assert "the model cannot be checked here" in str(inside) and "agrees" not in str(inside)
    with pytest.raises(ValueError, match="not this all-reduce job's fit"):
        l06.break_even(l06.TrainingSweepResult(steps, AlphaBeta(1e-3, 1e9), cores=2), job)


def test_with_its_all_reduce_job_the_sweep_counts_the_fits_band_and_reads_a_miss():
    job = _fake_allreduce([[2e-3, 3e-3], [2e-3, 3e-3]], [4 * KiB, 8 * KiB])
    job.worker_iqrs_s = [[0.2e-3, 0.3e-3]] * 2
    ring, band = job.ring_time_s(2, 4000)
    predicted = 1e-3 + ring  # 2 workers on 2 cores: one worker's step plus the all-reduce
    # Inside the steps' noise plus the fit's band, outside the steps' noise alone.
    steps_noise = 0.05 * 1e-3 + 0.05 * predicted * 0.95  # the 5% floors, roughly
    inside_s = predicted - steps_noise - band / 2
    inside = l06.TrainingSweepResult(
        [_fake_training(1, 1e-3), _fake_training(2, inside_s)], cores=2, link=None, allreduce=job
    )
    assert inside.link == job.link
    assert inside.model_sentence(inside.jobs[1]).endswith(
        f"within the step times' noise plus the all-reduce fit's band (±"
        f"{(inside_s * 0.05 + 0.05e-3 + band) / predicted:.0%} in all)"
    )
    without = l06.TrainingSweepResult(
        [_fake_training(1, 1e-3), _fake_training(2, inside_s)], job.link, 2
    )
    assert "not read as the model missing" in without.model_sentence(without.jobs[1])
    # Beyond both: the model misses, said as such, in the direction the numbers give.
    far_s = 0.5 * predicted
    far = l06.TrainingSweepResult(
        [_fake_training(1, 1e-3), _fake_training(2, far_s)], None, 2, allreduce=job
    )
    said = far.model_sentence(far.jobs[1])
    assert "-50% from the model, outside the step times' noise plus the all-reduce" in said
    assert "the model misses at 2 workers (its step is longer than the measured one)" in said
    assert "not read as the model missing" not in said and said in str(far)
    assert l06.break_even(far).ring_band_s == pytest.approx(band)  # the sweep's own job
    # read 129: the break-even answer says when it comes from a model that missed this step
    assert far.model_misses(far.jobs[1]) == "-50%"
    # read 159: '-19% ... outside (±19%)': at the band's edge, the digits that show it past
    edge_s = (predicted - 0.05e-3 - band) / 1.05 * (1 - 1e-4)
    edge = l06.TrainingSweepResult(
        [_fake_training(1, 1e-3), _fake_training(2, edge_s)], None, 2, allreduce=job
    )
    gap, spread = re.search(
        r"([-+][\d.]+)% from the model, outside .*\(±([\d.]+)% in all\)",
        (edge.model_sentence(edge.jobs[1])),
    ).groups()
    assert abs(float(gap)) > float(spread) and "." in gap
    assert edge.model_misses(edge.jobs[1]) == f"{gap}%"
    assert inside.model_misses(inside.jobs[1]) is None
    assert without.model_misses(without.jobs[1]) is None  # the fit's band unknown: not a miss
    answer = l06.break_even(far)
    answer.outcome = answer.model_says  # as if the run agreed in direction
    check = answer.tables()[0].verdicts[1]
    assert check.endswith(
        "but its step missed the measured one (-50%, beyond the noise: the sentence under the "
        "sweep's table), so the compute needed above is the model's estimate, not a threshold "
        "this run measured"
    )
    answer.model_gap = None
    assert answer.tables()[0].verdicts[1].endswith("is the sentence under the sweep's table")
    with pytest.raises(ValueError, match="not this all-reduce job's fit"):
        l06.TrainingSweepResult([_fake_training(1, 1e-3)], AlphaBeta(1e-3, 1e9), allreduce=job)


def _reports(step_s, start, count, first=1):
    return [
        {
            "step": first + i,
            "elapsed_s": 0.0,
            "window_s": 9,
            "loss": 1.0,
            "step_s": step_s,
            "at": start + i * step_s,
        }
        for i in range(count)
    ]


def _failure(layout, reports, finished, errors=("x",), cores=2):
    after = [0.1] * len(errors)
    return l06.WorkerLossResult(layout, 2, 0.1, list(errors), after, reports, finished, 5.0, cores)


def test_the_failure_tables_title_names_the_demos_step_when_known():
    demo = _failure("replicas", [_reports(1e-3, 0.0, 101), _reports(1e-3, 0.0, 300)], [False, True])
    assert demo.tables()[0].title == "2 replicas of one worker each"
    demo.step = (1024, 512)
    assert demo.tables()[0].title.endswith("(each step: width 1024, batch 512 per worker)")


def test_failure_demo_measures_the_loss_from_the_steps():
    # Two replicas at 1 ms a step; replica 0 dies at t = 0.1 s, replica 1 keeps its pace.
    demo = _failure("replicas", [_reports(1e-3, 0.0, 101), _reports(1e-3, 0.0, 300)], [False, True])
    assert demo.rate_before == pytest.approx(2000) and demo.rate_after == pytest.approx(1000)
    assert demo.lost_share == pytest.approx(0.5) and demo.model_lost == 0.5
    assert demo.killed_at_step == 101 and demo.victim == 0
    assert demo.verdict == (  # steady steps: each side's noise is the 5% floor, through 1 - 50%
        "1 of 2 workers finished their run: lost 50.0% ± 5.0% of the steps per second (the "
        "band: 0.500 x (±5.0% before + ±5.0% after)) (model: 50%, within the noise)"
    )
    rows = dict(demo.rows())  # read 60: each rate's noise is printed, so the band rebuilds
    assert rows["steps/s before the loss, all workers"] == "2000 ±5.0% (its noisiest worker's)"
    assert rows["steps/s after the loss, all workers"] == "1000 ±5.0% (its noisiest worker's)"
    lucky = _failure("replicas", [_reports(1e-3, 0.0, 101), _reports(0.7e-3, 0.0, 400)], [0, 1])
    assert lucky.lost_share == pytest.approx(0.41, abs=0.01)  # 1000 + 1429 before, 1429 after
    assert lucky.model_reading() == (  # read 119: the survivor's own times, unchanged, shown
        "model: 50%; less than the model beyond the noise (the survivors' steps took 700.0 µs "
        "±5% (floor) before the loss and 700.0 µs ±5% (floor) after: no measurable speed-up, so "
        "why less was lost is not shown; workers of unequal speed before the loss, or a "
        "speed-up inside the noise, are hypotheses)"
    )
    # A band wide enough to reach "nothing lost" cannot test the model.
    after, t = [], 0.1
    for i in range(60):  # blocks of ten steps, alternately 0.4 ms and 2.4 ms apart
        t += 0.4e-3 if (i // 10) % 2 == 0 else 2.4e-3
        after.append({**_reports(1e-3, t, 1, 102 + i)[0]})
    wobbly = [_reports(1e-3, 0.0, 101), _reports(1e-3, 0.0, 101) + after]
    vague = _failure("replicas", wobbly, [False, True])
    assert vague.model_reading().startswith("model: 50%: too noisy to test, its band")
    # read 68: 16.4% ± 42.2% holds the model's 50% and no loss alike: not "within the noise"
    cls = type(vague)
    with (
        mock.patch.object(cls, "lost_share", property(lambda _: 0.164)),
        mock.patch.object(cls, "lost_noise", property(lambda _: 0.422)),
    ):
        assert vague.model_reading() == (
            "model: 50%: too noisy to test, its band (±42%) covers no loss too"
        )
    with (
        mock.patch.object(cls, "lost_share", property(lambda _: 0.45)),
        mock.patch.object(cls, "lost_noise", property(lambda _: 0.2)),
    ):
        assert vague.model_reading() == "model: 50%, within the noise"
    # The survivor runs twice as fast once it has the core to itself: less is lost, and why.
    sped = [_reports(1e-3, 0.0, 101), _reports(1e-3, 0.0, 101) + _reports(0.5e-3, 0.1005, 400, 102)]
    demo = _failure("replicas", sped, [False, True], cores=1)
    assert demo.lost_share == pytest.approx(0.0, abs=0.01)
    assert (
        "the survivors' steps took 1.00 ms ±5% (floor) before the loss and 500.0 µs ±5% (floor) "
        "after, 500.0 µs shorter, beyond both noises (75.0 µs): they ran faster"
    ) in str(demo)  # read 56: printed with no noise
    assert "they ran faster once one worker stopped, so less was lost than the model's 50%" in (
        str(demo)
    )
    with (  # read 129: 35.0% ± 17.3% is not below 50% beyond its noise: 'less' only as a would
        mock.patch.object(cls, "lost_share", property(lambda _: 0.35)),
        mock.patch.object(cls, "lost_noise", property(lambda _: 0.173)),
    ):
        said = " ".join(demo.notes())
    assert "so less was lost" not in said
    assert "stopped, which would make less lost than the model's 50%, which gives" in said
    assert said.endswith("though the loss measured here is not below it beyond its noise")
    # read 70: more after than before is printed with its band, and still read against the model
    faster = [
        _reports(1e-3, 0.0, 101),
        _reports(1e-3, 0.0, 101) + _reports(0.4e-3, 0.1005, 400, 102),
    ]
    demo = _failure("replicas", faster, [False, True], cores=1)
    assert demo.lost_share == pytest.approx(-0.25, abs=0.01)
    assert "nothing: the survivors made 25.0% ± 12.5% more steps per second than all workers " in (
        demo.verdict
    )
    assert "(±5.0% before + ±5.0% after); beyond the noise)" in demo.verdict
    assert "(model: 50%; less than the model beyond the noise" in demo.verdict
    # read 84: more after, but within the noise: 'nothing' lost would claim more than the band
    near = [
        _reports(1e-3, 0.0, 101),
        _reports(1e-3, 0.0, 101) + _reports(0.476e-3, 0.1005, 400, 102),
    ]
    close = _failure("replicas", near, [False, True], cores=1)
    assert -0.1 < close.lost_share < 0 and -close.lost_share < close.lost_noise
    assert "lost nothing measurable: the survivors made 5.0% ± 10.5% more" in close.verdict
    assert close.lost_words().startswith("nothing measurable: the survivors made ")
    assert close.lost_words().endswith("within the noise, so not measurably more)")
    # A survivor with no steps after the kill, or a worker with none before it: said, not guessed.
    early = [_reports(1e-3, 0.0, 101), _reports(1e-3, 0.0, 80)]
    demo = _failure("replicas", early, [False, True])
    assert not demo.measured_after and "lost not measured: a survivor had no steps after" in str(
        demo
    )
    late = [_reports(1e-3, 0.0, 101), _reports(1e-3, 0.2, 80)]
    demo = _failure("replicas", late, [False, True])
    assert not demo.measured_before and "a worker had no steps before the loss" in demo.verdict


def test_group_failure_is_called_whole_only_when_every_worker_stopped():
    reports = [_reports(1e-3, 0.0, 100), _reports(1e-3, 0.0, 100)]
    demo = _failure("group", reports, [False, False], ["a", "b"])
    assert demo.failed_as_whole and demo.rate_after == 0 and demo.lost_share == 1.0
    assert demo.victim == 1
    assert demo.verdict.startswith(
        "the job failed as a whole: all 2 workers stopped: the killed one, and 1 with an error, "
        "the last 0.10 s after the loss"
    )
    cut = dataclasses.replace(demo, how="cut off (its link down)")
    assert cut.verdict.startswith(
        "the job failed as a whole: all 2 workers stopped with an error, the last 0.10 s after"
    )
    demo.collective_timeout_s = 5.0  # read 72: the timeout behind the time is printed beside it
    assert (
        "the last 0.10 s after the loss (a survivor's collective gives up after 5 s, this demo's "
        "timeout: an error came before it, not the timeout);"
    ) in demo.verdict
    demo.collective_timeout_s = 0.05  # read 78: which came first is said, not implied
    assert "this demo's timeout: the timeout had passed);" in demo.verdict
    demo.collective_timeout_s = None
    # Read 58: 'within 0.80 s' beside an error at 0.801 s; read 117: 'within 0.93 s' beside the
    # error table's 0.92 s. The last error's time, rounded as the table rounds it.
    demo.error_after_s = [0.1, 0.801]
    assert "with an error, the last 0.80 s after the loss" in demo.verdict
    demo.error_after_s = [0.1, 0.1]
    assert demo.verdict.endswith(  # nothing after the loss: exact, not "± inf"
        "lost all of the steps per second (no steps after the loss: exact) (model: 100%, as "
        "measured)"
    )
    kept = [_reports(1e-3, 0.0, 100), _reports(1e-3, 0.0, 300)]
    demo = _failure("group", kept, [False, True], ["a"])
    assert not demo.failed_as_whole and "failed as a whole" not in demo.verdict
    assert "the group did not fail as a whole in this run" in str(demo)
    none = _failure("group", kept, [True, True], [])
    assert none.verdict.startswith("no worker failed after one was killed (SIGKILL)")
    both = l06.ReplicasVsGroupResult(_failure("replicas", kept, [False, True]), demo)
    summary, errors = both.tables()
    assert [row[0] for row in summary.rows] == ["2 replicas", "one group of 2"]
    # read 60: the rates the lost share's band comes from carry their noise in the summary too
    assert summary.rows[0][1:3] == (
        "2000 ±5.0% (its noisiest worker's)",
        "1000 ±5.0% (its noisiest worker's)",
    )
    assert [row[0] for row in errors.rows] == ["replicas", "group"]
    assert both.verdict not in str(both)  # the panel prints it once, above the tables
    assert summary.title == "one worker killed (SIGKILL), in a replica set and in one group"
    both.replicas.step = (1024, 256)  # read 129: the summary the panel shows names the step too
    assert both.tables()[0].title.endswith(
        "in one group (each step: width 1024, batch 256 per worker)"
    )


def test_small_machine_gets_smaller_defaults_that_fit_two_gib():
    small = l06.machine_defaults(cores=1, available=8 * GiB)
    assert small.small and small.largest_message == 4 * MiB and small.sizes[-1] == 4 * MiB
    assert 2 * allreduce.worker_memory_bytes(small.largest_message) < 2 * GiB
    assert "a small machine, so smaller defaults" in str(small)
    assert "1 usable CPU core for" in str(small)
    assert l06.machine_defaults(cores=2, available=2 * GiB).small
    full = l06.machine_defaults(cores=2, available=8 * GiB)
    assert not full.small and "the full defaults" in str(full) and full.sizes[-1] == 16 * MiB


def test_the_cluster_panel_shows_the_runs_above_only_if_it_would_have_made_them():
    """Notebook 06 passes its job and sweep to the panel: shown, not run again (the book's
    default run), but only if the panel's default sliders would have made the same two."""
    panel = l06.cluster_panel()
    values, steps = panel.values(), l06.machine_defaults().steps
    sizes = sizes_up_to(values["largest_kib"] * KiB)
    times = [2e-3 + s / 3e8 for s in sizes]
    job = _fake_allreduce([times, times], sizes)

    def sweep(width=values["width"], link=job.link, steps=steps):
        trained = []
        for k in (1, 2):
            one = _fake_training(k, 1e-3 * k)
            one.width, one.batch_per_worker = width, 256
            one.workers = [{**w, "step_s": [1e-3 * k] * steps} for w in one.workers]
            trained.append(one)
        return l06.TrainingSweepResult(trained, link, 2)

    shown = l06.cluster_panel(shown=(job, sweep()))
    assert shown.result is not None and shown.shown_values == values
    assert "not run again" in shown.status.value and shown.output.outputs  # drawn
    fewer = _fake_allreduce([times[::2], times[::2]], sizes[::2])  # the sizes of another sweep
    others = [(fewer, sweep()), (job, sweep(width=values["width"] + 32))]
    others += [(job, sweep(steps=steps + 1)), (job, sweep(link=AlphaBeta(1e-3, 1e9)))]
    for other in others:
        refused = l06.cluster_panel(shown=other)
        assert refused.result is None and not refused.output.outputs
        assert "press Run to measure them" in refused.status.value


def test_panels_cap_their_sliders_and_estimate_before_running(monkeypatch):
    monkeypatch.setattr(panels, "max_workers", lambda: 2)
    panel = l06.cluster_panel()
    assert panel.sliders["n_workers"].max == 2
    seconds = panel.estimate(**panel.values())
    assert 10 < seconds < 300
    bigger = dict(panel.values(), width=1024)
    assert panel.estimate(**bigger) > seconds
    kill = l06.failure_panel()
    assert kill.sliders["n_workers"].max == 2 and kill.estimate(**kill.values()) > 0
    assert set(kill.sliders) == {"n_workers"}  # one run measures both layouts
    assert training.TrainingSweepResult is l06.TrainingSweepResult


# --- random bad values: always a clear refusal, at once, before any process -----------------------

_not_a_count = st.one_of(st.floats(allow_nan=True), st.text(max_size=3), st.booleans())
_BAD = {
    "n_workers": st.one_of(st.integers(max_value=0), st.integers(min_value=10**3), _not_a_count),
    "repeats": st.one_of(st.integers(max_value=0), _not_a_count),
    "steps": st.one_of(st.integers(max_value=0), _not_a_count),
    "width": st.one_of(st.integers(max_value=0), st.integers(min_value=10**10), _not_a_count),
    "batch_per_worker": st.one_of(st.integers(max_value=0), _not_a_count),
    "warmup": st.one_of(st.integers(max_value=-1), _not_a_count),
    "timeout_s": st.one_of(st.floats(max_value=0), st.text(max_size=3), st.booleans()),
    "window_s": st.one_of(st.floats(max_value=0), st.text(max_size=3), st.booleans()),
}
_ENTRIES = {
    "run_allreduce_job": (l06.run_allreduce_job, ("n_workers", "repeats", "warmup", "timeout_s")),
    "run_training": (
        l06.run_training,
        ("n_workers", "steps", "width", "batch_per_worker", "warmup", "timeout_s"),
    ),
    "run_training_sweep": (
        l06.run_training_sweep,
        ("steps", "width", "batch_per_worker", "warmup", "timeout_s"),
    ),
    "run_failure": (l06.run_failure, ("n_workers", "window_s", "width", "batch_per_worker")),
}


# The patch is the same for every example: a function-scoped fixture is safe here.
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), entry=st.sampled_from(sorted(_ENTRIES)))
def test_random_bad_values_are_refused_before_anything_is_built(data, entry, no_worker_may_start):
    function, names = _ENTRIES[entry]
    name = data.draw(st.sampled_from(names))
    value = data.draw(_BAD[name])
    with builds_nothing():
        with pytest.raises((ValueError, TypeError)):
            function(**{name: value})


def test_a_panel_refusal_names_the_slider_and_starts_nothing(monkeypatch, no_worker_may_start):
    panel = l06.cluster_panel()
    monkeypatch.setattr(jobs, "available_memory_bytes", lambda: 2 * GiB)
    panel.sliders["largest_kib"].value = panel.sliders["largest_kib"].max
    panel.sliders["n_workers"].value = 2
    monkeypatch.setattr(allreduce, "RING_COPIES", 1000)  # now the messages cannot fit
    monkeypatch.setattr(
        allreduce, "worker_memory_bytes", lambda size: allreduce.WORKER_BYTES + 1000 * size
    )
    panel.run()
    assert isinstance(panel.error, ValueError)
    assert "largest message that fits" in str(panel.error)
    assert "move the 'largest message (KiB)'" in str(panel.error)


# --- the notebook's cells are what the workers run ------------------------------------------------


def test_an_edited_worker_cell_changes_what_the_panel_runs():
    from tests.notebook_runs import run_edited

    panel = "panel = d2l.cluster_panel(allreduce_worker, training_worker, shown=(job, sweep))\n"
    step = "    n, batch = strategy.num_replicas_in_sync,"
    edits = {
        # the learner's edit: the training worker now fails at once, in every worker
        step: f'    raise RuntimeError("edited in the notebook")\n{step}',
        # none of the notebook's own jobs before the panel (each worker a fresh TensorFlow)
        "job = d2l.run_allreduce_job(n_workers=2, worker=allreduce_worker)": "pass",
        "job.plot()\njob": "",
        "sweep = d2l.run_training_sweep((1, 2), allreduce=job, worker=training_worker)": "pass",
        "sweep.plot()\nsweep": "",
        "d2l.hosts_reference(job, sweep)": "pass",
        f"{panel}panel": panel.replace(", shown=(job, sweep)", "")
        + "panel.sliders['largest_kib'].value = 64\npanel.run()\nprint('PANEL:', panel.error)",
    }
    outputs = run_edited("06_multi_process", edits, until="panel = d2l.cluster_panel")
    (panel,) = [text for text in outputs if "PANEL:" in text]
    # The panel trains only after its all-reduce job has finished (with the unedited worker):
    # the 1-worker training job is the first to start, and it runs the edited cell.
    assert "worker 0 of 1" in panel and "RuntimeError: edited in the notebook." in panel


def _hosts_file():
    held = [{"bytes": 2 << 20, "measured_s": 0.1, "predicted_s": 0.09, "residual": 0.11}]
    slow = {"rate_bit_s": 200e6, "alpha_s": 2e-3, "beta_bytes_per_s": 2.4e7}
    fast = {"rate_bit_s": 1e9, "alpha_s": 2e-3, "beta_bytes_per_s": 3e7}
    return {
        "machine": {"processor": "x86_64", "cpu_cores": 2, "tensorflow": "2.21.0", "date": "d"},
        "link": {"burst_bytes": 65536, "mtu": 1500, "payload_share": 0.956},
        "allreduce": [
            {**fast, "beta_over_rate": 0.24, "beta_over_payload_rate": 0.25, "held_out": held},
            {**slow, "beta_over_rate": 0.96, "beta_over_payload_rate": 1.0, "held_out": held},
        ],
        "training": {
            "two_vs_one": "2 workers: fewer samples/s than one worker (3.1x)",
            "step_s": [1e-3, 5e-3],
            "predicted_s": [1e-3, 4e-3],
        },
        "failure": {"group, link down": {"verdict": "the job failed as a whole"}},
        "compute_copy": {
            "run_s": 0.03,
            "copy_s": 0.04,
            "overlapped_s": 0.045,
            "hidden_fraction": 0.83,
            "hidden_ceiling": 0.97,
            "verdict": "Overlapped ran faster than one after the other (40 ms vs 45 ms)",
        },
    }


def test_alpha_prints_its_band_and_a_band_that_reaches_zero_leaves_it_undetermined(tmp_path):
    """Read 48: a fitted alpha of 107 us at 100 Mbit/s, 20-40x below the other links', was printed
    with no band; its times' noise (5% of 5.8 ms and up) hides any latency that small."""
    sizes = [64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB]
    held = [{"bytes": 128 * KiB, "residual": 0.0}]

    def link(alpha_s, beta, rate):
        times = [alpha_s + s / beta for s in sizes]
        return {
            "rate_bit_s": rate,
            "alpha_s": fit_alpha_beta(sizes, times).alpha_s,
            "beta_bytes_per_s": beta,
            "beta_over_rate": 0.9,
            "beta_over_payload_rate": 0.95,
            "held_out": held,
            "sizes": sizes,
            "times_s": times,
            "noise": [0.05] * len(sizes),
        }

    hosts = _hosts_file()
    hosts["allreduce"] = [link(4e-3, 8.3e7, 1e9), link(1e-4, 1.15e7, 1e8)]
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps(hosts))
    exact = [2e-3 + s / 3e8 for s in SIZES]
    job = _fake_allreduce([exact, exact], SIZES)
    rows = l06.hosts_reference(job, None, path).tables()[0].rows
    fast, slow = rows[1], rows[2]
    assert fast[1].startswith("4.00 ms ±") and "not resolved" not in fast[1]
    assert fast[3].startswith("324.2 KiB (") and " to " in fast[3]  # alpha x beta, its range
    assert slow[1].startswith("100.0 µs ±") and slow[1].endswith(
        "not resolved (its band reaches 0: the times' noise hides the latency)"
    )
    assert slow[3] == "- (alpha not resolved)"
    assert rows[0][1] == "2.00 ms"  # this run kept no IQRs: alpha as it was measured
    job.worker_iqrs_s = [[0.0] * len(SIZES)] * 2  # the floor, 5% of each time
    here = l06.hosts_reference(job, None, path).tables()[0].rows[0]
    assert here[1].startswith("2.00 ms ±") and " to " in here[3]


def test_the_committed_two_host_run_stands_beside_this_one(tmp_path):
    exact = [2e-3 + s / 3e8 for s in SIZES]
    job = _fake_allreduce([exact, exact], SIZES)
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps(_hosts_file()))
    result = l06.hosts_reference(job, None, path)
    links, failures, copy = result.tables()
    # read 155: the committed run's machine is named as its own, beside this run's cores
    assert links.title.startswith("all-reduce and training: loopback here (")
    assert (
        f"loopback here ({cores_phrase()}), two network namespaces in the committed run · that "
        in (links.title)
    )
    assert [row[0] for row in links.rows] == [
        "loopback, this run",
        "two hosts, 1000 Mbit/s link",
        "two hosts, 200 Mbit/s link",
    ]
    assert links.rows[0][3] == "585.9 KiB"  # alpha x beta: 2 ms x 300 MB/s
    assert links.rows[2][3:6] == ("46.9 KiB", "1.00 (0.96)", "+11%")  # 2 ms x 24 MB/s
    assert links.columns[4] == "beta / payload rate (/ set rate)"
    assert links.rows[2][6] == (
        "2 workers: fewer samples/s than one worker (3.1x) (the committed run's verdict, from "
        "step times whose spread it did not keep: not checkable here); a step took 5.00 ms, the "
        "model says 4.00 ms (+25%: the committed run kept no spread for its steps, so this gap "
        "is not read as the model holding or missing)"
    )
    assert links.rows[1][6] == "- (slowest link only)"  # trained across the slow link only
    noisy = _hosts_file()  # a run that recorded each size's noise prints it beside the residual
    noisy["allreduce"][1]["held_out"] = [{"bytes": 1 << 20, "residual": 0.24, "noise": 0.34}]
    path.write_text(json.dumps(noisy))
    assert l06.hosts_reference(job, None, path).tables()[0].rows[2][5] == "+24% (±34%)"
    noisy["allreduce"][1]["held_out"][0]["fit_noise"] = 0.061  # and the fit's, after it
    path.write_text(json.dumps(noisy))
    assert l06.hosts_reference(job, None, path).tables()[0].rows[2][5] == "+24% (±34%, ±6%)"
    assert links.rows[0][4:6] == ("- (no set rate)", "-")
    assert links.title.count("x86_64") == 1  # the machine is named once, in the title
    assert failures.rows == [
        ("group, link down", "the job failed as a whole", "none: the others finished")
    ]
    # the error each survivor got, as TensorFlow named it (the killed worker's own line skipped)
    killed = _hosts_file()
    killed["failure"] = {
        "group, worker killed": {
            "verdict": "the job failed as a whole",
            "errors": [
                "worker 1 of 2 (pid 1, port 2) was killed by SIGKILL (exit code -9) before ...",
                "worker 0 of 2 (pid 3, port 4) exited with code 1 before sending its result: "
                "UnavailableError: Collective ops is aborted by: recvmsg:Connection reset by "
                "peer. [Op:CollectiveReduceV2]",
            ],
        },
        "group, link down": {
            "verdict": "the job failed as a whole",
            "errors": ["worker 0 of 2 ...: DeadlineExceededError: tensorflow.python.framework."],
        },
    }
    path.write_text(json.dumps(killed))
    assert [row[2] for row in l06.hosts_reference(job, None, path).tables()[1].rows] == [
        "UnavailableError: Collective ops is aborted by: recvmsg:Connection reset by peer.",
        "DeadlineExceededError",
    ]
    assert copy.rows[3:] == [
        ("hidden by overlap", "83%"),
        (  # read 115: the launch and the ideal it implies, printed so that the ceiling rebuilds
            "hidden by overlap, at most (one launch paid)",
            "97.0% = 1 - launch / min(run, copy), the committed run's launch 900.0 µs; run + copy "
            "- launch = 69.10 ms, which the share is of (the verdict's 'one after the other' is "
            "that run's measured forced order, another time)",
        ),
        ("notebook 02's verdict on that run", _hosts_file()["compute_copy"]["verdict"]),
    ]
    assert copy.verdicts[0].startswith("hypothesis, not measured")
    assert "the committed make hosts run measured the saving" in copy.verdicts[0]
    # A committed run whose saving was inside its noise: its share is not printed as a result.
    inside = _hosts_file()
    inside["compute_copy"]["verdict"] = "No measurable difference between overlapped and ..."
    path.write_text(json.dumps(inside))
    copy = l06.hosts_reference(job, None, path).tables()[2]
    assert copy.rows[3] == ("hidden by overlap", "83% (not a result: see the verdict below)")
    assert "could not measure a saving" in copy.verdicts[0]
    # The committed run's verdict: "Not a result: ...": not a measured saving either.
    inside["compute_copy"]["verdict"] = "Not a result: one after the other came out below ..."
    path.write_text(json.dumps(inside))
    copy = l06.hosts_reference(job, None, path).tables()[2]
    assert copy.rows[3][1].endswith("(not a result: see the verdict below)")
    assert "could not measure a saving" in copy.verdicts[0]
    # A fitted alpha of 0 is the fit's floor, not a zero latency: not resolved, no break-even.
    clamped = _hosts_file()
    clamped["allreduce"][1]["alpha_s"] = 0.0
    path.write_text(json.dumps(clamped))
    slow_row = l06.hosts_reference(job, None, path).tables()[0].rows[2]
    assert slow_row[1].startswith("not resolved") and slow_row[3] == "- (alpha not resolved)"
    missing = l06.hosts_reference(job, None, tmp_path / "none.json")
    assert "no committed two-host results" in str(missing)
    assert hosts.break_even_bytes(2e-3, 1e8) == pytest.approx(2e5)


def test_the_cluster_panels_verdict_is_not_repeated_in_its_tables():
    exact = [2e-3 + s / 3e8 for s in SIZES]
    job = _fake_allreduce([exact, exact], SIZES)
    sweep = l06.TrainingSweepResult([_fake_training(1, 1e-3), _fake_training(2, 3.004e-3)], None, 2)
    both = l06.ClusterResult(job, sweep)
    assert both.verdict == f"{job.verdict}. {sweep.verdict}"
    lines = [v for table in both.tables() for v in table.verdicts]
    assert sweep.verdict in str(sweep) and sweep.verdict not in lines


def test_the_packages_worker_is_named_and_any_other_is_sent():
    from d2lhelpers.processes import mwms

    assert jobs.worker_code(mwms.training_worker) == (
        "d2lhelpers.processes.mwms:training_worker",
        None,
    )
    target, code = jobs.worker_code(_broken_worker)
    assert target.endswith(":_broken_worker") and "def _broken_worker(context)" in code["code"]


def test_the_sweep_table_prints_the_slowest_workers_noise_per_size():
    sizes = [4 * KiB, 4 * MiB]
    job = _fake_allreduce([[1e-3, 4e-3], [2e-3, 3e-3]], sizes)
    assert job.noises == [None, None]  # recorded before workers sent their IQRs: "-"
    assert [row[4] for row in job.tables()[0].rows] == ["-", "-"]
    job.worker_iqrs_s = [[1e-4, 4e-4], [5e-4, 6e-4]]  # slowest: worker 1 at 4 KiB, 0 at 4 MiB
    assert [relative_noise(n) for n in job.noises] == pytest.approx([0.25, 0.1])
    table = job.tables()[0]
    assert table.columns[3:5] == ["all-reduce", "noise"]
    assert [row[4] for row in table.rows] == ["±25%", "±10%"]
    with pytest.raises(ValueError, match="repeats"):
        l06.run_allreduce_job(2, SIZES, repeats=1)


def test_the_committed_runs_fixed_band_is_said_beside_its_readings(tmp_path):
    """Read 55: 'within 15%' was printed as if read from noise; the committed run kept none. The
    band is the one make hosts recorded (read 61: no longer found by looking for '15%')."""
    hosts = _hosts_file()
    hosts["allreduce"][0]["why"] = ["beta is 1.11 of that (within 12%: the serial model holds)"]
    path = tmp_path / "hosts.json"
    job = _fake_allreduce([[2e-3 + s / 3e8 for s in SIZES]] * 2, SIZES)
    for recorded, said in ((0.12, " (±12%, the goal make hosts checks)"), (None, "")):
        hosts.pop("fixed_band", None)
        if recorded:
            hosts["fixed_band"] = recorded
        path.write_text(json.dumps(hosts))
        notes = l06.hosts_reference(job, None, path).tables()[0].verdicts
        first = next(i for i, note in enumerate(notes) if "fixed band" in note)
        assert notes[first] == (
            f"the committed run's readings below hold beta against a fixed band{said}, not "
            "against noise: that run kept none for beta, so they are its readings, not this run's"
        )
        assert notes[first + 1] == "1000 Mbit/s: " + hosts["allreduce"][0]["why"][0]
    del hosts["allreduce"][0]["why"]  # no readings: no note about their band
    path.write_text(json.dumps(hosts))
    notes = l06.hosts_reference(job, None, path).tables()[0].verdicts
    assert not any("fixed band" in note for note in notes)


def test_the_committed_training_model_prints_the_alpha_and_beta_it_used():
    # read 64: the 100 Mbit/s row printed its own alpha and beta (fitted without the held-out
    # sizes) beside a model step that `make hosts` computed from a fit on all the sizes
    from d2lhelpers.lessons.l06_multi_process import hosts

    data = hosts.load_hosts()
    slow = min(data["allreduce"], key=lambda f: f["rate_bit_s"])
    said = hosts._training_words(data["training"], slow)
    alpha, unit, beta = re.search(r"alpha ([\d.]+) (s|ms|µs) and beta ([\d.]+) MB/s", said).groups()
    alpha_s = float(alpha) * {"s": 1, "ms": 1e-3, "µs": 1e-6}[unit]  # its unit follows its size
    one = data["training"]["step_s"][0]
    rebuilt = one + alpha_s + data["training"]["gradient_bytes"] / (float(beta) * 1e6)
    assert rebuilt == pytest.approx(data["training"]["predicted_s"][-1], rel=0.01)
    assert f"fitted on all {len(slow['sizes'])} sizes" in said
    assert "burst" not in said  # no burst given: no hypothesis about it
    # read 107: gradients within twice the limiter's burst: the burst named as a hypothesis
    grads = data["training"]["gradient_bytes"]
    near = hosts._training_words(data["training"], slow, burst_bytes=grads)
    assert near.endswith(
        "are within twice that, so one step's all-reduce may pass faster than beta says (a "
        "hypothesis, not measured))"
    )
    assert "burst" not in hosts._training_words(data["training"], slow, burst_bytes=grads // 3)
    # read 156: a step shorter than the model's all-reduce alone says what that implies
    alone = data["training"]["predicted_s"][-1] - one
    faster = "; the whole step is shorter than the model's all-reduce alone ("
    assert (faster in said) == (data["training"]["step_s"][-1] < alone * 0.95)
    close = {**data["training"], "step_s": [one, alone * 0.96]}  # read 158: inside the floor
    assert faster not in hosts._training_words(close, slow)
    quick = {**data["training"], "step_s": [one, alone * 0.94]}
    assert f"{faster}{format_seconds(alone)}) by more than the 5% floor" in (
        hosts._training_words(quick, slow)
    )
    # read 168: the time a step leaves its all-reduce, as a rate, beside the link's payload rate
    share = data["link"]["payload_share"]
    payload = slow["rate_bit_s"] / 8 * share
    grads = data["training"]["gradient_bytes"]
    fast = {**data["training"], "step_s": [one, one + grads / (payload * 1.2)]}  # 1.2x it
    said = hosts._training_words(fast, slow, payload_share=share)
    assert (
        "; by the model's premise (one worker's step, then the all-reduce) the step leaves " in said
    )
    assert "1.20x the link's payload rate" in said and "a rate no steady stream passes" in said
    steady = {**data["training"], "step_s": [one, one + grads / (payload * 1.04)]}  # in the floor
    assert "premise" not in hosts._training_words(steady, slow, payload_share=share)
    assert "premise" not in hosts._training_words(fast, slow)  # no share given: not read


def test_raw_tcps_rate_is_read_against_tensorflows_beta():
    """Read 96: 'the rest of TensorFlow's gap ... its serial model puts to the test' was printed
    for a link where TensorFlow's beta was 1.01x raw TCP's and no serial model was read."""
    from d2lhelpers.lessons.l06_multi_process.hosts import _against_raw_tcp

    link = {"rate_bit_s": 1e8, "tcp_over_rate": 0.9, "why": ["beta is 0.98 of the payload rate"]}
    # raw TCP: 0.9 x 12.5 MB/s = 11.25 MB/s
    level = _against_raw_tcp({**link, "beta_bytes_per_s": 11.4e6}, 0.15)
    assert level == (
        "raw TCP (one socket stream) reached 11.2 MB/s through the same limiter (0.90 of the set "
        "rate); TensorFlow's fitted beta is 1.01 of it, within the fixed ±15%: no gap past raw "
        "TCP to explain at this rate"
    )
    below = _against_raw_tcp({**link, "beta_bytes_per_s": 8e6}, 0.15)  # 0.71 of raw TCP
    assert "beta is 0.71 of it, below by more than the fixed ±15%: that the rest" in below
    assert "is a hypothesis (not traced" in below
    # where the run's own reading already places raw TCP, only the rate is added
    read = {**link, "beta_bytes_per_s": 8e6, "why": ["0.72 of raw TCP's rate ... a hypothesis"]}
    assert _against_raw_tcp(read, 0.15).endswith("(0.90 of the set rate)")


def test_a_latency_the_fit_clamped_to_zero_is_not_called_below_the_noise():
    """Read 100: 'latency below this link's noise' beside 2.76 ms fitted on a faster link; a
    clamp at 0 says the straight line misfits, not how small the latency is."""
    from d2lhelpers.lessons.l06_multi_process.allreduce import alpha_text

    assert alpha_text(0.0).startswith("not resolved (the fit hit alpha = 0: a line through these")
    assert "whether it is small beside their times or a straight line does not" in alpha_text(0.0)
    assert "below this link's noise" not in alpha_text(0.0)
    assert alpha_text(2e-3, 1e-3) == "2.00 ms ±1.00 ms"
    assert alpha_text(1e-3, 2e-3).endswith("not resolved (its band reaches 0: the times' noise "
                                           "hides the latency)")  # fmt: skip
    assert alpha_text(2e-3) == "2.00 ms"  # a committed run that kept no noise


def test_the_limiters_burst_is_said_with_its_source_beside_gradients_of_its_size():
    # read 135: 'through at the line's own speed' was stated bare
    from d2lhelpers.lessons.l06_multi_process.hosts import _burst_words

    said = _burst_words({"gradient_bytes": 66 * KiB}, 64 * KiB)
    assert said.startswith("; the limiter's token bucket holds a burst of 64.0 KiB, which it ")
    assert "(tc-tbf's documentation; not measured here)" in said
    assert said.endswith("may pass faster than beta says (a hypothesis, not measured)")
    assert _burst_words({"gradient_bytes": 129 * KiB}, 64 * KiB) == ""  # beyond twice the burst
    assert _burst_words({}, 64 * KiB) == _burst_words({"gradient_bytes": KiB}, None) == ""
