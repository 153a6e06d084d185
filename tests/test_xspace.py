"""The XSpace parser on hand-built traces: exact rows, as TensorFlow's profiler writes them."""

import pytest

from d2lhelpers.tracing import xspace
from d2lhelpers.tracing.xspace import EmptyTraceError, OpEvent, xplane_pb2

CPU0, CPU1 = "/device:CPU:0", "/device:CPU:1"
LOCAL = "/job:localhost/replica:0/task:0/device:CPU:"
WORKER = "/job:worker/replica:0/task:0/device:CPU:0"
EPOCH_NS = 1_795_000_000_000_000_000  # a trace start, in ns since 1970


class PlaneBuilder:
    """Writes events the way TensorFlow's profiler does: names in metadata, strings by reference."""

    def __init__(self, space: xplane_pb2.XSpace, name: str):
        self.plane = space.planes.add(name=name)

    def line(self, name: str, timestamp_ns: int):
        return self.plane.lines.add(name=name, timestamp_ns=timestamp_ns)

    def event(self, line, event_name, start_ns, duration_ns, display_name="", **stats):
        meta_id = len(self.plane.event_metadata) + 1
        meta = self.plane.event_metadata[meta_id]
        meta.id, meta.name, meta.display_name = meta_id, event_name, display_name
        event = line.events.add(
            metadata_id=meta_id,
            offset_ps=(start_ns - line.timestamp_ns) * 1000,
            duration_ps=duration_ns * 1000,
        )
        for key, value in stats.items():
            stat = event.stats.add(metadata_id=self._stat_id(key))
            if isinstance(value, str):
                stat.ref_value = self._stat_id(value)
            else:
                stat.int64_value = value

    def op(self, line, node, op_type, start_ns, duration_ns, **stats):
        self.event(line, f"{node}:{op_type}", start_ns, duration_ns, op_type, **stats)

    def _stat_id(self, name: str) -> int:
        for stat_id, meta in self.plane.stat_metadata.items():
            if meta.name == name:
                return stat_id
        stat_id = len(self.plane.stat_metadata) + 1
        self.plane.stat_metadata[stat_id].id = stat_id
        self.plane.stat_metadata[stat_id].name = name
        return stat_id


def started_at(space, epoch_ns: int):
    """The plane where the profiler writes when the trace began."""
    plane = space.planes.add(name="Task Environment")
    plane.stat_metadata[1].id, plane.stat_metadata[1].name = 1, "profile_start_time"
    plane.stats.add(metadata_id=1, uint64_value=epoch_ns)


def recv(host, line, name, posted_ns, done_ns):
    """A _Recv as the executor traces it: posted (Start), then completed (Done)."""
    recv_kernel = {"name": name, "kernel_type": "_Recv"}
    host.event(line, "ExecutorState::ProcessAsync::Start", posted_ns, 5, **recv_kernel)
    # The completion callback goes on to run what the tensor unblocked: a long event.
    host.event(line, "ExecutorState::ProcessAsync::Done", done_ns, 3000, **recv_kernel)


def test_parser_attributes_host_ops_by_graph_and_copies_by_rendezvous_key():
    space = xplane_pb2.XSpace()
    host = PlaneBuilder(space, "/host:CPU")
    a, b = host.line("tf_Compute/1", 1_000_000), host.line("tf_Compute/2", 1_000_500)
    host.event(a, "ExecutorState::Process", 1_000_000, 9000)  # a marker, not an op
    host.op(a, "MatMul", "MatMul", 1_000_000, 1000)
    key = f"{LOCAL}0;5cb7;{LOCAL}1;edge_4_MatMul;0:0"
    host.op(a, "MatMul/_1", "_Send", 1_001_000, 2500, key=key)  # ends after the whole handover
    recv(host, b, "MatMul/_2", posted_ns=1_000_600, done_ns=1_001_200)
    host.op(b, "MatMul_1", "MatMul", 1_001_300, 1000)
    host.op(b, "MatMul_1/_0__cf__0", "Const", 1_002_300, 100)  # Grappler's rename: look up prefix
    host.op(b, "mystery", "AddV2", 1_002_400, 100)  # not in the graph: the fallback device
    host.event(b, "ThreadpoolListener::Record", 1_002_500, 0)

    rows = xspace.events_from_xspace(
        space, {"MatMul": CPU0, "MatMul_1": CPU1}, fallback_device="/device:CPU:3"
    )

    assert rows == [
        OpEvent(CPU0, "MatMul", "matmul", 0.0, pytest.approx(1e-6)),
        # From the send (later than the receive was posted) to the receive's completion.
        OpEvent(
            CPU1, "MatMul", "copy", pytest.approx(1e-6), pytest.approx(1.2e-6), f"copy from {CPU0}"
        ),
        OpEvent(CPU1, "MatMul_1", "matmul", pytest.approx(1.3e-6), pytest.approx(2.3e-6)),
        OpEvent(CPU1, "MatMul_1/_0__cf__0", "other", pytest.approx(2.3e-6), pytest.approx(2.4e-6)),
        OpEvent("/device:CPU:3", "mystery", "other", pytest.approx(2.4e-6), pytest.approx(2.5e-6)),
    ]


