"""Reference results on an NVIDIA H200: notebooks 01 and 02's experiments in PyTorch.

Run on the GPU machine, from the repository root, with its python3 (standard library + torch;
no TensorFlow, no d2lhelpers, no network):

    python3 benchmarks/h200_reference.py [--out PATH ...]     # measure (under 3 minutes)
    python3 benchmarks/h200_reference.py --validate PATH      # check a results file (no torch)

The experiments are d2l's *Automatic Parallelism* (PyTorch tab), timed with CUDA events around
each region (side streams joined back before the stop event), after warm-up, repeated, reported
as median and IQR, and set beside what they cannot beat:

- the seed's workload, 50 products of 4000x4000 float32 matrices: as a chain y <- y @ x (each
  product needs the one before, so none can be skipped) and as the seed's 50 identical
  matmul(x, x); rate = 2 * 4000^3 * 50 / time, beside the published peak;
- two chains on two CUDA streams at once (the closest thing to two jobs on one chip) vs one;
- compute-then-copy vs compute-while-copy of the 50 products to pinned host memory over the real
  link (each copy on its own stream waits on its product's event; non_blocking=True). Ideals:
  sequential = run + copy, overlapped = max(run, copy).

Every matmul experiment runs twice, with torch.backends.cuda.matmul.allow_tf32 = False (FP32) and
= True (TF32); each row records the setting, and the matmul rows the product's error against
float64, which shows which arithmetic really ran. The rows go to
d2lhelpers/results/h200-pytorch.json (or each --out), rewritten after every row so that a
cut-off run still leaves what it measured.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from h200_results import (
    BEST_SIZE,
    N_MATMULS,
    PEAK_PCIE_GBPS,
    PEAK_TFLOPS,
    PRECISIONS,
    SIZE,
    ResultsWriter,
    format_row,
    format_table,
    make_row,
    matmul_flops,
    summarize_times,
    validate_file,
    validate_results,
)

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "d2lhelpers" / "results" / "h200-pytorch.json"
BYTES_PER_FLOAT = 4

WARMUP, MIN_RUNS, MAX_RUNS = 2, 5, 15
ROW_BUDGET_S = 3.0  # after MIN_RUNS, a measurement stops repeating once it has taken this long
SOFT_DEADLINE_S = 120.0  # past this, every measurement takes MIN_RUNS only
HARD_DEADLINE_S = 150.0  # past this, the remaining experiments are skipped (limit: 3 minutes)

EXIT_OK, EXIT_NO_TORCH, EXIT_NO_GPU, EXIT_NOT_H200 = 0, 3, 4, 5
EXIT_INVALID_FILE, EXIT_FAILED_CHECKS = 6, 7

# read 96: a mechanism with its source, not measured by this script
PAGEABLE_NOTE = (
    "blocking copies; the driver stages pageable memory through a pinned buffer (CUDA's "
    "documentation of pageable transfers, not measured here)"
)

GPU_STATE = "clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,power.limit"


class Refusal(Exception):
    """A reason not to run at all, with its own exit code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def import_torch_with_gpu(allow_other_gpu: bool = False):
    """torch, if it imports and sees a CUDA GPU that is an H200 (or `allow_other_gpu`)."""
    try:
        import torch
    except Exception as error:  # ImportError, or a broken CUDA library's OSError
        raise Refusal(
            EXIT_NO_TORCH,
            f"PyTorch is not importable here ({type(error).__name__}: {error}); run this on the "
            "GPU machine with its python3",
        ) from error
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        raise Refusal(
            EXIT_NO_GPU,
            "no CUDA GPU is visible to PyTorch; these are reference results for an H200, "
            "never measured on a CPU",
        )
    name = torch.cuda.get_device_name(0)
    if "H200" not in name and not allow_other_gpu:
        raise Refusal(
            EXIT_NOT_H200,
            f"the GPU is {name!r}, not an H200, and the peaks here are the H200's; "
            "--allow-other-gpu measures it anyway, against those peaks and labelled so",
        )
    return torch


