import re
from pathlib import Path

import pytest

from d2lhelpers.references import (
    ASSUMED_COPY_RATES,
    REFERENCE_TITLE,
    SEED_000,
    SEED_000_MATMULS,
    SEED_000_SIZE,
    SeedComputeResult,
    bound_note,
    machine_label,
    reference_table,
    row_detail,
    seed_compute_s,
    seed_copy_rate,
    seed_final_copy_s,
    seed_rate,
    seed_without_copy,
    slowest_copy_rate,
)

SEEDS = Path(__file__).parent / "seeds"


CPU = {
    "machine": {"summary": "4 logical CPU devices sharing 2 usable CPU cores", "tensorflow": "2.2"},
    "rows": [
        {"name": "concurrent 2 chains / 1 chain", "ratio": 1.02, "detail": "49 ms"},
        {"name": "Benchmark overhead", "ratio": 0.001, "detail": ""},
    ],
}
H200 = {
    "machine": {"label": "NVIDIA H200 · PyTorch 2.9"},
    "rows": [{"name": "fp32_two_streams_vs_one", "ratio": 1.9, "notes": "one chip"}],
}


def script_row(**overrides) -> dict:
    """An H200 script row (benchmarks/h200_results.make_row's fields), made up."""
    row = {
        "name": "tf32_compute_then_copy",
        "value": 0.0750,
        "unit": "s",
        "reference": 0.0751,
        "reference_kind": "ideal",
        "ratio": 0.0750 / 0.0751,
        "ratio_of": "sequential / (run + copy)",
        "notes": "its ideal is the sum",
        "flags": ["below its ideal by 0.1%, within the noise allowance (2%)"],
    }
    return {**row, **overrides}


def test_one_machine_is_named_once_above_its_rows_as_not_yours():
    table = reference_table("concurrency", [CPU])
    assert table.title == (
        f"{REFERENCE_TITLE}: 4 logical CPU devices sharing 2 usable CPU cores · TensorFlow 2.2"
    )
    assert table.rows == [["concurrent 2 chains / 1 chain", "1.02", "49 ms"]]  # topic rows only
    text = str(table)
    assert text.count("4 logical CPU devices") == 1 and text.startswith(REFERENCE_TITLE)
    assert "<table>" in table._repr_html_()


def test_several_machines_are_named_once_each_and_keyed_in_a_column():
    table = reference_table("concurrency", [CPU, H200])
    assert table.title.endswith(
        ": A: 4 logical CPU devices sharing 2 usable CPU cores · TensorFlow 2.2; "
        "B: NVIDIA H200 · PyTorch 2.9"
    )
    assert table.columns[0] == "machine"
    assert table.rows == [
        ["A", "concurrent 2 chains / 1 chain", "1.02", "49 ms"],
        ["B", "fp32_two_streams_vs_one", "1.90", "one chip"],
    ]
    assert str(table).count("NVIDIA H200") == 1
    assert machine_label({}) == "unknown machine · TensorFlow ?"


def test_an_h200_script_row_spells_out_its_ratio_and_its_bound():
    row = script_row()
    assert row_detail(row) == (
        "sequential / (run + copy): 75.00 ms vs 75.10 ms (ideal); its ideal is the sum"
    )
    assert bound_note(row) == (
        "below its ideal by 0.1%, within the noise allowance (2%): not impossible, and not a "
        "result below the bound either"
    )
    bug = script_row(flags=["TIMING BUG: 0.960x its ideal", "noisy: IQR is 12% of the median"])
    assert bound_note(bug).startswith("impossible")
    assert row_detail(bug).endswith("; noisy: IQR is 12% of the median")  # not a bound: detail
    rate = script_row(value=48.3, unit="TFLOP/s", reference=67.0, flags=[], notes="")
    assert row_detail(rate).endswith(": 48.3 TFLOP/s vs 67 TFLOP/s (ideal)")
    assert bound_note(rate) == ""
    # read 96: a 4% gap the script calls beyond its quiet runs' spread is within this book's floor
    beyond = "4% below 1.0, beyond the two medians' spread (0%): the streams finished sooner"
    streams = script_row(value=0.254, reference=0.264, flags=[], notes=beyond)
    assert row_detail(streams).endswith(
        "(ideal); by this book's rule (each time's noise at least 5% of it) this gap is within "
        "the noise, so these times cannot say whether running at once gained anything (the "
        "script, reading its runs' own spread with no floor, found: 4% below 1.0, beyond the two "
        "medians' spread (0%))"
    )
    # read 101: within the script's own spread, no mechanism either
    inside = "within the two medians' spread (8%) of 1.0: as far as these times can tell, one chain"
    assert row_detail(script_row(value=0.0379, reference=0.0406, flags=[], notes=inside)).endswith(
        "(ideal); within the two medians' spread (8%) of 1.0: these times cannot say whether "
        "running at once gained anything"
    )
    wide = script_row(value=0.20, reference=0.264, flags=[], notes=beyond)  # 24%: beyond both
    assert row_detail(wide).endswith("finished sooner")
    table = reference_table("copy", [{"machine": H200["machine"], "rows": [row, rate]}])
    assert table.columns[-1] == "bound" and table.rows[1][-1] == ""


