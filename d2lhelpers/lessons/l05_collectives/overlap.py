"""Notebook 05: an all-reduce and independent matmuls in one function, timed and traced.

The seed's recap: "fuse all_reduce with the next layer's forward". Whether running at the same
time saves time depends on what the link is. On logical CPUs the ring's copies and adds are
work for the same cores the matmuls use; on a GPU the link has its own copy engines. So the run
reports three things that need not agree: the trace (did they run at the same time?), the time
(did that save any?), and how much of the shorter part was hidden, all from this run's numbers.

Ideals. One after the other: allreduce + compute - launch, since one function pays one call's
fixed cost where the two separate calls paid two (the saved launch is not hidden time).
Overlapped: max(allreduce, compute), where the hidden share reaches its ceiling
1 - launch / min(allreduce, compute), not 100%. The all-reduce and the combined function are
the notebook's (`allreduce_in_one_graph`, `allreduce_and_compute`): an edited cell changes
what runs.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable

from d2lhelpers.collectives import tf_collective
from d2lhelpers.collectives.tf_allreduce import (
    allreduce_consumers,
    allreduce_devices,
    allreduce_inputs,
    allreduce_rows,
    allreduce_timeline,
    message_elements,
    require_message_fits,
    trace_with_allreduce,
)
from d2lhelpers.core.checks import require_count, require_measure_options
from d2lhelpers.core.counts import chain_bytes, chain_flops
from d2lhelpers.core.progress import Steps
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import (
    MiB,
    cores_phrase,
    device_names,
    format_bytes,
    format_seconds,
    short_device_name,
    usable_cores,
)
from d2lhelpers.core.verdicts import (
    LIKELY_CAUSES,
    Comparison,
    beats_ideal,
    hidden_ceiling,
    hidden_share,
    impossible,
    noise_of,
)
from d2lhelpers.timing.benchmark import Measurement
from d2lhelpers.timing.interleaved import measure_interleaved, turn_options
from d2lhelpers.tracing.timeline import (
    OpEvent,
    busy_intervals,
    busy_seconds,
    incomplete_reason,
    overlap_seconds,
)
from d2lhelpers.workloads import (
    chains_in_one_graph,
    random_matrix,
)

OVERLAP_CAUSES = (
    LIKELY_CAUSES[0],
    "the parts alone were timed while the machine was busier than for the combined run",
    "work was skipped, or the clock stopped before the devices finished",
)
MAX_CHAIN_SIZE = 8192  # matrices beyond this take minutes per chain on CPUs


@dataclasses.dataclass(repr=False)  # shown by its tables (`Reported`)
class AllreduceOverlapResult(Reported):
    """The all-reduce alone, the compute alone, a call's fixed cost, and both in one function.

    `launch`: the compute function on 1x1 matrices, a call that does no work: what one function
    saves over two separate calls. `rows`: one traced call of the combined function.
    """

    n_devices: int
    kind: str
    overlap: bool
    nbytes: int
    allreduce: Measurement
    compute: Measurement
    launch: Measurement
    combined: Measurement
    rows: list[OpEvent]  # one traced call, through `allreduce_timeline`
    devices: list[str]
    cores: int = dataclasses.field(default_factory=usable_cores)

    @property
    def ideal_sequential(self) -> float:
        """allreduce + compute - launch: one function pays one launch, two calls paid two."""
        return self.allreduce.median + self.compute.median - self.launch.median

    @property
    def ideal_overlapped(self) -> float:
        return max(self.allreduce.median, self.compute.median)

    @property
    def ideal(self) -> float:
        return self.ideal_overlapped if self.overlap else self.ideal_sequential

    @property
    def shorter(self) -> float:
        return min(self.allreduce.median, self.compute.median)

    @property
    def hidden_fraction(self) -> float:
        """(allreduce + compute - launch - combined) / min(allreduce, compute): the raw number."""
        return hidden_share(self.ideal_sequential, self.combined.median, self.shorter)

    @property
    def hidden_ceiling(self) -> float:
        """1 - launch / min(allreduce, compute): the share when the combined call takes
        max(allreduce, compute), the most overlap can hide."""
        return hidden_ceiling(self.launch.median, self.shorter)

    @property
    def hidden_noise(self) -> float:
        """The band, as a fraction of the shorter part, inside which `hidden_fraction` moves."""
        parts = (self.allreduce, self.compute, self.launch, self.combined)
        return sum(noise_of(m) for m in parts) / self.shorter

    def against_sequential(self) -> Comparison:
        """The combined run against the one-after-the-other ideal, with all four noises."""
        return Comparison(
            self.combined.median, self.ideal_sequential, self.hidden_noise * self.shorter
        )

    def traced_overlap(self) -> dict[str, float]:
        """Per device, |all-reduce ∩ matmuls| / the shorter of the two, from the trace.

        1 when the shorter ran entirely while the other did; 0 when they took turns. Empty
        for an incomplete trace: its missing rows would read as time not overlapped.
        """
        if incomplete_reason(self.rows):
            return {}
        fractions = {}
        for device in self.devices:
            reducing = busy_intervals(allreduce_rows(self.rows, device))
            computing = busy_intervals(self.rows, device, "matmul")
            shorter = min(busy_seconds(reducing), busy_seconds(computing))
            both = overlap_seconds(reducing, computing)
            fractions[device] = both / shorter if shorter > 0 else 0.0
        return fractions

    @property
    def impossible_result(self) -> bool:
        """Faster than max(allreduce, compute) (overlapped) or than the sum (one after the
        other) beyond the noise: a measurement problem, not a result."""
        longer = max(self.allreduce, self.compute, key=lambda m: m.median)
        if beats_ideal(self.combined, self.ideal_overlapped, noise_of(longer)):
            return True
        return not self.overlap and self.against_sequential().a_faster

    @property
    def above_ceiling(self) -> bool:
        """Overlapped, a hidden share above `hidden_ceiling` but inside the noise: too noisy to
        tell which time is off. The share passes its ceiling exactly when the combined call is
        faster than max(allreduce, compute), so that is what is compared (no rounding)."""
        return (
            self.overlap
            and not self.impossible_result
            and self.combined.median < self.ideal_overlapped
        )

    @property
    def verdict(self) -> str:
        """What the time says, then what the trace says, both from this run."""
        if self.impossible_result:
            return "No verdict: the combined run measured faster than its ideal (see the warning)."
        if self.above_ceiling:
            return (
                "No verdict: the hidden share came out above its ceiling, inside the noise (see "
                "the warning)."
            )
        c = self.against_sequential()
        both = f"the two in one function took {format_seconds(c.a)}"
        sequential = f"one after the other ({format_seconds(c.b)}, the parts' sum less a launch)"
        if not self.overlap:
            if c.a_slower:
                timed = f"In order, {both}: {c.ratio:.2f}x its ideal, {sequential}."
            else:
                timed = (
                    f"In order, {both}: no measurable difference from its ideal, {sequential}, "
                    f"within the noise of {format_seconds(c.noise)}."
                )
        elif c.a_faster:
            timed = (
                f"Overlapped, {both}: {format_seconds(c.b - c.a)} less than {sequential}, "
                f"hiding {self.hidden_fraction:.0%} of the shorter part (at most "
                f"{self.hidden_ceiling:.0%}: 1 - launch / min(all-reduce, compute))."
            )
        elif c.a_slower:
            timed = (
                f"Overlapped, {both}: {c.ratio:.2f}x {sequential}: running them at once cost "
                "time here and hid none."
            )
        else:
            timed = (
                f"Overlapped, {both}: no measurable difference from {sequential}, within the "
                f"noise of {format_seconds(c.noise)}: no time measurably hidden."
            )
        return f"{timed} {self._traced_sentence(c)}"

    def _traced_sentence(self, c: Comparison) -> str:
        fractions = self.traced_overlap()
        if not fractions:
            return incomplete_reason(self.rows) or "The trace caught no all-reduce and matmuls."
        each = ", ".join(f"{short_device_name(d)} {f:.0%}" for d, f in fractions.items())
        sentence = (
            f"The trace shows the all-reduce and the matmuls at the same time for {each} of "
            "the shorter part."
        )
        if self.kind == "logical CPU" and self.cores == 1 and max(fractions.values()) > 0:
            sentence += (
                " With 1 usable CPU core, ops at the same time in a trace were both in "
                "progress, taking turns on that core."
            )
        traced = statistics.mean(fractions.values())
        hidden = self.hidden_fraction if c.a_faster else 0.0
        if self.overlap and traced - hidden > self.hidden_noise:
            sentence += " Running at the same time is not running for free"
            if self.kind == "logical CPU":
                sentence += (
                    f"; a hypothesis this run does not test: both are work for the same "
                    f"{cores_phrase(self.cores)}, the ring's copies and adds as much as the "
                    "matmuls."
                )
            else:
                sentence += "."
        return sentence

    def tables(self) -> list[Table]:
        parts = [self.allreduce, self.compute, self.launch, self.combined]
        names = [
            f"all-reduce of {format_bytes(self.nbytes)} alone",
            "matmul chains alone",
            "launch: the compute function on 1x1 matrices",
            "both in one function, " + ("overlapped" if self.overlap else "one after the other"),
        ]
        rows = [
            (name, format_seconds(m.median), format_seconds(m.iqr), len(m.times))
            for name, m in zip(names, parts, strict=True)
        ]
        title = f"all-reduce and compute on {self.n_devices} {self.kind} devices"
        measured = Table(title, ("run", "median", "IQR", "runs"), rows)
        ideal_rows = [
            ("one after the other: all-reduce + compute - launch", self.ideal_sequential),
            ("overlapped: max(all-reduce, compute)", self.ideal_overlapped),
        ]
        compared = [
            (name, format_seconds(ideal), f"{self.combined.median / ideal:.2f}x")
            for name, ideal in ideal_rows
        ]
        compared.append(
            (
                "hidden: (sum - launch - both) / min(all-reduce, compute)",
                f"{self.hidden_fraction:.0%} ± {self.hidden_noise:.0%}",
                f"ceiling {self.hidden_ceiling:.0%} = 1 - launch / min(all-reduce, compute)"
                if self.overlap
                else "ideal 0%: order forced",
            )
        )
        for device, fraction in self.traced_overlap().items():
            compared.append(
                (f"traced at the same time on {short_device_name(device)}", f"{fraction:.0%}", "")
            )
        if incomplete_reason(self.rows):
            compared.append(("traced at the same time", "trace incomplete", ""))
        columns = ("ideal, or what was hidden and traced", "value", "both / ideal")
        return [
            measured,
            Table("against the ideals", columns, compared, [self.verdict], self.flags()),
        ]

    def flags(self) -> list[str]:
        found = []
        if self.impossible_result:
            ideal = "max(all-reduce, compute)" if self.overlap else "all-reduce + compute - launch"
            found.append(
                impossible(
                    f"both in one function took {format_seconds(self.combined.median)}, faster "
                    f"than its ideal {ideal}",
                    OVERLAP_CAUSES,
                )
            )
        hidden, noise = self.hidden_fraction, self.hidden_noise
        if self.above_ceiling:
            found.append(
                f"a hidden fraction of {hidden:.0%} (± {noise:.0%}) is above its ceiling "
                f"{self.hidden_ceiling:.0%} = 1 - launch / min(all-reduce, compute) (the combined "
                "call below max(all-reduce, compute)), inside the noise: this run was too noisy "
                "to tell which time is off, so not a result"
            )
        elif hidden < 0:
            found.append(
                f"a hidden fraction of {hidden:.0%} (± {noise:.0%}) is below 0, so it is not a "
                "share of time hidden: the combined run took longer than the parts one after "
                "the other"
                + (" (inside the noise)" if -hidden <= noise else "")
                + ". Likely causes: the runs contend for the same cores or memory, or the "
                "machine was busy (another program or another copy of this notebook)"
            )
        for m in (self.allreduce, self.compute, self.launch, self.combined):
            found += [f"{m.label}: {warning}" for warning in m.warnings]
        return found


def _overlap_checks(n_devices, size, chain_size, chain_length) -> tuple[list, int, int, int]:
    if n_devices is None:
        raise TypeError("n_devices must be a whole number of devices, 2 or more, got None")
    devices = allreduce_devices(n_devices, "there is nothing to overlap")
    message_elements(size, "size")
    chain_size = require_count("chain_size", chain_size, 1, MAX_CHAIN_SIZE)
    chain_length = require_count("chain_length", chain_length, 1, 1000)
    return devices, size, chain_size, chain_length


def run_allreduce_overlap(
    n_devices: int = 2,
    size: int = 8 * MiB,
    chain_size: int = 256,
    chain_length: int = 12,
    overlap: bool = True,
    progress: Callable[[int, int, str], None] | None = None,
    rounds: int = 3,
    allreduce_and_compute: Callable = tf_collective.allreduce_and_compute,
    allreduce_in_one_graph: Callable = tf_collective.allreduce_in_one_graph,
    **measure_options,
) -> AllreduceOverlapResult:
    """Time an all-reduce of `size` bytes per device and a chain of `chain_length` matmuls of
    `chain_size`² per device: each alone, then together in one function, and trace that one.
    The all-reduce alone is `allreduce_in_one_graph(devices)`; both together are
    `allreduce_and_compute(devices, chain_length, overlap)`.
    The four are timed in turns, `rounds` times (`measure_interleaved`), so a machine whose load
    changes meanwhile slows them alike.

    The defaults make the two parts similar (a few ms each on 2 cores), where the two ideals
    differ most. Checked before anything is allocated: at least 2 devices, a size that is a
    multiple of 4 bytes, and memory for both. `progress(done, total, status)` after every
    timed block.
    """
    for fn in (allreduce_and_compute, allreduce_in_one_graph):
        if not callable(fn):
            raise TypeError(f"pass the notebook's functions, got {fn!r}")
    options = require_measure_options(measure_options, budget_s=1.0)
    rounds = require_count("rounds", rounds, 1, 20)
    if not isinstance(overlap, bool):
        raise TypeError(f"overlap must be True or False, got {overlap!r}")
    devices, size, chain_size, chain_length = _overlap_checks(
        n_devices, size, chain_size, chain_length
    )
    what = f"an all-reduce of {format_bytes(size)} and a {chain_size}² matmul chain"
    require_message_fits(size, devices, what, "size", extra_bytes=chain_bytes(chain_size))
    grads = allreduce_inputs(size, devices)
    xs = [random_matrix(chain_size, d, seed=i) for i, d in enumerate(devices)]
    tiny_xs = [random_matrix(1, d) for d in devices]
    reduce_only = allreduce_in_one_graph(devices)
    compute_only = chains_in_one_graph(devices, chain_length)
    combined = allreduce_and_compute(devices, chain_length, overlap)
    steps = Steps(progress, rounds + 1)
    n = len(devices)
    flops = n * chain_flops(chain_size, chain_length)
    both = "both, " + ("overlapped" if overlap else "one after the other")
    runs = [
        (lambda: reduce_only(*grads), f"all-reduce of {format_bytes(size)} on {n} devices",
         {"nbytes": size}),
        (lambda: compute_only(*xs), f"{chain_length} matmuls of {chain_size}² on each device",
         {"flops": flops}),
        (lambda: compute_only(*tiny_xs), "launch: the compute function on 1x1 matrices", {}),
        (lambda: combined(grads, xs), both, {}),
    ]  # fmt: skip
    measured = measure_interleaved(
        runs,
        rounds,
        on_round=lambda: steps.finish(f"round {steps.done + 1} of {rounds}"),
        on_repeat=lambda r, label, repeat: steps.say(
            f"measuring {label} (round {r} of {rounds}), repeat {repeat}"
        ),
        **turn_options(options, rounds),
    )
    steps.say("tracing one call of both in one function")
    names = device_names(devices)
    traced = trace_with_allreduce(combined, grads, xs, devices=names)
    consumers = allreduce_consumers(combined.get_concrete_function(grads, xs).graph)
    rows = allreduce_timeline(traced, consumers)
    steps.finish("the trace")
    kind = devices[0].kind
    return AllreduceOverlapResult(n, kind, overlap, size, *measured, rows, list(names))
