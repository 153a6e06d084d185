"""TensorFlow's own all-reduce on the set-up devices: timed, predicted, and hidden behind compute.

Which all-reduce. One `CollectiveReduceV2` op per device, all in one `tf.function`: TensorFlow's
collective runtime, the op that `MirroredStrategy` (its default cross-device ops on CPUs in TF
2.21) and `MultiWorkerMirroredStrategy` emit. With `communication_hint='ring'` each device runs
a ring: reduce-scatter then all-gather, in 2(n-1) steps of 1/n of the vector (the runtime may
split big vectors over several rings, chunks of at most 4 MB). Each op carries an ordering
token (a resource on its device), as tf.distribute's own launcher does: without one, the first
call never completes (probed: with `timeout_seconds` set it fails with DeadlineExceededError).

What else was tried (TF 2.21, 4 logical CPUs, one process):
- `MirroredStrategy(cross_device_ops=ReductionToOneDevice())`: copies every vector to one
  device, adds them there with one `AddN`, copies the sum back. Between logical CPUs a copy
  passes a pointer, so this times one `AddN` on one core, not a link.
- `HierarchicalCopyAllReduce`: also ran, as splits, packs and `AddN`s on one device.
- `NcclAllReduce`: eager calls returned sums; in a `tf.function` it refuses CPU tensors
  ("Device assignment ... required for nccl collective ops"). It is for GPUs.
- `MirroredStrategy()` with its default on CPUs, `CollectiveAllReduce`: the same op as here,
  wrapped in packing ops (Reshape, SplitV, Pack).
- Inside a `tf.function` the strategies' ops without a device scope all landed on CPU:0.

What the link is. On logical CPU devices the collective runtime moves each chunk with a real
`memcpy` between buffers of one process (`CollectiveRemoteAccessLocal::MemCpyAsync`), and adds
it on the same cores that compute. So a fit of t(S) = alpha + S / beta gives:
- alpha: the fixed cost of one call: launching one function piece per device, the ranks
  finding each other, the first chunk. NCCL on NVLink needs a few µs per step; here the whole
  call's start-up is about a millisecond, and grows with the number of devices.
- beta: S / t, the rate at which the ring gets S bytes per device reduced (NCCL-tests' "algbw").
  Its bus bandwidth B = beta * 2(n-1)/n is the rate each rank's "link" carried: here the rate at
  which shared cores copy and add in RAM. `AllReduceSweep` sets it beside one core's own copy
  and add rates, measured on one device, so the learner sees the link is RAM.

The alpha-beta model must predict, not only fit: alpha comes from a tiny message alone, beta
from the largest size alone, and every other size is predicted; separately, a least-squares
fit on every other size predicts the sizes it did not see. It holds while the "link" keeps one
speed: above 32 MiB every new tensor costs page faults (`FRESH_PAGES_BYTES`), and a beta taken
there is 2-3x too slow for the sizes below.

Overlap (`overlap_experiment`): an all-reduce and independent matmuls in one function run at
the same time, which the trace shows; whether that saves time depends on what the link is.
On logical CPUs the ring's copies and adds need the cores the matmuls use, so on 2 cores the
overlap hides little of the all-reduce, and unreliably: in `make bench` runs on a 2-core
machine the overlapped run took 1.1-2.2x max(all-reduce, compute) and 0.7-1.1x their sum.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Sequence

import matplotlib.pyplot as plt
import tensorflow as tf

from d2lhelpers.benchmark import Measurement, compare_to_ideal, measure
from d2lhelpers.costs import AlphaBeta, Residual, bus_bandwidth_bound_s, fit_alpha_beta
from d2lhelpers.devices import Device, check_fits, select_devices, setup_devices
from d2lhelpers.timeline import (
    OpEvent,
    busy_intervals,
    busy_seconds,
    device_label,
    overlap_seconds,
    trace,
)
from d2lhelpers.units import format_bytes, format_rate, format_seconds
from d2lhelpers.workloads import (
    chain_bytes,
    chain_flops,
    chains_in_one_graph,
    matmul_chain,
    random_matrix,
)

ELEMENT_BYTES = 4  # float32
TINY_BYTES = ELEMENT_BYTES  # alpha's message: one number
KiB, MiB = 1024, 1024 * 1024
# Up to 16 MiB: below the allocator's cliff (see FRESH_PAGES_BYTES), where one beta holds.
DEFAULT_SIZES = (4 * KiB, 64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB)
# glibc's malloc serves blocks above 32 MiB (its largest mmap threshold) with fresh pages from
# the kernel, every time: page faults and zeroing. Probed: one device copied 31 MiB at 10 GB/s,
# 33 MiB at 2.4 GB/s; the all-reduce's rate fell from 1.35 to 0.9 GB/s across the same step.
FRESH_PAGES_BYTES = 32 * MiB
COLLECTIVE_TIMEOUT_S = 120.0  # a collective that waits this long for its peers fails, not hangs
ALLREDUCE_OP = "allreduce"  # op names 'allreduce_<rank>' find the all-reduce in a trace
ALLREDUCE_LANE = "all-reduce"  # drawn as its own row under each device, not over its matmuls
# Far above the keys tf.distribute hands out (from 1 up), so a strategy in the same kernel never
# reuses one of ours for another set of devices.
_GROUP_KEY_BASE = 1 << 20
_group_keys: dict[tuple[str, ...], int] = {}
_instance_keys = itertools.count(1)
_ordering_tokens: dict[str, tf.Variable] = {}


def _names(devices: Sequence[Device | str]) -> tuple[str, ...]:
    return tuple(d if isinstance(d, str) else d.name for d in devices)


def _communication_hint(devices: Sequence[Device | str]) -> str:
    """'ring' on logical CPUs and virtual GPUs (NCCL refuses two ranks on one chip); else 'auto'."""
    kinds = {d.kind for d in devices if isinstance(d, Device)}
    return "auto" if kinds == {"GPU"} else "ring"


def _ordering_token(name: str) -> tf.Tensor:
    """A resource on device `name` that orders its collectives (what tf.distribute does too)."""
    if name not in _ordering_tokens:
        with tf.init_scope(), tf.device(name):
            _ordering_tokens[name] = tf.Variable(0.0, trainable=False, name="ordering_token")
    return _ordering_tokens[name].handle


def _all_reduce_ops(xs: Sequence[tf.Tensor], names: tuple[str, ...], hint: str) -> list:
    """One CollectiveReduceV2 per device; call while tracing. One instance key per call."""
    group_key = _group_keys.setdefault(names, _GROUP_KEY_BASE + len(_group_keys))
    instance_key = next(_instance_keys)  # shared by the ranks: a key per rank would deadlock
    reduced = []
    for rank, (name, x) in enumerate(zip(names, xs, strict=True)):
        with tf.device(name):
            reduced.append(
                tf.raw_ops.CollectiveReduceV2(
                    input=x,
                    group_size=len(names),
                    group_key=group_key,
                    instance_key=instance_key,
                    ordering_token=[_ordering_token(name)],
                    merge_op="Add",
                    final_op="Id",
                    communication_hint=hint,
                    timeout_seconds=COLLECTIVE_TIMEOUT_S,
                    name=f"{ALLREDUCE_OP}_{rank}",
                )
            )
    return reduced


def allreduce_in_one_graph(devices: Sequence[Device | str]) -> Callable:
    """One tf.function: `run(*xs)` with one tensor per device returns, on each device, the sum.

    sum_i xs[i], element by element, computed by TensorFlow's collective ring; nothing else runs
    in it. Cached per set of devices; each new shape is traced with its own instance key.
    """
    names = _names(devices)
    if not names:
        raise ValueError("an all-reduce needs at least one device")
    return _allreduce_in_one_graph(names, _communication_hint(devices))


@functools.lru_cache(maxsize=32)
def _allreduce_in_one_graph(names: tuple[str, ...], hint: str) -> Callable:
    for name in names:
        _ordering_token(name)  # created eagerly, before tracing

    @tf.function
    def run(*xs):
        return _all_reduce_ops(xs, names, hint)

    return run


def allreduce_inputs(nbytes: int, devices: Sequence[Device | str], seed: int = 0) -> list:
    """One float32 vector of `nbytes` per device, created there (rank r holds values near r+1)."""
    elements = _elements(nbytes)
    xs = []
    for rank, name in enumerate(_names(devices)):
        with tf.device(name):
            noise = tf.random.stateless_uniform((elements,), seed=(seed, rank))
            xs.append(noise + float(rank + 1))
    return xs


def _elements(nbytes: int) -> int:
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < ELEMENT_BYTES:
        raise ValueError(f"a message size must be a whole number of bytes >= 4, got {nbytes!r}")
    if nbytes % ELEMENT_BYTES:
        raise ValueError(f"a message size must be a multiple of 4 bytes (float32), got {nbytes}")
    return nbytes // ELEMENT_BYTES


# --- Sweep: time per size, alpha-beta predictions, residuals -------------------------------------


@dataclasses.dataclass
class AllReduceSweep:
    """TF's all-reduce on `n_devices` timed per message size, beside the alpha-beta predictions.

    `model`: alpha from the tiny message alone, beta from the largest size alone; it predicts
    every other size (`residuals`). `fitted`: least squares on every other size (`fit_sizes`),
    predicting the rest (`held_out_residuals`); None with fewer than 3 sizes. `copy`, `add`: one
    device copying, and adding, a tensor of the largest size (the RAM the link really is).
    """

    n_devices: int
    kind: str
    sizes: list[int]  # bytes per device, ascending
    measurements: list[Measurement]
    tiny: Measurement
    copy: Measurement
    add: Measurement
    model: AlphaBeta
    fitted: AlphaBeta | None
    fit_sizes: list[int]

    @property
    def times(self) -> list[float]:
        return [m.median for m in self.measurements]

    @property
    def predicted(self) -> list[float]:
        """The two-point model's time for every size (the largest is exact by construction)."""
        return [self.model.predict(s) for s in self.sizes]

    @property
    def residuals(self) -> list[Residual]:
        """Sizes the two-point model did not see (all but the largest): measured vs predicted."""
        return self.model.residuals(self.sizes[:-1], self.times[:-1])

    @property
    def held_out_sizes(self) -> list[int]:
        return [s for s in self.sizes if s not in self.fit_sizes]

    @property
    def held_out_residuals(self) -> list[Residual]:
        if self.fitted is None:
            return []
        held = self.held_out_sizes
        times = [t for s, t in zip(self.sizes, self.times, strict=True) if s in held]
        return self.fitted.residuals(held, times)

    @property
    def bus_bandwidth(self) -> float | None:
        """B = beta * 2(n-1)/n, bytes/s through each rank's link; None when nothing moves."""
        if self.n_devices < 2 or math.isinf(self.model.beta_bytes_per_s):
            return None
        return self.model.beta_bytes_per_s * 2 * (self.n_devices - 1) / self.n_devices

    def bound_s(self, nbytes: float) -> float | None:
        """Bus-bandwidth lower bound 2(n-1)/n * S / B with B = `bus_bandwidth`."""
        bandwidth = self.bus_bandwidth
        return bus_bandwidth_bound_s(self.n_devices, nbytes, bandwidth) if bandwidth else None

    def lines(self) -> list[str]:
        """Print-ready: alpha, beta and what they mean, then each size measured vs predicted."""
        alpha, beta = self.model.alpha_s, self.model.beta_bytes_per_s
        out = [
            f"TF all-reduce (CollectiveReduceV2, ring) on {self.n_devices} {self.kind} devices",
            f"alpha = {alpha * 1e6:.0f} µs (one {TINY_BYTES}-byte all-reduce)",
        ]
        if math.isinf(beta):
            out.append(
                "beta not measurable: the largest size took no longer than the tiny message "
                "(choose a larger size)"
            )
        else:
            out.append(
                f"beta = {format_rate(beta, 'B/s')} (the {format_bytes(self.sizes[-1])} "
                f"all-reduce, alpha taken off)"
            )
        if self.bus_bandwidth:
            out.append(
                f"bus bandwidth B = beta * 2(n-1)/n = {format_rate(self.bus_bandwidth, 'B/s')}; "
                f"one device copies at {format_rate(self.copy.rate, 'B/s')} and adds at "
                f"{format_rate(self.add.rate, 'B/s')}"
            )
        if self.kind == "logical CPU":
            out.append("(logical CPUs: the 'link' is memcpy and add in RAM on the shared cores)")
            if self.sizes[-1] > FRESH_PAGES_BYTES:
                out.append(
                    f"(above {format_bytes(FRESH_PAGES_BYTES)} each new tensor gets fresh pages "
                    "from the kernel: page faults, not the link, slow those sizes down, and a "
                    "beta taken there under-predicts the smaller sizes)"
                )
        out.append(self.table())
        if self.fitted is not None:
            fit = ", ".join(format_bytes(s) for s in self.fit_sizes)
            out.append(
                f"least squares on {fit}: alpha = {self.fitted.alpha_s * 1e6:.0f} µs, "
                f"beta = {_rate(self.fitted.beta_bytes_per_s)}; held out:"
            )
            out += [_residual_line(r) for r in self.held_out_residuals]
        return out

    def table(self) -> str:
        rows = ["    size   measured   predicted  residual  (alpha, beta from tiny and largest)"]
        for size, m, predicted in zip(self.sizes, self.measurements, self.predicted, strict=True):
            note = "   (calibrates beta)" if size == self.sizes[-1] else ""
            residual = (m.median - predicted) / m.median
            rows.append(
                f"{format_bytes(size):>9}  {_ms(m.median)}  {_ms(predicted)}  "
                f"{residual:+8.0%}{note}"
            )
        return "\n".join(rows)


