"""Worker life cycle: ready, results, failures named, and no process left behind, ever.

Life-cycle tests use plain-Python workers (no TensorFlow import: ~0.1 s to start); only the
tests about TensorFlow start TensorFlow workers (a few seconds each). After every test the
process table is searched for anything a worker group of this test process started.
"""

import gc
import json
import os
import signal
import socket
import threading
import time

import pytest

from d2lhelpers.processes import worker_main
from d2lhelpers.processes.group import (
    WORKER_MAIN_PATH,
    PortInUseError,
    WorkerError,
    WorkerGroup,
    WorkerTimeout,
    free_ports,
    tf_config,
)
from tests.conftest import is_running, run_python, started_by_this_process, wait_until_gone

TARGETS = """
import json, os, signal, socket, subprocess, sys, time

def echo(context):
    listener = socket.socket()
    listener.bind(("127.0.0.1", context.port))
    listener.listen()
    context.ready(port=context.port)
    print("a stray print: it must land in stderr, not in the protocol")
    context.progress(step=1)
    return {
        "index": context.index,
        "ports": context.ports,
        "args": context.args,
        "tf_config": json.loads(os.environ["TF_CONFIG"]),
        "threads": [os.environ["TF_NUM_INTRAOP_THREADS"], os.environ["TF_NUM_INTEROP_THREADS"]],
    }

def serve(context):
    # A child in the worker's process group stands for whatever a real worker might start.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
    print(f"worker {context.index} started", file=sys.stderr, flush=True)
    context.ready(child=child.pid)
    context.wait_until_ended()

def never_ready(context):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only the SIGKILL after the grace ends it
    print(f"worker {context.index} is thinking", file=sys.stderr, flush=True)
    time.sleep(1000)

def fail(context):
    context.ready()
    raise ValueError(f"worker {context.index} cannot go on")

def count(context):
    context.ready()
    for step in range(1, context.args["steps"] + 1):
        time.sleep(0.02)
        context.progress(step=step, of=context.args["steps"])
    return step

def bind_port(context):
    listener = socket.socket()
    listener.bind(("127.0.0.1", context.port))
    return context.port

def all_reduce_sum(context):
    import tensorflow as tf
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING,
        timeout_seconds=context.args["timeout_s"],
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    context.ready(replicas=strategy.num_replicas_in_sync)

    @tf.function
    def step():
        replica = tf.distribute.get_replica_context()
        return replica.all_reduce(tf.distribute.ReduceOp.SUM, tf.fill([4], context.index + 1.0))

    context.progress(total=strategy.run(step).numpy().tolist())
    while True:  # all-reduce again and again, until the test kills a worker
        strategy.run(step).numpy()
"""


@pytest.fixture
def target(tmp_path):
    path = tmp_path / "targets.py"
    path.write_text(TARGETS)
    return lambda name: f"{path}:{name}"


@pytest.fixture(autouse=True)
def no_process_left():
    assert started_by_this_process() == [], "an earlier test left workers running"
    yield
    # SIGKILLed processes leave the table a moment after the signal, not at once.
    assert wait_until_gone(started_by_this_process(), timeout=2.0) == []


def test_free_ports_are_distinct_and_bindable():
    ports = free_ports(4)
    assert len(set(ports)) == 4
    for port in ports:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))


def test_tf_config_names_every_worker_and_this_task():
    assert tf_config([5001, 5002], 1) == {
        "cluster": {"worker": ["127.0.0.1:5001", "127.0.0.1:5002"]},
        "task": {"type": "worker", "index": 1},
    }


def test_workers_signal_ready_and_return_results(target):
    progress = []
    with WorkerGroup(
        target("echo"), 2, args={"size": 7}, tf_config_job="worker", ready_timeout=10
    ) as group:
        assert group.ready_info == [{"port": port} for port in group.ports]
        pids = group.pids
        results = group.results(timeout=10, on_progress=lambda i, info: progress.append(i))
    assert sorted(progress) == [0, 1]
    for index, result in enumerate(results):
        assert result["index"] == index
        assert result["ports"] == group.ports
        assert result["args"] == {"size": 7}
        assert result["tf_config"] == tf_config(group.ports, index)
        assert result["threads"] == ["1", "1"]
    assert wait_until_gone(pids) == []


