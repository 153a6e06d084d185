"""Notebook 05's panel: the alpha-beta model's all-reduce time per algorithm for the learner's
ranks, size, alpha and beta, beside the bandwidth bound and TensorFlow's own all-reduce measured.
"""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt

from d2lhelpers.collectives.algorithms import ALGORITHMS, allreduce_stats
from d2lhelpers.collectives.costs import bus_bandwidth_bound_s
from d2lhelpers.collectives.tf_allreduce import (
    allreduce_in_one_graph,
    allreduce_inputs,
    require_message_fits,
)
from d2lhelpers.core.checks import require_count, require_measure_options
from d2lhelpers.core.progress import Steps
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import KiB, format_bytes, format_rate, format_seconds
from d2lhelpers.devices import select_devices, setup_devices
from d2lhelpers.lessons.l05_collectives.runs import (
    ESTIMATE_CALL_S,
    ESTIMATE_RATE_BYTES_PER_S,
)
from d2lhelpers.timing.benchmark import Measurement, measure
from d2lhelpers.timing.estimate import measure_seconds
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
class AllreduceModel(Reported):
    """The alpha-beta prediction per algorithm for one size, its bound, and TF's measured time."""

    ranks: int
    nbytes: int
    alpha_s: float
    beta_bytes_per_s: float
    set_up: int  # devices set up here: TF's all-reduce is measured only up to this many ranks
    measured: Measurement | None = None
    kind: str = ""

    def stats(self, algorithm: str):
        return allreduce_stats(algorithm, self.ranks, self.nbytes, element_bytes=1)

    @property
    def predicted(self) -> dict[str, float]:
        return {a: self.stats(a).time_s(self.alpha_s, self.beta_bytes_per_s) for a in ALGORITHMS}

    def latency_share(self, algorithm: str) -> float:
        """rounds * alpha / the predicted time: 1 when start-ups are all of it."""
        return self.stats(algorithm).rounds * self.alpha_s / self.predicted[algorithm]

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
            stats = self.stats(algorithm)
            rows.append(
                (
                    f"{algorithm} (model)",
                    stats.rounds,
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
                    format_seconds(self.measured.median),
                    "",
                    format_ratio(self.measured.median / self.bound),
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
            f"{format_seconds(self.measured.median)}: {ratio:,.2f}x the model's ring with your α "
            "and β (the sweep above measures α and β of this machine)."
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


def estimate_allreduce_model_s(ranks, kib, alpha_us, beta_gbps) -> float:
    """About how long one Run takes: the model is instant; TF's all-reduce is measured when
    `ranks` is no more than the set-up devices, at a cautious rate for logical CPUs."""
    ranks, kib, _, _ = _check_values(ranks, kib, alpha_us, beta_gbps)
    if ranks > len(setup_devices()):
        return 0.0
    nbytes = kib * KiB
    call = ESTIMATE_CALL_S + 2 * (ranks - 1) / ranks * nbytes / ESTIMATE_RATE_BYTES_PER_S
    return measure_seconds(call, **require_measure_options(PANEL_MEASURE, budget_s=1.0))


def run_allreduce_model(ranks, kib, alpha_us, beta_gbps, progress=None) -> AllreduceModel:
    """The panel's experiment: predictions for these values; TF's own measured if it can be."""
    ranks, kib, alpha_us, beta_gbps = _check_values(ranks, kib, alpha_us, beta_gbps)
    nbytes, set_up = kib * KiB, len(setup_devices())
    result = AllreduceModel(ranks, nbytes, alpha_us * 1e-6, beta_gbps * 1e9, set_up)
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
    steps.finish(label)
    return result


def plot_allreduce_model(result: AllreduceModel):
    """Bars: the model's time per algorithm, TF's measured time; the bound as a dashed line."""
    figure, ax = plt.subplots(figsize=(7, 3.2))
    names = [f"{a}\n({result.stats(a).rounds} rounds)" for a in result.predicted]
    times = list(result.predicted.values())
    ax.bar(names, times, color="tab:blue", label="α-β model (your α, β)")
    ax.axhline(
        result.bound, c="gray", ls="--", label=f"bandwidth bound {format_seconds(result.bound)}"
    )
    if result.measured is not None:
        ax.bar(
            ["TF measured"], [result.measured.median], color="tab:orange", label="TensorFlow, here"
        )
        times.append(result.measured.median)
    # A log scale keeps a bound a million times below the bars visible beside them.
    ax.set(ylabel="time (s)", yscale="log", title=f"all-reduce on {result.ranks} ranks")
    ax.set_ylim(min(result.bound, *times) / 3, max(times) * 3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    figure.tight_layout()
    return figure


def allreduce_panel() -> Panel:
    """Notebook 05: predicted all-reduce time per algorithm (alpha-beta), and TF's own measured."""
    count = len(setup_devices())
    sliders = {
        "ranks": slider("ranks (n)", max(2, min(4, count)), 2, 64),
        "kib": slider("vector size per rank (KiB)", 1024, 4, 16 * 1024, 4),
        "alpha_us": slider("α: start-up per message (µs)", 10, 1, 1000),
        "beta_gbps": slider("β: link bandwidth (GB/s)", 25, 1, 900),
    }

    def experiment(ranks, kib, alpha_us, beta_gbps, progress):
        return run_allreduce_model(ranks, kib, alpha_us, beta_gbps, progress)

    return Panel(
        "All-reduce: ring, tree, the seed's, and TensorFlow's",
        sliders,
        experiment,
        plot_allreduce_model,
        estimate=estimate_allreduce_model_s,
    )