def _rate(bytes_per_s: float) -> str:
    if math.isinf(bytes_per_s):
        return "unbounded (time did not grow with size)"
    return format_rate(bytes_per_s, "B/s")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.3f} ms"


def _residual_line(r: Residual) -> str:
    return (
        f"  {format_bytes(r.nbytes):>9}: measured {_ms(r.measured_s)}, predicted "
        f"{_ms(r.predicted_s)}, residual {r.relative:+.0%}"
    )


def sizes_up_to(largest: int, smallest: int = 4 * KiB) -> list[int]:
    """`smallest`, 4x that, 16x, ... below `largest`, then `largest`: one slider, one sweep."""
    _elements(smallest)
    _elements(largest)
    if largest < smallest:
        raise ValueError(f"the largest size ({largest} B) is below the smallest ({smallest} B)")
    sizes = [smallest]
    while sizes[-1] * 4 < largest:
        sizes.append(sizes[-1] * 4)
    return sizes + [largest] if largest > sizes[-1] else sizes


def _check_sizes(sizes) -> list[int]:
    sizes = sorted(set(sizes))
    for size in sizes:
        _elements(size)
    if len(sizes) < 2:
        raise ValueError(
            "give at least two different sizes: beta comes from the largest, the others are "
            f"predicted (got {sizes})"
        )
    return sizes