def test_exception_in_the_with_block_ends_every_worker_and_its_children(target):
    with pytest.raises(RuntimeError, match="the notebook's code failed"):
        with WorkerGroup(target("serve"), 2, ready_timeout=10) as group:
            pids = group.pids + [info["child"] for info in group.ready_info]
            assert all(map(is_running, pids))
            raise RuntimeError("the notebook's code failed")
    assert wait_until_gone(pids) == []


def test_keyboard_interrupt_in_the_with_block_ends_every_worker(target):
    with pytest.raises(KeyboardInterrupt):
        with WorkerGroup(target("serve"), 2, ready_timeout=10) as group:
            pids = group.pids + [info["child"] for info in group.ready_info]
            raise KeyboardInterrupt  # what the notebook's Stop button raises
    assert wait_until_gone(pids) == []


def test_stop_button_while_waiting_for_ready_ends_every_worker(target):
    # A real SIGINT, as Jupyter's interrupt sends: it lands inside __enter__, where `with`
    # would not call __exit__, so start() itself must clean up.
    # Python's own handler, whatever an earlier test in this process left installed: the test
    # reads start()'s clean-up, not the handler of the moment.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    stop = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    began = time.monotonic()
    stop.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            WorkerGroup(target("never_ready"), 2, ready_timeout=30, grace_s=0.3).start()
    finally:
        stop.cancel()
        signal.signal(signal.SIGINT, before)
    assert time.monotonic() - began < 5


def test_ready_timeout_names_the_silent_workers_and_kills_them(target):
    began = time.monotonic()
    with pytest.raises(WorkerTimeout) as caught:
        with WorkerGroup(target("never_ready"), 2, ready_timeout=1.0, grace_s=0.3):
            pytest.fail("the workers never signal ready")
    assert time.monotonic() - began < 5  # 1 s timeout + 0.3 s grace, not a hang
    message = str(caught.value)
    assert "timed out after 1 s" in message and "become ready" in message
    assert "worker 0 of 2" in message and "worker 1 of 2" in message
    assert "worker 0 is thinking" in message  # the last lines of its stderr
    assert wait_until_gone([caught.value.pid]) == []


def test_worker_killed_mid_run_is_named_with_exit_code_and_stderr(target):
    with WorkerGroup(target("serve"), 2, ready_timeout=10) as group:
        victim = group.pids[1]
        os.kill(victim, signal.SIGKILL)
        began = time.monotonic()
        with pytest.raises(WorkerError) as caught:
            group.results(timeout=10)
        assert time.monotonic() - began < 3
    error = caught.value
    assert (error.index, error.pid, error.exit_code) == (1, victim, -signal.SIGKILL)
    message = str(error)
    assert f"worker 1 of 2 (pid {victim}" in message
    assert "killed by SIGKILL" in message and "before sending its result" in message
    assert "worker 1 started" in message


def test_worker_exception_is_reported_with_its_traceback(target):
    with pytest.raises(WorkerError) as caught:
        with WorkerGroup(target("fail"), 1, ready_timeout=10) as group:
            group.results(timeout=10)
    assert caught.value.index == 0
    assert "ValueError: worker 0 cannot go on" in str(caught.value)


def test_check_alive_passes_while_running_and_raises_once_a_worker_died(target):
    with WorkerGroup(target("serve"), 2, ready_timeout=10) as group:
        group.check_alive()
        group.kill_worker(0)
        deadline = time.monotonic() + 3
        with pytest.raises(WorkerError, match="worker 0 of 2"):
            while time.monotonic() < deadline:
                group.check_alive()
                time.sleep(0.05)


def test_watch_sees_every_state_and_progress_can_be_waited_for(target):
    seen = []
    group = WorkerGroup(
        target("count"),
        2,
        args={"steps": 30},
        ready_timeout=10,
        watch=lambda g: seen.append(g.states),
    )
    with group:
        # The watch runs at least once a wait, the last time after every worker said ready.
        # How many looks saw a worker starting is the scheduler's doing (a machine with both
        # cores busy saw both ready at the first look, so `seen` held only that): not asserted.
        assert seen and all(len(states) == 2 for states in seen)
        assert all(set(states) <= {"starting", "ready"} for states in seen)
        assert seen[-1] == ["ready", "ready"]
        assert group.states == ["ready", "ready"]
        heard = []
        latest = group.wait_for_progress(
            10, on_progress=lambda i, info: heard.append(i), until=lambda i, info: info["step"] >= 5
        )
        assert all(info["step"] >= 5 for info in latest)
        assert latest == group.latest_progress
        assert sorted(set(heard)) == [0, 1]
        results = group.results(timeout=10, on_progress=lambda i, info: heard.append(i))
        assert results == [30, 30] and heard.count(0) == heard.count(1) == 30
        assert group.states == ["done", "done"]
        later = []
        group.check_alive(on_progress=lambda i, info: later.append(info))  # nothing left unheard
        assert later == []