def test_the_one_core_checker_skips_the_same_reference_title():
    from tests import one_core

    assert one_core.REFERENCE_TITLE == REFERENCE_TITLE


def test_no_results_says_so():
    table = reference_table("allreduce", [CPU])
    assert table.title == f"{REFERENCE_TITLE}: none for 'allreduce' in results/ yet"
    assert not table.rows and not reference_table("copy", []).rows


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


def test_the_seeds_times_less_their_copy_at_each_assumed_rate():
    # At the seed's own rate: 62.9 - 42.95 = 19.95 ms of compute, 86.9 - 42.95 = 43.95 ms for both.
    assert seed_compute_s("GPU1 time", seed_copy_rate()) == pytest.approx(0.019952, rel=1e-4)
    assert seed_compute_s("GPU1 & GPU2", float("inf")) == 0.0869  # a free copy takes nothing
    assert seed_final_copy_s(16e9) == pytest.approx(0.004)  # 64 MB at 16 GB/s
    assert seed_rate(1, float("inf")) == pytest.approx(1.28e11 / 0.0629)
    assert seed_rate(50, seed_copy_rate()) == pytest.approx(6.4e12 / 0.019952, rel=1e-4)
    assert slowest_copy_rate() == pytest.approx(64e6 / 0.0629)
    assert ASSUMED_COPY_RATES[0] == seed_copy_rate() and ASSUMED_COPY_RATES[-1] == float("inf")


def test_the_reading_spans_the_rates_and_says_what_it_cannot_tell():
    reading = seed_without_copy()
    (table,) = reading.tables()
    assert [row[0] for row in table.rows] == [
        "1.49 GB/s", "3.00 GB/s", "6.00 GB/s", "12.00 GB/s", "24.00 GB/s", "free",
    ]  # fmt: skip
    assert [row[4] for row in table.rows][::5] == ["2.20x", "1.38x"]
    assert [row[5] for row in table.rows][::5] == ["321", "102"]  # TFLOP/s if all 50 ran
    assert table.rows[-1][1] == "none"
    # read 101: the stand-in for the seed's noise is the gap between its timings of the same work
    # on the verdict's own basis, each less its copy at that rate: 87% at 1.49 GB/s (23.85 ms
    # against 12.75 ms), 20% with a free copy (reads 89, 95: every pair of the three)
    from d2lhelpers.references import spread_less_copy

    assert spread_less_copy(seed_copy_rate()) == pytest.approx(23.85 / 12.75 - 1, abs=0.01)
    assert spread_less_copy(float("inf")) == pytest.approx(0.0668 / 0.0557 - 1)
    assert reading.verdict.startswith(
        "'GPU1 & GPU2' over the slower GPU alone (not the table's 'both / one', which is over "
        "'GPU1 time') is within the seed's noise at 1.49 GB/s (1.84x, "
        "gap 87%), so at that rate its numbers cannot tell whether the two jobs took the time of "
        "one; beyond it at 3.00 GB/s (1.44x, gap 32%); "
    )
    assert "; free (1.30x, gap 20%): there they did not (the largest gap" in reading.verdict
    assert "runs from 1.38x to 2.20x" in table.verdicts[1]
    assert "would take longer than all of 'GPU1 time'" in table.verdicts[1]
    assert any("names no GPU" in line for line in table.verdicts)


def test_a_ratio_within_the_spread_of_the_single_times_is_not_called_a_difference(monkeypatch):
    monkeypatch.setitem(SEED_000, "GPU1 & GPU2", 0.0680)  # 1.02x GPU2's 66.8 ms: within 20%
    verdict = SeedComputeResult((float("inf"),)).verdict
    assert verdict.startswith(
        "'GPU1 & GPU2' over the slower GPU alone (not the table's 'both / one', which is over "
        "'GPU1 time') is within the seed's noise at free (1.02x, gap "
        "20%), so at that rate its numbers cannot tell"
    )
    assert "beyond it" not in verdict
    wide = SeedComputeResult((float("inf"), 12e9))
    monkeypatch.setitem(SEED_000, "GPU1 & GPU2", 0.0869)  # the seed's own: beyond at both
    assert wide.verdict.startswith(
        "At every copy rate here, 'GPU1 & GPU2' over the slower GPU alone (not the table's 'both "
        "/ one', which is over 'GPU1 time') is beyond the seed's noise (free (1.30x, gap 20%); "
        "12.00 GB/s (1.33x, gap 22%);"
    )
    assert wide.verdict.endswith("together, the two jobs did not take the time of one")


