"""Reference results beside the learner's own: committed runs on other machines, and the seeds'.

`d2lhelpers/results/*.json` holds runs of `make bench` (TensorFlow) and of
`benchmarks/h200_reference.py` (PyTorch on an H200), each describing its machine. They are
package data, read with `importlib.resources`, so an installed wheel shows them as the
repository does; `make bench` writes its new results into the same folder of the repository.
`reference_table` shows a notebook's rows of them as one table that names each machine once and
says it is not the learner's. The seeds' published numbers are kept here verbatim, with the one
home of the arithmetic that reads them.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
from importlib import resources
from importlib.resources.abc import Traversable

from d2lhelpers.core.counts import chain_flops
from d2lhelpers.core.report import Reported, Table
from d2lhelpers.core.units import BYTES_PER_FLOAT, GB, format_seconds
from d2lhelpers.core.verdicts import NOISE_FLOOR, above_limit

RESULTS_DIR = resources.files("d2lhelpers") / "results"

# the seed: a TensorFlow version of d2l's "Automatic Parallelism"; 2 GPUs, model not stated
SEED_000 = {
    "GPU1 time": 0.0629,
    "GPU2 time": 0.0668,
    "GPU1 & GPU2": 0.0869,
    "Run on GPU1": 0.0557,
    "Copy to CPU": 2.1474,
    "Run on GPU1 and copy to CPU": 2.5692,
}

# The seed's GPU is not named, so no peak of its own can be checked. The yardstick: an H100/H200
# SXM's published dense TF32 tensor-core peak (no sparsity; an A100's is 156), the highest of any
# NVIDIA GPU before the Blackwell generation (NVIDIA's datasheet).
H100_TF32_PEAK = 495e12
DATASHEET_PEAK = (
    f"an H100/H200's dense TF32 peak ({H100_TF32_PEAK / 1e12:.0f} TFLOP/s, NVIDIA's datasheet)"
)
HIGHEST_BEFORE_BLACKWELL = (
    "the highest of NVIDIA's GPUs before the Blackwell generation (their datasheets)"
)

SEED_000_SIZE, SEED_000_MATMULS = 4000, 50  # run(x): 50 products of one 4000x4000 float32 matrix
# What every seed timing's final `run(x)[-1].numpy()` copies to the host: one result, 64 MB.
SEED_RESULT_BYTES = SEED_000_SIZE**2 * BYTES_PER_FLOAT


def seed_copy_rate() -> float:
    """The seed's own device-to-host rate, B/s: its 50 results copied in 'Copy to CPU'."""
    return SEED_000_MATMULS * SEED_RESULT_BYTES / SEED_000["Copy to CPU"]


def slowest_copy_rate() -> float:
    """B/s below which one result's copy would take longer than all of 'GPU1 time'."""
    return SEED_RESULT_BYTES / SEED_000["GPU1 time"]


# Rates the final copy may have run at (assumed, not measured): from the seed's own bulk rate (50
# separate copies) to a free copy.
ASSUMED_COPY_RATES = (seed_copy_rate(), 3 * GB, 6 * GB, 12 * GB, 24 * GB, math.inf)


def seed_final_copy_s(copy_rate: float | None = None) -> float:
    """What the `.numpy()` in every seed timing costs at `copy_rate` (default: the seed's own
    copy rate, about 43 ms of the 62.9 ms 'GPU1 time')."""
    return SEED_RESULT_BYTES / (seed_copy_rate() if copy_rate is None else copy_rate)


def seed_compute_s(label: str, copy_rate: float | None = None) -> float:
    """A seed timing less its final `.numpy()` copy (at `copy_rate`): what its GPU work took."""
    return SEED_000[label] - seed_final_copy_s(copy_rate)


def seed_rate(products: int, copy_rate: float, label: str = "GPU1 time") -> float:
    """FLOP/s of one GPU in `label` if `products` of the 4000x4000 products ran, the final copy
    (at `copy_rate`) taken off."""
    return chain_flops(SEED_000_SIZE, products) / seed_compute_s(label, copy_rate)


def _rate_words(rate: float) -> str:
    return "free" if math.isinf(rate) else f"{rate / GB:.2f} GB/s"