def _local_rates(nbytes: int, device: str, **measure_options) -> tuple[Measurement, Measurement]:
    """One device copying, then adding, tensors of `nbytes`: the RAM speed of one core."""
    with tf.device(device):
        a, b = tf.random.stateless_uniform((2, _elements(nbytes)), seed=(1, 2))

    @tf.function
    def copy(x):
        with tf.device(device):
            return tf.raw_ops.DeepCopy(x=x)  # a real copy; tf.identity would pass a pointer

    @tf.function
    def add(x, y):
        with tf.device(device):
            return x + y

    label = f"one device, {format_bytes(nbytes)}"
    copied = measure(lambda: copy(a), f"copy ({label})", nbytes=nbytes, **measure_options)
    added = measure(lambda: add(a, b), f"add ({label})", nbytes=nbytes, **measure_options)
    return copied, added


def alpha_beta_models(
    sizes: Sequence[int], seconds: Sequence[float], tiny_s: float
) -> tuple[AlphaBeta, AlphaBeta | None, list[int]]:
    """The two ways the alpha-beta model is made to predict (sizes ascending, times per size).

    Two-point: alpha = `tiny_s` (a 4-byte all-reduce), beta from the largest size alone:
    S_max / (t_max - alpha); beta = inf when the largest took no longer than the tiny one.
    Held out: least squares (`fit_alpha_beta`) on every other size from the smallest, to
    predict the sizes between; (None, []) with fewer than 3 sizes.
    """
    if seconds[-1] > tiny_s:
        model = AlphaBeta.from_measurements(tiny_s, sizes[-1], seconds[-1])
    else:  # time did not grow with size: all of it is latency
        model = AlphaBeta(tiny_s, math.inf)
    if len(sizes) < 3:
        return model, None, []
    fit_sizes = list(sizes[::2])
    return model, fit_alpha_beta(fit_sizes, list(seconds[::2])), fit_sizes


