"""The H200 reference results file: its rows, their honesty checks, the table and the validator.

Standard library only: the measuring script (h200_reference.py) writes rows made here, and the
validator checks a results file anywhere, torch or not. A row holds one measured value beside
what bounds it, and their ratio:

    ratio = value / reference

where the reference is a published peak (an upper bound on a rate: ratio <= 1), an ideal time
(a lower bound: ratio >= 1), a peak measured in the same run, or a baseline. A rate above its
published peak, or a time below its ideal beyond the noise, is a timing bug: flagged in the row,
and an error for the validator.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import statistics
from collections.abc import Iterable
from pathlib import Path

SCHEMA = "d2lhelpers-h200-reference/1"

SIZE, N_MATMULS = 4000, 50  # the seed's workload: 50 products of 4000x4000 float32
BEST_SIZE = 8192  # one large product: the best rate the chip gives one matmul
PRECISIONS = ("FP32", "TF32")

# Published H200 SXM peaks (NVIDIA datasheet): leads, not readings. FP32 is the plain (non-tensor)
# rate; TF32 the dense tensor-core rate (989 is with 2:4 sparsity, which nothing here uses).
# PCIe 5 x16 carries 64 GB/s each way before encoding (about 63 after 128b/130b).
PEAK_TFLOPS = {"FP32": 67.0, "TF32": 495.0}
PEAK_PCIE_GBPS = 64.0

NOISY_IQR = 0.1  # IQR / median above this: too noisy to trust (as d2lhelpers.timing.benchmark)
IDEAL_TOLERANCE = 0.02  # a time this far below a lower-bound ideal is a timing bug, not noise
FP32_MAX_ERROR = 1e-4  # relative error vs float64: FP32 lands near 1e-6, TF32 near 3e-4
TF32_MIN_ERROR = 1e-5

UNITS = ("TFLOP/s", "GB/s", "s")
REFERENCE_KINDS = ("published peak", "measured peak", "ideal", "baseline")
BOUNDS = ("upper", "lower", None)  # the reference caps the value / the time cannot beat it
ROW_TYPES = {
    "name": str,
    "experiment": str,
    "dtype": str,
    "precision": str,
    "setting": str,
    "value": (int, float),
    "unit": str,
    "reference": (int, float),
    "reference_kind": str,
    "ratio": (int, float),
    "ratio_of": str,
    "goal": str,
    "measured": dict,
    "flags": list,
    "notes": str,
}
MEASURED_KEYS = ("median_s", "iqr_s", "runs", "times_s")
MACHINE_KEYS = (
    "label",
    "framework",
    "device_name",
    "memory_bytes",
    "torch_version",
    "cuda_version",
    "driver_version",
)


def expected_row_names() -> list[str]:
    """Every row a complete run writes, in the order it writes them."""
    names = []
    for p in (p.lower() for p in PRECISIONS):
        names += [
            f"{p}_best_matmul_{BEST_SIZE}",
            f"{p}_seed_{N_MATMULS}_identical",
            f"{p}_chain_{N_MATMULS}",
            f"{p}_chain_vs_best",
            f"{p}_two_streams_vs_one",
            f"{p}_two_streams_vs_serial",
            f"{p}_two_streams_rate",
        ]
        if p == "fp32":
            names += ["copy_pinned_d2h", "copy_pageable_d2h"]
        names += [
            f"{p}_compute_then_copy",
            f"{p}_compute_while_copy_vs_max",
            f"{p}_compute_while_copy_vs_sum",
        ]
    return names + ["timer_overhead_empty"]


def matmul_flops(size: int, n: int = 1) -> int:
    """FLOPs of `n` size x size products: a multiply and an add per term, 2 size^3 each."""
    return 2 * size**3 * n


def summarize_times(times: Iterable[float]) -> dict:
    """Median, IQR (inclusive quartiles, as timing.benchmark), minimum and every raw time."""
    times = [float(t) for t in times]
    if not times:
        raise ValueError("no times to summarize")
    q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else [0] * 3
    return {
        "median_s": statistics.median(times),
        "iqr_s": q3 - q1,
        "min_s": min(times),
        "runs": len(times),
        "times_s": times,
    }


def rate_flags(value: float, peak: float, unit: str) -> list[str]:
    """A rate above the published peak is impossible: work skipped or a clock that did not wait."""
    if value > peak:
        return [
            f"IMPOSSIBLE: {value:.4g} {unit} is {value / peak:.2f}x the published peak "
            f"{peak:.4g} {unit}: work was skipped or the clock stopped early"
        ]
    return []


def ideal_flags(measured_s: float, ideal_s: float, tolerance: float = IDEAL_TOLERANCE) -> list[str]:
    """A time below a lower-bound ideal is a timing bug; within `tolerance`, only a note."""
    ratio = measured_s / ideal_s
    if ratio < 1 - tolerance:
        return [
            f"TIMING BUG: {ratio:.3f}x its ideal, which nothing beats by more than the noise "
            f"allowance ({tolerance:.0%}): some work was not timed, or the ideal's parts were "
            "timed under other conditions (clocks, temperature)"
        ]
    if ratio < 1:
        return [f"below its ideal by {1 - ratio:.2%}, within the noise allowance ({tolerance:.0%})"]
    return []


def noise_flags(median_s: float, iqr_s: float) -> list[str]:
    if median_s <= 0:
        return ["the clock measured no time at all"]
    if iqr_s > NOISY_IQR * median_s:
        return [f"noisy: IQR is {iqr_s / median_s:.0%} of the median (above {NOISY_IQR:.0%})"]
    return []


def precision_flags(precision: str, rel_error: float | None) -> list[str]:
    """A product's error against float64 says which arithmetic ran, whatever the setting said."""
    if rel_error is None:
        return []
    if not math.isfinite(rel_error):
        return [f"the product is not finite (relative error {rel_error})"]
    if precision == "FP32" and rel_error > FP32_MAX_ERROR:
        return [f"FP32 asked, but the error {rel_error:.1e} is TF32's or worse"]
    if precision == "TF32" and rel_error < TF32_MIN_ERROR:
        return [f"TF32 asked, but the error {rel_error:.1e} is FP32's: TF32 was not in effect"]
    return []


