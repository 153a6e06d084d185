"""Every experiment against its ideal, measured side by side in one run: `make bench`.

Each row is a ratio of two things measured here, now, on the same devices, with a goal where the
issue sets one. The table is printed and written to d2lhelpers/results/<machine>.json.

    .venv/bin/python benchmarks/run_all.py [--notebooks] [--make-test] [--out PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import d2lhelpers as d2l
from d2lhelpers.core.units import format_rate, format_seconds, usable_cores
from d2lhelpers.core.verdicts import NOISE_FLOOR
from d2lhelpers.lessons.l01_two_devices import run_concurrency
from d2lhelpers.lessons.l06_multi_process.failure import COLLECTIVE_TIMEOUT_S
from d2lhelpers.lessons.l07_serving.sweep import busy_and_idle
from d2lhelpers.references import COPY_RATIO_DETAIL, RESULTS_DIR
from d2lhelpers.timing import stopping
from d2lhelpers.timing.benchmark import MIN_BLOCK_S
from d2lhelpers.tracing.timeline import busy_intervals, busy_seconds, overlap_seconds
from d2lhelpers.workloads import chains_in_one_graph

ROOT = Path(__file__).resolve().parent.parent


@dataclasses.dataclass
class Row:
    """One measured ratio, its goal, and the bounds past which it cannot be true.

    `floor`/`ceiling`: a ratio below the floor (a time below its ideal) or above the ceiling (a
    hidden share above 100%) by more than the noise floor is IMPOSSIBLE, whatever the goal says.
    """

    name: str
    ratio: float
    goal: str  # e.g. "<= 1.10", ">= 0.8", or "report" where no goal applies
    detail: str
    floor: float | None = None
    ceiling: float | None = None

    @property
    def verdict(self) -> str:
        if self.floor is not None and self.ratio < self.floor * (1 - NOISE_FLOOR):
            return "IMPOSSIBLE"
        if self.ceiling is not None and self.ratio > self.ceiling * (1 + NOISE_FLOOR):
            return "IMPOSSIBLE"
        if self.goal.startswith("<="):
            return "ok" if self.ratio <= float(self.goal[2:]) else "MISSED"
        if self.goal.startswith(">="):
            return "ok" if self.ratio >= float(self.goal[2:]) else "MISSED"
        return ""


def concurrency_rows(devices, size: int, n: int) -> list[Row]:
    """Concurrent k chains on k devices / one chain on one device (ideal 1.0)."""
    cores = usable_cores()
    result = run_concurrency(size, n, len(devices), min_runs=7, budget_s=3.0)
    rows = []
    for k, slowdown, m in zip(
        result.device_counts, result.slowdowns, result.measurements, strict=True
    ):
        limited = devices[0].kind == "logical CPU" and k > cores
        goal = "report" if limited else "<= 1.10"
        why = f" ({k} devices > {cores} cores: they must queue)" if limited else ""
        rows.append(
            Row(
                f"concurrent {k} chains / 1 chain",
                slowdown,
                goal,
                f"{m.median * 1e3:.1f} ms{why}",
                floor=1.0,
            )
        )
    return rows


def rate_rows(devices, size: int, n: int) -> list[Row]:
    """The workload's rate against the device's best matmul, and against the fair baseline."""
    device = devices[0]
    peak = d2l.device_peak_rate(device)
    x = d2l.random_matrix(size, device)
    chain = chains_in_one_graph([device], n)
    m = d2l.measure(
        lambda: chain(x), "chain", flops=d2l.chain_flops(size, n), peak=peak, min_runs=7
    )
    rows = [
        Row(
            "workload rate / device's best matmul rate",
            m.rate / m.best_peak,
            ">= 0.8",
            f"{format_rate(m.rate)} vs {format_rate(m.best_peak)} ({size}x{size}, {n} "
            f"matmuls; noise of rate and peak {m.rate_noise:.0%})"
            + "".join(f"; WARNING: {w}" for w in m.warnings),
            ceiling=1.0,
        )
    ]
    if device.kind == "logical CPU":
        baseline = d2l.machine_baseline_rate(refresh=True)["flops_per_s"]
        sharing = min(len(devices), usable_cores())
        fair = baseline / sharing
        rows.append(
            Row(
                "per-device rate / (machine baseline / devices per core set)",
                m.rate / fair,
                ">= 0.8",
                f"{format_rate(m.rate)} vs {format_rate(baseline)} / {sharing}",
                ceiling=1.0,  # a device's share of the machine can at best match the whole
            )
        )
    return rows


def concurrency_panel_rows(devices) -> list[Row]:
    """Notebook 01's panel: its run time against its own estimate, at the default sliders and at
    both ends of them (the largest run takes minutes on 2 CPU cores)."""
    panel = d2l.concurrency_panel()
    sliders = panel.sliders
    cases = {
        "default": {name: s.value for name, s in sliders.items()},
        "smallest": {name: s.min for name, s in sliders.items()},
        "largest": {name: s.max for name, s in sliders.items()},
    }
    rows = []
    for case, values in cases.items():
        estimate = panel.estimate(**values)
        start = time.perf_counter()
        panel.experiment(progress=lambda *a: None, **values)
        actual = time.perf_counter() - start
        rows.append(
            Row(
                f"notebook 01 panel, {case} sliders: run time vs estimate (larger / smaller)",
                max(actual / estimate, estimate / actual),
                "<= 1.5",
                f"ran {actual:.1f} s, estimated {estimate:.1f} s for "
                + ", ".join(f"{name} {value}" for name, value in values.items()),
            )
        )
    return rows


def overhead_row(size: int, n: int, devices) -> Row:
    """One sync + clock read, against the shortest block `measure` times for the smallest workload.

    `measure` syncs once per block of calls lasting at least MIN_BLOCK_S, so that ratio is the
    share of every reported time that is overhead.
    """
    empty = d2l.measure(lambda: None, "empty", number=1, min_runs=20, budget_s=1.0)
    x = d2l.random_matrix(size, devices[0])
    chain = chains_in_one_graph([devices[0]], n)
    smallest = d2l.measure(lambda: chain(x), "smallest")
    block = max(MIN_BLOCK_S, smallest.median)
    return Row(
        "Benchmark overhead / smallest workload's timed block",
        empty.median / block,
        "<= 0.01",
        f"one sync + clock read {format_seconds(empty.median)} per block of "
        f"{format_seconds(block)} (workload {format_seconds(smallest.median)} per call)",
    )


def traced_at_once_rows(what: str, rows) -> list[Row]:
    """How long the first two devices' matmuls ran at once in one traced call, over the shorter
    one's busy time (ideal 1.0). The scheduler decides this afresh on every run: a measurement,
    not something a test can assert. An incomplete trace gives its sentence, not a row."""
    if rows.incomplete:
        print(f"{what}: {rows.incomplete}", flush=True)
        return []
    devices = sorted({r.device for r in rows if r.kind == "matmul"})[:2]
    if len(devices) < 2:
        return []
    busy = [busy_intervals(rows, device, "matmul") for device in devices]
    shorter = min(busy_seconds(b) for b in busy)
    return [
        Row(
            f"{what}: traced at once / shorter busy time",
            overlap_seconds(*busy) / shorter,
            "report",
            f"ideal 1.00, one traced call on {' and '.join(devices)}",
            ceiling=1.0,
        )
    ]


def trace_and_copy_rows(devices, size: int, n: int) -> list[Row]:
    """Two chains traced on two devices; on logical CPUs, a 'copy' between devices vs memcpy."""
    if len(devices) < 2:
        return []
    xs = [d2l.random_matrix(size, d, seed=i) for i, d in enumerate(devices[:2])]
    chains = d2l.trace(chains_in_one_graph(devices[:2], n), *xs)
    rows = traced_at_once_rows("independent chains on 2 devices", chains)
    if devices[0].kind == "logical CPU":
        copy = d2l.local_copy_cost((1 << 20, 64 << 20), min_runs=7)
        largest = copy.copies[-1].median
        rows += [
            Row(
                "'copy' of 64 MiB between logical CPUs / NumPy copy of 64 MiB",
                largest / copy.memcpy.median,
                "<= 0.2",
                f"ideal ~0 (no bytes move): {format_seconds(largest)} vs "
                f"{format_seconds(copy.memcpy.median)}",
            ),
            Row(
                "'copy' of 64 MiB / 'copy' of 1 MiB between logical CPUs",
                copy.time_ratio,
                "<= 4",
                COPY_RATIO_DETAIL,
            ),
        ]
    return rows


def split_model_rows(devices) -> list[Row]:
    """Notebooks 03-04: split runs / one device, next to what the cost models predict."""
    from d2lhelpers.collectives.tf_allreduce import allreduce_inputs
    from d2lhelpers.collectives.tf_collective import allreduce_in_one_graph

    n = min(2, len(devices))
    usable = min(n, usable_cores()) if devices[0].kind == "logical CPU" else n
    rows = []
    branch_devices = len(devices) - 1  # the join takes the CPU
    for k in sorted({min(2, branch_devices), min(3, branch_devices)}):
        mlp = d2l.run_mlp_branches(256, 512, 2048, k)
        model = d2l.model_speedup(k, usable_cores(), devices[0].kind)
        rows.append(
            Row(
                f"MLP, one branch per device / one device ({k} branches)",
                mlp.split.median / mlp.one_device.median,
                "report",
                f"model 1/{model:.2f} = {1 / model:.2f} (no overlap cost)" if model else "",
                floor=1 / model if model else None,
            )
        )
        rows += traced_at_once_rows(f"MLP, {k} branches", mlp.trace)
    tensor = d2l.run_tensor_parallel(256, 512, n, hidden=1024)
    xs = allreduce_inputs(512 * 256 * 4, tensor.devices)
    reduce = allreduce_in_one_graph(tensor.devices)
    comm = d2l.measure(lambda: reduce(*xs), "all-reduce").median
    predicted = 1 / usable + comm / tensor.reference_time
    rows.append(
        Row(
            f"tensor parallel step / one device ({n} devices)",
            tensor.time / tensor.reference_time,
            "report",
            f"model 1/{usable} + all-reduce/one device = {predicted:.2f}",
            floor=1 / usable,
        )
    )
    m = 8
    pipe = d2l.run_pipeline_parallel(256, 512, m, n)
    model = (m + n - 1) / (m * usable)
    rows.append(
        Row(
            f"pipeline step / one device ({n} stages, {m} microbatches)",
            pipe.time / pipe.reference_time,
            "report",
            f"GPipe model (m+p-1)/(m*p) = {model:.2f}; measured bubble "
            f"{pipe.measured_bubble:.0%} vs (p-1)/(m+p-1) = {pipe.model_bubble:.0%}",
            floor=1 / usable,
        )
    )
    return rows


def estimate_row(name: str, panel, values: dict) -> Row:
    """A panel's run at `values` against the time its estimate announced: within x1.5 either way."""
    for slider, value in values.items():
        panel.sliders[slider].value = value
    estimated, share = panel.estimate(**panel.values()), stopping.share_past_fewest()
    start = time.perf_counter()
    panel.run()
    seconds = time.perf_counter() - start
    ratio = seconds / estimated
    return Row(
        f"{name}: run / estimate ({panel.describe(values)[:40]})",
        max(ratio, 1 / ratio),
        "<= 1.5",
        f"run {seconds:.1f} s, estimated {estimated:.1f} s (each measure expected {share:.0%} of "
        "the way from its fewest runs to its cap, as this process's recent ones went); load "
        f"average {os.getloadavg()[0]:.1f} on {usable_cores()} usable cores"
        + (f"; ERROR {panel.error}" if panel.error else ""),
    )