# The seed gives one time per run, no spread: the largest gap between its timings of the same
# work stands in. 'GPU1 time', 'GPU2 time' and 'Run on GPU1' run the same code (run(x), then one
# result's .numpy()) on two GPUs of one kind and in two cells: every pair counts (read 89: 13%
# between 'GPU1 time' and 'Run on GPU1'; read 95: 20% between 'GPU2 time' and 'Run on GPU1').
SAME_WORK = tuple(itertools.combinations(("GPU1 time", "GPU2 time", "Run on GPU1"), 2))


def _gap(a: str, b: str) -> float:
    return max(SEED_000[a], SEED_000[b]) / min(SEED_000[a], SEED_000[b]) - 1


def spread_less_copy(rate: float) -> float:
    """The largest gap between the seed's timings of the same work, each less its final copy at
    `rate`: the stand-in for its noise on that basis (the totals' gap when the copy is free)."""
    times = {label: seed_compute_s(label, rate) for pair in SAME_WORK for label in pair}
    return max(max(times[a], times[b]) / min(times[a], times[b]) - 1 for a, b in SAME_WORK)


SEED_SPREAD_PAIR = max(SAME_WORK, key=lambda pair: _gap(*pair))
SEED_SPREAD = _gap(*SEED_SPREAD_PAIR)
SEED_SPREAD_SOURCE = (
    f"the gap between '{SEED_SPREAD_PAIR[0]}' and '{SEED_SPREAD_PAIR[1]}', the seed's timings of "
    "the same work that differ most"
)


def less_copy_source(rate: float) -> str:
    """Where `spread_less_copy(rate)` comes from, in words, and why not `SEED_SPREAD` (reads
    141, 142: the totals' 20% and this 87% side by side, unexplained)."""
    return (
        "the largest gap between the seed's timings of the same work, each less its copy at "
        f"{_rate_words(rate)}; not the {SEED_SPREAD:.0%} of the totals, as this rate is of a "
        "time less its copy"
    )


def above_datasheet(rate: float, spread: float = SEED_SPREAD) -> str | None:
    """How a seed rate sits against the highest pre-Blackwell datasheet peak: 'beyond' above it
    by more than the seed's noise stand-in `spread` (`SEED_SPREAD`, or `spread_less_copy` at
    the copy rate the rate assumes: read 129), 'within' above it inside that (too close to
    call: read 83), None at or below it."""
    if rate <= H100_TF32_PEAK:
        return None
    return "beyond" if above_limit(rate, H100_TF32_PEAK, spread) else "within"


def within_seed_noise(rate: float, spread: float = SEED_SPREAD, source=SEED_SPREAD_SOURCE) -> str:
    """The words for a seed rate above the datasheet peak inside the seed's noise stand-in."""
    return (
        f"{rate / H100_TF32_PEAK:.2f}x that peak, above it within the {spread:.0%} that "
        f"stands in for the seed's noise ({source}): too close to call, not a result either way"
    )


# read 156: the verdict's 1.84x beside the table's 2.20x 'both / one', two ratios unnamed
OVER_SLOWER = (
    "'GPU1 & GPU2' over the slower GPU alone (not the table's 'both / one', which is over "
    "'GPU1 time')"
)


