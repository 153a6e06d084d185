"""Notebook 05, collectives: all-reduce algorithms, their alpha-beta cost, TensorFlow's own.

In notebook order: the experiment, its result, its plot, its panel.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from d2lhelpers.benchmark import measure
from d2lhelpers.collectives import ALGORITHMS, allreduce_time_s
from d2lhelpers.costs import bus_bandwidth_bound_s
from d2lhelpers.devices import check_fits, select_devices, setup_devices
from d2lhelpers.panel import Panel, slider
from d2lhelpers.tf_allreduce import allreduce_in_one_graph, allreduce_inputs


def allreduce_panel() -> Panel:
    """Notebook 05: predicted all-reduce time per algorithm (alpha-beta), and TF's own measured."""
    count = len(setup_devices())
    sliders = {
        "ranks": slider("ranks (n)", min(4, count), 2, 64),
        "kib": slider("vector size per rank (KiB)", 1024, 4, 16 * 1024, 4),
        "alpha_us": slider("α: start-up per message (µs)", 10, 1, 1000),
        "beta_gbps": slider("β: link bandwidth (GB/s)", 25, 1, 900),
    }

    def experiment(ranks, kib, alpha_us, beta_gbps, progress):
        nbytes, alpha, beta = kib * 1024, alpha_us * 1e-6, beta_gbps * 1e9
        predicted = {a: allreduce_time_s(a, ranks, nbytes, alpha, beta) for a in ALGORITHMS}
        bound = bus_bandwidth_bound_s(ranks, nbytes, beta)
        for algorithm, seconds in predicted.items():
            print(
                f"{algorithm:5} predicted {seconds * 1e3:9.3f} ms "
                f"({seconds / bound:5.2f}x the bound)"
            )
        print(f"bound 2(n-1)/n·S/β = {bound * 1e3:.3f} ms")
        measured = None
        if ranks <= count:
            devices = select_devices(ranks)
            check_fits(2 * nbytes, devices, f"a {kib} KiB all-reduce on {ranks} devices")
            xs = allreduce_inputs(nbytes, devices)
            run = allreduce_in_one_graph(devices)
            measured = measure(
                lambda: run(*xs), f"TensorFlow's all-reduce on {ranks} devices", nbytes=nbytes
            )
            print(measured)
        else:
            print(f"measured only up to the {count} set-up devices: the bars are the model alone")
        progress(1, 1)
        return {"predicted": predicted, "bound": bound, "measured": measured, "ranks": ranks}

    def show(result):
        figure, ax = plt.subplots(figsize=(7, 3.2))
        names = list(result["predicted"])
        ax.bar(
            names,
            [t * 1e3 for t in result["predicted"].values()],
            color="tab:blue",
            label="α-β model (your α, β)",
        )
        ax.axhline(result["bound"] * 1e3, c="gray", ls="--", label="bandwidth bound")
        if result["measured"] is not None:
            ax.bar(
                ["TF measured"],
                [result["measured"].median * 1e3],
                color="tab:orange",
                label="TensorFlow, measured here",
            )
        ax.set(ylabel="time (ms)", title=f"all-reduce on {result['ranks']} ranks")
        ax.legend(fontsize=8)
        figure.tight_layout()
        return figure

    return Panel("All-reduce: ring, tree, the seed's, and TensorFlow's", sliders, experiment, show)