def split_model_estimate_rows() -> list[Row]:
    """Notebooks 03-04: each panel's estimate against its run, at default and extreme sliders."""
    import matplotlib.pyplot as plt

    from d2lhelpers.ui.output import render_png

    render_png(plt.figure())  # matplotlib's first figure loads fonts: a notebook paid it earlier
    rows = []
    panels = [("03 MLP panel", d2l.mlp_panel), ("04 three schemes", d2l.parallelism_panel)]
    for name, make in panels:
        panel = make()
        d2l.device_peak_rate(d2l.setup_devices()[0])  # measured once, before any run is timed
        defaults = panel.values()
        for values in (
            defaults,
            {s: panel.sliders[s].min for s in defaults},
            {s: panel.sliders[s].max for s in defaults},
        ):
            rows.append(estimate_row(name, panel, values))
    return rows


def allreduce_rows(devices) -> list[Row]:
    """Notebook 05: TF's all-reduce / the alpha-beta prediction, on sizes the model did not see."""
    sweep = d2l.run_allreduce_sweep(n_devices=min(2, len(devices)))
    rows = []
    for r in sweep.held_out_residuals:
        rows.append(
            Row(
                f"all-reduce {r.nbytes / 1024:.0f} KiB / alpha-beta prediction",
                r.measured_s / r.predicted_s,
                "report",
                f"least squares on {len(sweep.fit_sizes)} other sizes",
            )
        )
    overlap = d2l.run_allreduce_overlap(n_devices=min(2, len(devices)), overlap=True)
    rows.append(
        Row(
            "all-reduce overlapped with compute / max(all-reduce, compute)",
            overlap.combined.median / overlap.ideal_overlapped,
            "<= 1.10",
            "shared cores: the 'link' is memcpy on the cores the matmuls use",
            floor=1.0,
        )
    )
    rows.append(
        Row(
            "all-reduce overlapped with compute / (all-reduce + compute - launch)",
            overlap.combined.median / overlap.ideal_sequential,
            "<= 1.0",
            "the one call that the combined function saves is taken off",
        )
    )
    for device, share in overlap.traced_overlap().items():
        rows.append(
            Row(
                f"all-reduce and compute traced at once on {device} / shorter part",
                share,
                "report",
                "ideal 1.00: the scheduler's choice on this run (tests assert only the order)",
                ceiling=1.0,
            )
        )
    if overlap.rows.incomplete:
        print(f"all-reduce and compute: {overlap.rows.incomplete}", flush=True)
    return rows