@dataclasses.dataclass(repr=False)  # shown by its tables (`Reported`)
class SeedComputeResult(Reported):
    """The seed's 'GPU1 time', 'GPU2 time' and 'GPU1 & GPU2', each less its final copy, for copy
    rates that the seed's numbers cannot rule out."""

    copy_rates: tuple[float, ...] = ASSUMED_COPY_RATES
    h200: dict[str, dict] = dataclasses.field(default_factory=lambda: h200_rows())

    def both_over(self, label: str, rate: float) -> float:
        """'GPU1 & GPU2' over `label`, both less the one copy each contains."""
        return seed_compute_s("GPU1 & GPU2", rate) / seed_compute_s(label, rate)

    @property
    def verdict(self) -> str:
        """What the seed's numbers can tell, rate by rate: 'both / slower' against the largest
        gap between its timings of the same work, each less its copy at that rate (read 101: the
        20% of the totals applied to times less their copy, where that gap grows to 87%)."""
        slower = max(("GPU1 time", "GPU2 time"), key=SEED_000.get)
        beyond, within = [], []
        for r in self.copy_rates:
            excess, spread = self.both_over(slower, r) - 1, spread_less_copy(r)
            (beyond if excess > spread else within).append(
                f"{_rate_words(r)} ({excess + 1:.2f}x, gap {spread:.0%})"
            )
        how = (
            "the largest gap between the seed's timings of the same work, each less its copy at "
            f"that rate, stands in for its noise ({SEED_SPREAD_SOURCE} when the copy is free; "
            "the seed gives one time each: an assumption); being already the spread of a ratio "
            "of two timings, it is set once against this ratio, not once per time"
        )
        if not within:
            return (
                f"At every copy rate here, {OVER_SLOWER} is beyond the "
                f"seed's noise ({'; '.join(beyond)}; {how}): together, the two jobs did not take "
                "the time of one"
            )
        said = (
            f"{OVER_SLOWER} is within the seed's noise at "
            f"{'; '.join(within)}, so at {'that rate' if len(within) == 1 else 'those rates'} "
            "its numbers cannot tell whether the two jobs took the time of one"
        )
        if beyond:
            said += f"; beyond it at {'; '.join(beyond)}: there they did not"
        return f"{said} ({how})"

    def _run_on_gpu1(self) -> str:
        """The seed's other timing of the same run(x) and copy, read the same way (read 80):
        above the datasheet peak where 'GPU1 time' is not, but inside the seed's noise stand-in
        (read 83), which the sentence then says."""
        other = [seed_rate(SEED_000_MATMULS, r, "Run on GPU1") for r in self.copy_rates]
        top, at = max(zip(other, self.copy_rates, strict=True))
        # read 129: each rate against the stand-in on its own basis (87% at the seed's copy
        # rate, where this one is the highest), not the totals' 20%
        where = above_datasheet(top, spread_less_copy(at))
        if where is None:
            return ""
        said = (
            f"; the seed's 'Run on GPU1' ({SEED_000['Run on GPU1']} s, the same run(x) and copy, "
            f"timed in another cell) would need up to {top / 1e12:.0f} TFLOP/s for all 50"
        )
        if where == "within":  # read 83: 1.01x the peak inside a 6% stand-in for the noise
            return f"{said}, {within_seed_noise(top, spread_less_copy(at), less_copy_source(at))}"
        above = [
            r
            for r, rate in zip(self.copy_rates, other, strict=True)
            if above_datasheet(rate, spread_less_copy(r))
        ]
        return (
            f"{said}: at {', '.join(_rate_words(r) for r in above)}, beyond that noise, all 50 "
            "running would need a GPU faster than any NVIDIA GPU before Blackwell"
        )

    def tables(self) -> list[Table]:
        rows = [
            [
                _rate_words(rate),
                "none" if math.isinf(rate) else format_seconds(seed_final_copy_s(rate)),
                format_seconds(seed_compute_s("GPU1 time", rate)),
                format_seconds(seed_compute_s("GPU1 & GPU2", rate)),
                f"{self.both_over('GPU1 time', rate):.2f}x",
                f"{seed_rate(SEED_000_MATMULS, rate) / 1e12:.0f}",
                f"{seed_rate(1, rate) / 1e12:.1f}",
            ]
            for rate in self.copy_rates
        ]
        ratios = [self.both_over("GPU1 time", r) for r in self.copy_rates]
        notes = [
            self.verdict,
            "Cannot tell how long the matmuls took: over these rates 'both / one' runs from "
            f"{min(ratios):.2f}x to {max(ratios):.2f}x (ideal 1.00x). The seed's only copy rate, "
            f"{_rate_words(seed_copy_rate())}, is for 50 separate copies; a copy slower than "
            f"{_rate_words(slowest_copy_rate())} would take longer than all of 'GPU1 time'.",
            "Cannot tell whether GPU 1 had finished: 'GPU1 & GPU2' waits only for GPU 2's last "
            "result (the seed's code calls run(x_gpu1) without .numpy(), and the book's "
            "Benchmark, in d2l's own library, starts and stops a timer and syncs no device "
            "(read in d2l's source, its `Benchmark` class; not shown here); this notebook's "
            "d2l.Benchmark syncs every device: how it is built, not shown by a cell).",
            "Cannot tell how many of the 50 products ran: the seed names no GPU, so no rate "
            "above can be checked against its own GPU's peak; "
            + _against_datasheet([seed_rate(SEED_000_MATMULS, r) for r in self.copy_rates])
            + self._run_on_gpu1()
            + ".",
            *_h200_scale([seed_rate(SEED_000_MATMULS, r) for r in self.copy_rates], self.h200),
        ]
        title = "The seed's times less the final 64 MB copy, at assumed copy rates"
        columns = [
            "copy rate (assumed)",
            "copy",
            "'GPU1 time' less copy",
            "'GPU1 & GPU2' less copy",
            "both / one",
            "TFLOP/s if 50 ran",
            "if 1 ran",
        ]
        return [Table(title, columns, rows, notes)]


