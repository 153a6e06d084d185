"""Notebook 05's panel: the alpha-beta model's all-reduce time per algorithm for the learner's
ranks, size, alpha and beta, beside the bandwidth bound and TensorFlow's own all-reduce measured
(the notebook's `allreduce_in_one_graph`, so an edited cell changes what Run times).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from d2lhelpers.collectives import tf_collective
from d2lhelpers.collectives.algorithms import (
    ALGORITHMS,
    AllreduceCosts,
    allreduce_costs,
    allreduce_time_s,
)
from d2lhelpers.collectives.costs import AlphaBeta, bus_bandwidth_bound_s
from d2lhelpers.collectives.tf_allreduce import allreduce_inputs, require_message_fits
from d2lhelpers.core.checks import require_count, require_measure_options
from d2lhelpers.core.heap import return_freed_memory
from d2lhelpers.core.progress import Steps
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import KiB, format_bytes, format_rate, format_seconds, usable_cores
from d2lhelpers.core.verdicts import relative_noise, with_noise
from d2lhelpers.devices import select_devices, setup_devices
from d2lhelpers.lessons.l05_collectives.plots import plot_allreduce_model
from d2lhelpers.lessons.l05_collectives.sweep import run_allreduce_sweep
from d2lhelpers.timing.benchmark import Measurement, measure
from d2lhelpers.timing.estimate import DRAW_S, call_seconds, measure_seconds, trace_seconds
from d2lhelpers.ui.panel import Panel, slider

PANEL_MEASURE = {"min_runs": 5, "max_runs": 30, "budget_s": 1.0}
LATENCY_BOUND = 0.9  # alpha's share of a prediction above which the bound says little
FAR_FROM_BOUND = 10  # predictions this many times the bound get an explanation


def format_ratio(ratio: float) -> str:
    """'1.52x', '25.0x', '140,626x': three digits or so, whatever the size."""
    if ratio >= 100:
        return f"{ratio:,.0f}x"
    return f"{ratio:.1f}x" if ratio >= 10 else f"{ratio:.2f}x"


@dataclasses.dataclass(repr=False)  # shown by its tables (`Reported`)
class AllreduceModelResult(Reported):
    """The alpha-beta prediction per algorithm for one size, its bound, and TF's measured time."""

    ranks: int
    nbytes: int
    alpha_s: float
    beta_bytes_per_s: float
    set_up: int  # devices set up here: TF's all-reduce is measured only up to this many ranks
    measured: Measurement | None = None
    kind: str = ""

    def costs(self, algorithm: str) -> AllreduceCosts:
        return allreduce_costs(algorithm, self.ranks, self.nbytes, element_bytes=1)

    @property
    def predicted(self) -> dict[str, float]:
        return {a: self.costs(a).time_s(self.alpha_s, self.beta_bytes_per_s) for a in ALGORITHMS}

    def latency_share(self, algorithm: str) -> float:
        """rounds * alpha / the predicted time: 1 when start-ups are all of it."""
        return self.costs(algorithm).rounds * self.alpha_s / self.predicted[algorithm]

    @property
    def bound(self) -> float:
        return bus_bandwidth_bound_s(self.ranks, self.nbytes, self.beta_bytes_per_s)

    @property
    def fastest(self) -> str:
        return min(self.predicted, key=self.predicted.get)

    @property
    def verdict(self) -> str:
        """The model's fastest algorithm for these values, and by how much (the model has no
        noise: these are predictions, not measurements)."""
        times = self.predicted
        best = self.fastest
        others = sorted((t, a) for a, t in times.items() if a != best)
        second_time, second = others[0]
        if second_time == times[best]:
            return (
                f"The α-β model predicts {best} and {second} equally fast for "
                f"{format_bytes(self.nbytes)} on {self.ranks} ranks: {format_seconds(times[best])}."
            )
        return (
            f"The α-β model predicts {best} fastest for {format_bytes(self.nbytes)} on "
            f"{self.ranks} ranks: {format_seconds(times[best])}, {second_time / times[best]:.2f}x "
            f"faster than {second}."
        )

    def tables(self) -> list[Table]:
        rows = []
        for algorithm, seconds in self.predicted.items():
            costs = self.costs(algorithm)
            rows.append(
                (
                    f"{algorithm} (model)",
                    costs.rounds,
                    format_seconds(seconds),
                    f"{self.latency_share(algorithm):.0%}",
                    format_ratio(seconds / self.bound),
                )
            )
        rows.append(("bound 2(n-1)/n·S/β", "", format_seconds(self.bound), "0%", format_ratio(1)))
        verdicts = [self.verdict, *self._bound_sentences(), self._measured_sentence()]
        flags = (
            [f"{self.measured.label}: {w}" for w in self.measured.warnings] if self.measured else []
        )
        if self.measured is not None:
            rows.append(
                (
                    f"TensorFlow, measured here ({self.kind})",
                    "",
                    with_noise(self.measured),
                    "",
                    # read 165: a bound from the sliders' β, not this machine's
                    f"{format_ratio(self.measured.median / self.bound)} (the sliders' bound)",
                )
            )
        title = (
            f"all-reduce of {format_bytes(self.nbytes)} on {self.ranks} ranks, "
            f"α = {format_seconds(self.alpha_s)}, β = {format_rate(self.beta_bytes_per_s, 'B/s')}"
        )
        columns = ("algorithm", "rounds", "time", "of which α", "x the bound")
        return [Table(title, columns, rows, verdicts, flags)]

    def _bound_sentences(self) -> list[str]:
        """Why a prediction is far above the bound: the bound counts bytes, not start-ups."""
        far = {
            a: t / self.bound for a, t in self.predicted.items() if t > FAR_FROM_BOUND * self.bound
        }
        if not far:
            return []
        latency = [a for a in far if self.latency_share(a) > LATENCY_BOUND]
        ratios = ", ".join(f"{a} {format_ratio(r)}" for a, r in far.items())
        sentence = (
            f"The bound counts bytes only: {format_seconds(self.bound)} for these S and β, "
            f"far below the predictions ({ratios} the bound). "
        )
        if latency:
            sentence += (
                f"For {_listed(latency)} the α start-ups are over {LATENCY_BOUND:.0%} of the time: "
                "latency-bound, so the ratio measures α and rounds, not bandwidth. "
            )
        queued = [a for a in far if a not in latency]
        if queued:
            sentence += (
                f"For {_listed(queued)} the whole-vector messages cross the links one after "
                "another: their bytes in sequence are many times the bound's."
            )
        return [sentence.rstrip()]

    def _measured_sentence(self) -> str:
        if self.measured is None:
            return (
                f"TensorFlow's all-reduce is measured only up to the {self.set_up} set-up "
                f"devices: for {self.ranks} ranks the table is the model alone."
            )
        ratio = self.measured.median / self.predicted["ring"]
        return (
            f"TensorFlow's ring, measured here on {self.ranks} {self.kind} devices, took "
            f"{with_noise(self.measured)}: {ratio:,.2f}x "
            f"± {ratio * relative_noise(self.measured):,.2f} the model's ring with the sliders' "
            f"α = {format_seconds(self.alpha_s)} and "
            f"β = {format_rate(self.beta_bytes_per_s, 'B/s')} (values to set, not this "
            "machine's: the sweep above measures those)."
        )