def allreduce_panel_rows(devices) -> list[Row]:
    """Notebook 05's panel: its estimate against its run at the default sliders, at both ends,
    and at the largest run it measures (every set-up device, the largest size); the panel is
    built as a learner's is, its link measured by a quick sweep. Its runs take about a second:
    below one, the panel says "under 1 s" (`ui.output.about`), so times are compared at that
    resolution, max(t, 1 s), and both raw times are printed."""
    from d2lhelpers.ui.output import about

    panel = d2l.allreduce_panel()
    sliders = panel.sliders
    cases = [
        panel.values(),
        {name: s.min for name, s in sliders.items()},
        {name: s.max for name, s in sliders.items()},  # more ranks than devices: the model alone
        {"ranks": min(len(devices), sliders["ranks"].max), "kib": sliders["kib"].max},
    ]
    rows = []
    for values in cases:
        for slider, value in values.items():
            sliders[slider].value = value
        estimated = panel.estimate(**panel.values())
        start = time.perf_counter()
        panel.run()
        seconds = time.perf_counter() - start
        ratio = max(seconds, 1.0) / max(estimated, 1.0)
        rows.append(
            Row(
                f"05 all-reduce panel: run / estimate ({panel.describe(values)[:40]})",
                max(ratio, 1 / ratio),
                "<= 1.5",
                f"run {seconds:.2f} s, estimated {estimated:.2f} s (the panel said "
                f"'{about(estimated)}'); load average {os.getloadavg()[0]:.1f} on "
                f"{usable_cores()} usable cores"
                + (f"; ERROR {panel.error}" if panel.error else ""),
            )
        )
    return rows