def h200_rows(results: list[dict] | None = None) -> dict[str, dict]:
    """The committed H200 run's rows by name (`benchmarks/h200_reference.py`, PyTorch); empty
    when none is committed."""
    for result in load_results() if results is None else results:
        machine = result.get("machine", {})
        if machine.get("framework") == "PyTorch" and "H200" in machine.get("device_name", ""):
            return {row["name"]: row for row in result.get("rows", [])}
    return {}


H200_RUN = "the committed H200 run (PyTorch; another machine, for scale, not a bound)"


def h200_seed_rates(rows: dict[str, dict]) -> tuple[float, float] | None:
    """(TF32, FP32) FLOP/s of the seed's 50 identical products in the H200 run (eager PyTorch
    runs every one), or None without that run."""
    tf32, fp32 = rows.get("tf32_seed_50_identical"), rows.get("fp32_seed_50_identical")
    if not (tf32 and fp32):
        return None
    return tf32["value"] * 1e12, fp32["value"] * 1e12


def _h200_scale(rates: list[float], rows: dict[str, dict]) -> list[str]:
    """The table's 'if 50 ran' rates beside what the H200 run measured on the same products."""
    measured = h200_seed_rates(rows)
    if measured is None:
        return []
    tf32, fp32 = measured
    return [
        f"In {H200_RUN}, the seed's 50 products ran at {tf32 / 1e12:.0f} TFLOP/s in TF32 and "
        f"{fp32 / 1e12:.1f} TFLOP/s in FP32; of the {len(rates)} rates 'if 50 ran' above, "
        f"{sum(r <= tf32 for r in rates)} are at or below its TF32 rate and "
        f"{sum(r <= fp32 for r in rates)} at or below its FP32 rate."
    ]


def h200_run_words(rows: dict[str, dict], copy_rate: float, matmul_rate: float) -> list[str]:
    """Notebook 02's seed reading beside the H200 run: its copy rates and its rate on the seed's
    products, against the seed's `copy_rate` and the `matmul_rate` its run would need."""
    pinned, pageable = rows.get("copy_pinned_d2h"), rows.get("copy_pageable_d2h")
    measured = h200_seed_rates(rows)
    if not (pinned and pageable and measured):
        return []
    slowest = min(pinned["value"], pageable["value"]) * GB
    return [
        f"In {H200_RUN}, the device-to-host copy of the same 3.2 GB ran at "
        f"{pinned['value']:.1f} GB/s into pinned and {pageable['value']:.1f} GB/s into pageable "
        "host memory (each as 50 copies of one product, one tensor per call, as the seed's); "
        f"the seed's {copy_rate / GB:.2f} GB/s is {slowest / copy_rate:.1f}x below "
        f"the slower of those, and the seed's 50 products ran there at "
        f"{measured[0] / 1e12:.0f} TFLOP/s in TF32: {matmul_rate / 1e12:.0f} TFLOP/s is "
        f"{matmul_rate / measured[0]:.2f}x that."
    ]


def _against_datasheet(rates: list[float]) -> str:
    """Rates held against the highest dense TF32 datasheet peak (notebook 02's yardstick)."""
    peak, top, where = H100_TF32_PEAK, max(rates), DATASHEET_PEAK
    if top <= peak:
        return f"all are below {where}, so none is ruled out (at most {top / 1e12:.0f} TFLOP/s)"
    above = sum(r > peak for r in rates)
    return f"{above} of them are above {where}: those copy rates are ruled out"