class Clock:
    """Seconds since the start, and how long one measurement may still repeat."""

    def __init__(self):
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def measurement_budget(self) -> float:
        return ROW_BUDGET_S if self.elapsed() < SOFT_DEADLINE_S else 0.0


def time_regions(torch, bodies: dict, budget_s: float, warmup: int = WARMUP) -> dict:
    """name -> (event times, host times) in seconds of each `body()`, taken in turns.

    Each round times every body once, in order, so that all of them see the same clocks and
    temperature: on the H200 at TF32, one chain timed back to back slowed from 19.2 to 20.5 ms as
    the clocks fell (first run, 2026-12-04), and a sum of parts timed that way, group by group,
    came out 4% above the sequential run that contained them. Each body queues its work and joins
    every side stream it used back to the current stream, so the stop event, recorded on the
    current stream, comes after all of it. The device is synchronized before each start, so no
    earlier work is counted, and after each stop.
    """
    for body in bodies.values():
        for _ in range(warmup):
            body()
    timed = {name: ([], []) for name in bodies}
    began = time.perf_counter()
    for run in range(MAX_RUNS):
        if run >= MIN_RUNS and time.perf_counter() - began > budget_s:
            break
        for name, body in bodies.items():
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            host_start = time.perf_counter()
            start.record()
            kept = body()  # held until the device is done: nothing it uses is freed early
            stop.record()
            torch.cuda.synchronize()
            timed[name][1].append(time.perf_counter() - host_start)
            timed[name][0].append(start.elapsed_time(stop) / 1e3)
            del kept
    return timed


def streams_vs_serial_words(two: list[float], serial: list[float]) -> str:
    """What two streams at once against the same chains one after the other shows, read against
    both medians' spreads (IQR over median, added)."""
    two_s, serial_s = statistics.median(two), statistics.median(serial)
    noise = sum(summarize_times(t)["iqr_s"] / statistics.median(t) for t in (two, serial))
    ratio = two_s / serial_s
    if ratio < 1 - noise:
        return (
            f"{1 - ratio:.0%} below 1.0, beyond the two medians' spread ({noise:.0%}): at once, "
            "the streams finished sooner, so one chain alone left some of the chip's capacity "
            "unused (which units, these times cannot show)"
        )
    if ratio > 1 + noise:
        return (
            f"{ratio - 1:.0%} above 1.0, beyond the two medians' spread ({noise:.0%}): running "
            "the streams at once cost time beyond running them one after the other"
        )
    return (
        f"within the two medians' spread ({noise:.0%}) of 1.0: as far as these times can tell, "
        "one chain alone already kept the chip busy"
    )


SHARED_SMS_NOTE = (  # the notebooks' reference table labels its mechanism (read 143)
    "1.0 would need a second chip's compute: the two streams share one chip's SMs, so 2.0 where "
    "one chain alone keeps them all busy; the row beside, two streams vs both chains on one "
    "stream, says how far below 2.0 they came"
)
OVERLAP_FLOOR_NOTE = (  # the notebooks' reference table reads it with its noise (read 143)
    "below 1.0 is a timing bug; the exact floor adds the pipeline's fill and drain "
    "(components.pipeline_floor_s)"
)
GROUP_PEAK = ": above that group's measured peak"  # the notebooks' reference table reads it


def group_rates_words(run_rate: float, best_rate: float, chain_rate: float) -> str:
    """The overlap group's run alone against the matmul group's rates (read 89: 375 TFLOP/s
    here beside a 'measured peak' of 358 there, unsaid)."""
    said = (
        f"the run alone ran at {run_rate:.0f} TFLOP/s in this group, {run_rate / chain_rate:.2f}x "
        f"the same chain in the matmul group ({chain_rate:.0f} TFLOP/s; one {BEST_SIZE}x"
        f"{BEST_SIZE} product there {best_rate:.0f})"
    )
    if run_rate > best_rate:
        said += (
            f"{GROUP_PEAK}; why is not measured (a hypothesis: each group runs at its own clocks, "
            "as there products run back to back and here copies leave the SMs idle between "
            "runs), so rates are compared within a group only"
        )
    return said