def allreduce_sweep(
    n_devices: int | None = None,
    sizes: Sequence[int] = DEFAULT_SIZES,
    progress: Callable[[int, int], None] | None = None,
    **measure_options,
) -> AllReduceSweep:
    """Time TF's all-reduce of each size (bytes per device) on the first `n_devices` devices.

    Also times a 4-byte all-reduce (alpha) and one device copying and adding the largest size.
    Refuses sizes that do not fit before allocating anything. `progress(done, total)` after each
    measurement; `measure_options` go to `measure` (e.g. min_runs=3, budget_s=0.5).
    """
    devices = select_devices(len(setup_devices()) if n_devices is None else n_devices)
    sizes = _check_sizes(sizes)
    # Input, output and the ring's chunk buffers on each device, plus the local copy and add.
    check_fits(3 * sizes[-1], devices, f"an all-reduce of {format_bytes(sizes[-1])}")
    measure_options.setdefault("budget_s", 1.0)
    total = len(sizes) + 2
    run = allreduce_in_one_graph(devices)
    report = progress or (lambda done, total: None)
    kind = devices[0].kind

    def timed(nbytes: int) -> Measurement:
        xs = allreduce_inputs(nbytes, devices)
        label = f"all-reduce of {format_bytes(nbytes)} on {len(devices)} {kind} devices"
        return measure(lambda: run(*xs), label, nbytes=nbytes, **measure_options)

    tiny = timed(TINY_BYTES)
    report(1, total)
    measurements = []
    for done, size in enumerate(sizes, start=2):
        measurements.append(timed(size))
        report(done, total)
    copied, added = _local_rates(sizes[-1], devices[0].name, **measure_options)
    report(total, total)
    model, fitted, fit_sizes = alpha_beta_models(
        sizes, [m.median for m in measurements], tiny.median
    )
    return AllReduceSweep(
        len(devices), kind, sizes, measurements, tiny, copied, added, model, fitted, fit_sizes
    )