def _listed(names: list[str]) -> str:
    """'ring', 'ring and tree', 'seed, ring and tree'."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _check_values(ranks, kib, alpha_us, beta_gbps) -> tuple[int, int, int, int]:
    ranks = require_count("ranks (n) slider", ranks, 2, 1024)
    kib = require_count("vector size per rank (KiB) slider", kib, 1)
    alpha_us = require_count("α slider (µs)", alpha_us, 0, 10**6)
    beta_gbps = require_count("β slider (GB/s)", beta_gbps, 1, 10**5)
    return ranks, kib, alpha_us, beta_gbps


# The run's graph: a collective, an input and an output per rank. Once this process has run a
# collective (the notebook's earlier cells, or the quick sweep), a new one costs its tracing.
OPS_PER_RANK = 3
QUICK_SWEEP = {"rounds": 1, "min_runs": 3, "max_runs": 5, "budget_s": 0.2}
LARGEST_KIB = 16 * 1024  # the size slider's end: the quick sweep's beta comes from it


def estimate_allreduce_model_s(ranks, kib, alpha_us, beta_gbps, link: AlphaBeta | None) -> float:
    """About how long one Run takes: the model is instant; TF's all-reduce is traced and measured
    when `ranks` is no more than the set-up devices, each call as long as the ring model predicts
    with `link` (one link's alpha and beta on this machine, e.g. `sweep.link`). Logical CPU
    devices share the usable cores: more ranks than cores share the bandwidth too."""
    ranks, kib, _, _ = _check_values(ranks, kib, alpha_us, beta_gbps)
    devices = setup_devices()
    if ranks > len(devices) or link is None:
        return DRAW_S
    nbytes = kib * KiB
    shared = max(1.0, ranks / usable_cores()) if devices[0].kind == "logical CPU" else 1.0
    beta = link.beta_bytes_per_s / shared
    call = allreduce_time_s("ring", ranks, nbytes, link.alpha_s, beta)
    inputs = call_seconds(ranks * nbytes, link.beta_bytes_per_s)
    options = require_measure_options(PANEL_MEASURE, budget_s=1.0)
    return inputs + trace_seconds(OPS_PER_RANK * ranks) + measure_seconds(call, **options) + DRAW_S


def run_allreduce_model(
    ranks,
    kib,
    alpha_us,
    beta_gbps,
    progress=None,
    allreduce_in_one_graph: Callable = tf_collective.allreduce_in_one_graph,
) -> AllreduceModelResult:
    """The panel's experiment: predictions for these values; TF's own all-reduce, built by
    `allreduce_in_one_graph(devices)`, measured if there are `ranks` devices to run it on."""
    ranks, kib, alpha_us, beta_gbps = _check_values(ranks, kib, alpha_us, beta_gbps)
    nbytes, set_up = kib * KiB, len(setup_devices())
    result = AllreduceModelResult(ranks, nbytes, alpha_us * 1e-6, beta_gbps * 1e9, set_up)
    if ranks > set_up:
        return result
    devices = select_devices(ranks)
    what = f"a {kib} KiB all-reduce on {ranks} devices"
    require_message_fits(nbytes, devices, what, "vector size per rank (KiB) slider", buffers=2)
    steps = Steps(progress, 1)
    label = f"TensorFlow's all-reduce on {ranks} devices"
    xs = allreduce_inputs(nbytes, devices)
    run = allreduce_in_one_graph(devices)
    result.measured = measure(
        lambda: run(*xs), label, nbytes=nbytes, on_repeat=steps.start(label), **PANEL_MEASURE
    )
    result.kind = devices[0].kind
    return_freed_memory()
    steps.finish(label)
    return result


def measured_link(allreduce_in_one_graph: Callable) -> AlphaBeta | None:
    """One link's alpha and beta from a quick sweep on 2 devices (a 4-byte and a 16 MiB
    all-reduce, the size slider's end: about a second), or None with one device set up."""
    if len(setup_devices()) < 2:
        return None
    sizes = (64 * KiB, LARGEST_KIB * KiB)
    sweep = run_allreduce_sweep(
        2, sizes, allreduce_in_one_graph=allreduce_in_one_graph, **QUICK_SWEEP
    )
    return sweep.link


def allreduce_panel(
    allreduce_in_one_graph: Callable = tf_collective.allreduce_in_one_graph,
    link: AlphaBeta | None = None,
) -> Panel:
    """Notebook 05: predicted all-reduce time per algorithm (alpha-beta), and TF's own measured.

    It runs the `allreduce_in_one_graph` it is given: the notebook passes its own, so an edited
    cell changes what Run times. `link`: one link's alpha and beta on this machine (the notebook
    passes `sweep.link`) for the run-time estimate; None measures them now, in under a second.
    """
    count = len(setup_devices())
    link = link if link is not None else measured_link(allreduce_in_one_graph)
    sliders = {
        "ranks": slider("ranks (n)", max(2, min(4, count)), 2, 64),
        "kib": slider("vector size per rank (KiB)", 1024, 4, LARGEST_KIB, 4),
        "alpha_us": slider("α: start-up per message (µs)", 10, 1, 1000),
        "beta_gbps": slider("β: link bandwidth (GB/s)", 25, 1, 900),
    }

    def experiment(ranks, kib, alpha_us, beta_gbps, progress):
        return run_allreduce_model(
            ranks, kib, alpha_us, beta_gbps, progress, allreduce_in_one_graph
        )

    def estimate(ranks, kib, alpha_us, beta_gbps):
        return estimate_allreduce_model_s(ranks, kib, alpha_us, beta_gbps, link)

    return Panel(
        "All-reduce: ring, tree, the seed's, and TensorFlow's",
        sliders,
        experiment,
        plot_allreduce_model,
        estimate,
    )