def seed_without_copy(copy_rates: tuple[float, ...] = ASSUMED_COPY_RATES) -> SeedComputeResult:
    """The seed's two-GPU timings read without their final copy, at each of `copy_rates`."""
    if not copy_rates or min(copy_rates) <= slowest_copy_rate():
        raise ValueError(
            f"copy rates must be above {_rate_words(slowest_copy_rate())}: a slower copy would "
            "take longer than the whole 'GPU1 time'"
        )
    return SeedComputeResult(tuple(copy_rates))


# Which rows of each results file belong to a notebook's topic (substrings of row names).
TOPICS = {
    "concurrency": (
        "concurrent",
        "two_streams",
        "workload rate",
        "seed_50_identical",
        "chain_50",
        "chain_vs_best",
    ),
    "copy": ("compute_then_copy", "compute_while_copy", "copy_pinned", "run and copy", "copy"),
    "allreduce": ("all-reduce",),
    "split": ("tensor parallel", "pipeline", "MLP"),
}
REFERENCE_TITLE = "Reference results (committed runs, not this one)"


def load_results(directory: Traversable = RESULTS_DIR) -> list[dict]:
    """Every results file (`*.json`), in name order; none when the folder is missing."""
    if not directory.is_dir():
        return []
    files = sorted((p for p in directory.iterdir() if p.name.endswith(".json")), key=str)
    return [json.loads(p.read_text(encoding="utf-8")) for p in files]


def machine_label(result: dict) -> str:
    machine = result.get("machine", {})
    if "label" in machine:
        return machine["label"]
    return (
        f"{machine.get('summary', 'unknown machine')} · TensorFlow {machine.get('tensorflow', '?')}"
    )


def _quantity(value: float, unit: str) -> str:
    return format_seconds(value) if unit == "s" else f"{value:.3g} {unit}"


def _is_script_row(row: dict) -> bool:
    """A row of the H200 script (value, reference and what the ratio is), not of make bench."""
    return "ratio_of" in row


def _script_flags(row: dict) -> tuple[list[str], list[str]]:
    """(flags about the bound, other warnings) of an H200 script row."""
    flags = row.get("flags") or []
    bound = [f for f in flags if f.startswith(("TIMING BUG", "IMPOSSIBLE")) or "allowance" in f]
    return bound, [f for f in flags if f not in bound]


def row_detail(row: dict, machine: dict | None = None) -> str:
    """What a committed row measured: make bench's detail (with notebook 01's model beside a
    concurrency row of `machine`'s), or the H200 script's ratio spelled out (value against its
    reference, then its notes and warnings)."""
    if not _is_script_row(row):
        detail = row.get("detail") or row.get("notes", "")
        return OLD_DETAILS.get(detail, detail) + _concurrency_model(row, machine or {})
    unit = row["unit"]
    said = (
        f"{row['ratio_of']}: {_quantity(row['value'], unit)} vs "
        f"{_quantity(row['reference'], unit)} ({row['reference_kind']})"
    )
    warnings = _script_flags(row)[1]
    notes = reread_notes(row)
    return "; ".join([said, *([notes] if notes else []), *warnings])


CONCURRENT = re.compile(r"concurrent (\d+) chains / 1 chain")


def _concurrency_model(row: dict, machine: dict) -> str:
    """Read 108: a committed run of k chains on logical CPU devices beside notebook 01's model
    max(1, k/c) (1.81x where it says 1.50x, unsaid), read with this book's 5% floor on each
    time, the only noise that run leaves (it kept none of its own)."""
    found = CONCURRENT.fullmatch(row["name"])
    cores = machine.get("cpu_cores")
    if not found or found[1] == "1" or not cores or "logical CPU" not in machine.get("summary", ""):
        return ""  # k = 1 is the yardstick itself
    k, ratio = int(found[1]), row["ratio"]
    model = max(1.0, k / cores)
    band = NOISE_FLOOR * (ratio + model)  # each time's noise at least the floor of it
    said = f"; notebook 01's model max(1, k/c) says {model:.2f}x for {k} on {cores} cores"
    if abs(ratio - model) <= band:
        return f"{said}: within this book's 5% floors of it"
    side = "slower" if ratio > model else "faster"
    return (
        f"{said}: {side} by {abs(ratio / model - 1):.0%}, beyond this book's {NOISE_FLOOR:.0%} "
        "floors alone (the run kept no noise of its own, so whether a wider noise holds it is not "
        "known here)"
    )


