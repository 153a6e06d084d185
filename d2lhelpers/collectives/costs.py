"""Cost models for splitting a model across devices: tensor parallel, pipeline, replicas.

Pure Python, no TensorFlow: these are the numbers the measurements are held against.

- Tensor parallel: each of N devices computes 1/N of every layer, then all pay the
  communication: per-token time t(N) = compute/N + comm, speedup S(N) = compute / t(N),
  efficiency E(N) = (compute/N) / (compute/N + comm) = S(N) / N.
- Pipeline: p stages, m microbatches, each stage a time t per microbatch: the last microbatch
  leaves after (m + p - 1) t, of which a share (p - 1) / (m + p - 1) every stage sits idle
  (uneven stages: sum(t_s) + (m - 1) max(t_s)).
- Replicas: G devices as G/k independent k-way groups; throughput adds up, and one failed
  device takes down only its own group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The seed's table: (GPUs, communication ms per token) at 40 ms of compute per token on one GPU.
SEED_COMPUTE_MS = 40.0
SEED_ROWS = ((2, 1.5), (4, 3.0), (8, 6.0), (8, 60.0))
TABLE_HEADER = "GPUs  compute/token  comm/token  speedup vs 1 GPU"


def _check_devices(n: int, what: str = "device count") -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{what} must be a whole number >= 1, got {n!r}")


def _check_time(ms: float, what: str) -> None:
    if not ms >= 0:  # also refuses NaN
        raise ValueError(f"{what} must be a time >= 0 ms, got {ms!r}")


def tensor_parallel_time_ms(compute_ms: float, n_devices: int, comm_ms: float) -> float:
    """Per-token time on `n_devices` tensor-parallel devices: compute/N + comm."""
    _check_devices(n_devices)
    _check_time(compute_ms, "compute per token")
    _check_time(comm_ms, "communication per token")
    return compute_ms / n_devices + comm_ms


def tensor_parallel_speedup(compute_ms: float, n_devices: int, comm_ms: float) -> float:
    """Speedup over one device (which needs no communication): compute / (compute/N + comm)."""
    per_token = tensor_parallel_time_ms(compute_ms, n_devices, comm_ms)
    if compute_ms == 0:
        raise ValueError("compute per token must be > 0 ms for a speedup to mean anything")
    return compute_ms / per_token


def tensor_parallel_efficiency(compute_ms: float, n_devices: int, comm_ms: float) -> float:
    """Share of each device's time spent computing: (compute/N) / (compute/N + comm)."""
    per_token = tensor_parallel_time_ms(compute_ms, n_devices, comm_ms)
    return (compute_ms / n_devices) / per_token if per_token > 0 else 1.0


@dataclass(frozen=True)
class EfficiencyRow:
    """One row of the seed's table: N devices, each computing 1/N, then communicating."""

    n_devices: int
    compute_ms: float  # per token on each device: total compute / N
    comm_ms: float
    per_token_ms: float
    speedup: float  # vs one device
    efficiency: float  # speedup / N

    def line(self) -> str:
        """This row exactly as the seed's Go program prints it."""
        return (
            f"{self.n_devices:4d}  {self.compute_ms:10.1f} ms  {self.comm_ms:7.1f} ms  "
            f"{self.speedup:8.2f}x"
        )


class EfficiencyTable(list):
    """`EfficiencyRow`s that print as the Go program prints them: its header, a line per row."""

    def __str__(self) -> str:
        return "\n".join([TABLE_HEADER, *(row.line() for row in self)]) + "\n"


def efficiency_table(compute_ms: float = SEED_COMPUTE_MS, rows=SEED_ROWS) -> EfficiencyTable:
    """The seed's tensor-parallel table: one row per (devices, communication ms per token);
    `str()` of it is the Go program's output (newline-terminated)."""
    table = EfficiencyTable()
    for n, comm_ms in rows:
        per_token = tensor_parallel_time_ms(compute_ms, n, comm_ms)
        table.append(
            EfficiencyRow(
                n_devices=n,
                compute_ms=compute_ms / n,
                comm_ms=float(comm_ms),
                per_token_ms=per_token,
                speedup=tensor_parallel_speedup(compute_ms, n, comm_ms),
                efficiency=tensor_parallel_efficiency(compute_ms, n, comm_ms),
            )
        )
    return table


