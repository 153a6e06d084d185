"""Compute + copy over a real link: values, placement, timings' arithmetic, traces, clean-up.

Everything that connects to a worker runs in ONE fresh Python (a module-scoped fixture): connecting
changes this process's TensorFlow context for good, and each worker start costs ~3 s. That run
reports in JSON, and the tests below assert on the report.
"""

import json
import os
import statistics

import pytest

import d2lhelpers as d2l
from d2lhelpers import compute_copy
from d2lhelpers.benchmark import Measurement
from d2lhelpers.timeline import OpEvent
from d2lhelpers.workers import free_ports
from tests.conftest import run_python

WORKER = "/job:worker/replica:0/task:0/device:CPU:0"
HERE = "/device:CPU:0"

REMOTE_RUN = r"""
import json, os, time
import numpy as np
import d2lhelpers as d2l
import tensorflow as tf
from d2lhelpers import compute_copy as cc, worker_main
from d2lhelpers.timeline import busy_intervals, overlap_seconds
from d2lhelpers.workers import remote_tf_workers

d2l.setup_devices()
report = {}


def workers_alive():
    # Live processes a WorkerGroup of this process started (they carry its pid in their env).
    marker = f"{worker_main.PARENT_VAR}={os.getpid()}".encode()
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if marker in environ.read().split(b"\0"):
                    with open(f"/proc/{entry}/stat") as stat:
                        if stat.read().split(")")[-1].split()[0] != "Z":
                            found.append(int(entry))
        except OSError:
            pass
    return found


def summary(result):
    m = lambda x: None if x is None else {"median": x.median, "times": x.times, "rate": x.rate}
    return {
        "run": m(result.run), "copy": m(result.copy), "sequential": m(result.sequential),
        "overlapped": m(result.overlapped), "nbytes": result.nbytes,
        "ideal_sequential": result.ideal_sequential, "ideal_overlapped": result.ideal_overlapped,
        "hidden": result.hidden_fraction, "copy_rate": result.copy_rate,
        "link_peak": result.link_peak, "source": result.trace_source,
        "traced_overlap": result.traced_overlap, "lines": result.lines(),
        "rows": [[r.device, r.op, r.kind, r.start_s, r.end_s] for r in result.rows],
        "overhead": None if result.overhead is None else result.overhead.ratio,
        "launch": m(result.launch),
        "hidden_forced": result.hidden_forced,
        "ideal_one_function": result.ideal_sequential_one_function,
    }


steps = []
began = time.perf_counter()
result = cc.compute_copy_experiment(
    256, 6, overlap=True, progress=lambda d, t: steps.append([d, t]), min_runs=3, budget_s=0.2
)
report["overlap"] = summary(result)
report["overlap"]["seconds"] = time.perf_counter() - began
report["steps"] = steps
report["alive_after_first"] = workers_alive()
result = cc.compute_copy_experiment(256, 6, overlap=False, trace_overhead=False, min_runs=3,
                                    budget_s=0.2)
report["no_overlap"] = summary(result)
report["alive_after_second"] = workers_alive()

size, n = 384, 8
with remote_tf_workers(1, inter_op_threads=cc.WORKER_INTER_OP_THREADS) as remote:
    x = d2l.random_matrix(size, remote.device)
    x_here = x.numpy().astype(np.float64)
    expected, y = [], x_here
    for _ in range(n):
        y = y @ x_here
        expected.append(y)
    results = cc.chain_on(remote.device, n)(x)
    report["run_devices"] = sorted({t.device for t in results})
    copies = cc.copy_to(cc.HOST)(results)
    report["copy_devices"] = sorted({t.device for t in copies})
    report["copy_close"] = all(
        np.allclose(c.numpy(), e, rtol=1e-4, atol=1e-5) for c, e in zip(copies, expected))
    for overlap in (True, False):
        fn = cc.run_and_copy(remote.device, cc.HOST, n, overlap=overlap)
        out = fn(x)
        key = "overlapped" if overlap else "sequential"
        report[key] = {
            "devices": sorted({t.device for t in out}),
            "close": all(
                np.allclose(o.numpy(), e, rtol=1e-4, atol=1e-5) for o, e in zip(out, expected)),
            "count": len(out),
        }
        traces = []
        for _ in range(3 if overlap else 1):  # copies may fill the gaps between matmuls only
            rows, source = cc.trace_with_worker(
                fn, x, worker_address=remote.addresses[0], worker_device=remote.device,
                expected_matmuls=n, expected_s=0.05)
            matmuls = busy_intervals(rows, remote.device, "matmul")
            copying = busy_intervals(rows, cc.HOST, "copy")
            last_matmul_end = max(end for _, end in matmuls) if matmuls else None
            copy_starts = [r.start_s for r in rows if r.kind == "copy"]
            traces.append(dict(
                source=source,
                traced_overlap=cc.traced_overlap(rows, remote.device),
                overlap_s=overlap_seconds(matmuls, copying),
                last_matmul_end=last_matmul_end,
                first_copy_start=min(copy_starts) if copy_starts else None,
                copies_before_last_matmul_end=sum(t < last_matmul_end for t in copy_starts),
                n_matmul_rows=sum(r.kind == "matmul" for r in rows),
                n_copy_rows=len(copy_starts),
            ))
        report[key]["traces"] = traces
    worker_pid = remote.group.pids[0]
report["alive_at_end"] = workers_alive()
report["worker_pid"] = worker_pid
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def remote_report():
    finished = run_python(REMOTE_RUN, timeout=240)
    assert finished.returncode == 0, finished.stderr[-4000:]
    return json.loads(finished.stdout.strip().splitlines()[-1])


# --- values and placement -------------------------------------------------------------------------


def test_copies_land_here_and_results_stay_on_the_worker(remote_report):
    local = "/job:localhost/replica:0/task:0/device:CPU:0"
    assert remote_report["run_devices"] == [WORKER]
    assert remote_report["copy_devices"] == [local]
    assert remote_report["copy_close"]
    for key in ("overlapped", "sequential"):
        assert remote_report[key]["devices"] == [local]
        assert remote_report[key]["count"] == 8


def test_overlapped_and_sequential_values_equal_the_local_computation(remote_report):
    assert remote_report["overlapped"]["close"]
    assert remote_report["sequential"]["close"]


# --- the merged trace -----------------------------------------------------------------------------


def test_trace_has_the_workers_matmuls_and_the_copies_on_one_clock(remote_report):
    for key in ("overlapped", "sequential"):
        for traced in remote_report[key]["traces"]:
            assert traced["source"] == "worker and notebook"
            assert traced["n_matmul_rows"] == 8
            assert traced["n_copy_rows"] == 8


def test_overlapped_copies_run_while_the_worker_multiplies(remote_report):
    traces = remote_report["overlapped"]["traces"]
    # The copies go while the chain runs (y_1's during y_2's matmul...), not after its end. Not
    # every time on a busy 2-core machine: when this process posts its receives late (probed:
    # 1 trace in 12), every copy comes after the chain, and a short copy can slip into the gap
    # between two matmuls. Of three traces, at least one shows it.
    interleaved = [
        traced
        for traced in traces
        if traced["copies_before_last_matmul_end"] >= 6 and traced["overlap_s"] > 0
    ]
    assert interleaved, traces
    assert max(traced["traced_overlap"] for traced in interleaved) > 0.1


def test_forced_sequential_copies_wait_for_the_last_matmul(remote_report):
    (traced,) = remote_report["sequential"]["traces"]
    slack = 50e-6  # two processes' trace clocks, read separately
    assert traced["first_copy_start"] >= traced["last_matmul_end"] - slack
    assert traced["copies_before_last_matmul_end"] == 0
    assert traced["overlap_s"] <= slack


# --- the experiment -------------------------------------------------------------------------------


def test_experiment_times_ideals_and_rates_are_positive_and_consistent(remote_report):
    result = remote_report["overlap"]
    run, copy = result["run"]["median"], result["copy"]["median"]
    both = result["overlapped"]["median"]
    assert min(run, copy, both, result["sequential"]["median"]) > 0
    assert result["nbytes"] == 6 * 256 * 256 * 4
    assert result["ideal_sequential"] == pytest.approx(run + copy)
    assert result["ideal_overlapped"] == pytest.approx(max(run, copy))
    launch = result["launch"]["median"]
    assert 0 < launch < min(run, copy) * 2  # 1x1 matrices: no work, only the call
    assert result["ideal_one_function"] == pytest.approx(run + copy - launch)
    assert result["hidden"] == pytest.approx((run + copy - launch - both) / min(run, copy))
    assert result["copy_rate"] == pytest.approx(result["nbytes"] / copy)
    assert result["copy"]["rate"] == pytest.approx(result["copy_rate"])
    assert result["run"]["rate"] == pytest.approx(2 * 256**3 * 6 / run)
    assert 0 < result["copy_rate"] and 0 < result["link_peak"]
    for key in ("run", "copy", "sequential", "overlapped", "launch"):
        assert len(result[key]["times"]) >= 3 * 3  # three rounds of at least three runs
        assert result[key]["median"] == statistics.median(result[key]["times"])
    assert result["overhead"] > 0
    assert result["source"] == "worker and notebook"
    assert {r[0] for r in result["rows"]} == {WORKER, HERE}
    text = "\n".join(result["lines"])
    assert "GB/s" in text and "ideal max(run, copy)" in text and "ideal run + copy" in text
    assert "loopback TCP" in text and "25 GB/s" in text and "tracing overhead" in text
    assert "ideal run + copy - launch" in text


def test_experiment_reports_progress_to_the_end(remote_report):
    steps = remote_report["steps"]
    assert [d for d, _ in steps] == list(range(1, 8))  # peak, worker, 3 rounds, trace, overhead
    assert all(total == 7 for _, total in steps)


def test_experiment_without_overlap_runs_only_one_after_the_other(remote_report):
    result = remote_report["no_overlap"]
    assert result["overlapped"] is None
    assert result["overhead"] is None
    run, copy = result["run"]["median"], result["copy"]["median"]
    launch, sequential = result["launch"]["median"], result["sequential"]["median"]
    assert result["hidden"] == pytest.approx((run + copy - launch - sequential) / min(run, copy))
    assert result["hidden_forced"] == pytest.approx(
        (run + copy - launch - sequential) / min(run, copy)
    )
    text = "\n".join(result["lines"])
    assert "overlapped (one function)" not in text and "one after the other" in text
    assert result["traced_overlap"] < 0.05  # the traced run is the forced-sequential one


def test_no_worker_is_left_after_any_run(remote_report):
    assert remote_report["alive_after_first"] == []
    assert remote_report["alive_after_second"] == []
    assert remote_report["alive_at_end"] == []
    assert not os.path.exists(f"/proc/{remote_report['worker_pid']}/status") or (
        "zombie" in open(f"/proc/{remote_report['worker_pid']}/status").read()
    )


# --- refused before anything starts ---------------------------------------------------------------


@pytest.mark.parametrize(
    "size, n_matmuls", [(0, 10), (-5, 10), (512, 0), (2.5, 10), (True, 10), (512, "10")]
)
def test_bad_input_is_refused_before_a_worker_starts(monkeypatch, size, n_matmuls):
    def must_not_start(*args, **kwargs):
        raise AssertionError("started work for input that should have been refused")

    monkeypatch.setattr(compute_copy, "remote_tf_workers", must_not_start)
    monkeypatch.setattr(compute_copy, "loopback_tcp_bandwidth", must_not_start)
    with pytest.raises(ValueError, match="whole number"):
        compute_copy.compute_copy_experiment(size, n_matmuls)


def test_too_large_is_refused_before_a_worker_starts(monkeypatch):
    def must_not_start(*args, **kwargs):
        raise AssertionError("started work for a size that cannot fit")

    monkeypatch.setattr(compute_copy, "remote_tf_workers", must_not_start)
    monkeypatch.setattr(compute_copy, "loopback_tcp_bandwidth", must_not_start)
    with pytest.raises(ValueError, match="choose a smaller size"):
        compute_copy.compute_copy_experiment(200_000, 10)  # 1.6 TB of results
    assert compute_copy.check_compute_copy_fits(64, 3) == 3 * 64 * 64 * 4


# --- pieces that need no worker -------------------------------------------------------------------


def test_a_copy_between_logical_cpu_devices_moves_no_bytes():
    result = compute_copy.local_copy_cost((1 << 20, 64 << 20), min_runs=5, budget_s=0.3)
    assert result.size_ratio == 64
    small, large = (m.median for m in result.copies)
    # Moving 64 MiB through memory takes milliseconds (the NumPy copy); the "copy" takes what
    # a function call takes, whatever the size.
    assert large < 2e-3
    assert large < result.memcpy.median / 5
    assert result.time_ratio < 4
    assert small > 0
    assert result.moved_no_bytes and "no bytes moved" in "\n".join(result.lines())


def test_local_copy_verdict_follows_the_measurement():
    def timed(seconds):
        return measurement("copy", seconds)

    sizes, memcpy = [1 << 20, 64 << 20], measurement("memcpy", 5e-3, 64 << 20)
    free = compute_copy.LocalCopyResult(
        "/device:GPU:0", "/device:GPU:1", sizes, [timed(1e-4), timed(1.2e-4)], memcpy
    )
    real = compute_copy.LocalCopyResult(
        "/device:GPU:0", "/device:GPU:1", sizes, [timed(1e-4), timed(3e-3)], memcpy
    )
    assert free.moved_no_bytes and not real.moved_no_bytes
    assert "really moves" in "\n".join(real.lines())


def test_trace_falls_back_to_this_process_when_the_worker_cannot_be_traced(devices):
    fn = compute_copy.run_and_copy(devices[0].name, devices[1].name, 3, overlap=True)
    x = d2l.random_matrix(64, devices[0])
    rows, source = compute_copy.trace_with_worker(
        fn,
        x,
        worker_address=f"127.0.0.1:{free_ports(1)[0]}",  # nobody listens there
        worker_device=WORKER,
        expected_matmuls=3,
        expected_s=0.01,
    )
    assert source == "notebook only"
    assert sum(r.kind == "matmul" for r in rows) == 3
    assert sum(r.kind == "copy" and r.device == "/device:CPU:1" for r in rows) == 3
    assert not any(r.op.startswith("SyncDevice") for r in rows)


def test_loopback_tcp_bandwidth_is_measured_and_bounded():
    rate = compute_copy.loopback_tcp_bandwidth(16 << 20, 1 << 20, repeats=1)
    assert 1e7 < rate < 1e12  # between 10 MB/s and 1 TB/s: a real, finite measurement
    with pytest.raises(ValueError):
        compute_copy.loopback_tcp_bandwidth(1 << 20, 4 << 20)


def test_measure_interleaved_takes_turns_and_pools_every_rounds_times():
    now, calls = [0.0], []

    def work(name, seconds):
        def run():
            calls.append(name)
            now[0] += seconds

        return run

    runs = [(work("a", 0.02), "a", {}), (work("b", 0.03), "b", {"nbytes": 3e6})]
    fake = {"warmup": 0, "number": 1, "clock": lambda: now[0], "sync": lambda: None}
    rounds_seen = []
    a, b = compute_copy.measure_interleaved(
        runs, 3, on_round=lambda: rounds_seen.append(len(calls)), min_runs=2, max_runs=2, **fake
    )
    assert calls == ["a", "a", "b", "b"] * 3  # in turns, round after round
    assert rounds_seen == [4, 8, 12]
    assert a.times == pytest.approx([0.02] * 6) and b.times == pytest.approx([0.03] * 6)
    assert b.rate == pytest.approx(1e8) and a.rate is None
    assert a.warnings == [] and b.warnings == []
    with pytest.raises(ValueError, match="rounds"):
        compute_copy.measure_interleaved(runs, 0)


def test_pooled_times_that_disagree_are_flagged_noisy():
    now, cost = [0.0], [0.01]

    def run():
        now[0] += cost[0]

    def slower_each_round():
        cost[0] *= 3

    fake = {"warmup": 0, "number": 1, "clock": lambda: now[0], "sync": lambda: None}
    (m,) = compute_copy.measure_interleaved(
        [(run, "drifting", {})], 3, on_round=slower_each_round, min_runs=2, max_runs=2, **fake
    )
    assert len(m.times) == 6 and any("noisy" in w for w in m.warnings)


def row(device, kind, start, end):
    return OpEvent(device, f"{kind}@{start}", kind, start, end)


def test_traced_overlap_is_the_shared_time_over_the_shorter_part():
    rows = [
        row(WORKER, "matmul", 0.0, 1.0),
        row(WORKER, "matmul", 1.0, 2.0),
        row(HERE, "copy", 1.5, 2.5),  # half of it during the second matmul
        row(HERE, "other", 0.0, 3.0),  # not a copy: ignored
    ]
    assert compute_copy.traced_overlap(rows, WORKER) == pytest.approx(0.5)
    after = [row(WORKER, "matmul", 0.0, 1.0), row(HERE, "copy", 1.0, 2.0)]
    assert compute_copy.traced_overlap(after, WORKER) == 0.0
    assert compute_copy.traced_overlap([row(WORKER, "matmul", 0.0, 1.0)], WORKER) == 0.0


def measurement(label, seconds, nbytes=None):
    return Measurement(label, [seconds] * 3, nbytes, "B/s" if nbytes else "FLOP/s")


def fake_result(run, copy, sequential, overlapped, source="worker and notebook", launch=None):
    rows = [row(WORKER, "matmul", 0.0, run), row(HERE, "copy", run / 2, run / 2 + copy)]
    return compute_copy.ComputeCopyResult(
        size=512,
        n_matmuls=10,
        overlap=overlapped is not None,
        nbytes=10 * 512 * 512 * 4,
        run=measurement("run", run),
        copy=measurement("copy", copy, 10 * 512 * 512 * 4),
        sequential=measurement("sequential", sequential),
        overlapped=None if overlapped is None else measurement("overlapped", overlapped),
        link_peak=4e9,
        rows=rows,
        trace_source=source,
        worker_device=WORKER,
        launch=None if launch is None else measurement("launch", launch),
    )


def test_result_arithmetic_and_lines_with_known_times():
    result = fake_result(run=0.030, copy=0.010, sequential=0.041, overlapped=0.033)
    assert result.ideal_sequential == pytest.approx(0.040)
    assert result.ideal_overlapped == pytest.approx(0.030)
    assert result.hidden_fraction == pytest.approx((0.040 - 0.033) / 0.010)
    assert result.hidden_vs_forced == pytest.approx((0.041 - 0.033) / 0.010)
    assert result.copy_rate == pytest.approx(10 * 512 * 512 * 4 / 0.010)
    text = "\n".join(result.lines())
    assert "1.05 GB/s" in text and "4.00 GB/s" in text and "1.5 GB/s" in text
    assert (
        "hidden by overlap: 70% of min(run, copy) (ideal 100%" in text
        and "same one function: 80%" in text
    )
    assert "WARNING" not in text


def test_one_function_one_after_the_other_is_compared_with_one_launch_paid():
    result = fake_result(run=0.030, copy=0.010, sequential=0.037, overlapped=0.031, launch=0.003)
    assert result.ideal_sequential == pytest.approx(0.040)  # the brief's ideal, for hidden
    assert result.ideal_sequential_one_function == pytest.approx(0.037)
    line = next(line for line in result.lines() if line.startswith("one after the other"))
    assert "ideal run + copy - launch: 37.00 ms" in line and "1.00x ideal" in line
    assert "WARNING" not in line
    assert any("launch: each call costs 3.00 ms" in line for line in result.lines())


def test_seed_numbers_show_no_overlap_and_a_slow_copy():
    text = "\n".join(compute_copy.seed_lines())
    assert "2.2031 s" in text and "1.17x run + copy" in text
    assert "3.2 GB in 2.1474 s = 1.49 GB/s" in text and "6% of it" in text


def test_an_overlapped_time_under_its_ideal_is_flagged_not_celebrated():
    result = fake_result(run=0.030, copy=0.010, sequential=0.041, overlapped=0.020)
    flagged = [line for line in result.lines() if "overlapped (one function)" in line]
    assert len(flagged) == 1 and "WARNING: faster than the ideal" in flagged[0]


def test_a_fallback_trace_says_so():
    result = fake_result(0.030, 0.010, 0.041, 0.033, source="notebook only")
    assert any("could not be taken" in line for line in result.lines())
    sequential_only = fake_result(0.030, 0.010, 0.038, None, launch=0.002)
    assert sequential_only.hidden_vs_forced is None
    assert sequential_only.hidden_forced == pytest.approx(0.0)
    text = "\n".join(sequential_only.lines())
    assert "overlapped (one function)" not in text
    assert "hidden by the forced order: 0% of min(run, copy) (ideal 0%" in text


def test_c_level_output_is_dropped_inside_and_kept_after(capfd):
    with compute_copy._c_stdout_silenced():
        os.write(1, b"from C inside\n")
    os.write(1, b"after\n")
    assert capfd.readouterr().out == "after\n"