# read 99: '64 if every byte were copied' holds only for calls that cost nothing but their bytes
COPY_RATIO_DETAIL = (
    "ideal 1.0 (no bytes move); up to 64 if every byte were copied and a call cost nothing else "
    "(a per-call cost makes it less)"
)
# Details of committed make bench rows reworded since that run, as they now read
OLD_DETAILS = {"ideal 1.0 (no bytes move); 64 if every byte were copied": COPY_RATIO_DETAIL}


# The H200 script's phrases that this book re-reads by its own rule when it shows a committed row
# (the file keeps the words it was written with; the script's own wording may since have changed).
# A test checks that the script still writes each one.
PAGEABLE_MECHANISM = "the driver stages pageable memory through a pinned buffer"  # PAGEABLE_NOTE
PAGEABLE_SOURCE = " (CUDA's documentation of pageable transfers, not measured here)"
GROUP_PEAK = ": above that group's measured peak"  # group_rates_words
BEYOND_SPREAD = "beyond the two medians' spread"  # streams_vs_serial_words, a gap it read
WITHIN_SPREAD = "within the two medians' spread"  # streams_vs_serial_words, none read
SHARED_SMS = "1.0 would need a second chip's compute"  # SHARED_SMS_NOTE
TIMING_BUG = "below 1.0 is a timing bug"  # OVERLAP_FLOOR_NOTE


def reread_notes(row: dict) -> str:
    """An H200 script row's notes as this book reads them: the first rule of `NOTE_REREADS`
    whose phrase the notes hold, or the notes as written."""
    notes = row.get("notes", "")
    for phrase, reread in NOTE_REREADS:
        if phrase in notes:
            return reread(row, notes)
    return notes


def _pageable_source(row: dict, notes: str) -> str:
    """A mechanism with its source, for a file written before the script said it."""
    return notes if PAGEABLE_SOURCE in notes else notes + PAGEABLE_SOURCE


def _shared_sms(row: dict, notes: str) -> str:
    """Read 143: the script's mechanism for two streams on one chip, labelled as expected."""
    head, _, rest = notes.partition(";")
    return f"{head} (expected, not measured: the script traced no SM occupancy);{rest}"


def _timing_bug(row: dict, notes: str) -> str:
    """Read 143: below max(run, copy) is not a result only beyond the noise, and a timing bug is
    one possible cause of three (as notebook 02 reads its own run)."""
    return (
        "below 1.0 beyond the noise is not a result (possible causes, not measured: a timing "
        "error, a change in the machine's speed between the runs, or the floor's premise "
        f"failing);{notes.partition(';')[2]}"
    )


def _group_peak(row: dict, notes: str) -> str:
    """Read 100: above the group's best product by this book's rule, the cause a hypothesis."""
    return notes[: notes.index(GROUP_PEAK)] + _group_peak_words(notes)


def _beyond_spread(row: dict, notes: str) -> str:
    """Reads 96, 98, 100: a gap the script read beyond its quiet runs' own spread (0% there),
    while every verdict in these notebooks takes each time's noise as at least `NOISE_FLOOR`:
    within that floor, the times cannot tell, and the script's mechanism is not repeated."""
    if abs(row["value"] - row["reference"]) > NOISE_FLOOR * (row["value"] + row["reference"]):
        return notes
    gap = notes.split(":")[0]  # e.g. "4% below 1.0, beyond the two medians' spread (0%)"
    return (
        f"by this book's rule (each time's noise at least {NOISE_FLOOR:.0%} of it) this gap "
        "is within the noise, so these times cannot say whether running at once gained "
        f"anything (the script, reading its runs' own spread with no floor, found: {gap})"
    )


def _within_spread(row: dict, notes: str) -> str:
    """Read 101: within the noise, then a mechanism: the mechanism is not read."""
    return f"{notes.split(':')[0]}: these times cannot say whether running at once gained anything"