def test_parser_merges_a_worker_process_trace_onto_one_clock():
    worker_space, local_space = xplane_pb2.XSpace(), xplane_pb2.XSpace()
    # Each space counts from its own start: the worker's trace began 3 µs after the local one.
    started_at(worker_space, EPOCH_NS + 3000)
    started_at(local_space, EPOCH_NS)
    worker, local = PlaneBuilder(worker_space, "/host:CPU"), PlaneBuilder(local_space, "/host:CPU")
    w, c = worker.line("tf_Compute/7", 0), local.line("tf_Compute/9", 0)
    worker.op(w, "MatMul", "MatMul", 0, 4000)
    key = f"{WORKER};aa;{LOCAL}0;edge_4_MatMul;0:0"
    worker.op(w, "MatMul/_1", "_Send", 4000, 900, key=key)
    recv(local, c, "MatMul/_2", posted_ns=2000, done_ns=9000)  # posted before the worker sent

    rows = xspace.events_from_xspace([worker_space, local_space], {"MatMul": WORKER})

    assert [(r.device, r.kind, r.lane) for r in rows] == [
        (WORKER, "matmul", ""),
        (CPU0, "copy", f"copy from {WORKER}"),
    ]
    matmul, copy = rows
    assert (matmul.start_s, matmul.end_s) == (0.0, pytest.approx(4e-6))
    assert (copy.start_s, copy.end_s) == (pytest.approx(4e-6), pytest.approx(6e-6))


def test_parser_takes_gpu_ops_from_the_device_plane_not_their_host_launch():
    space = xplane_pb2.XSpace()
    host, gpu = PlaneBuilder(space, "/host:CPU"), PlaneBuilder(space, "/device:GPU:0")
    launches = host.line("tf_Compute/1", 0)
    host.op(launches, "MatMul", "MatMul", 0, 50)  # the kernel's launch, on the host
    to_host = "/job:localhost/replica:0/task:0/device:GPU:0;1;/job:localhost/replica:0/task:0/"
    host.op(launches, "MatMul/_1", "_Send", 60, 10, key=to_host + "device:CPU:0;edge_2;0:0")
    kernels, copies = gpu.line("Stream #7(Kernel)", 0), gpu.line("Stream #13(MemcpyD2H)", 0)
    gpu.event(kernels, "sm90_xmma_gemm_f32f32", 100, 2000, tf_op="MatMul:MatMul")
    gpu.event(copies, "MemcpyD2H", 2100, 700, tf_op="MatMul/_1:_Send")
    gpu.event(gpu.line("CUPTI overhead", 0), "overhead", 0, 10)

    rows = xspace.events_from_xspace(space, {"MatMul": "/device:GPU:0"})

    assert rows == [
        OpEvent("/device:GPU:0", "MatMul", "matmul", 0.0, pytest.approx(2e-6)),
        OpEvent(
            "/device:GPU:0", "MatMul/_1", "copy", pytest.approx(2e-6), pytest.approx(2.7e-6),
            "Stream #13(MemcpyD2H)",
        ),
    ]  # fmt: skip


def test_a_space_with_no_op_events_raises():
    space = xplane_pb2.XSpace()
    host = PlaneBuilder(space, "/host:CPU")
    host.event(host.line("python", 0), "ExecutorState::Process", 0, 10)
    with pytest.raises(EmptyTraceError, match="no op events"):
        xspace.events_from_xspace(space, {})


@pytest.mark.parametrize(
    ("op_type", "kind"),
    [("MatMul", "matmul"), ("BatchMatMulV2", "matmul"), ("_Recv", "copy"), ("_Send", "copy")]
    + [("MemcpyHtoD", "copy"), ("MemcpyD2H", "copy"), ("AddV2", "other"), ("Identity", "other")],
)
def test_op_kinds(op_type, kind):
    assert xspace.op_kind(op_type) == kind