def test_check_alive_hands_on_progress_that_came_while_nobody_listened(target):
    with WorkerGroup(target("count"), 1, args={"steps": 3}, ready_timeout=10) as group:
        time.sleep(1.0)  # all three reports arrive, unheard
        heard = []
        group.check_alive(on_progress=lambda i, info: heard.append(info["step"]))
        assert heard == [1, 2, 3]


def test_finalizer_ends_the_workers_of_a_forgotten_group(target):
    group = WorkerGroup(target("serve"), 1, ready_timeout=10, grace_s=0.3).start()
    pids = group.pids
    del group
    gc.collect()
    assert wait_until_gone(pids) == []


def test_taken_port_is_picked_again(target):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        picks = [[busy]]
        with WorkerGroup(
            target("bind_port"), 1, pick_ports=lambda n: picks.pop() if picks else free_ports(n)
        ) as group:
            (port,) = group.results(timeout=10)
        assert group.attempts == 2
        assert port == group.ports[0] != busy


def test_port_always_taken_is_a_clear_error_not_a_hang(target):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        began = time.monotonic()
        with pytest.raises(PortInUseError, match="taken by another program") as caught:
            WorkerGroup(target("bind_port"), 1, pick_ports=lambda n: [busy]).start()
        assert time.monotonic() - began < 5
    assert f"port {busy}" in str(caught.value)
    assert "Address already in use" in str(caught.value)


def test_watchdog_ends_a_worker_whose_parent_was_killed(target):
    # The parent dies without any clean-up (os._exit): only the worker's watchdog can act.
    parent = run_python(
        f"""
        import json, os, subprocess, sys
        env = dict(os.environ, {worker_main.INDEX_VAR}="0", {worker_main.PORTS_VAR}="[0]",
                   {worker_main.PARENT_VAR}=str(os.getpid()))
        worker = subprocess.Popen(
            [sys.executable, {WORKER_MAIN_PATH!r}, {target("serve")!r}], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        ready = json.loads(worker.stdout.readline())["ready"]
        print(json.dumps([worker.pid, ready["child"]]), flush=True)
        os._exit(0)
        """,
        timeout=30,
    )
    pids = json.loads(parent.stdout)
    assert wait_until_gone(pids, timeout=3.0) == []


def test_multi_worker_mirrored_all_reduce_then_a_killed_worker_is_named(target):
    with WorkerGroup(
        target("all_reduce_sum"),
        2,
        args={"timeout_s": 5},
        tf_config_job="worker",
        ready_timeout=90,
        grace_s=0.3,  # MWMS catches SIGTERM (TF's preemption notifier): SIGKILL ends it
    ) as group:
        assert group.ready_info == [{"replicas": 2}, {"replicas": 2}]
        totals = group.wait_for_progress(timeout=30)
        assert totals == [{"total": [3.0] * 4}] * 2  # 1 + 2 on every worker: a real all-reduce
        group.kill_worker(1)  # mid-all-reduce: the workers all-reduce in a loop
        with pytest.raises(WorkerError) as killed:
            group.results(timeout=10)
        # Named even when its peer's error comes in first: the dead worker is the cause.
        assert killed.value.index == 1 and killed.value.exit_code == -signal.SIGKILL
        # Its peer fails too, never hangs: on the lost connection, or at the latest when
        # CommunicationOptions' timeout ends its wait in the collective.
        began = time.monotonic()
        with pytest.raises(WorkerError) as stranded:
            group.results(timeout=20)
        assert stranded.value.index == 0
        assert time.monotonic() - began < 5 + 3
        message = str(stranded.value)
        assert "Collective has timed out" in message or "UnavailableError" in message