def set_precision(torch, precision: str) -> str:
    """Set the float32 matmul arithmetic to FP32 or TF32 explicitly; the setting as read back."""
    allow = precision == "TF32"
    matmul = torch.backends.cuda.matmul
    with warnings.catch_warnings():  # torch >= 2.9 calls this flag legacy; it still rules cuBLAS
        warnings.simplefilter("ignore")
        try:
            matmul.allow_tf32 = allow
            return f"torch.backends.cuda.matmul.allow_tf32 = {matmul.allow_tf32}"
        except (AttributeError, RuntimeError):  # a torch that has dropped the legacy flag
            matmul.fp32_precision = "tf32" if allow else "ieee"
            return f"torch.backends.cuda.matmul.fp32_precision = {matmul.fp32_precision!r}"


def product_error(torch, x) -> float:
    """‖x @ x − (x @ x in float64)‖ / ‖x @ x in float64‖, under the current matmul setting."""
    reference = torch.mm(x.double(), x.double())
    difference = torch.mm(x, x).double() - reference
    return float(torch.linalg.norm(difference) / torch.linalg.norm(reference))


def random_matrix(torch, size: int, seed: int):
    """Normal entries over sqrt(size): spectral radius about 1, so a chain's powers stay finite.

    Never zeros: a product of zeros can run faster than real data.
    """
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(size, size, device="cuda", generator=generator) / size**0.5


def matmul_chain_into(torch, x, ys) -> None:
    """ys[0] = x @ x, ys[i] = ys[i-1] @ x: each product needs the one before."""
    previous = x
    for y in ys:
        torch.mm(previous, x, out=y)
        previous = y


def identical_matmuls_into(torch, x, ys) -> None:
    """The seed's workload, matmul(x, x) into each of ys (every one runs in eager PyTorch)."""
    for y in ys:
        torch.mm(x, x, out=y)


