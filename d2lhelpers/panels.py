"""The notebooks' slider panels: each wires sliders to one experiment and its plot.

The experiments themselves are plain functions in other modules; a panel only chooses slider
ranges that fit this machine (larger defaults on a GPU) and draws the result.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from d2lhelpers.benchmark import compare_to_ideal
from d2lhelpers.devices import cpu, setup_devices
from d2lhelpers.peaks import device_peak_rate
from d2lhelpers.plots import plot_concurrency
from d2lhelpers.timeline import plot_timeline
from d2lhelpers.widgets import Panel, largest_size_that_fits, slider
from d2lhelpers.workloads import chain_bytes, concurrency_sweep, mlp_branch_experiment


def on_gpu() -> bool:
    return setup_devices()[0].kind != "logical CPU"


def concurrency_panel() -> Panel:
    """Notebook 01: one chain per device on 1..N devices at once, time and speedup vs ideal."""
    devices = setup_devices()
    default_size, cap, default_n = (4096, 8192, 50) if on_gpu() else (512, 2048, 20)
    sliders = {
        "size": slider(
            "matrix size", default_size, 64, largest_size_that_fits(chain_bytes, devices, cap), 64
        ),
        "n_matmuls": slider("matmuls per chain", default_n, 1, 100),
        "max_devices": slider("devices (1 to all set up)", len(devices), 1, len(devices)),
    }
    peak = device_peak_rate(devices[0])

    def experiment(size, n_matmuls, max_devices, progress):
        result = concurrency_sweep(size, n_matmuls, max_devices, progress, device_peak=peak)
        print(result.table())
        for m in result.measurements:
            for warning in m.warnings:
                print(f"WARNING ({m.label}): {warning}")
        return result

    return Panel("One chain per device, all at once", sliders, experiment, plot_concurrency)


def mlp_panel() -> Panel:
    """Notebook 03: the seed's MLP, branches on one device vs one per device, with its trace."""
    branch_devices = len(setup_devices()) - (1 if setup_devices()[0].name == cpu().name else 0)
    batch, width, hidden = (4096, 4096, 16384) if on_gpu() else (256, 512, 2048)
    sliders = {
        "batch": slider("batch size", batch, 16, 4 * batch, 16),
        "hidden": slider("hidden width", hidden, 128, 4 * hidden, 128),
        "branches": slider("branches (one per device)", min(2, branch_devices), 1, branch_devices),
    }

    def experiment(batch, hidden, branches, progress):
        result = mlp_branch_experiment(batch, width, hidden, branches, progress)
        print(result.one_device)
        print(result.split)
        ideal = result.one_device.median / branches
        print(compare_to_ideal(result.split.median, ideal, "one branch per device vs ideal"))
        return result

    def show(result):
        figure, ax = plt.subplots(figsize=(10, 1.4 + 0.5 * (result.branches + 2)))
        return plot_timeline(result.trace, f"one call, {result.branches} branches", ax=ax)

    return Panel("The seed's two-layer MLP, split into branches", sliders, experiment, show)


def speedup_model_panel() -> Panel:
    """Notebook 04: "when more GPUs make it slower", the cost model with the seed's rows."""
    from d2lhelpers.costs import efficiency_table, tensor_parallel_speedup
    from d2lhelpers.plots import plot_speedup_model

    sliders = {
        "compute_ms": slider("compute per token on 1 device (ms)", 40, 1, 200),
        "comm_ms": slider("communication per token (ms)", 6, 0, 100),
        "max_devices": slider("largest device count", 16, 2, 64),
    }

    def experiment(compute_ms, comm_ms, max_devices, progress):
        ns = list(range(1, max_devices + 1))
        # One device sends nothing; from two devices on, every token pays the communication.
        speedups = [tensor_parallel_speedup(compute_ms, n, comm_ms if n > 1 else 0) for n in ns]
        best = max(range(len(ns)), key=speedups.__getitem__)
        slower = [n for n, s in zip(ns, speedups, strict=True) if s < 1]
        print(f"best: {ns[best]} devices, {speedups[best]:.2f}x vs one device")
        print(f"slower than one device from N = {slower[0]}" if slower else "never slower than 1x")
        progress(1, 1)
        return {"devices": ns, "speedups": speedups, "compute_ms": compute_ms, "comm_ms": comm_ms}

    return Panel(
        "When more GPUs make it slower (cost model)",
        sliders,
        experiment,
        lambda curve: plot_speedup_model(curve, efficiency_table()),
    )


