"""When more GPUs make it slower: tensor parallel's cost model, its table, plot and panel."""

from __future__ import annotations

import dataclasses

import ipywidgets as widgets
import matplotlib.pyplot as plt

from d2lhelpers.collectives.costs import (
    efficiency_table,
    tensor_parallel_efficiency,
    tensor_parallel_speedup,
    tensor_parallel_time_ms,
)
from d2lhelpers.core.checks import require_count
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.ui.panel import Panel, slider


@dataclasses.dataclass(repr=False)  # IPython shows the tables: _repr_pretty_
class SpeedupModelResult(Reported):
    """Tensor parallel's cost model: t(N) = compute/N + comm(N), comm(N) = per_device x N.

    The seed's rows grow that way (1.5, 3, 6 ms at 2, 4, 8 GPUs: 0.75 ms per GPU); one device
    sends nothing. A model: every sentence here is arithmetic on the stated inputs.
    """

    compute_ms: float
    comm_per_device_ms: float
    max_devices: int

    @property
    def devices(self) -> list[int]:
        return list(range(1, self.max_devices + 1))

    def comm_ms(self, n: int) -> float:
        return self.comm_per_device_ms * n if n > 1 else 0.0

    @property
    def speedups(self) -> list[float]:
        return [tensor_parallel_speedup(self.compute_ms, n, self.comm_ms(n)) for n in self.devices]

    @property
    def best(self) -> int:
        return max(self.devices, key=lambda n: self.speedups[n - 1])

    @property
    def slower(self) -> list[int]:
        return [n for n, s in zip(self.devices, self.speedups, strict=True) if s < 1]

    @property
    def verdict(self) -> str:
        best = f"fastest at N = {self.best}: {self.speedups[self.best - 1]:.2f}x one device"
        if not self.slower:
            return f"{best}; never slower than one device up to N = {self.max_devices}"
        return f"{best}; slower than one device at N = {_ranges(self.slower)}"

    def tables(self) -> list[Table]:
        shown = {1, self.best, self.max_devices, *self.slower[:1]}
        shown |= {2**k for k in range(1, 7) if 2**k <= self.max_devices}
        rows = []
        for n in sorted(shown):
            comm = self.comm_ms(n)
            rows.append(
                (
                    n,
                    f"{self.compute_ms / n:.2f}",
                    f"{comm:.2f}",
                    f"{tensor_parallel_time_ms(self.compute_ms, n, comm):.2f}",
                    f"{self.speedups[n - 1]:.2f}x",
                    f"{tensor_parallel_efficiency(self.compute_ms, n, comm):.0%}",
                )
            )
        columns = (
            "devices N",
            "compute/N (ms)",
            "comm (ms)",
            "per token (ms)",
            "speedup",
            "efficiency",
        )
        return [Table("cost model, per token", columns, rows, [self.verdict])]


def _ranges(ns: list[int]) -> str:
    """[2, 3, 4, 9] -> '2..4, 9'."""
    parts, start = [], ns[0]
    for a, b in zip(ns, [*ns[1:], None], strict=True):
        if b != a + 1:
            parts.append(f"{start}..{a}" if a > start else f"{a}")
            start = b
    return ", ".join(parts)


def plot_speedup_model(model: SpeedupModelResult, seed_rows=()):
    """Speedup vs device count from the cost model, against 1x and the ideal N; the seed's rows."""
    ns, speedups = model.devices, model.speedups
    fig, ax = plt.subplots(figsize=(9, 3.6))
    ax.plot(
        ns,
        speedups,
        "o-",
        ms=3,
        label=f"model: {model.compute_ms:g} ms compute, "
        f"{model.comm_per_device_ms:g} ms x N communication",
    )
    ax.plot(ns, ns, "--", c="gray", label="ideal: N devices, N times faster")
    ax.axhline(1, c="tab:red", lw=1, label="1x: no faster than one device")
    shown = [row for row in seed_rows if row.n_devices <= model.max_devices]
    if shown:
        ax.scatter(
            [r.n_devices for r in shown],
            [r.speedup for r in shown],
            s=80,
            facecolors="none",
            edgecolors="black",
            label="seed's rows (40 ms compute), labelled by comm",
        )
    for row in shown:
        ax.annotate(
            f"{row.comm_ms:g} ms",
            (row.n_devices, row.speedup),
            xytext=(7, 2),
            textcoords="offset points",
            fontsize=8,
        )
    top = max([*speedups, *(r.speedup for r in shown)])
    ax.set(
        xlabel="devices (N)",
        ylabel="speedup vs one device",
        xlim=(0.5, model.max_devices + 0.5),
        ylim=(0, top * 1.2 + 0.2),
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def speedup_model_panel() -> Panel:
    """Notebook 04: "when more GPUs make it slower", the cost model with the seed's rows."""
    sliders = {
        "compute_ms": slider("compute per token on 1 device (ms)", 40, 1, 200),
        "comm_per_device_ms": widgets.FloatSlider(
            value=0.75,
            min=0.0,
            max=10.0,
            step=0.25,
            continuous_update=False,
            description="communication per token per device (ms)",
            style={"description_width": "initial"},
            layout=widgets.Layout(width="420px"),
        ),
        "max_devices": slider("largest device count", 16, 2, 64),
    }

    def experiment(compute_ms, comm_per_device_ms, max_devices, progress):
        model = speedup_model(compute_ms, comm_per_device_ms, max_devices)
        progress(1, 1, "computed")
        return model

    return Panel(
        "When more GPUs make it slower (cost model)",
        sliders,
        experiment,
        lambda model: plot_speedup_model(model, efficiency_table()),
    )


def speedup_model(
    compute_ms: float, comm_per_device_ms: float, max_devices: int
) -> SpeedupModelResult:
    """The cost model for 1 .. `max_devices` devices (validated: times >= 0, devices >= 1)."""
    max_devices = require_count("largest device count", max_devices, 1, 1024)
    tensor_parallel_time_ms(compute_ms, 1, comm_per_device_ms)  # refuses negative or NaN times
    if not compute_ms > 0:
        raise ValueError(f"compute per token must be > 0 ms, got {compute_ms!r}")
    return SpeedupModelResult(float(compute_ms), float(comm_per_device_ms), max_devices)