def compute_copy_rows() -> list[Row]:
    """Notebook 02, through its panel: compute in a worker process, copies to a driver over gRPC;
    the panel's estimate against the run it estimated, at default and at extreme sliders, in the
    order a learner would run them (each estimate uses the previous run's measured rates)."""
    panel = d2l.compute_copy_panel()
    rows, results = [], []
    for size, n, overlap in ((512, 10, True), (64, 1, False), (2048, 50, True)):
        with panel.values_set(size=size, n_matmuls=n, overlap=overlap):
            expected = panel.estimate(**panel.values())
            began = time.perf_counter()
            result = panel.run()
            took = time.perf_counter() - began
        if result is None:
            rows.append(Row(f"notebook 02 panel ({size}², {n}): runs", 0.0, ">= 1", panel.error))
            continue
        results.append(result)
        rows.append(
            Row(
                f"notebook 02 panel ({size}², {n}, overlap {overlap}): run / estimate, or inverse",
                max(took / expected, expected / took),
                "<= 1.5",
                f"ran {took:.1f} s, estimated {expected:.1f} s",
            )
        )
    if not results or results[0].overlapped is None:
        return rows
    result = results[0]
    return rows + [
        Row(
            "overlapped run+copy / max(run, copy)",
            result.overlapped.median / result.ideal_overlapped,
            "<= 1.10",
            f"run {format_seconds(result.run.median)}, copy {format_seconds(result.copy.median)}",
            floor=1.0,
        ),
        Row(
            "overlapped run+copy / (run + copy - launch)",
            result.overlapped.median / result.ideal_sequential,
            "<= 1.0",
            "",
        ),
        Row(
            "hidden fraction (run + copy - launch - overlapped) / min(run, copy)",
            result.hidden_fraction,
            ">= 0.7",
            f"{usable_cores()} usable cores shared by the worker's matmuls and gRPC threads; "
            f"ceiling 1 - launch / min(run, copy) = {result.hidden_ceiling:.2f}",
            ceiling=result.hidden_ceiling,
        ),
        Row(
            "copy rate / TCP peak of the same link",
            result.copy_rate / result.link_peak,
            "report",
            f"{format_rate(result.copy_rate, 'B/s')} vs {format_rate(result.link_peak, 'B/s')}",
            ceiling=1.0,
        ),
    ]