def parallelism_panel() -> Panel:
    """Notebook 04: replicas, tensor parallel and pipeline parallel, run for real, side by side."""
    from d2lhelpers.pipeline_parallel import run_pipeline_parallel
    from d2lhelpers.replicas import run_replicas
    from d2lhelpers.tensor_parallel import run_tensor_parallel

    count = len(setup_devices())
    width, batch = (4096, 4096) if on_gpu() else (256, 512)
    sliders = {
        "width": slider("model width", width, 32, 4 * width, 32),
        "batch": slider("batch", batch, 16, 4 * batch, 16),
        "microbatches": slider("pipeline microbatches", 8, 1, 32),
        "n_devices": slider("devices", min(2, count), 1, count),
    }

    def experiment(width, batch, microbatches, n_devices, progress):
        runs = []
        for done, run in enumerate(
            [
                lambda: run_replicas(width, batch, n_devices),
                lambda: run_tensor_parallel(width, batch, n_devices),
                lambda: run_pipeline_parallel(width, batch, microbatches, n_devices),
            ],
            start=1,
        ):
            runs.append(run())
            print(runs[-1], end="\n\n")
            progress(done, 3)
        return runs

    def show(runs):
        figure, ax = plt.subplots(figsize=(7, 3.2))
        names = [r.scheme for r in runs]
        ax.bar(names, [r.speedup for r in runs], color="tab:blue", label="measured speedup")
        ax.scatter(
            names,
            [r.ideal_speedup for r in runs],
            marker="_",
            s=900,
            c="black",
            label="ideal for this split",
            zorder=3,
        )
        ax.axhline(1, c="tab:red", lw=1, label="one device")
        ax.set(
            ylabel="speedup vs one device", title=f"{runs[0].kind} devices: {len(runs[0].devices)}"
        )
        ax.legend(fontsize=8)
        figure.tight_layout()
        return figure

    return Panel("Three ways to split one model, run for real", sliders, experiment, show)


def allreduce_panel() -> Panel:
    """Notebook 05: predicted all-reduce time per algorithm (alpha-beta), and TF's own measured."""
    from d2lhelpers.benchmark import measure
    from d2lhelpers.collectives import ALGORITHMS, allreduce_time_s
    from d2lhelpers.costs import bus_bandwidth_bound_s
    from d2lhelpers.devices import check_fits, select_devices
    from d2lhelpers.tf_allreduce import allreduce_in_one_graph, allreduce_inputs

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


def compute_copy_panel() -> Panel:
    """Notebook 02: compute in a worker process, copy each result here; overlap on or off."""
    import ipywidgets as widgets

    from d2lhelpers.compute_copy import compute_copy_experiment

    sliders = {
        "size": slider("matrix size", 512, 64, 2048, 64),
        "n_matmuls": slider("number of matmuls", 10, 1, 50),
        "overlap": widgets.Checkbox(value=True, description="overlap run and copy"),
    }

    def experiment(size, n_matmuls, overlap, progress):
        result = compute_copy_experiment(size, n_matmuls, overlap, progress, trace_overhead=False)
        print("\n".join(result.lines()))
        return result

    def show(result):
        figure, (bars, gantt) = plt.subplots(
            2, 1, figsize=(10, 6), gridspec_kw={"height_ratios": [1, 1.2]}
        )
        names = ["run", "copy", "one after the other"]
        times = [result.run.median, result.copy.median, result.sequential.median]
        if result.overlapped is not None:
            names.append("overlapped")
            times.append(result.overlapped.median)
        bars.barh(names, [t * 1e3 for t in times], color="tab:blue")
        bars.axvline(result.ideal_sequential * 1e3, c="gray", ls="--", label="ideal: run + copy")
        bars.axvline(
            result.ideal_overlapped * 1e3,
            c="tab:green",
            ls=":",
            label="ideal overlap: max(run, copy)",
        )
        bars.set(xlabel="time (ms)")
        bars.invert_yaxis()
        bars.legend(fontsize=8, loc="lower right")
        plot_timeline(result.rows, f"one traced call ({result.trace_source})", ax=gantt)
        figure.tight_layout()
        return figure

    return Panel("Compute in the worker, copy here", sliders, experiment, show)