class Experiments:
    """Buffers, streams and the experiments; each row is written through `writer` as it is made.

    Outputs go into buffers allocated once (one per product, as the seed keeps all 50 results:
    they are what gets copied), so no allocator work is timed and nothing is freed while a
    stream still reads it.
    """

    def __init__(self, torch, writer: ResultsWriter, clock: Clock):
        self.torch, self.writer, self.clock = torch, writer, clock
        self.shortest_s = math.inf
        self.tags: dict = {}
        self.rates: dict = {}  # precision -> (best product's, chain's) TFLOP/s, matmul group

    def allocate(self) -> None:
        torch = self.torch
        self.x, self.x2 = random_matrix(torch, SIZE, 0), random_matrix(torch, SIZE, 1)
        self.ys = torch.empty(N_MATMULS, SIZE, SIZE, device="cuda")
        self.ys2 = torch.empty(N_MATMULS, SIZE, SIZE, device="cuda")
        self.big = [random_matrix(torch, BEST_SIZE, 2), random_matrix(torch, BEST_SIZE, 3)]
        self.big_out = torch.empty(BEST_SIZE, BEST_SIZE, device="cuda")
        self.pinned = torch.empty(N_MATMULS, SIZE, SIZE, pin_memory=True)
        self.pageable = torch.empty(N_MATMULS, SIZE, SIZE)
        self.streams = [torch.cuda.Stream(), torch.cuda.Stream()]
        self.copy_stream = torch.cuda.Stream()
        torch.cuda.synchronize()

    def spin_up(self, seconds: float = 1.0) -> None:
        """Large products until the clocks leave idle, so that the first row does not pay."""
        began = time.perf_counter()
        while time.perf_counter() - began < seconds:
            self.best_matmul()
            self.torch.cuda.synchronize()

    def measure(self, **bodies: Callable[[], object]) -> dict:
        """name -> (times, host times) of each body, timed in turns (`time_regions`)."""
        timed = time_regions(self.torch, bodies, self.clock.measurement_budget() * len(bodies))
        for times, _ in timed.values():
            self.shortest_s = min(self.shortest_s, statistics.median(times))
        return timed

    def add(self, **fields) -> None:
        row = make_row(**{**self.tags, **fields})
        self.writer.add(row, self.clock.elapsed())
        print(format_row(row), flush=True)

    def run(self) -> None:
        for precision in PRECISIONS:
            if self.clock.elapsed() > HARD_DEADLINE_S:
                print(f"skipped the {precision} rows: the time budget is spent", flush=True)
                continue
            setting = set_precision(self.torch, precision)
            self.tags = {"precision": precision, "setting": setting}
            error = product_error(self.torch, self.x)
            self.matmul_rows(precision, error)
            self.stream_rows(precision)
            if precision == "FP32":
                self.copy_rows()
            self.overlap_rows(precision)
        self.tags = {}
        self.overhead_row()

    def best_matmul(self) -> None:
        self.torch.mm(*self.big, out=self.big_out)

    # Each group times its bodies in turns, so that its ratios compare like with like.

    def matmul_rows(self, precision: str, error: float) -> None:
        torch, x, ys, p = self.torch, self.x, self.ys, precision.lower()
        peak = dict(
            reference=PEAK_TFLOPS[precision],
            reference_kind="published peak",
            bound="upper",
            ratio_of=f"rate / published {precision} peak",
            rel_error=error,
        )
        timed = self.measure(
            best=self.best_matmul,
            identical=lambda: identical_matmuls_into(torch, x, ys),
            chain=lambda: matmul_chain_into(torch, x, ys),
        )
        times, walls = timed["best"]
        best_rate = matmul_flops(BEST_SIZE) / statistics.median(times) / 1e12
        self.add(
            name=f"{p}_best_matmul_{BEST_SIZE}",
            experiment=f"one {BEST_SIZE}x{BEST_SIZE} product: the best one matmul gives",
            value=best_rate,
            unit="TFLOP/s",
            times=times,
            wall_times=walls,
            notes="the measured ceiling this group's rows are held against (at its clocks: "
            "products back to back)",
            **peak,
        )
        work = matmul_flops(SIZE, N_MATMULS)
        times, walls = timed["identical"]
        self.add(
            name=f"{p}_seed_{N_MATMULS}_identical",
            experiment=f"the seed's {N_MATMULS} x matmul(x, x), {SIZE}x{SIZE}",
            value=work / statistics.median(times) / 1e12,
            unit="TFLOP/s",
            times=times,
            wall_times=walls,
            notes="eager PyTorch launches every product (no graph optimiser merges identical "
            "ops, as a TensorFlow tf.function's can: notebook 01 traces that); its rate is "
            f"{statistics.median(timed['chain'][0]) / statistics.median(times):.2f}x the chain's, "
            "which can skip none",
            **peak,
        )
        times, walls = timed["chain"]
        chain_rate = work / statistics.median(times) / 1e12
        self.rates[precision] = (best_rate, chain_rate)
        chain = dict(unit="TFLOP/s", value=chain_rate, times=times, wall_times=walls)
        what = f"a chain of {N_MATMULS} products y <- y @ x, {SIZE}x{SIZE}"
        self.add(
            name=f"{p}_chain_{N_MATMULS}",
            experiment=what,
            notes="each product needs the one before: none can be skipped or merged",
            **chain,
            **peak,
        )
        self.add(
            name=f"{p}_chain_vs_best",
            experiment=f"{what}, beside one {BEST_SIZE}x{BEST_SIZE} product",
            reference=best_rate,
            reference_kind="measured peak",
            ratio_of=f"chain rate / best single {BEST_SIZE} matmul rate",
            goal=">= 0.8",
            rel_error=error,
            **chain,
        )

    def stream_rows(self, precision: str) -> None:
        torch, p = self.torch, precision.lower()
        s0, s1 = self.streams
        a, b = (s0, self.x, self.ys), (s1, self.x2, self.ys2)

        def chains_on_streams(*jobs):
            """Each (stream, x, ys) job runs its chain on its stream; launches interleave."""
            current = torch.cuda.current_stream()
            for stream, _, _ in jobs:
                stream.wait_stream(current)
            previous = [x for _, x, _ in jobs]
            for i in range(N_MATMULS):
                for j, (stream, x, ys) in enumerate(jobs):
                    with torch.cuda.stream(stream):
                        torch.mm(previous[j], x, out=ys[i])
                    previous[j] = ys[i]
            for stream, _, _ in jobs:
                current.wait_stream(stream)

        def both_chains_on_one_stream():
            current = torch.cuda.current_stream()
            s0.wait_stream(current)
            with torch.cuda.stream(s0):
                matmul_chain_into(torch, self.x, self.ys)
                matmul_chain_into(torch, self.x2, self.ys2)
            current.wait_stream(s0)

        timed = self.measure(
            one=lambda: chains_on_streams(a),
            two=lambda: chains_on_streams(a, b),
            serial=both_chains_on_one_stream,
        )
        (one, _), (two, walls), (serial, _) = timed["one"], timed["two"], timed["serial"]
        one_s, two_s, serial_s = (statistics.median(t) for t in (one, two, serial))
        parts = {"one_stream_median_s": one_s, "both_on_one_stream_median_s": serial_s}
        two_streams = dict(times=two, wall_times=walls, components=parts)
        self.add(
            name=f"{p}_two_streams_vs_one",
            experiment="two chains on two CUDA streams at once vs one chain on one stream",
            value=two_s,
            unit="s",
            reference=one_s,
            reference_kind="ideal",
            bound="lower",
            ratio_of="2 streams / 1 stream",
            notes=SHARED_SMS_NOTE,
            **two_streams,
        )
        self.add(
            name=f"{p}_two_streams_vs_serial",
            experiment="two chains on two streams vs the same two chains one after the other",
            value=two_s,
            unit="s",
            reference=serial_s,
            reference_kind="baseline",
            ratio_of="2 streams / both chains on 1 stream",
            notes=streams_vs_serial_words(two, serial),
            **two_streams,
        )
        self.add(
            name=f"{p}_two_streams_rate",
            experiment="two chains on two streams: their combined rate",
            value=2 * matmul_flops(SIZE, N_MATMULS) / two_s / 1e12,
            unit="TFLOP/s",
            reference=PEAK_TFLOPS[precision],
            reference_kind="published peak",
            bound="upper",
            ratio_of=f"rate / published {precision} peak",
            notes="streams share one chip: together they cannot pass its peak",
            **two_streams,
        )

    def copy_all(self, host, stream=None) -> None:
        """Every product to `host` memory, on `stream` (joined back), or blocking when None."""
        if stream is None:
            for i in range(N_MATMULS):
                host[i].copy_(self.ys[i])
            return
        current = self.torch.cuda.current_stream()
        stream.wait_stream(current)
        with self.torch.cuda.stream(stream):
            for i in range(N_MATMULS):
                host[i].copy_(self.ys[i], non_blocking=True)
        current.wait_stream(stream)

    def copy_rows(self) -> None:
        gigabytes = N_MATMULS * SIZE * SIZE * BYTES_PER_FLOAT / 1e9
        pageable = "to pageable host memory (what a plain .to('cpu') returns)"
        timed = self.measure(
            copy_pinned_d2h=lambda: self.copy_all(self.pinned, self.copy_stream),
            copy_pageable_d2h=lambda: self.copy_all(self.pageable),
        )
        for name, stream, how in (
            ("copy_pinned_d2h", self.copy_stream, "to pinned host memory"),
            ("copy_pageable_d2h", None, pageable),
        ):
            times, walls = timed[name]
            self.add(
                name=name,
                experiment=f"the {N_MATMULS} products ({gigabytes:.1f} GB), device to host, {how}",
                value=gigabytes / statistics.median(times),
                unit="GB/s",
                reference=PEAK_PCIE_GBPS,
                reference_kind="published peak",
                bound="upper",
                ratio_of="bandwidth / PCIe 5 x16 peak, one way",
                precision="n/a",
                setting="n/a: no matmul",
                times=times,
                wall_times=walls,
                notes="cudaMemcpyAsync on its own stream, non_blocking=True"
                if stream is not None
                else PAGEABLE_NOTE,
            )

    def overlap_rows(self, precision: str) -> None:
        torch, p, x, ys, copies = self.torch, precision.lower(), self.x, self.ys, self.copy_stream

        def run():
            matmul_chain_into(torch, x, ys)

        def compute_then_copy():
            run()
            self.copy_all(self.pinned, copies)

        def compute_while_copy():
            """Product i's copy waits on product i's event alone, so it overlaps product i+1."""
            current = torch.cuda.current_stream()
            copies.wait_stream(current)
            previous = x
            for i in range(N_MATMULS):
                torch.mm(previous, x, out=ys[i])
                previous = ys[i]
                done = torch.cuda.Event()
                done.record(current)
                copies.wait_event(done)
                with torch.cuda.stream(copies):
                    self.pinned[i].copy_(ys[i], non_blocking=True)
            current.wait_stream(copies)

        timed = self.measure(
            run=run,
            copy=lambda: self.copy_all(self.pinned, copies),
            then=compute_then_copy,
            overlapped=compute_while_copy,
        )
        run_s, copy_s = (statistics.median(timed[name][0]) for name in ("run", "copy"))
        (then_t, then_walls), (while_t, while_walls) = timed["then"], timed["overlapped"]
        # A two-stage pipeline of N equal steps cannot end before max + min / N: the first
        # product has nothing to overlap with, nor has the last copy.
        parts = {
            "run_median_s": run_s,
            "copy_median_s": copy_s,
            "pipeline_floor_s": max(run_s, copy_s) + min(run_s, copy_s) / N_MATMULS,
        }
        what = f"a {N_MATMULS}-product chain, each product copied to pinned host memory"
        self.add(
            name=f"{p}_compute_then_copy",
            experiment=f"{what}: all the products, then all the copies",
            value=statistics.median(then_t),
            unit="s",
            reference=run_s + copy_s,
            reference_kind="ideal",
            bound="lower",
            ratio_of="sequential / (run + copy)",
            times=then_t,
            wall_times=then_walls,
            components=parts,
            notes="the seed's run, then copy: its ideal is the sum; "
            + group_rates_words(
                matmul_flops(SIZE, N_MATMULS) / run_s / 1e12, *self.rates[precision]
            ),
        )
        overlapped = dict(
            value=statistics.median(while_t),
            unit="s",
            times=while_t,
            wall_times=while_walls,
            components=parts,
            reference_kind="ideal",
        )
        self.add(
            name=f"{p}_compute_while_copy_vs_max",
            experiment=f"{what}: each copy starts as soon as its product is done",
            reference=max(run_s, copy_s),
            bound="lower",
            ratio_of="overlapped / max(run, copy)",
            goal="<= 1.10",
            notes=OVERLAP_FLOOR_NOTE,
            **overlapped,
        )
        self.add(
            name=f"{p}_compute_while_copy_vs_sum",
            experiment=f"{what}: overlapped, beside the sequential ideal",
            reference=run_s + copy_s,
            ratio_of="overlapped / (run + copy)",
            goal="< 1.0",
            notes="below 1.0: the overlap saved time",
            **overlapped,
        )

    def overhead_row(self) -> None:
        times, walls = time_regions(
            self.torch, {"empty": lambda: None}, self.clock.measurement_budget()
        )["empty"]
        self.add(
            name="timer_overhead_empty",
            experiment="an empty region between two CUDA events",
            value=max(statistics.median(times), 1e-9),
            unit="s",
            reference=self.shortest_s,
            reference_kind="baseline",
            ratio_of="empty region / shortest workload",
            goal="<= 0.01",
            times=times,
            wall_times=walls,
            notes="the timing's own cost, beside the shortest workload timed in this run",
        )