def multi_process_rows() -> list[Row]:
    """Notebook 06: each panel's run against its estimate, at default and extreme sliders
    (goal: neither more than 1.5x the other); then the failure panel's default run measures
    both layouts."""
    cluster, failure = d2l.cluster_panel(), d2l.failure_panel()
    cases = [(cluster, {}), (failure, {})]
    top = cluster.sliders["largest_kib"]
    cases += [
        (cluster, {"n_workers": 2, "largest_kib": top.min, "width": 32}),
        (
            cluster,
            {"n_workers": cluster.sliders["n_workers"].max, "largest_kib": top.max, "width": 1024},
        ),
        (failure, {"n_workers": failure.sliders["n_workers"].max}),
    ]
    rows = []
    for panel, values in cases:
        with panel.values_set(**values):
            expected = panel.estimate(**panel.values())
            began = time.perf_counter()
            panel.run()
            took = time.perf_counter() - began
            name = "cluster panel" if panel is cluster else "failure panel"
            label = f"06 {name} {'default' if not values else values}"
        rows.append(
            Row(
                f"{label}: run / estimate, or its inverse",
                max(took / expected, expected / took),
                "<= 1.5",
                f"ran {took:.1f} s, estimate {expected:.1f} s"
                + ("" if panel.error is None else f"; failed: {panel.error}"),
            )
        )
        if panel is failure and not values and panel.result is not None:
            both = panel.result
            measured = both.replicas.measured_after and both.group.measured_before
            rows.append(
                Row(
                    "06 failure demo, default: both layouts measured",
                    float(measured),
                    ">= 1",
                    both.verdict[:120],
                )
            )
            # How soon the one-group job's survivor failed after the kill (a time, measured here
            # and not asserted by a test): within the collective timeout plus start-up slack.
            timeout_s = COLLECTIVE_TIMEOUT_S  # run_replicas_vs_group's default
            peer_s = max(both.group.error_after_s, default=math.nan)
            rows.append(
                Row(
                    "06 failure demo: survivor's error after the kill / (collective timeout + 3 s)",
                    peer_s / (timeout_s + 3),
                    "<= 1",
                    "errors after the kill: "
                    + ", ".join(f"{after:.1f} s" for after in both.group.error_after_s),
                )
            )
    return rows