def clock_flags(event_median_s: float, wall_median_s: float | None) -> list[str]:
    """CUDA events inside a host-timed region cannot measure more than the host clock saw."""
    if wall_median_s is not None and event_median_s > 1.05 * wall_median_s + 1e-5:
        return [
            f"event time {event_median_s:.4g} s exceeds the host's {wall_median_s:.4g} s: "
            "the events were not around the region"
        ]
    return []


def make_row(
    *,
    name: str,
    experiment: str,
    value: float,
    unit: str,
    reference: float,
    reference_kind: str,
    ratio_of: str,
    times: list[float],
    wall_times: list[float] | None = None,
    bound: str | None = None,
    goal: str = "report",
    dtype: str = "float32",
    precision: str = "n/a",
    setting: str = "n/a",
    rel_error: float | None = None,
    components: dict | None = None,
    notes: str = "",
) -> dict:
    """One row: the measured value beside its peak or ideal, their ratio, and every flag.

    `bound='upper'`: the reference is a ceiling the value cannot pass (a published peak);
    `bound='lower'`: the reference is a time the value cannot beat (an ideal).
    """
    if unit not in UNITS or reference_kind not in REFERENCE_KINDS or bound not in BOUNDS:
        raise ValueError(
            f"bad unit, reference_kind or bound: {unit!r} {reference_kind!r} {bound!r}"
        )
    measured = summarize_times(times)
    if wall_times:
        measured["wall_median_s"] = statistics.median(wall_times)
    if components:
        measured["components"] = components
    if rel_error is not None:
        measured["rel_error_vs_fp64"] = rel_error
    flags = noise_flags(measured["median_s"], measured["iqr_s"])
    flags += clock_flags(measured["median_s"], measured.get("wall_median_s"))
    flags += precision_flags(precision, rel_error)
    if bound == "upper":
        flags += rate_flags(value, reference, unit)
    elif bound == "lower":
        flags += ideal_flags(value, reference)
    return {
        "name": name,
        "experiment": experiment,
        "dtype": dtype,
        "precision": precision,
        "setting": setting,
        "value": value,
        "unit": unit,
        "reference": reference,
        "reference_kind": reference_kind,
        "bound": bound,
        "ratio": value / reference,
        "ratio_of": ratio_of,
        "goal": goal,
        "measured": measured,
        "flags": flags,
        "notes": notes,
    }


def validate_results(data: object, require_complete: bool = True) -> list[str]:
    """Everything wrong with a results file's content; an empty list means it is valid.

    Checks the schema, that every expected row is there (unless `require_complete` is False, for
    a cut-off run), that each ratio is value / reference, that no value passes its upper bound (a
    rate above its published peak) and that no time beats its lower bound (an ideal) beyond noise.
    """
    if not isinstance(data, dict):
        return ["the file does not hold a JSON object"]
    errors = []
    if data.get("schema") != SCHEMA:
        errors.append(f"schema is {data.get('schema')!r}, expected {SCHEMA!r}")
    machine = data.get("machine")
    if not isinstance(machine, dict):
        errors.append("no machine description")
    else:
        errors += [f"machine lacks {key!r}" for key in MACHINE_KEYS if key not in machine]
    try:
        datetime.datetime.fromisoformat(str(data.get("date")))
    except ValueError:
        errors.append(f"date {data.get('date')!r} is not an ISO date")
    rows = data.get("rows")
    if not isinstance(rows, list):
        return errors + ["no list of rows"]
    names = [row.get("name") if isinstance(row, dict) else None for row in rows]
    repeated = sorted({n for n in names if n is not None and names.count(n) > 1})
    errors += [f"row {n!r} appears more than once" for n in repeated]
    if require_complete:
        errors += [f"row {n!r} is missing" for n in expected_row_names() if n not in names]
    for i, row in enumerate(rows):
        errors += [f"row {i} ({names[i]}): {error}" for error in _row_errors(row)]
    return errors