@pytest.mark.parametrize("rates", [(), (1e9,), (2e9, slowest_copy_rate())])
def test_a_copy_rate_that_would_outlast_the_timing_is_refused(rates):
    with pytest.raises(ValueError, match="copy rates must be above 1.02 GB/s"):
        seed_without_copy(rates)


def test_a_ratio_past_its_bound_is_flagged_beside_it():
    rows = [
        {"name": "concurrent rate / peak", "ratio": 1.04, "detail": "", "ceiling": 1.0},
        {
            "name": "concurrent time / ideal",
            "ratio": 0.9,
            "detail": "",
            "floor": 1.0,
            "verdict": "IMPOSSIBLE",
        },
        {"name": "concurrent 2 chains / 1 chain", "ratio": 1.02, "detail": "49 ms"},
    ]
    table = reference_table("concurrency", [{"machine": CPU["machine"], "rows": rows}])
    assert table.columns[-1] == "bound"
    assert table.rows[0][-1].startswith("above its ceiling 1.00 by less than make bench's 5% floor")
    assert table.rows[1][-1].startswith("impossible")
    assert table.rows[2][-1] == ""
    assert reference_table("concurrency", [CPU]).columns[-1] == "detail"  # none past a bound


def test_notebook_01s_worked_seed_rates_are_the_packages():
    """Notebook 01's Try-it computes the seed's rates by hand, from the seed's printed numbers;
    its stored output must be what this module's one home of that arithmetic gives."""
    import json

    notebook = Path(__file__).parent.parent / "notebooks" / "01_two_devices_two_jobs.ipynb"
    cells = json.loads(notebook.read_text())["cells"]
    (cell,) = [c for c in cells if "gpu1_s = 0.0629" in "".join(c["source"])]
    printed = "".join("".join(o.get("text", "")) for o in cell["outputs"])
    for copy, rate in [("free", float("inf")), ("at the seed's rate", seed_copy_rate())]:
        one, fifty = seed_rate(1, rate) / 1e12, seed_rate(50, rate) / 1e12
        line = f"copy {copy}: one product {one:.1f} TFLOP/s, all 50 {fifty:.0f} TFLOP/s"
        assert line in printed


def test_the_seeds_rates_are_held_against_the_datasheet_yardstick_notebook_02_uses():
    from d2lhelpers.references import H100_TF32_PEAK, _against_datasheet

    below = _against_datasheet([100e12, 321e12])
    assert below.startswith("all are below an H100/H200's dense TF32 peak (495 TFLOP/s")
    assert below.endswith("none is ruled out (at most 321 TFLOP/s)")
    assert _against_datasheet([100e12, 1.01 * H100_TF32_PEAK, 2 * H100_TF32_PEAK]).startswith(
        "2 of them are above"
    )
    notes = SeedComputeResult(h200={}).tables()[0].verdicts  # no H200 run: its note is absent
    # read 80: the seed's other timing of the same run, read the same way; read 83: its 1.01x
    # the peak is inside the 6% that stands in for the seed's noise, so it rules nothing out;
    # read 129: that stand-in on the rate's own basis (times less their copy at 1.49 GB/s)
    assert notes[-1].endswith(
        "none is ruled out (at most 321 TFLOP/s); the seed's 'Run on GPU1' (0.0557 s, the same "
        "run(x) and copy, timed in another cell) would need up to 502 TFLOP/s for all 50, 1.01x "
        "that peak, above it within the 87% that stands in for the seed's noise (the largest gap "
        "between the seed's timings of the same work, each less its copy at 1.49 GB/s; not the "
        "20% of the totals, as this rate is of a time less its copy): too close to call, not a "
        "result either way."
    )


H200_ROWS = {
    "tf32_seed_50_identical": {"value": 333.0},
    "fp32_seed_50_identical": {"value": 48.6},
    "copy_pinned_d2h": {"value": 55.1},
    "copy_pageable_d2h": {"value": 12.8},
}


