"""MultiWorkerMirroredStrategy jobs on loopback: right sums, a fit, training in sync, failures.

Each cluster start costs seconds (TensorFlow's import in every worker), so the jobs run once per
module and several tests read each. After every test the process table must hold nothing that a
worker group of this process started.
"""

import json
import math
import os
import signal
import subprocess
import sys

import pytest

from d2lhelpers import cluster
from d2lhelpers.collectives import allreduce_time_s
from d2lhelpers.costs import AlphaBeta
from d2lhelpers.workers import PROJECT_ROOT, WorkerError, free_ports, tf_config
from tests.test_workers import started_by_this_process, wait_until_gone

KiB, MiB = 1024, 1024 * 1024
SIZES = (4 * KiB, 256 * KiB, 4 * MiB)
WIDTH, BATCH, STEPS = 32, 64, 40


@pytest.fixture(autouse=True)
def no_process_left():
    yield
    assert wait_until_gone(started_by_this_process(), timeout=2.0) == []


@pytest.fixture(scope="module")
def allreduce():
    progress = []
    job = cluster.allreduce_job(
        2, SIZES, repeats=5, timeout_s=60, progress=lambda i, info: progress.append((i, info))
    )
    return job, progress


@pytest.fixture(scope="module")
def sweep(allreduce):
    # 1, 2 and 4 workers: the 4-worker run oversubscribes 2 cores, which the lines must say.
    return cluster.training_sweep(
        (1, 2, 4), link=allreduce[0].link, width=WIDTH, batch_per_worker=BATCH, steps=STEPS
    )


# --- real jobs ------------------------------------------------------------------------------------


def test_allreduce_job_sums_exactly_and_times_every_size(allreduce):
    job, progress = allreduce
    assert job.n_workers == 2 and job.sizes == list(SIZES)
    assert job.sums_correct == [True, True]  # checked inside each worker, every element
    assert len(job.worker_medians_s) == 2
    assert all(len(m) == len(SIZES) and min(m) > 0 for m in job.worker_medians_s)
    assert job.times == [max(a, b) for a, b in zip(*job.worker_medians_s, strict=True)]
    assert job.times[-1] > job.times[0]  # 4 MiB takes longer than 4 KiB
    for index in (0, 1):
        assert [info["done"] for i, info in progress if i == index] == [1, 2, 3]
    assert 0 < job.start_s < job.wall_s < 60


def test_allreduce_job_fits_alpha_beta_and_prints_residuals(allreduce):
    job, _ = allreduce
    fit, two = job.fitted, job.two_point
    assert fit.alpha_s >= 0 and fit.beta_bytes_per_s > 0
    assert two.alpha_s == job.times[0]
    assert two.predict(SIZES[-1]) == pytest.approx(job.times[-1])
    residuals = fit.residuals(job.sizes, job.times)
    assert len(residuals) == 3 and all(math.isfinite(r.relative) for r in residuals)
    lines = job.lines()
    assert "sums correct on every worker: yes" in lines
    assert any(line.startswith("least squares: alpha = ") for line in lines)
    rows = [line for line in lines if line.strip().startswith(("4.0 KiB", "256.0 KiB", "4.0 MiB"))]
    assert len(rows) == 3 and all(line.count("%") == 2 for line in rows)


def test_allreduce_job_reports_each_workers_memory(allreduce):
    job, _ = allreduce
    for worker in job.workers:
        assert 200 * MiB < worker["peak_rss_bytes"] < 3 * 1024 * MiB  # TensorFlow is in there
        assert 0 < worker["pss_bytes"] <= worker["peak_rss_bytes"]
    assert any(line.startswith("memory: peak RSS summed over 2 worker(s)") for line in job.lines())


def test_allreduce_plot_is_log_log(allreduce):
    import matplotlib.pyplot as plt

    figure = cluster.plot_allreduce_job(allreduce[0])
    ax = figure.axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert len(ax.lines) == 2 + 2 + 1  # two models, two workers, the all-reduce
    plt.close(figure)


def test_two_workers_train_in_sync_and_the_loss_falls(sweep):
    job = sweep.jobs[1]
    assert job.n_workers == 2
    assert job.weights_identical  # the same summed gradient applied on both: data parallel
    assert len({w["weights_sha256"] for w in sweep.jobs[0].workers + job.workers}) == 2
    for worker in job.workers:
        losses = worker["losses"]
        assert len(losses) == STEPS + 5 and len(worker["step_s"]) == STEPS
        assert losses[-1] < losses[0] / 3
        assert min(worker["step_s"]) > 0
    assert job.gradient_bytes == 4 * (64 * WIDTH + WIDTH + WIDTH + 1)
    assert job.throughput == pytest.approx(2 * BATCH / job.step_s)
    assert "weights identical on every worker: yes" in job.lines()


def test_four_workers_on_two_cores_are_named_oversubscribed(sweep):
    four = sweep.jobs[2]
    assert four.n_workers == 4 and four.weights_identical
    assert four.workers[0]["losses"][-1] < four.workers[0]["losses"][0] / 3
    if cluster.CORES < 4:
        assert any("more workers can be slower" in line for line in four.lines())
        assert any("more workers can be slower" in line for line in sweep.lines())


