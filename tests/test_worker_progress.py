"""One progress protocol: each worker's reports become progress(done, total, status), the status
naming every worker, and changing at least every second while the workers start."""

from d2lhelpers.processes.progress import HEARTBEAT_S, ProgressBoard, units_of


class _Group:
    def __init__(self, states):
        self.states = states


def test_units_of_reads_steps_and_sizes():
    assert units_of({"step": 3, "of": 10, "loss": 1.0}) == (3, 10, "step 3/10")
    assert units_of({"done": 2, "of": 4, "nbytes": 8}) == (2, 4, "size 2/4")


def test_board_names_each_worker_and_sums_units_over_stages():
    calls = []
    now = [0.0]  # a fake clock: the test sets the time
    board = ProgressBoard(lambda *a: calls.append(a), total=2 * 2 + 1 * 10, clock=lambda: now[0])
    board.stage("all-reduce", 2, 2)
    now[0] = 3.2
    board.watch(_Group(["starting", "starting"]))
    assert calls[-1] == (
        0,
        14,
        "worker 0: all-reduce (2 workers) starting (importing TensorFlow, 3 s); "
        "worker 1: all-reduce (2 workers) starting (importing TensorFlow, 3 s)",
    )
    board.watch(_Group(["ready", "starting"]))
    board.heard(0, {"done": 1, "of": 2})
    board.heard(1, {"done": 2, "of": 2})
    assert calls[-1][:2] == (3, 14)
    assert calls[-1][2].startswith("worker 0: all-reduce (2 workers) size 1/2; worker 1:")
    board.stage("training", 1, 10)
    board.heard(0, {"step": 4, "of": 10})
    assert calls[-1] == (3 + 4, 14, "worker 0: training (1 worker) step 4/10")
    board.watch(_Group(["failed"]))
    assert calls[-1][2] == "worker 0: training (1 worker) failed at step 4/10"


def test_an_unchanged_status_is_sent_again_only_after_the_heartbeat():
    calls, now = [], [0.0]
    board = ProgressBoard(lambda *a: calls.append(a), total=4, clock=lambda: now[0])
    board.stage("x", 1, 4)
    board.watch(_Group(["ready"]))
    now[0] = HEARTBEAT_S / 2
    board.watch(_Group(["ready"]))
    assert len(calls) == 2  # the stage's start, then ready: no repeat yet
    now[0] = HEARTBEAT_S * 1.01
    board.watch(_Group(["ready"]))
    assert len(calls) == 3 and calls[-1] == calls[-2]  # the same news again, so it is known alive


def test_no_callback_is_allowed():
    board = ProgressBoard(None, 4)
    board.stage("x", 1, 4)
    board.heard(0, {"step": 1, "of": 4})  # counted, though nobody listens
    assert board.done == {0: 1} and board.status() == "worker 0: x (1 worker) step 1/4"


def test_end_stage_fills_the_stages_share_and_keeps_the_status():
    calls = []
    board = ProgressBoard(lambda *a: calls.append(a), total=20, clock=lambda: 0.0)
    board.stage("demo", 1, 10)
    board.heard(0, {"step": 3, "of": 10})
    board.end_stage()
    assert calls[-1] == (10, 20, "worker 0: demo (1 worker) step 3/10")
    board.stage("next", 1, 10)
    assert calls[-1][0] == 10  # the next stage starts where the last one ended


def test_a_time_window_reports_hundredths_of_it():
    assert units_of({"step": 40, "elapsed_s": 1.5, "window_s": 3.0}) == (
        50,
        100,
        "step 40, 50% of its time",
    )
    assert units_of({"step": 2, "elapsed_s": 0.0, "window_s": 3.0, "warm": True})[0] == 0
    assert units_of({"step": 99, "elapsed_s": 3.2, "window_s": 3.0})[0] == 100
