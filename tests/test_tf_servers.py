"""TF servers as remote devices: connect, place, copy, trace on one clock, watch, drop cleanly.

Everything that connects to a worker runs in a fresh Python: connecting changes that process's
TensorFlow context for good (and a dead connected worker makes its `sync_devices` wait forever).
"""

import json
import os
import time

import pytest
import tensorflow as tf

import d2lhelpers as d2l
from d2lhelpers.processes import tf_servers, worker_main
from d2lhelpers.processes.group import free_ports
from d2lhelpers.tracing.timeline import OpEvent
from tests.conftest import run_python, wait_until_gone

WORKER = "/job:worker/replica:0/task:0/device:CPU:0"
HERE = "/device:CPU:0"


TF_REMOTE = """
import json, os, socket, time
import d2lhelpers as d2l
import tensorflow as tf
from d2lhelpers.processes.tf_servers import remote_tf_workers
from d2lhelpers.timing.benchmark import sync_devices
from d2lhelpers.processes.group import free_ports

devices = d2l.setup_devices()
taken = socket.socket()
taken.bind(("", 0))
taken.listen()
picks = [[taken.getsockname()[1]]]
report = {"taken": taken.getsockname()[1]}
with remote_tf_workers(1, pick_ports=lambda n: picks.pop() if picks else free_ports(n)) as remote:
    report["attempts"] = remote.group.attempts
    report["ports"] = remote.group.ports
    report["connected"] = [d.name for d in tf.config.list_logical_devices()]
    with tf.device(remote.device):
        on_worker = tf.range(1024 * 1024, dtype=tf.float32) * 2  # 4 MiB made in the worker
    with tf.device(devices[1].name):
        here = tf.identity(on_worker)
    report["placed"] = [on_worker.device, here.device]
    report["values"] = here[:3].numpy().tolist() + [float(here[-1])]
    worker_pid = remote.group.pids[0]
report["after"] = [d.name for d in tf.config.list_logical_devices()]
began = time.perf_counter()
sync_devices()
report["sync_s"] = time.perf_counter() - began
report["here_still_valid"] = float(here[1])
report["worker_pid"] = worker_pid


def listening_sockets():
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            mine.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the fd that listed the folder is gone already
            pass
    rows = [line.split() for name in ("tcp", "tcp6") for line in open(f"/proc/net/{name}")]
    return sum(row[3] == "0A" and f"socket:[{row[9]}]" in mine for row in rows[1:])


# A second connection reuses this process's one local gRPC server instead of adding one.
report["servers"] = [listening_sockets()]
with remote_tf_workers(1) as remote:
    with tf.device(remote.device):
        report["second"] = float(tf.reduce_sum(tf.ones([1000])))
report["servers"].append(listening_sockets())
print(json.dumps(report))
"""


def test_remote_tf_worker_computes_copies_and_is_dropped_cleanly():
    finished = run_python(TF_REMOTE, timeout=120)
    assert finished.returncode == 0, finished.stderr[-3000:]
    report = json.loads(finished.stdout.strip().splitlines()[-1])
    assert report["attempts"] == 2 and report["ports"] != [report["taken"]]
    local = [f"/device:CPU:{i}" for i in range(4)]  # set up first: connecting keeps them
    assert report["connected"] == local + [WORKER]
    assert report["placed"] == [WORKER, "/job:localhost/replica:0/task:0/device:CPU:1"]
    assert report["values"] == [0.0, 2.0, 4.0, 2.0 * (1024 * 1024 - 1)]
    # Disconnected before the worker ended: no remote device, and syncing does not hang on it.
    assert report["after"] == local
    assert report["sync_s"] < 5
    assert report["here_still_valid"] == 2.0
    assert report["second"] == 1000.0
    assert report["servers"][1] == report["servers"][0]
    assert wait_until_gone([report["worker_pid"]]) == []


TRACED = r"""
import json
import d2lhelpers as d2l
import tensorflow as tf
from d2lhelpers.processes import tf_servers as ts

d2l.setup_devices()
n = 5
with ts.remote_tf_workers(1, inter_op_threads=2) as remote:
    x = d2l.random_matrix(256, remote.device)

    @tf.function
    def chain_then_copy(x):
        with tf.device(remote.device):
            ys, y = [], x
            for _ in range(n):
                y = tf.linalg.matmul(y, x)
                ys.append(y)
        with tf.device(ts.HOST):
            return [tf.identity(y) for y in ys]

    rows, source = ts.trace_with_worker(
        chain_then_copy, x, worker_address=remote.addresses[0], worker_device=remote.device,
        expected_matmuls=n, expected_s=0.05)
    report = {
        "source": source,
        "matmuls": sorted({r.device for r in rows if r.kind == "matmul"}),
        "n_matmuls": sum(r.kind == "matmul" for r in rows),
        "n_copies": sum(r.kind == "copy" for r in rows),
        "sync_rows": sum(r.op.startswith("SyncDevice") for r in rows),
        "overlap": ts.traced_overlap(rows, remote.device),
    }
print(json.dumps(report))
"""


