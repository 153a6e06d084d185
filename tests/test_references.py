from d2lhelpers.references import SEED_000, machine_label, reference_lines


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


def test_seed_numbers_are_the_published_ones():
    assert (
        SEED_000["Run on GPU1"] + SEED_000["Copy to CPU"] < SEED_000["Run on GPU1 and copy to CPU"]
    )