def _row_errors(row: object) -> list[str]:
    if not isinstance(row, dict):
        return ["not an object"]
    errors = [f"lacks {key!r}" for key in [*ROW_TYPES, "bound"] if key not in row]
    errors += [
        f"{key!r} has the wrong type ({type(row[key]).__name__})"
        for key, kind in ROW_TYPES.items()
        if key in row and (not isinstance(row[key], kind) or isinstance(row[key], bool))
    ]
    if errors:
        return errors
    if row["unit"] not in UNITS:
        errors.append(f"unit {row['unit']!r} is not one of {UNITS}")
    if row["reference_kind"] not in REFERENCE_KINDS:
        errors.append(f"reference_kind {row['reference_kind']!r} is not one of {REFERENCE_KINDS}")
    if row["bound"] not in BOUNDS:
        errors.append(f"bound {row['bound']!r} is not one of {BOUNDS}")
    numbers = (row["value"], row["reference"], row["ratio"])
    if not all(math.isfinite(x) and x > 0 for x in numbers):
        return errors + [f"value, reference and ratio must be finite and positive: {numbers}"]
    if not math.isclose(row["ratio"], row["value"] / row["reference"], rel_tol=1e-6):
        errors.append(f"ratio {row['ratio']} is not value / reference")
    missing = [key for key in MEASURED_KEYS if key not in row["measured"]]
    if missing:
        errors.append(f"measured lacks {missing}")
    elif len(row["measured"]["times_s"]) != row["measured"]["runs"]:
        errors.append("measured runs does not match its times")
    if row["bound"] == "upper" and row["value"] > row["reference"]:
        errors.append(f"{row['value']:.4g} {row['unit']} is above its peak {row['reference']:.4g}")
    if row["bound"] == "lower" and row["ratio"] < 1 - IDEAL_TOLERANCE:
        errors.append(f"{row['ratio']:.3f}x its ideal: faster than possible, a timing bug")
    return errors


def validate_file(path: Path, require_complete: bool = True) -> list[str]:
    """`validate_results` of the JSON file at `path` (an unreadable file is one error)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        return [f"cannot read {path}: {error}"]
    return validate_results(data, require_complete)


class ResultsWriter:
    """Holds the machine description and the rows; rewrites every output file after each row.

    Each write goes to a temporary file that then replaces the old one, so an interrupted run
    leaves the last whole file, never half of one.
    """

    def __init__(self, paths: Iterable[Path], machine: dict, date: str | None = None):
        self.paths = [Path(p) for p in paths]
        self.data = {
            "schema": SCHEMA,
            "machine": machine,
            "date": date or datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "complete": False,
            "elapsed_s": 0.0,
            "rows": [],
        }

    def add(self, row: dict, elapsed_s: float) -> None:
        self.data["rows"].append(row)
        self.data["elapsed_s"] = round(elapsed_s, 2)
        self.write()

    def finish(self, elapsed_s: float, **machine_after) -> None:
        self.data["elapsed_s"] = round(elapsed_s, 2)
        self.data["machine"].update(machine_after)
        names = {row["name"] for row in self.data["rows"]}
        self.data["complete"] = names.issuperset(expected_row_names())
        self.write()

    def write(self) -> None:
        text = json.dumps(self.data, indent=1) + "\n"
        for path in self.paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(path.name + ".partial")
            partial.write_text(text)
            os.replace(partial, path)


def format_value(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1e3:.2f} ms" if value >= 1e-3 else f"{value * 1e6:.1f} µs"
    return f"{value:.1f} {unit}"


def format_row(row: dict) -> str:
    """One line (name, precision, value, IQR/median, ratio and what it is of), then its flags."""
    median = row["measured"]["median_s"]
    spread = row["measured"]["iqr_s"] / median if median > 0 else 0.0
    reference = f"{row['reference_kind']} {format_value(row['reference'], row['unit'])}"
    goal = "" if row["goal"] == "report" else f", goal {row['goal']}"
    line = (
        f"{row['name']:<30} {row['precision']:<4} {format_value(row['value'], row['unit']):>13} "
        f"{spread:4.0%} {row['ratio']:7.3f} = {row['ratio_of']} [{reference}{goal}]"
    )
    return "\n".join([line] + [f"{'':31}! {flag}" for flag in row["flags"]])


def format_table(rows: list[dict]) -> str:
    header = f"{'row':<30} {'prec':<4} {'measured':>13} {'IQR':>4} {'ratio':>7}"
    return "\n".join([header, "-" * 100] + [format_row(row) for row in rows])