def serving_rows(devices) -> list[Row]:
    """Notebook 07: steady-state saturation / measured capacity per layout, replicas' capacity
    after a failure / ((n - 1) / n x before), and the panel's estimate against its run."""
    if len(devices) < 2:
        return []
    rows = []
    sweep = d2l.run_load_sweep(2)
    for s in sweep.sweeps:
        point, capacity = s.saturation_point, s.capacity.tokens_per_s.median
        ratio = point.throughput.median / capacity if point else 0.0
        detail = (
            f"{format_rate(point.throughput.median, 'tokens/s')} vs capacity "
            f"{format_rate(capacity, 'tokens/s')}; {busy_and_idle(point)}"
            + s.per_busy_second(point)
            if point
            else "did not saturate"
        )
        rows.append(
            Row(
                f"serving, {s.layout}: saturation / measured capacity",
                ratio,
                "report",
                detail,
                ceiling=1.0,
            )
        )
    failure = d2l.run_serving_failure(2, ["replicas"], sweep=sweep)
    (replicas,) = failure.runs
    rows.append(
        Row(
            "serving, replicas: capacity after a failure / ((n-1)/n x before)",
            replicas.ratio / replicas.expected,
            "report",
            f"before {format_rate(replicas.throughput_before.median, 'tokens/s')}, after "
            f"{format_rate(replicas.throughput_after.median, 'tokens/s')}"
            + (f"; not a result: {replicas.set_aside}" if replicas.set_aside else ""),
        )
    )
    panel = d2l.serving_panel()
    extremes = {
        "default": {},
        "smallest": {"load_percent": 50, "width": 16, "n_out": 2, "window_ms": 200},
        "largest": {
            "n_devices": panel.sliders["n_devices"].max,
            "load_percent": 300,
            "width": panel.sliders["width"].max,
            "n_out": 48,
            "window_ms": 3000,
        },
    }
    for name, values in extremes.items():
        for layout in ("replicas", "tensor parallel", "pipeline"):
            with panel.values_set(layout=layout, **values):
                estimate = panel.estimate(**panel.values())
                started = time.perf_counter()
                panel.run()
                took = time.perf_counter() - started
            what = f"serving panel, {layout}, {name} sliders: estimate vs run (either way)"
            if panel.error:  # refused before it ran (its one sentence): no run to time
                rows.append(Row(what, 0.0, "report", f"refused, so not timed: {panel.error}"))
                continue
            ratio = max(estimate / took, took / estimate)
            rows.append(Row(what, ratio, "<= 1.5", f"estimated {estimate:.1f} s, ran {took:.1f} s"))
    return rows