def break_even_comm_ms(compute_ms: float, n_from: int, comm_from: float, n_to: int) -> float:
    """Communication per token at which `n_to` devices are no faster than `n_from` devices.

    Solves compute/n_to + c = compute/n_from + comm_from for c: with 40 ms of compute and
    2 devices at 1.5 ms, 4 devices are no faster once c >= 20 + 1.5 - 10 = 11.5 ms.
    A result <= 0 means `n_to` devices are never faster (fewer devices, less compute each).
    """
    baseline = tensor_parallel_time_ms(compute_ms, n_from, comm_from)
    _check_devices(n_to)
    return baseline - compute_ms / n_to


def pipeline_bubble_fraction(stages: int, microbatches: int) -> float:
    """Share of the time each stage sits idle: (p - 1) / (m + p - 1)."""
    _check_devices(stages, "number of pipeline stages")
    _check_devices(microbatches, "number of microbatches")
    return (stages - 1) / (microbatches + stages - 1)


def pipeline_step_time(stage_times, microbatches: int) -> float:
    """GPipe's step: the first microbatch passes every stage, the rest follow at the slowest's pace.

    sum(t_s) + (m - 1) max(t_s); with p equal stages of time t that is (m + p - 1) t. Any unit.
    """
    stage_times = list(stage_times)
    _check_devices(len(stage_times), "number of pipeline stages")
    _check_devices(microbatches, "number of microbatches")
    for t in stage_times:
        _check_time(t, "stage time")
    return sum(stage_times) + (microbatches - 1) * max(stage_times)


@dataclass(frozen=True)
class GroupLayout:
    """G devices as `n_groups` independent tensor-parallel groups of `group_size` each."""

    n_groups: int
    group_size: int
    per_token_ms: float  # one token through one group
    tokens_per_s: float  # all groups together, each serving its own requests
    speedup: float  # vs one device running the whole model
    lost_on_failure: float  # share of tokens_per_s lost when one device fails

    @property
    def label(self) -> str:
        if self.n_groups == 1:
            return f"one {self.group_size}-way group"
        return f"{self.n_groups} replicas of {self.group_size}-way groups"


def layout(n_devices: int, group_size: int, compute_ms: float, comm_ms: float) -> GroupLayout:
    """`n_devices` split into replicas of `group_size`-way tensor-parallel groups.

    A group serves one token every compute/k + comm ms; the G/k groups work independently, so
    throughput = (G/k) * 1000 / (compute/k + comm) tokens/s. One failed device stops its group
    (a split model cannot run with a piece missing): the share lost is 1 / (G/k).
    """
    _check_devices(n_devices)
    _check_devices(group_size, "group size")
    if n_devices % group_size:
        raise ValueError(f"{n_devices} devices do not split into groups of {group_size}")
    n_groups = n_devices // group_size
    per_token = tensor_parallel_time_ms(compute_ms, group_size, comm_ms)
    if per_token == 0:
        raise ValueError("compute and communication are both 0 ms: throughput is unbounded")
    return GroupLayout(
        n_groups=n_groups,
        group_size=group_size,
        per_token_ms=per_token,
        tokens_per_s=n_groups * 1000.0 / per_token,
        speedup=n_groups * compute_ms / per_token,
        lost_on_failure=1.0 / n_groups,
    )


@dataclass(frozen=True)
class ReplicasVsGroup:
    """The seed's "Try it" 3: one big group against replicas of small ones."""

    one_group: GroupLayout
    replicas: GroupLayout

    @property
    def throughput_ratio(self) -> float:
        """Replicas' tokens/s over the one group's."""
        return self.replicas.tokens_per_s / self.one_group.tokens_per_s