def test_sweep_predictions_follow_the_cost_model(sweep):
    one, two, four = sweep.jobs
    assert sweep.predicted_s(one) == one.step_s
    link = sweep.link
    for job in (two, four):
        ring = allreduce_time_s(
            "ring", job.n_workers, job.gradient_bytes, link.alpha_s, link.beta_bytes_per_s
        )
        compute = one.step_s * max(1, job.n_workers / cluster.CORES)
        assert sweep.predicted_s(job) == pytest.approx(compute + ring)
    table = [line for line in sweep.lines() if line[:7].strip() in ("1", "2", "4")]
    assert len(table) == 3 and all(line.endswith("yes") for line in table)


def test_group_failure_names_the_dead_worker_and_fails_the_whole_job():
    demo = cluster.failure_demo("group", n_workers=2, collective_timeout_s=5)
    assert demo.killed == 1 and demo.killed_at_step > 0 and demo.survivors == []
    assert len(demo.errors) == 2
    assert demo.errors[0].startswith("worker 1 of 2") and "killed by SIGKILL" in demo.errors[0]
    assert demo.errors[1].startswith("worker 0 of 2")  # its peer fails too, never hangs
    assert demo.error_after_s[0] < 3 and demo.error_after_s[1] < 5 + 3
    assert any("failed as a whole: lost 100%" in line for line in demo.lines())
    assert demo.lost_share == 1.0 and "(model: 100%)" in "\n".join(demo.lines())
    assert demo.wall_s < 30


def test_replica_failure_loses_only_that_replica():
    demo = cluster.failure_demo("replicas", n_workers=2, steps=200)
    assert demo.errors[0].startswith("worker 0 of 1") and "killed by SIGKILL" in demo.errors[0]
    assert demo.error_after_s[0] < 3
    (survivor,) = demo.survivors
    assert len(survivor.workers[0]["losses"]) == 200  # it finished every step
    assert survivor.throughput > 0
    assert any("lost 50% of the workers' capacity" in line for line in demo.lines())
    assert demo.lost_share == 0.5 and "(model: 50%)" in "\n".join(demo.lines())
    assert demo.wall_s < 30