def notebook_rows() -> list[Row]:
    """Wall time and peak memory of each notebook run top to bottom in a fresh kernel."""
    rows = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        out = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "notebook_cost.py"), str(path)],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if out.returncode != 0:
            rows.append(Row(f"{path.stem}: runs", 0.0, ">= 1", out.stderr[-300:]))
            continue
        cost = json.loads(out.stdout.strip().splitlines()[-1])
        limit = 90 if "multi_process" in path.stem else 60
        rows.append(
            Row(
                f"{path.stem}: wall time / {limit} s",
                cost["seconds"] / limit,
                "<= 1.0",
                f"{cost['seconds']:.1f} s, peak kernel memory {cost['peak_mib']:.0f} MiB",
            )
        )
    return rows


def make_test_row() -> Row:
    start = time.perf_counter()
    done = subprocess.run(["make", "test"], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    passed = "passed" if done.returncode == 0 else f"FAILED: {done.stdout[-200:]}"
    return Row(
        "make test wall time / 15 min", seconds / 900, "<= 1.0", f"{seconds:.0f} s, {passed}"
    )


def machine_description(devices) -> dict:
    return {
        "devices": [str(d) for d in devices],
        "summary": d2l.device_summary(),
        "cpu_cores": usable_cores(),
        "processor": platform.processor() or platform.machine(),
        "tensorflow": sys.modules["tensorflow"].__version__,  # whichever build is installed
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebooks", action="store_true", help="also time every notebook")
    parser.add_argument("--make-test", action="store_true", help="also time `make test`")
    parser.add_argument("--out", type=Path, help="JSON path (default: in RESULTS_DIR)")
    parser.add_argument(
        "--panels",
        action="store_true",
        help="only each panel's run against its estimate (into build/, not the reference)",
    )
    args = parser.parse_args()

    devices = d2l.setup_devices()
    on_gpu = devices[0].kind != "logical CPU"
    size, n = (4096, 50) if on_gpu else (512, 20)
    kind = devices[0].kind.replace(" ", "-").lower()
    name = f"{kind}-{usable_cores()}cores"
    out = args.out or (
        ROOT / "build" / f"{name}-panels.json" if args.panels else RESULTS_DIR / f"{name}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    steps = [
        lambda: concurrency_rows(devices, size, n),
        lambda: rate_rows(devices, size, n),
        lambda: concurrency_panel_rows(devices),
        lambda: [overhead_row(64, 1, devices)],
        lambda: trace_and_copy_rows(devices, size, n),
        lambda: split_model_rows(devices),
        split_model_estimate_rows,
        lambda: allreduce_rows(devices),
        lambda: allreduce_panel_rows(devices),
        compute_copy_rows,
        lambda: serving_rows(devices),
        multi_process_rows,
    ]
    if args.panels:  # the steps whose rows are panels' estimates against their runs
        steps = [
            lambda: concurrency_panel_rows(devices),
            split_model_estimate_rows,
            lambda: allreduce_panel_rows(devices),
            compute_copy_rows,
            lambda: serving_rows(devices),
            multi_process_rows,
        ]
    if args.notebooks:
        steps.append(notebook_rows)
    if args.make_test:
        steps.append(lambda: [make_test_row()])
    print(f"{'measured ratio':<62} {'ratio':>7}  {'goal':<8} verdict  detail", flush=True)
    rows: list[Row] = []
    for step in steps:
        for row in step():
            rows.append(row)
            print(
                f"{row.name:<62} {row.ratio:7.3f}  {row.goal:<8} {row.verdict:<7}  {row.detail}",
                flush=True,
            )
        # Written after every step, so a run cut short still leaves its rows.
        report = {
            "machine": machine_description(devices),
            "rows": [{**dataclasses.asdict(r), "verdict": r.verdict} for r in rows],
        }
        out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"this benchmark process peaked at {peak_mib:.0f} MiB")


if __name__ == "__main__":
    main()
