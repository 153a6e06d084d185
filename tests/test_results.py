"""The committed reference results are well formed, and no impossible ratio passes as a result.

The rules are the package's own: a time can beat its ideal only within the noise floor
(`verdicts.NOISE_FLOOR`), a rate can exceed the device's peak only within that same floor (a row
keeps no noise of its own), a fraction lies in 0..1. A row outside its rule must carry a verdict
other than "ok"; the rules are tested on made-up rows first, so that they can fail.
"""

import importlib.util
import json
import math
import re
import sys
from pathlib import Path

import pytest

from d2lhelpers.core.verdicts import NOISE_FLOOR, NOISY_CAUSES
from d2lhelpers.references import load_results, machine_label, reference_table

ROOT = Path(__file__).resolve().parent.parent

RESULTS = ROOT / "d2lhelpers" / "results"
CPU_FILES = sorted(p for p in RESULTS.glob("*.json") if not p.name.startswith("h200"))
EXPECTED_PREFIXES = (
    "concurrent 1 chains / 1 chain",
    "concurrent 2 chains / 1 chain",
    "workload rate / device's best matmul rate",
    "Benchmark overhead / smallest workload",
    "tensor parallel step / one device",
    "pipeline step / one device",
    "all-reduce overlapped with compute / max(all-reduce, compute)",
    "overlapped run+copy / max(run, copy)",
    "hidden fraction",
)
# Rows whose ratio is a time over its ideal (nothing can be faster), a rate over its peak, a share.
BELOW_IDEAL_IMPOSSIBLE = (
    "concurrent",
    "overlapped run+copy / max",
    "all-reduce overlapped with compute / max",
)
ABOVE_PEAK_IMPOSSIBLE = ("workload rate / device's best matmul rate",)
FRACTIONS = ("hidden fraction",)
# Known faults of committed files, to be emptied when `make bench` is re-run with flagging verdicts
# (benchmarks/run_all.py's Row.verdict says "ok" for a ratio below its ideal).
KNOWN_UNFLAGGED: set[tuple[str, str]] = set()  # make bench flags them itself (Row.verdict)


def impossible_reason(row: dict) -> str | None:
    """Why `row`'s ratio cannot be a plain result, or None when it can."""
    name, ratio = row["name"], row["ratio"]
    if name.startswith(BELOW_IDEAL_IMPOSSIBLE) and ratio < 1 - NOISE_FLOOR:
        return f"{ratio:.3f}x its ideal, beyond the {NOISE_FLOOR:.0%} noise floor"
    if name.startswith(ABOVE_PEAK_IMPOSSIBLE) and ratio > 1 + NOISE_FLOOR:
        return f"{ratio:.3f}x the peak, beyond the {NOISE_FLOOR:.0%} noise floor"
    if name.startswith(FRACTIONS) and not 0 <= ratio <= 1:
        return f"a fraction of {ratio:.0%}"
    return None


def unflagged_impossible(path: Path) -> set:
    data = json.loads(path.read_text())
    return {
        (path.name, row["name"])
        for row in data["rows"]
        if impossible_reason(row) and row["verdict"] in ("ok", "")
    }


@pytest.mark.parametrize(
    ("name", "ratio", "impossible"),
    [
        ("overlapped run+copy / max(run, copy)", 0.94, True),
        ("overlapped run+copy / max(run, copy)", 0.96, False),
        ("concurrent 2 chains / 1 chain", 0.9987, False),
        ("concurrent 2 chains / 1 chain", 0.5, True),
        ("all-reduce overlapped with compute / max(all-reduce, compute)", 0.9, True),
        ("workload rate / device's best matmul rate", 1.05, False),
        ("workload rate / device's best matmul rate", 1.06, True),
        ("hidden fraction (run + copy - launch - overlapped) / min(run, copy)", 2.88, True),
        ("hidden fraction (run + copy - launch - overlapped) / min(run, copy)", -0.1, True),
        ("hidden fraction (run + copy - launch - overlapped) / min(run, copy)", 0.91, False),
        ("tensor parallel step / one device (2 devices)", 0.1, False),  # no ideal in the rule
    ],
)
def test_the_rules_find_impossible_ratios(name, ratio, impossible):
    assert (impossible_reason({"name": name, "ratio": ratio}) is not None) is impossible