def test_the_printed_real_cluster_command_runs_the_same_worker_code():
    # The command printed for real hosts, run here against a one-host loopback "cluster".
    (port,) = free_ports(1)
    plan = cluster.real_cluster_tf_config(
        [f"127.0.0.1:{port}"], args={"sizes": [4 * KiB, 8 * KiB], "repeats": 2}
    )
    venv = os.path.dirname(sys.executable)
    finished = subprocess.run(
        ["bash", "-c", plan.commands[0]],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=PROJECT_ROOT,
        env={**os.environ, "PATH": f"{venv}:{os.environ['PATH']}"},
        start_new_session=True,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    messages = [json.loads(line) for line in finished.stdout.splitlines() if line.startswith("{")]
    assert messages[0] == {"ready": {"replicas": 1}}
    assert messages[-1]["result"]["sums_correct"] is True


def test_stop_button_mid_job_ends_every_worker_at_once():
    # KeyboardInterrupt is what the notebook's Stop button raises; here it comes from the
    # progress callback, while both workers are inside the sweep.
    def stop(index, info):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cluster.allreduce_job(2, SIZES, repeats=50, timeout_s=60, progress=stop)
    # no_process_left checks the process table


# --- no processes ---------------------------------------------------------------------------------


def test_real_cluster_tf_config_is_the_loopback_config_with_other_hosts():
    ports = [5001, 5002]
    loopback = cluster.real_cluster_tf_config([f"127.0.0.1:{p}" for p in ports])
    assert loopback.configs == [tf_config(ports, i) for i in range(2)]
    plan = cluster.real_cluster_tf_config(["gpu-node-1:12345", "gpu-node-2:12345"])
    assert plan.configs[1] == {
        "cluster": {"worker": ["gpu-node-1:12345", "gpu-node-2:12345"]},
        "task": {"type": "worker", "index": 1},
    }
    lines = plan.lines()
    assert lines[0] == "# on gpu-node-1:" and lines[2] == "# on gpu-node-2:"
    assert lines[1].startswith('TF_CONFIG=\'{"cluster": {"worker": ["gpu-node-1:12345"')
    assert 'python -m d2lhelpers.cluster allreduce_worker \'{"sizes"' in lines[1]
    assert "Kubernetes" in lines[-1]
    with pytest.raises(ValueError, match="target"):
        cluster.real_cluster_tf_config(["a:1"], target="rm -rf")


def _fake_job(times_per_worker, sizes) -> cluster.AllReduceJob:
    memory = {"peak_rss_bytes": 700 * MiB, "pss_bytes": 400 * MiB}
    workers = [{"medians_s": t, "sums_correct": True, **memory} for t in times_per_worker]
    return cluster.AllReduceJob(
        len(workers), list(sizes), times_per_worker, [True] * len(workers), workers, 4.0, 9.0
    )


def test_fit_on_exact_data_recovers_alpha_beta_and_the_link_values():
    alpha, beta, n = 2e-3, 3e8, 4
    sizes = [4 * KiB, 256 * KiB, 4 * MiB, 16 * MiB]
    exact = [alpha + s / beta for s in sizes]
    job = _fake_job([exact, [t * 0.9 for t in exact], exact, exact], sizes)
    assert job.times == exact  # the slowest worker decides
    assert job.fitted.alpha_s == pytest.approx(alpha) and job.two_point.alpha_s == exact[0]
    assert job.fitted.beta_bytes_per_s == pytest.approx(beta)
    link = job.link  # per link, the ring's closed form gives back the whole all-reduce's time
    for size in sizes:
        ring = allreduce_time_s("ring", n, size, link.alpha_s, link.beta_bytes_per_s)
        assert ring == pytest.approx(job.fitted.predict(size))
    assert "sums correct on every worker: yes" in job.lines()
    with pytest.raises(ValueError, match="nobody"):
        _ = _fake_job([exact], sizes).link


def test_two_point_model_of_flat_times_is_all_latency():
    job = _fake_job([[1e-3, 1e-3], [1e-3, 0.9e-3]], [4 * KiB, 8 * KiB])
    assert job.two_point == AlphaBeta(1e-3, math.inf)


def _fake_training(n_workers, step_s) -> cluster.TrainingJob:
    worker = {
        "step_s": [step_s] * 3,
        "losses": [4.0, 1.0],
        "weights_sha256": "same",
        "gradient_bytes": 4000,
        "peak_rss_bytes": 700 * MiB,
        "pss_bytes": 400 * MiB,
    }
    return cluster.TrainingJob(n_workers, 8, 100, [worker] * n_workers, 3.0, 4.0)


def test_sweep_lines_explain_each_slowdown(monkeypatch):
    monkeypatch.setattr(cluster, "CORES", 2)
    jobs = [_fake_training(1, 1e-3), _fake_training(2, 3.004e-3), _fake_training(4, 6e-3)]
    sweep = cluster.TrainingSweep(jobs, AlphaBeta(1e-3, 1e9))
    lines = sweep.lines()
    assert lines[2].split()[:4] == ["1", "1.00", "ms", "1.00"]  # no prediction error at K = 1
    assert lines[2].endswith("4.00->1.00       yes")
    # t(1) + 2 alpha + 2 * (4000 / 2) / beta = 1 ms + 2 ms + 4 µs, as measured: residual 0
    assert lines[3].split()[1:5] == ["3.00", "ms", "3.00", "ms"]
    assert lines[3].split()[5] in ("+0%", "-0%")
    assert "2 workers: fewer samples/s than 1" in lines[5]  # communication, not cores
    assert lines[6].startswith("4 workers on 2 cores") and len(lines) == 7
    # Faster with more workers, within the cores: nothing to explain.
    assert len(cluster.TrainingSweep(jobs[:1] + [_fake_training(2, 0.8e-3)], None).lines()) == 4


def test_predict_step_s_adds_the_ring_and_shares_the_cores():
    link = AlphaBeta(1e-3, 1e9)
    assert cluster.predict_step_s(1, 2e-3, 1000, link, cores=2) == 2e-3
    two = 2e-3 + 2 * 1e-3 + 2 * 500 / 1e9  # 2(K-1) alpha + 2(K-1) ceil(G/K) / beta
    assert cluster.predict_step_s(2, 2e-3, 1000, link, cores=2) == pytest.approx(two)
    four = 2e-3 * 4 / 2 + 6 * 1e-3 + 6 * 250 / 1e9  # 4 workers take turns on 2 cores
    assert cluster.predict_step_s(4, 2e-3, 1000, link, cores=2) == pytest.approx(four)


def test_error_line_keeps_the_exception_and_tfs_reason():
    error = WorkerError(
        "worker 0 of 2 (pid 7, port 9) exited with code 1 before sending its result\n"
        "Its error:\n    Traceback (most recent call last):\n"
        "    tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:\n"
        "    Collective ops is aborted by: Socket closed\n"
        "Last lines of its stderr:\n    I0000 something"
    )
    assert cluster._error_line(error) == (
        "worker 0 of 2 (pid 7, port 9) exited with code 1 before sending its result: "
        "UnavailableError: Collective ops is aborted by: Socket closed"
    )
    killed = WorkerError(f"worker 1 of 2 was killed by {signal.SIGKILL.name}\nLast lines: x")
    assert cluster._error_line(killed) == "worker 1 of 2 was killed by SIGKILL"


def test_bad_arguments_are_refused_before_any_process_starts():
    with pytest.raises(ValueError, match="multiples of 4"):
        cluster.allreduce_job(2, sizes=[4096, 4097])
    with pytest.raises(ValueError, match="two or more"):
        cluster.allreduce_job(2, sizes=[4096, 4096])
    with pytest.raises(ValueError, match="layout"):
        cluster.failure_demo("ring")