def test_one_call_is_traced_in_the_worker_and_here_on_one_clock():
    finished = run_python(TRACED, timeout=120)
    assert finished.returncode == 0, finished.stderr[-3000:]
    report = json.loads(finished.stdout.strip().splitlines()[-1])
    assert report["source"] == tf_servers.BOTH_TRACED
    assert report["matmuls"] == [WORKER] and report["n_matmuls"] == 5
    assert report["n_copies"] == 5
    assert report["sync_rows"] == 0
    assert 0.0 <= report["overlap"] <= 1.0


WORKER_DIES = r"""
import os, signal, sys, time
import d2lhelpers as d2l
from d2lhelpers.processes import tf_servers as ts
from d2lhelpers.timing.benchmark import sync_devices

d2l.setup_devices()
with ts.remote_tf_workers(1) as remote:
    with ts.exit_if_worker_dies(remote.check_alive, period_s=0.1):
        print(remote.group.pids[0], flush=True)
        os.kill(remote.group.pids[0], signal.SIGKILL)
        sync_devices()  # waits on the dead worker forever: only the watcher can end this
        time.sleep(30)
print("not reached", flush=True)
"""


def test_a_process_waiting_on_a_dead_worker_is_ended_not_hung():
    began = time.monotonic()
    finished = run_python(WORKER_DIES, timeout=60)
    # Two ways to end, both bounded: the watcher sees the death first and exits (the usual), or
    # TensorFlow notices the broken connection before the sync starts waiting and raises.
    raised = finished.returncode == 1 and "UnavailableError" in finished.stderr
    if not raised:
        assert finished.returncode == tf_servers.WORKER_DIED_EXIT_CODE, finished.stderr[-3000:]
        assert "the TensorFlow worker died" in finished.stderr
    assert "not reached" not in finished.stdout
    assert time.monotonic() - began < 45
    assert wait_until_gone([int(finished.stdout.split()[0])]) == []


def test_trace_falls_back_to_this_process_when_the_worker_cannot_be_traced(devices):
    @tf.function
    def chain_then_copy(x):
        with tf.device(devices[0].name):
            ys = [tf.linalg.matmul(x, x)]
            for _ in range(2):
                ys.append(tf.linalg.matmul(ys[-1], x))
        with tf.device(devices[1].name):
            return [tf.identity(y) for y in ys]

    x = d2l.random_matrix(64, devices[0])
    rows, source = tf_servers.trace_with_worker(
        chain_then_copy,
        x,
        worker_address=f"127.0.0.1:{free_ports(1)[0]}",  # nobody listens there
        worker_device=WORKER,
        expected_matmuls=3,
        expected_s=0.01,
    )
    assert source == tf_servers.DRIVER_TRACED
    assert sum(r.kind == "matmul" for r in rows) == 3
    assert sum(r.kind == "copy" and r.device == "/device:CPU:1" for r in rows) == 3
    assert not any(r.op.startswith("SyncDevice") for r in rows)


def test_tcp_fetch_takes_every_byte_from_a_source_and_refuses_bad_counts():
    source = tf_servers.tcp_source()
    address = f"127.0.0.1:{source.getsockname()[1]}"
    began = time.perf_counter()
    tf_servers.tcp_fetch(address, (16 << 20) + 3)  # not a whole number of chunks
    assert 0 < time.perf_counter() - began < tf_servers.TCP_TIMEOUT_S
    with pytest.raises(ValueError):
        tf_servers.tcp_fetch(address, 0)
    with pytest.raises(TypeError):
        tf_servers.tcp_fetch(address, 1.5e6)
    with pytest.raises(ValueError):
        tf_servers.tcp_fetch(address, 1 << 40)
    with pytest.raises(OSError):  # nobody listens there
        tf_servers.tcp_fetch(f"127.0.0.1:{free_ports(1)[0]}", 1 << 20)