def nvidia_smi(fields: str) -> dict:
    """A read-only nvidia-smi query of GPU 0, field -> value; empty where it cannot answer."""
    if shutil.which("nvidia-smi") is None:
        return {}
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader", "--id=0"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    values = [v.strip() for v in out.stdout.strip().split(",")]
    names = fields.split(",")
    return dict(zip(names, values, strict=True)) if len(values) == len(names) else {}


def machine_description(torch) -> dict:
    props = torch.cuda.get_device_properties(0)
    name = torch.cuda.get_device_name(0)
    description = {
        "label": f"{name} · PyTorch {torch.__version__}",
        "framework": "PyTorch",
        "device_name": name,
        "memory_bytes": props.total_memory,
        "multiprocessors": props.multi_processor_count,
        "compute_capability": f"{props.major}.{props.minor}",
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "driver_version": nvidia_smi("driver_version").get("driver_version", "unknown"),
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "gpu_state_before": nvidia_smi(GPU_STATE),
        "published_peaks": {
            **{f"{p} TFLOP/s": PEAK_TFLOPS[p] for p in PRECISIONS},
            "PCIe 5 x16 GB/s each way": PEAK_PCIE_GBPS,
        },
    }
    if "H200" not in name:
        description["warning"] = "not an H200: the peaks here are the H200's, not this GPU's"
    return description


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        action="append",
        type=Path,
        help=f"results file, rewritten after each row; repeat for several (default {DEFAULT_OUT})",
    )
    parser.add_argument(
        "--validate",
        type=Path,
        metavar="PATH",
        help="check a results file instead of measuring (needs neither torch nor a GPU)",
    )
    parser.add_argument(
        "--allow-partial", action="store_true", help="with --validate: accept a cut-off run"
    )
    parser.add_argument(
        "--allow-other-gpu",
        action="store_true",
        help="measure a GPU that is not an H200 (against the H200's peaks, labelled so)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.validate:
        errors = validate_file(args.validate, require_complete=not args.allow_partial)
        for error in errors:
            print(f"{args.validate}: {error}", file=sys.stderr)
        print(f"{args.validate}: {'INVALID' if errors else 'valid'}")
        return EXIT_INVALID_FILE if errors else EXIT_OK
    try:
        torch = import_torch_with_gpu(args.allow_other_gpu)
    except Refusal as refusal:
        print(f"h200_reference: refused, nothing measured or written: {refusal}", file=sys.stderr)
        return refusal.code
    clock = Clock()
    writer = ResultsWriter(args.out or [DEFAULT_OUT], machine_description(torch))
    machine = writer.data["machine"]
    print(f"{machine['label']}, {machine['memory_bytes'] / 2**30:.0f} GiB, {machine['platform']}")
    print(f"writing {', '.join(map(str, writer.paths))} after every row\n", flush=True)
    experiments = Experiments(torch, writer, clock)
    experiments.allocate()
    experiments.spin_up()
    experiments.run()
    writer.finish(clock.elapsed(), gpu_state_after=nvidia_smi(GPU_STATE))
    print("\n" + format_table(writer.data["rows"]))
    print(f"\nelapsed: {clock.elapsed():.1f} s (limit 180 s)")
    errors = validate_results(writer.data)
    for error in errors:
        print(f"CHECK FAILED: {error}", file=sys.stderr)
    return EXIT_FAILED_CHECKS if errors else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