def replicas_vs_one_group(
    n_devices: int, group_size: int, compute_ms: float, comm_ms_group: float, comm_ms_all: float
) -> ReplicasVsGroup:
    """G devices as one G-way group (comm `comm_ms_all`) vs G/k replicas (comm `comm_ms_group`).

    Seed numbers, 8 devices, model fits on 2, 40 ms compute: one 8-way group at 6 ms comm gives
    1000 / (5 + 6) = 90.9 tokens/s and loses everything to one failure; four 2-way replicas at
    1.5 ms give 4 * 1000 / (20 + 1.5) = 186.0 tokens/s and lose a quarter.
    """
    return ReplicasVsGroup(
        one_group=layout(n_devices, n_devices, compute_ms, comm_ms_all),
        replicas=layout(n_devices, group_size, compute_ms, comm_ms_group),
    )


# --- The alpha-beta model of communication --------------------------------------------------------


def alpha_beta_time_s(rounds: int, nbytes: float, alpha_s: float, beta_bytes_per_s: float) -> float:
    """`rounds` message rounds moving `nbytes` one after another: rounds * alpha + S / beta."""
    if rounds < 0 or nbytes < 0:
        raise ValueError(f"need rounds >= 0 and bytes >= 0, got {rounds}, {nbytes}")
    if not alpha_s >= 0 or not beta_bytes_per_s > 0:
        raise ValueError(
            f"need alpha >= 0 s and beta > 0 bytes/s, got {alpha_s}, {beta_bytes_per_s}"
        )
    return rounds * alpha_s + nbytes / beta_bytes_per_s


def bus_bandwidth_bound_s(n_ranks: int, nbytes: float, bandwidth_bytes_per_s: float) -> float:
    """No all-reduce beats 2(n-1)/n * S / B: each rank must send (and receive) that many bytes."""
    _check_devices(n_ranks, "number of ranks")
    if nbytes < 0 or not bandwidth_bytes_per_s > 0:
        raise ValueError(
            f"need bytes >= 0 and bandwidth > 0, got {nbytes}, {bandwidth_bytes_per_s}"
        )
    return 2 * (n_ranks - 1) / n_ranks * nbytes / bandwidth_bytes_per_s


@dataclass(frozen=True)
class Residual:
    """One held-out (or fitted) size: what was measured beside what the model said."""

    nbytes: float
    measured_s: float
    predicted_s: float

    @property
    def relative(self) -> float:
        """(measured - predicted) / predicted: +0.1 means it took 10% longer than predicted.
        The one residual of every table (notebooks 05 and 06, `make hosts`)."""
        return (self.measured_s - self.predicted_s) / self.predicted_s


@dataclass(frozen=True)
class AlphaBeta:
    """t(S) = alpha + S / beta: a start-up cost per call plus S bytes at a bandwidth.

    Fitted to a whole all-reduce these are effective values: for a ring of n ranks,
    alpha = 2(n-1) * alpha_link and beta = beta_link * n / (2(n-1)).
    """

    alpha_s: float
    beta_bytes_per_s: float

    def predict(self, nbytes: float) -> float:
        """Predicted seconds for `nbytes`."""
        return self.alpha_s + nbytes / self.beta_bytes_per_s

    def ring_link(self, n_ranks: int) -> AlphaBeta:
        """One link's values, when this models a whole ring all-reduce of `n_ranks`: its 2(n-1)
        rounds share alpha, and each link carries 2(n-1)/n of S, so alpha / 2(n-1) and
        beta * 2(n-1)/n (the bus bandwidth)."""
        _check_devices(n_ranks, "number of ranks")
        if n_ranks < 2:
            raise ValueError("a ring of one rank has no link: need 2 ranks or more")
        hops = 2 * (n_ranks - 1)
        return AlphaBeta(self.alpha_s / hops, self.beta_bytes_per_s * hops / n_ranks)

    def residuals(self, nbytes, seconds) -> list[Residual]:
        """Measured against predicted, size by size (use sizes the fit did not see)."""
        samples = _samples(nbytes, seconds, at_least=1)
        return [Residual(s, t, self.predict(s)) for s, t in samples]

    @classmethod
    def from_measurements(cls, tiny_s: float, large_nbytes: float, large_s: float) -> AlphaBeta:
        """alpha from a tiny message alone; beta from one large transfer, less that alpha."""
        if not 0 <= tiny_s < large_s or not large_nbytes > 0:
            raise ValueError("need 0 <= tiny time < large time and a large size > 0 bytes")
        return cls(tiny_s, large_nbytes / (large_s - tiny_s))


