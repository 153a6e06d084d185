"""The committed reference results are well formed: every row present, no impossible ratio."""

import json
import math
from pathlib import Path

import pytest

RESULTS = Path(__file__).parent.parent / "results"
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


def test_a_cpu_reference_is_committed():
    assert CPU_FILES, "run `make bench` and commit results/<machine>.json"


@pytest.mark.parametrize("path", CPU_FILES, ids=lambda p: p.name)
def test_cpu_reference_schema_and_rows(path):
    data = json.loads(path.read_text())
    assert {"summary", "cpu_cores", "tensorflow", "date", "devices"} <= set(data["machine"])
    names = [row["name"] for row in data["rows"]]
    for prefix in EXPECTED_PREFIXES:
        assert any(n.startswith(prefix) for n in names), f"missing row {prefix!r}"
    for row in data["rows"]:
        assert set(row) == {"name", "ratio", "goal", "detail", "verdict"}
        assert math.isfinite(row["ratio"]) and row["ratio"] >= 0
        assert row["goal"] == "report" or row["goal"][:2] in ("<=", ">=")
        if row["name"].startswith("workload rate"):
            assert row["ratio"] <= 1.2, "a rate above the device's peak is a measurement bug"
        if row["name"].startswith(
            ("overlapped run+copy / max", "all-reduce overlapped with compute / max")
        ):
            assert row["ratio"] >= 0.9, "faster than the ideal overlap is a timing bug"