def test_the_seed_rates_are_set_beside_the_h200_runs_rates_on_the_same_products():
    from d2lhelpers.references import h200_rows

    notes = SeedComputeResult(h200=H200_ROWS).tables()[0].verdicts
    assert notes[-1] == (
        "In the committed H200 run (PyTorch; another machine, for scale, not a bound), the seed's "
        "50 products ran at 333 TFLOP/s in TF32 and 48.6 TFLOP/s in FP32; of the 6 rates 'if 50 "
        "ran' above, 6 are at or below its TF32 rate and 0 at or below its FP32 rate."
    )
    slower = {**H200_ROWS, "tf32_seed_50_identical": {"value": 150.0}}  # counts, not constants
    assert "4 are at or below its TF32" in SeedComputeResult(h200=slower).tables()[0].verdicts[-1]
    assert "committed H200 run" not in SeedComputeResult(h200={}).tables()[0].verdicts[-1]
    pytorch = {"machine": {"framework": "PyTorch", "device_name": "NVIDIA H200"}, "rows": [
        {"name": "fp32_chain_50", "value": 48.3}]}  # fmt: skip
    tensorflow = {"machine": {"summary": "4 logical CPU devices"}, "rows": [{"name": "x"}]}
    assert h200_rows([tensorflow, pytorch]) == {"fp32_chain_50": {"name": "fp32_chain_50",
                                                                  "value": 48.3}}  # fmt: skip
    assert h200_rows([tensorflow]) == {}
    committed = h200_rows()  # the file in d2lhelpers/results/, when committed
    assert not committed or {"tf32_seed_50_identical", "copy_pinned_d2h"} <= set(committed)


def test_the_seeds_copy_and_rate_beside_the_h200_run():
    from d2lhelpers.references import h200_run_words

    (line,) = h200_run_words(H200_ROWS, copy_rate=1.49e9, matmul_rate=502e12)
    assert "55.1 GB/s into pinned and 12.8 GB/s into pageable host memory" in line
    assert "the seed's 1.49 GB/s is 8.6x below the slower of those" in line
    assert line.endswith("333 TFLOP/s in TF32: 502 TFLOP/s is 1.51x that.")
    assert h200_run_words({}, 1.49e9, 502e12) == []


def test_a_committed_detail_reworded_since_reads_as_it_now_does():
    # read 99: '64 if every byte were copied' ignores the per-call cost
    from d2lhelpers.references import COPY_RATIO_DETAIL

    old = {
        "name": "x",
        "ratio": 1.4,
        "detail": "ideal 1.0 (no bytes move); 64 if every byte were copied",
    }
    assert row_detail(old) == COPY_RATIO_DETAIL
    assert "up to 64" in COPY_RATIO_DETAIL and "per-call cost" in COPY_RATIO_DETAIL
    assert row_detail({"name": "y", "ratio": 1.0, "detail": "other"}) == "other"


def test_the_overlap_groups_run_above_the_matmul_groups_peak_is_read_by_this_books_rule():
    # read 100: 1.05x 'above that group's measured peak, so each group runs at its own clocks'
    old = (
        "its ideal is the sum; the run alone ran at 384 TFLOP/s in this group, 1.15x the same "
        "chain in the matmul group (335 TFLOP/s; one 8192x8192 product there 366): above that "
        "group's measured peak, so each group runs at its own clocks (there products run back "
        "to back; here copies leave the SMs idle between runs: a hypothesis), and rates are "
        "compared within a group only"
    )
    said = row_detail(script_row(notes=old, flags=[]))
    assert said.endswith(
        "(335 TFLOP/s; one 8192x8192 product there 366): 1.05x that group's best single product, "
        "above it within the noise: not a result above it (by this book's rule, each rate's noise "
        "at least 5% of it); why the same chain ran 1.15x as fast here is not measured (a "
        "hypothesis: each group runs at its own clocks, as there products run back to back and "
        "here copies leave the SMs idle between runs), so rates are compared within a group only"
    )
    beyond = old.replace("ran at 384", "ran at 420")  # 1.15x the best: beyond 5% + 5%
    assert "1.15x that group's best single product, above it beyond the noise (by" in row_detail(
        script_row(notes=beyond, flags=[])
    )


def test_a_committed_concurrency_row_is_read_beside_notebook_01s_model():
    """Read 108: the committed 2-core run's 3 chains at 1.81x beside the model's 1.50x, unsaid."""
    machine = {"cpu_cores": 2, "summary": "4 logical CPU devices sharing 2 usable CPU cores"}

    def row(k, ratio):
        return {"name": f"concurrent {k} chains / 1 chain", "ratio": ratio, "detail": "t"}

    assert row_detail(row(1, 1.0), machine) == "t"  # the yardstick itself
    assert row_detail(row(2, 1.08), machine) == (
        "t; notebook 01's model max(1, k/c) says 1.00x for 2 on 2 cores: within this book's 5% "
        "floors of it"
    )
    assert row_detail(row(3, 1.81), machine).endswith(
        "says 1.50x for 3 on 2 cores: slower by 21%, beyond this book's 5% floors alone (the run "
        "kept no noise of its own, so whether a wider noise holds it is not known here)"
    )
    assert "faster by" in row_detail(row(4, 1.5), machine)
    assert row_detail(row(3, 1.81), {"cpu_cores": 2, "summary": "2 GPUs"}) == "t"
    assert row_detail(row(3, 1.81)) == "t"  # no machine: no model
    table = str(reference_table("concurrency"))
    assert "notebook 01's model max(1, k/c) says" in table  # the committed file, read so