@pytest.mark.parametrize("address", ["localhost", "host:", ":80", "host:http", "host:70000", 5])
def test_a_worker_address_must_be_host_and_port(address):
    with pytest.raises(ValueError, match="HOST:PORT"):
        tf_servers.split_address(address)
    assert tf_servers.split_address("10.0.0.2:2222") == ("10.0.0.2", 2222)


STARTED_ELSEWHERE = r"""
import json, subprocess, sys, time
import d2lhelpers as d2l
import tensorflow as tf
from d2lhelpers.processes import tf_servers as ts
from d2lhelpers.processes.group import free_ports

d2l.setup_devices()
address = f"127.0.0.1:{free_ports(1)[0]}"
server = subprocess.Popen([sys.executable, "-m", "d2lhelpers.processes.tf_servers",
                           "--address", address], stdout=subprocess.PIPE, text=True)
try:
    said = server.stdout.readline()
    with ts.tf_worker_at(address) as remote:
        with tf.device(remote.device):
            on_worker = tf.ones([1000]) * 3
        ts.tcp_fetch(remote.sources[0], 1 << 20)
        report = {"said": said, "device": on_worker.device, "source": remote.sources[0],
                  "sum": float(tf.reduce_sum(tf.identity(on_worker)))}
        remote.check_alive()
        server.kill()
        server.wait()
        try:
            remote.check_alive()
            report["dead_seen"] = False
        except OSError:
            report["dead_seen"] = True
finally:
    server.kill()
print(json.dumps(report))
"""


def test_a_worker_started_elsewhere_is_reached_at_its_address():
    finished = run_python(STARTED_ELSEWHERE, timeout=120)
    assert finished.returncode == 0, finished.stderr[-3000:]
    report = json.loads(finished.stdout.strip().splitlines()[-1])
    port = int(report["said"].split(":")[1].split(",")[0])
    assert report["said"].startswith("TF server at 127.0.0.1:")
    assert report["source"] == f"127.0.0.1:{port + 1}"
    assert report["device"] == WORKER and report["sum"] == 3000.0
    assert report["dead_seen"]


@pytest.mark.parametrize("count", [0, -1, 1.5, 10**4])
def test_remote_tf_workers_refuses_bad_counts_before_starting(monkeypatch, count):
    def must_not_start(*args, **kwargs):
        raise AssertionError("started workers for a count that should have been refused")

    monkeypatch.setattr(tf_servers, "WorkerGroup", must_not_start)
    with pytest.raises((TypeError, ValueError)):
        with tf_servers.remote_tf_workers(count):
            pass


def row(device, kind, start, end):
    return OpEvent(device, f"{kind}@{start}", kind, start, end)


def test_traced_overlap_is_the_shared_time_over_the_shorter_part():
    rows = [
        row(WORKER, "matmul", 0.0, 1.0),
        row(WORKER, "matmul", 1.0, 2.0),
        row(HERE, "copy", 1.5, 2.5),  # half of it during the second matmul
        row(HERE, "other", 0.0, 3.0),  # not a copy: ignored
    ]
    assert tf_servers.traced_overlap(rows, WORKER, HERE) == pytest.approx(0.5)
    after = [row(WORKER, "matmul", 0.0, 1.0), row(HERE, "copy", 1.0, 2.0)]
    assert tf_servers.traced_overlap(after, WORKER, HERE) == 0.0
    assert tf_servers.traced_overlap([row(WORKER, "matmul", 0.0, 1.0)], WORKER, HERE) == 0.0


def test_the_copies_order_after_the_matmuls_is_read_from_the_trace():
    after = [row(WORKER, "matmul", 0.0, 1.0), row(HERE, "copy", 1.25, 2.0)]
    assert tf_servers.copies_after_matmuls_s(after, WORKER, HERE) == pytest.approx(0.25)
    between = [*after, row(WORKER, "matmul", 1.5, 3.0), row(HERE, "other", 0.0, 0.5)]
    assert tf_servers.copies_after_matmuls_s(between, WORKER, HERE) == pytest.approx(-1.75)
    assert tf_servers.copies_after_matmuls_s(after[:1], WORKER, HERE) is None  # no copy


def test_c_level_output_is_dropped_inside_and_kept_after(capfd):
    with tf_servers.c_stdout_silenced():
        os.write(1, b"from C inside\n")
    os.write(1, b"after\n")
    assert capfd.readouterr().out == "after\n"


def test_the_server_target_string_resolves():
    assert worker_main.load_target(tf_servers.TF_SERVER_TARGET) is tf_servers.tf_server
    assert tf_servers.tf_worker_device(2) == "/job:worker/replica:0/task:2/device:CPU:0"