def cluster_panel() -> Panel:
    """Notebook 06: K worker processes: all-reduce sweep and data-parallel training vs models."""
    from d2lhelpers.cluster import (
        allreduce_job,
        plot_allreduce_job,
        plot_training_sweep,
        training_sweep,
    )
    from d2lhelpers.tf_allreduce import sizes_up_to

    sliders = {
        "n_workers": slider("worker processes", 2, 1, 4),
        "largest_kib": slider("largest message (KiB)", 4096, 64, 16 * 1024, 64),
        "width": slider("model width", 256, 32, 1024, 32),
    }

    def experiment(n_workers, largest_kib, width, progress):
        counts = [k for k in (1, 2, 4) if k <= n_workers] or [1]
        total = n_workers + sum(counts)
        done, latest = set(), {}

        def report(index, info, stage):
            workers = info.get("workers", max(n_workers, 2))
            done.add((stage, workers, index))
            step = (
                f"{info['done']}/{info['of']} sizes"
                if "done" in info
                else (f"step {info['step']}/{info['of']}")
            )
            latest[index] = f"worker {index}: {stage} ({workers} workers) {step}"
            progress(min(len(done), total), total, "<br>".join(latest[i] for i in sorted(latest)))

        job = allreduce_job(
            max(n_workers, 2),
            sizes_up_to(largest_kib * 1024),
            progress=lambda i, info: report(i, info, "allreduce"),
        )
        print("\n".join(job.lines()), end="\n\n")
        sweep = training_sweep(
            counts, link=job.link, width=width, progress=lambda i, info: report(i, info, "training")
        )
        print("\n".join(sweep.lines()))
        return job, sweep

    def show(result):
        job, sweep = result
        figure, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
        plot_allreduce_job(job, ax=left)
        plot_training_sweep(sweep, ax=right)
        figure.tight_layout()
        return figure

    return Panel(
        "Worker processes: all-reduce and data-parallel training", sliders, experiment, show
    )


def failure_panel() -> Panel:
    """Notebook 06: kill one worker of a replica set, or of one big group, and see what is lost."""
    import ipywidgets as widgets

    from d2lhelpers.cluster import failure_demo

    sliders = {
        "n_workers": slider("worker processes", 2, 2, 4),
        "layout": widgets.ToggleButtons(
            options=["replicas", "group"], value="replicas", description="layout"
        ),
    }

    def experiment(n_workers, layout, progress):
        result = failure_demo(layout, n_workers=n_workers)
        print("\n".join(result.lines()))
        progress(1, 1)
        return result

    def show(result):
        # Capacity still working after the kill: the survivors' share of the workers.
        kept = 1 - result.lost_share
        figure, ax = plt.subplots(figsize=(6, 2.6))
        ax.barh(["still working", "lost"], [kept, 1 - kept], color=["tab:green", "tab:red"])
        ax.set(
            xlim=(0, 1),
            xlabel=f"share of {result.n_workers} workers' capacity",
            title=f"{result.layout}: one worker killed at step {result.killed_at_step}",
        )
        figure.tight_layout()
        return figure

    return Panel("Kill one worker", sliders, experiment, show)