def _group_peak_words(notes: str) -> str:
    """The overlap group's run alone against the matmul group's best single product, by this
    book's rule (each rate's noise at least `NOISE_FLOOR` of it; read 100: 1.05x printed as
    'above that group's measured peak, so each group runs at its own clocks')."""
    found = re.search(
        r"ran at (\d+) TFLOP/s in this group, ([\d.]+)x .*product there (\d+)\)", notes
    )
    if not found:
        return notes[notes.index(GROUP_PEAK) :]
    run, chain, best = float(found[1]), found[2], float(found[3])
    within = run - best <= NOISE_FLOOR * (run + best)
    where = "within the noise: not a result above it" if within else "beyond the noise"
    return (
        f": {run / best:.2f}x that group's best single product, above it {where} (by this "
        f"book's rule, each rate's noise at least {NOISE_FLOOR:.0%} of it); why the same chain "
        f"ran {chain}x as fast here is not measured (a hypothesis: each group runs at its own "
        "clocks, as there products run back to back and here copies leave the SMs idle between "
        "runs), so rates are compared within a group only"
    )


NOTE_REREADS = (
    (PAGEABLE_MECHANISM, _pageable_source),
    (GROUP_PEAK, _group_peak),
    (BEYOND_SPREAD, _beyond_spread),
    (WITHIN_SPREAD, _within_spread),
    (SHARED_SMS, _shared_sms),
    (TIMING_BUG, _timing_bug),
)


def bound_note(row: dict) -> str:
    """A committed ratio past the bound it cannot pass (a rate above its peak, a time below its
    ideal): flagged, never shown as a plain result. Within the run's noise allowance (make
    bench's floor, the H200 script's) it was let through there; here it still says so."""
    if _is_script_row(row):
        bound = _script_flags(row)[0]
        if any(f.startswith(("TIMING BUG", "IMPOSSIBLE")) for f in bound):
            return "impossible: past its bound beyond the noise, so not a result"
        if bound:
            return f"{bound[0]}: not impossible, and not a result below the bound either"
        return ""
    ceiling, floor, ratio = row.get("ceiling"), row.get("floor"), row["ratio"]
    if row.get("verdict") == "IMPOSSIBLE":
        return "impossible: past its bound beyond the noise, so not a result"
    if ceiling is not None and ratio > ceiling:
        return (
            f"above its ceiling {ceiling:.2f} by less than make bench's {NOISE_FLOOR:.0%} "
            f"floor: not impossible, and not a result above the bound either"
        )
    if floor is not None and ratio < floor:
        return (
            f"below its floor {floor:.2f} by less than make bench's {NOISE_FLOOR:.0%} "
            f"floor: not impossible, and not a result below the bound either"
        )
    return ""


def reference_table(topic: str, results: list[dict] | None = None) -> Table:
    """The committed rows of `topic` as one table, each machine named once in its title (as A,
    B, ... when there are several) and labelled as not the learner's machine."""
    keys = TOPICS[topic]
    results = load_results() if results is None else results
    found = []
    for result in results:
        rows = [r for r in result.get("rows", []) if any(k in r["name"] for k in keys)]
        if rows:
            found.append((machine_label(result), rows, result.get("machine", {})))
    if not found:
        return Table(f"{REFERENCE_TITLE}: none for '{topic}' in {RESULTS_DIR.name}/ yet", [])
    several = len(found) > 1
    names = [
        f"{chr(65 + i)}: {label}" if several else label for i, (label, _, _) in enumerate(found)
    ]
    bounded = any(bound_note(r) for _, rs, _ in found for r in rs)  # a column only when needed
    rows = [
        ([chr(65 + i)] if several else [])
        + [row["name"], f"{row['ratio']:.2f}", row_detail(row, machine)]
        + ([bound_note(row)] if bounded else [])
        for i, (_, machine_rows, machine) in enumerate(found)
        for row in machine_rows
    ]
    columns = (["machine"] if several else []) + ["what was measured there", "ratio", "detail"]
    if bounded:
        columns.append("bound")
    return Table(f"{REFERENCE_TITLE}: {'; '.join(names)}", columns, rows)