def plot_allreduce_sweep(result: AllReduceSweep, ax=None):
    """Log-log: measured times, the alpha-beta prediction, and the bus-bandwidth lower bound."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.2))
    low = TINY_BYTES
    high = result.sizes[-1]
    grid = [low * (high / low) ** (i / 60) for i in range(61)]
    ax.plot(grid, [result.model.predict(s) for s in grid], "-", c="tab:blue", label="predicted")
    if result.fitted is not None:
        ax.plot(
            grid,
            [result.fitted.predict(s) for s in grid],
            ":",
            c="tab:green",
            label="least squares on every other size",
        )
    if result.bus_bandwidth:
        bus = format_rate(result.bus_bandwidth, "B/s")
        ax.plot(
            grid,
            [result.bound_s(s) for s in grid],
            "--",
            c="gray",
            label=f"lower bound 2(n-1)/n·S/B, B = {bus}",
        )
    if result.n_devices > 1 and result.copy.rate:
        ram = format_rate(result.copy.rate, "B/s")
        ax.plot(
            grid,
            [bus_bandwidth_bound_s(result.n_devices, s, result.copy.rate) for s in grid],
            "-.",
            c="tab:red",
            lw=1,
            label=f"2(n-1)/n·S at one core's copy rate ({ram})",
        )
    ax.errorbar(
        result.sizes[:-1],
        result.times[:-1],
        yerr=[m.iqr / 2 for m in result.measurements[:-1]],
        fmt="o",
        c="tab:orange",
        label="measured (predicted sizes)",
    )
    ax.plot(
        [TINY_BYTES, high],
        [result.tiny.median, result.times[-1]],
        "s",
        c="black",
        label="measured (alpha and beta from these)",
    )
    ax.set(xscale="log", yscale="log", xlabel="bytes per device", ylabel="time (s)")
    # The bound falls towards 0 at tiny sizes: show it only near the measurements.
    ax.set_ylim(bottom=min(result.tiny.median, *result.times) / 30)
    ax.set_title(f"TF all-reduce on {result.n_devices} {result.kind} devices")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.figure.tight_layout()
    return ax.figure


# --- Overlap: an all-reduce hidden behind independent compute ------------------------------------


def allreduce_and_compute(
    devices: Sequence[Device | str], chain_length: int, overlap: bool
) -> Callable:
    """One tf.function `run(grads, xs)`: all-reduce `grads` and run a matmul chain on each `xs`.

    overlap=True: the chains share no data with the all-reduce, so the dependency tracker runs
    them at the same time (the seed's "fuse all_reduce with the next layer's forward").
    overlap=False: every chain waits, by control dependencies, for the whole all-reduce (every
    rank's sum): one after the other.
    """
    names = _names(devices)
    if chain_length < 1:
        raise ValueError(f"chain_length must be at least 1, got {chain_length}")
    return _allreduce_and_compute(names, _communication_hint(devices), chain_length, overlap)


@functools.lru_cache(maxsize=32)
def _allreduce_and_compute(names, hint, chain_length, overlap) -> Callable:
    for name in names:
        _ordering_token(name)

    @tf.function
    def run(grads, xs):
        reduced = _all_reduce_ops(grads, names, hint)
        after = [] if overlap else reduced
        products = []
        for name, x in zip(names, xs, strict=True):
            with tf.device(name), tf.control_dependencies(after):
                products.append(matmul_chain(x, chain_length))
        return reduced, products

    return run


def _is_allreduce(row: OpEvent) -> bool:
    return row.op.startswith(ALLREDUCE_OP) and not row.lane.startswith("copy")  # not its result


def allreduce_rows(rows: Sequence[OpEvent], device: str | None = None) -> list[OpEvent]:
    """The trace rows of the all-reduce ops themselves (on `device`, if given)."""
    device = device_label(device) if device else None
    return [r for r in rows if _is_allreduce(r) and (device is None or r.device == device)]


def allreduce_consumers(graph: tf.Graph) -> dict[str, set[str]]:
    """For each all-reduce op in `graph`, the ops that take its result or wait for it."""
    consumers: dict[str, set[str]] = {}
    for op in graph.get_operations():
        if op.type == "CollectiveReduceV2":
            consumers.setdefault(op.name, set())
        for source in [t.op for t in op.inputs] + list(op.control_inputs):
            if source.type == "CollectiveReduceV2":
                consumers.setdefault(source.name, set()).add(op.name)
    return consumers


def allreduce_timeline(
    rows: Sequence[OpEvent], consumers: dict[str, set[str]] | None = None
) -> list[OpEvent]:
    """`rows` ready to draw: each all-reduce row in its own lane under its device (else it
    hides the matmuls it overlaps), and ended no later than the first use of its result.

    The profiler closes an async kernel's event only when its completion callback returns, and
    on busy cores that thread can be preempted for milliseconds after the sum was ready (probed:
    up to 17 ms on 2 loaded cores, while the ops it unblocked already ran), which would draw a
    false overlap. No op can use the result before it exists, so the first copy of it, or the
    first start of an op in `consumers[op]` (see `allreduce_consumers`), bounds the true end.
    """
    consumers = consumers or {}
    fixed = []
    for row in rows:
        if _is_allreduce(row):
            users = consumers.get(row.op, set())
            uses = [
                r.start_s
                for r in rows
                if (r.kind == "copy" and r.op == row.op and r.lane == f"copy from {row.device}")
                or (r.op in users and r.lane == "")
            ]
            end = max(row.start_s, min([row.end_s, *uses]))
            row = dataclasses.replace(row, end_s=end, lane=ALLREDUCE_LANE)
        fixed.append(row)
    return fixed


@dataclasses.dataclass
class OverlapResult:
    """The all-reduce alone, the compute alone, and both in one function, with its trace.

    Ideals: one after the other, allreduce + compute; overlapped, max(allreduce, compute).
    """

    n_devices: int
    kind: str
    overlap: bool
    nbytes: int
    allreduce: Measurement
    compute: Measurement
    combined: Measurement
    rows: list[OpEvent]  # one traced call, through `allreduce_timeline`
    devices: list[str]

    @property
    def ideal_sequential(self) -> float:
        return self.allreduce.median + self.compute.median

    @property
    def ideal_overlapped(self) -> float:
        return max(self.allreduce.median, self.compute.median)

    @property
    def ideal(self) -> float:
        return self.ideal_overlapped if self.overlap else self.ideal_sequential

    @property
    def hidden_fraction(self) -> float:
        """(allreduce + compute - combined) / min(allreduce, compute): 1 all hidden, 0 none."""
        saved = self.ideal_sequential - self.combined.median
        return saved / min(self.allreduce.median, self.compute.median)

    def traced_overlap(self) -> dict[str, float]:
        """Per device, |all-reduce ∩ matmuls| / the shorter of the two, from the trace.

        1 when the shorter ran entirely while the other did; 0 when they took turns.
        """
        fractions = {}
        for device in self.devices:
            reducing = busy_intervals(allreduce_rows(self.rows, device))
            computing = busy_intervals(self.rows, device, "matmul")
            shorter = min(busy_seconds(reducing), busy_seconds(computing))
            both = overlap_seconds(reducing, computing)
            fractions[device] = both / shorter if shorter > 0 else 0.0
        return fractions

    def lines(self) -> list[str]:
        """Print-ready: the parts, the combined time beside its ideal, and what was hidden.

        Both parts alone pay a function call's start-up each (about alpha), the combined run
        pays one: one after the other can come out a little under allreduce + compute.
        """
        fractions = self.traced_overlap().items()
        traced = ", ".join(
            f"{device_label(d).removeprefix('/device:')} {f:.0%}" for d, f in fractions
        )
        if self.overlap:
            versus = compare_to_ideal(
                self.combined.median, self.ideal, "overlapped, ideal max(all-reduce, compute)"
            )
            other = f"one after the other would be {format_seconds(self.ideal_sequential)}"
        else:
            versus = compare_to_ideal(
                self.combined.median, self.ideal, "one after the other, ideal all-reduce + compute"
            )
            other = f"overlapped could be as short as {format_seconds(self.ideal_overlapped)}"
        return [
            str(self.allreduce),
            str(self.compute),
            versus,
            f"{other}; hidden: {self.hidden_fraction:.0%} of the shorter part "
            "(overlapped ideal 100%, one after the other 0%)",
            f"traced: all-reduce and matmuls at the same time for {traced} of the shorter part",
        ]


def overlap_experiment(
    n_devices: int = 2,
    size: int = 8 * MiB,
    chain_size: int = 256,
    chain_length: int = 12,
    overlap: bool = True,
    progress: Callable[[int, int], None] | None = None,
    **measure_options,
) -> OverlapResult:
    """Time an all-reduce of `size` bytes per device and a chain of `chain_length` matmuls of
    `chain_size`² per device: each alone, then together in one function, and trace that one.

    The defaults make the two parts similar (about 5 ms each on 2 cores), where the two ideals
    differ most. On logical CPUs the ring's copies and adds run on the same cores as the
    matmuls, so overlap can hide only the time the cores are not all busy (ranks waiting for
    each other, a device's part of the function starting late). 2 devices on 2 cores is where
    that shows: the trace has them overlapping, and the time says how much it bought. With 4
    devices on 2 cores the matmuls alone already fill the cores. A GPU's link has its own copy
    engines: there the overlap can hide the all-reduce.
    """
    if n_devices < 2:
        raise ValueError(
            f"an all-reduce over {n_devices} device moves nothing to overlap: choose 2 or more"
        )
    for name, value in (("chain_size", chain_size), ("chain_length", chain_length)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    _elements(size)
    devices = select_devices(n_devices)
    what = f"an all-reduce of {format_bytes(size)} and a {chain_size}² matmul chain"
    check_fits(3 * size + chain_bytes(chain_size), devices, what)
    measure_options.setdefault("budget_s", 1.0)
    grads = allreduce_inputs(size, devices)
    xs = [random_matrix(chain_size, d, seed=i) for i, d in enumerate(devices)]
    reduce_only = allreduce_in_one_graph(devices)
    compute_only = chains_in_one_graph(devices, chain_length)
    combined = allreduce_and_compute(devices, chain_length, overlap)
    flops = n_devices * chain_flops(chain_size, chain_length)
    kind = devices[0].kind
    steps = [
        lambda: measure(
            lambda: reduce_only(*grads),
            f"all-reduce of {format_bytes(size)} on {n_devices} devices",
            nbytes=size,
            **measure_options,
        ),
        lambda: measure(
            lambda: compute_only(*xs),
            f"{chain_length} matmuls of {chain_size}² on each device",
            flops=flops,
            **measure_options,
        ),
        lambda: measure(
            lambda: combined(grads, xs),
            "both, " + ("overlapped" if overlap else "one after the other"),
            **measure_options,
        ),
        lambda: _trace_with_allreduce(combined, grads, xs, devices=_names(devices)),
    ]
    results = []
    for done, step in enumerate(steps, start=1):
        results.append(step())
        if progress:
            progress(done, len(steps))
    alone, compute, both, traced = results
    consumers = allreduce_consumers(combined.get_concrete_function(grads, xs).graph)
    rows = allreduce_timeline(traced, consumers)
    names = list(_names(devices))
    return OverlapResult(n_devices, kind, overlap, size, alone, compute, both, rows, names)


def _short(device: str) -> str:
    return device_label(device).removeprefix("/device:")


def _trace_with_allreduce(fn, *args, devices: Sequence[str], tries: int = 3) -> list[OpEvent]:
    """`trace(fn, *args)`, again if an all-reduce row is missing.

    A collective's profiler event closes after its completion callback; when it is the last op
    of the call, the profiler can stop first and lose it.
    """
    wanted = {device_label(device) for device in devices}
    rows: list[OpEvent] = []
    for _ in range(tries):
        rows = trace(fn, *args)
        if wanted <= {r.device for r in allreduce_rows(rows)}:
            break
    return rows
