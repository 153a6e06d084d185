import re
from pathlib import Path

import pytest

from d2lhelpers.references import (
    SEED_000,
    SEED_000_MATMULS,
    SEED_000_SIZE,
    machine_label,
    reference_lines,
    seed_compute_s,
    seed_copy_rate,
    seed_final_copy_s,
)

SEEDS = Path(__file__).parent / "seeds"


def test_rows_are_picked_by_topic_and_labelled_by_machine():
    results = [
        {
            "machine": {"summary": "4 logical CPU devices", "tensorflow": "2.21.0"},
            "rows": [
                {"name": "concurrent 2 chains / 1 chain", "ratio": 1.02, "detail": "49 ms"},
                {"name": "Benchmark overhead", "ratio": 0.001, "detail": ""},
            ],
        },
        {
            "machine": {"label": "NVIDIA H200 · PyTorch 2.9"},
            "rows": [{"name": "fp32_two_streams_vs_one", "ratio": 1.9, "notes": "one chip"}],
        },
    ]
    lines = reference_lines("concurrency", results)
    assert lines == [
        "[4 logical CPU devices · TensorFlow 2.21.0] concurrent 2 chains / 1 chain: 1.02  49 ms",
        "[NVIDIA H200 · PyTorch 2.9] fp32_two_streams_vs_one: 1.90  one chip",
    ]
    assert machine_label({}) == "unknown machine · TensorFlow ?"


def test_no_results_says_so():
    assert reference_lines("allreduce", [])[0].startswith("no reference results")


def test_seed_numbers_are_the_published_ones_in_order():
    printed = (SEEDS / "000_automatic_parallelism_output.txt").read_text()
    published = re.findall(r"^(.+): (\d+\.\d{4}) sec$", printed, flags=re.M)
    assert len(published) == 6
    assert list(SEED_000.items()) == [(label, float(value)) for label, value in published]


def test_seed_workload_is_read_from_the_seeds_code():
    code = (SEEDS / "000_automatic_parallelism.py").read_text()
    (n,) = {int(k) for k in re.findall(r"for _ in range\((\d+)\)", code)}
    sizes = {tuple(map(int, s)) for s in re.findall(r"shape=\((\d+), (\d+)\)", code)}
    assert (SEED_000_MATMULS, {(SEED_000_SIZE, SEED_000_SIZE)}) == (n, sizes)


def test_the_seeds_final_copy_is_about_43_ms_of_its_63_ms():
    # 50 results of 64 MB each in 2.1474 s: 1.49 GB/s; one result at that rate: 2.1474 / 50 s
    assert seed_copy_rate() == pytest.approx(3.2e9 / 2.1474)
    assert seed_final_copy_s() == pytest.approx(0.042948)
    assert seed_compute_s("GPU1 time") == pytest.approx(0.0629 - 0.042948)