def _samples(nbytes, seconds, at_least: int) -> list[tuple[float, float]]:
    samples = list(zip(nbytes, seconds, strict=True))
    if len(samples) < at_least:
        raise ValueError(f"need at least {at_least} (bytes, seconds) samples, got {len(samples)}")
    if any(s < 0 or not t > 0 for s, t in samples):
        raise ValueError("sizes must be >= 0 bytes and times > 0 s")
    return samples


FIT_METHOD = "least squares on relative error"  # how `fit_alpha_beta` fits, as tables name it


def fit_alpha_beta(nbytes, seconds) -> AlphaBeta:
    """Least squares on relative error: minimises sum_i ((alpha + S_i/beta - t_i) / t_i)^2.

    Relative error, because sizes span decades: plain least squares would let the largest
    size alone decide and leave alpha to noise. Constrained to alpha >= 0 and 1/beta >= 0
    (beta = inf when time does not grow with size over the samples).
    """
    samples = _samples(nbytes, seconds, at_least=2)
    if len({s for s, _ in samples}) < 2:
        raise ValueError("need at least two different sizes to separate alpha from beta")
    # Each sample, divided by its time: alpha * (1/t) + (1/beta) * (S/t) ~ 1.
    ww = sum(1 / t**2 for _, t in samples)
    wu = sum(s / t**2 for s, t in samples)
    uu = sum((s / t) ** 2 for s, t in samples)
    w1 = sum(1 / t for _, t in samples)
    u1 = sum(s / t for s, t in samples)
    det = ww * uu - wu * wu
    alpha = (w1 * uu - u1 * wu) / det
    inverse_beta = (ww * u1 - wu * w1) / det
    if alpha < 0:
        alpha, inverse_beta = 0.0, u1 / uu
    if inverse_beta <= 0:
        alpha, inverse_beta = w1 / ww, 0.0
    return AlphaBeta(alpha, 1 / inverse_beta if inverse_beta > 0 else math.inf)


def fit_noise_s(nbytes, seconds, noises_s, value) -> float:
    """How far `value(fit_alpha_beta(nbytes, seconds))` (seconds: a prediction, alpha, a ring's
    time) could move when each fitted time moves by its own noise (`noises_s`, seconds): each
    sample moved down and up by its noise alone, half the change it makes, and those changes
    combined as the root of their sum of squares. First order, as the ratios' bands are; not
    their worst-case sum, because the sizes are timed apart, so their noises are independent, and
    a worst-case sum over many sizes would widen the band with every size added to the fit."""
    samples = _samples(nbytes, seconds, at_least=2)
    if len(noises_s) != len(samples) or any(not n >= 0 for n in noises_s):
        raise ValueError("need one noise >= 0 s for each (bytes, seconds) sample")
    sizes = [s for s, _ in samples]
    squares = 0.0
    for i, ((_, t), noise) in enumerate(zip(samples, noises_s, strict=True)):
        moved = []
        for sign in (-1, 1):
            times = [u for _, u in samples]
            times[i] = max(t + sign * noise, t * 1e-3)  # a time stays > 0
            moved.append(value(fit_alpha_beta(sizes, times)))
        squares += ((moved[1] - moved[0]) / 2) ** 2
    return math.sqrt(squares)


def fit_prediction_noise_s(nbytes, seconds, noises_s, at: float) -> float:
    """`fit_noise_s` of the fit's prediction at `at` bytes (at 0: alpha's band). For two sizes,
    whose fit passes through both, it is sqrt(((1 - w) n_1)^2 + (w n_2)^2),
    w = (at - S_1) / (S_2 - S_1)."""
    return fit_noise_s(nbytes, seconds, noises_s, lambda fit: fit.predict(at))