def test_an_unflagged_impossible_row_is_found_in_a_file(tmp_path):
    rows = [
        {"name": "hidden fraction x", "ratio": 2.88, "verdict": "ok"},
        {"name": "hidden fraction y", "ratio": 2.88, "verdict": "IMPOSSIBLE"},
        {"name": "overlapped run+copy / max(run, copy)", "ratio": 1.02, "verdict": "ok"},
    ]
    path = tmp_path / "made-up.json"
    path.write_text(json.dumps({"rows": rows}))
    assert unflagged_impossible(path) == {("made-up.json", "hidden fraction x")}


NOTEBOOK_TOPICS = sorted(
    {
        topic
        for path in (ROOT / "notebooks").glob("*.ipynb")
        for topic in re.findall(r'reference_table\(\\"(\w+)\\"\)', path.read_text())
    }
)


def test_the_notebooks_print_reference_tables():
    assert "concurrency" in NOTEBOOK_TOPICS  # notebook 01's; the pattern above finds them


@pytest.mark.parametrize("topic", NOTEBOOK_TOPICS)
def test_every_reference_table_a_notebook_prints_has_committed_rows(topic):
    table = reference_table(topic)
    assert table.rows, f"no committed row matches {topic!r}: run `make bench`, or fix TOPICS"
    for result in load_results():  # each machine named once, however many rows it has
        assert str(table).count(machine_label(result)) <= 1


@pytest.mark.parametrize("path", CPU_FILES, ids=lambda p: p.name)
def test_cpu_reference_schema_and_rows(path):
    data = json.loads(path.read_text())
    assert {"summary", "cpu_cores", "tensorflow", "date", "devices"} <= set(data["machine"])
    names = [row["name"] for row in data["rows"]]
    for prefix in EXPECTED_PREFIXES:
        assert any(n.startswith(prefix) for n in names), f"missing row {prefix!r}"
    for row in data["rows"]:
        assert set(row) == {"name", "ratio", "goal", "detail", "verdict", "floor", "ceiling"}
        assert math.isfinite(row["ratio"]) and row["ratio"] >= 0
        assert row["goal"] == "report" or row["goal"][:2] in ("<=", ">=")


@pytest.mark.parametrize("path", CPU_FILES, ids=lambda p: p.name)
def test_a_committed_noisy_warning_names_its_causes_as_possible(path):
    """A noisy row's warning names what could have caused it as possible, not measured, as every
    live warning does (`verdicts.noisy_warning`): a reference run cannot tell which it was."""
    for row in json.loads(path.read_text())["rows"]:
        for warning in re.findall(r"noisy: IQR is [^;]*; ([^;]*)", row["detail"]):
            assert warning == NOISY_CAUSES, row["name"]


@pytest.mark.parametrize("path", CPU_FILES, ids=lambda p: p.name)
def test_no_impossible_ratio_passes_as_a_result(path):
    found = unflagged_impossible(path)
    assert found <= KNOWN_UNFLAGGED, f"impossible ratios shown as results: {found}"


def test_make_bench_reads_a_ratio_past_its_bound_as_impossible_not_ok():
    spec = importlib.util.spec_from_file_location("run_all", ROOT / "benchmarks" / "run_all.py")
    run_all = importlib.util.module_from_spec(spec)
    sys.modules["run_all"] = run_all  # dataclasses look their module up there
    spec.loader.exec_module(run_all)
    row = run_all.Row
    assert row("overlapped / max", 0.94, "<= 1.10", "", floor=1.0).verdict == "IMPOSSIBLE"
    assert row("overlapped / max", 0.97, "<= 1.10", "", floor=1.0).verdict == "ok"  # noise
    assert row("overlapped / max", 1.20, "<= 1.10", "", floor=1.0).verdict == "MISSED"
    assert row("hidden fraction", 1.10, ">= 0.7", "", ceiling=1.0).verdict == "IMPOSSIBLE"
    assert row("hidden fraction", 0.80, ">= 0.7", "", ceiling=1.0).verdict == "ok"
    assert row("a ratio", 0.10, "report", "").verdict == ""
