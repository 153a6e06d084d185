"""The H200 reference script without a GPU: its refusals, its pure parts and its validator.

torch is not installed here, so the script's GPU path runs once against a stand-in module (NumPy
behind torch's names, synchronous "streams", events read from the host clock) at a tiny size: that
proves the experiments' code runs and writes a valid file, and nothing about any GPU's speed.
"""

import copy
import importlib.util
import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
SCRIPT = BENCHMARKS / "h200_reference.py"
COMMITTED = ROOT / "d2lhelpers" / "results" / "h200-pytorch.json"


def load(name: str) -> types.ModuleType:
    """Import benchmarks/<name>.py by path (benchmarks/ is scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


results = load("h200_results")
reference = load("h200_reference")

# A stand-in for torch: GPU_NAME None means "no GPU"; RAISE makes its import fail.
FAKE_TORCH = """
import time
import types
import numpy as np

GPU_NAME = {gpu_name!r}
if {raise_on_import!r}:
    raise ImportError("stand-in torch that cannot be imported")
__version__ = "0.0-stand-in"
version = types.SimpleNamespace(cuda="0.0")
backends = types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=types.SimpleNamespace(
    allow_tf32=False)))


class Tensor:
    def __init__(self, a):
        self.a = a

    def __getitem__(self, i):
        return Tensor(self.a[i])

    def __iter__(self):
        return (Tensor(row) for row in self.a)

    def __truediv__(self, k):
        return Tensor((self.a / k).astype(self.a.dtype))

    def __sub__(self, other):
        return Tensor(self.a - other.a)

    def double(self):
        return Tensor(self.a.astype(np.float64))

    def copy_(self, src, non_blocking=False):
        self.a[...] = src.a
        return self


class Generator:
    def __init__(self, device=None):
        self.rng = np.random.default_rng(0)

    def manual_seed(self, seed):
        self.rng = np.random.default_rng(seed)
        return self


def randn(*shape, device=None, generator=None):
    return Tensor(generator.rng.standard_normal(shape).astype(np.float32))


def empty(*shape, device=None, pin_memory=False):
    return Tensor(np.full(shape, np.nan, dtype=np.float32))


def mm(a, b, out=None):
    product = a.a @ b.a
    if out is None:
        return Tensor(product)
    out.a[...] = product
    return out


linalg = types.SimpleNamespace(norm=lambda t: float(np.linalg.norm(t.a)))


class _Stream:
    def wait_stream(self, other):
        pass

    def wait_event(self, event):
        pass


class _StreamContext:
    def __init__(self, stream):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Event:
    def __init__(self, enable_timing=False):
        self.at = None

    def record(self, stream=None):
        self.at = time.perf_counter()

    def elapsed_time(self, end):
        return (end.at - self.at) * 1e3


cuda = types.SimpleNamespace(
    is_available=lambda: GPU_NAME is not None,
    device_count=lambda: 0 if GPU_NAME is None else 1,
    get_device_name=lambda i=0: GPU_NAME,
    get_device_properties=lambda i=0: types.SimpleNamespace(
        total_memory=141 * 2**30, multi_processor_count=132, major=9, minor=0),
    synchronize=lambda: None,
    Event=_Event,
    Stream=_Stream,
    stream=_StreamContext,
    current_stream=lambda: _Stream(),
)
"""


def fake_torch_dir(tmp_path: Path, gpu_name: str | None, raise_on_import: bool = False) -> Path:
    package = tmp_path / "stand_in" / "torch"
    package.mkdir(parents=True)
    source = FAKE_TORCH.format(gpu_name=gpu_name, raise_on_import=raise_on_import)
    (package / "__init__.py").write_text(source)
    return package.parent


def run_script(*args: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(pythonpath) if pythonpath else ""}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60, env=env
    )


# --- Refusals: a clear line, a distinct exit code, nothing written ----------------------------


@pytest.mark.parametrize(
    ("gpu_name", "raise_on_import", "code", "words"),
    [
        (None, True, reference.EXIT_NO_TORCH, "PyTorch is not importable"),
        (None, False, reference.EXIT_NO_GPU, "no CUDA GPU"),
        ("Stand-in GPU 9000", False, reference.EXIT_NOT_H200, "not an H200"),
    ],
)
def test_refuses_clearly_before_any_work(tmp_path, gpu_name, raise_on_import, code, words):
    out = tmp_path / "out" / "h200.json"
    stand_in = fake_torch_dir(tmp_path, gpu_name, raise_on_import)
    done = run_script("--out", str(out), pythonpath=stand_in)
    assert done.returncode == code
    assert words in done.stderr and "refused" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert done.stdout == ""
    assert not out.exists() and not out.parent.exists()


def test_refuses_here_where_torch_is_not_installed(tmp_path):
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here; the stand-in test above covers the refusal")
    out = tmp_path / "h200.json"
    done = run_script("--out", str(out))
    assert done.returncode == reference.EXIT_NO_TORCH
    assert "No module named 'torch'" in done.stderr
    assert not out.exists()


def test_importing_the_script_needs_neither_torch_nor_tensorflow():
    code = f"""
        import importlib.util, sys
        for name in ("h200_results", "h200_reference"):
            path = {str(BENCHMARKS)!r} + f"/{{name}}.py"
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        heavy = {{"torch", "tensorflow", "d2lhelpers", "numpy"}} & set(sys.modules)
        assert not heavy, heavy
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


# --- The experiments' code, run once against the stand-in at a tiny size -----------------------


@pytest.fixture
def stand_in_h200(tmp_path, monkeypatch):
    """The stand-in torch as `torch`, naming an H200; tiny matrices and budgets."""
    stand_in = types.ModuleType("torch")
    exec(FAKE_TORCH.format(gpu_name="Stand-in H200", raise_on_import=False), stand_in.__dict__)
    monkeypatch.setitem(sys.modules, "torch", stand_in)
    monkeypatch.setattr(reference, "SIZE", 24)
    for module in (reference, results):
        monkeypatch.setattr(module, "BEST_SIZE", 48)
    monkeypatch.setattr(reference, "ROW_BUDGET_S", 0.01)
    monkeypatch.setattr(reference.Experiments, "spin_up", lambda self: None)
    return stand_in


def test_the_experiments_write_every_row_row_by_row(stand_in_h200, tmp_path, monkeypatch, capsys):
    outs = [tmp_path / "a" / "h200.json", tmp_path / "b.json"]
    rows_on_disk = []
    add = results.ResultsWriter.add

    def add_and_read_back(self, row, elapsed_s):
        add(self, row, elapsed_s)
        rows_on_disk.append(len(json.loads(outs[0].read_text())["rows"]))

    monkeypatch.setattr(results.ResultsWriter, "add", add_and_read_back)
    code = reference.main(["--out", str(outs[0]), "--out", str(outs[1])])
    expected = results.expected_row_names()
    assert "fp32_best_matmul_48" in expected
    assert rows_on_disk == list(range(1, len(expected) + 1))  # the file grew with every row
    data = json.loads(outs[0].read_text())
    assert json.loads(outs[1].read_text()) == data
    assert [row["name"] for row in data["rows"]] == expected
    assert data["complete"] is True
    assert data["machine"]["device_name"] == "Stand-in H200"
    # The stand-in's streams are synchronous, so bounds may be missed by noise: only those.
    errors = results.validate_results(data)
    assert [e for e in errors if "timing bug" not in e and "above its peak" not in e] == []
    assert code == (reference.EXIT_FAILED_CHECKS if errors else reference.EXIT_OK)
    by_name = {row["name"]: row for row in data["rows"]}
    assert by_name["fp32_chain_50"]["setting"] == "torch.backends.cuda.matmul.allow_tf32 = False"
    assert by_name["tf32_chain_50"]["setting"] == "torch.backends.cuda.matmul.allow_tf32 = True"
    # NumPy's products are FP32's, so the TF32 rows say TF32 was not in effect.
    assert any("TF32 was not in effect" in f for f in by_name["tf32_chain_50"]["flags"])
    assert not any("TF32" in f for f in by_name["fp32_chain_50"]["flags"])
    printed = capsys.readouterr().out
    assert "elapsed:" in printed and "2 streams / 1 stream" in printed
    assert not list(tmp_path.rglob("*.partial"))


def test_a_group_is_timed_in_turns_after_each_body_is_warmed(stand_in_h200, monkeypatch):
    """One run of each body per round, so all see the same clocks (not one body's runs, then the
    next's: back to back, the H200's TF32 chain slowed 7% as its clocks fell)."""
    calls = []
    bodies = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    monkeypatch.setattr(reference, "MAX_RUNS", 6)
    timed = reference.time_regions(stand_in_h200, bodies, budget_s=60.0, warmup=2)
    assert calls == ["a", "a", "b", "b", "c", "c"] + ["a", "b", "c"] * 6
    assert {name: len(t[0]) for name, t in timed.items()} == {"a": 6, "b": 6, "c": 6}
    assert all(len(times) == len(walls) and min(times) >= 0 for times, walls in timed.values())
    calls.clear()  # past its budget, a group stops after MIN_RUNS rounds
    reference.time_regions(stand_in_h200, bodies, budget_s=0.0, warmup=0)
    assert calls == ["a", "b", "c"] * reference.MIN_RUNS


def test_two_streams_against_one_after_the_other_is_read_against_both_spreads():
    steady = [1.0, 1.0, 1.0, 1.0, 1.0]
    faster = reference.streams_vs_serial_words([0.94] * 5, steady)
    assert faster.startswith("6% below 1.0, beyond the two medians' spread (0%)")
    assert "left some of the chip's capacity unused" in faster
    assert reference.streams_vs_serial_words([1.05] * 5, steady).startswith("5% above 1.0")
    noisy = [0.80, 0.90, 0.94, 1.00, 1.10]  # IQR 0.10 of a 0.94 median: 11%
    assert reference.streams_vs_serial_words(noisy, steady).startswith(
        "within the two medians' spread (11%) of 1.0"
    )


def test_the_overlap_groups_run_is_read_beside_the_matmul_groups_rates():
    words = reference.group_rates_words(375.0, 358.0, 330.0)
    assert words.startswith("the run alone ran at 375 TFLOP/s in this group, 1.14x the same chain")
    assert (
        "above that group's measured peak; why is not measured (a hypothesis: each group" in words
    )
    assert "measured peak" not in reference.group_rates_words(340.0, 358.0, 330.0)


# --- Pure parts --------------------------------------------------------------------------------


def test_summarize_times_gives_median_and_inclusive_iqr():
    summary = results.summarize_times([5.0, 1.0, 4.0, 2.0, 3.0])
    assert summary["median_s"] == 3.0 and summary["iqr_s"] == 2.0
    assert summary["min_s"] == 1.0 and summary["runs"] == 5 and len(summary["times_s"]) == 5
    assert results.summarize_times([0.5])["iqr_s"] == 0.0
    with pytest.raises(ValueError):
        results.summarize_times([])


def test_the_seed_workload_and_the_published_peaks():
    assert results.matmul_flops(4000, 50) == 6.4e12  # the seed's 50 products of 4000x4000
    assert results.matmul_flops(2, 3) == 48  # 2 * 2 * 2 multiply-adds per product, 3 products
    assert results.PEAK_TFLOPS == {"FP32": 67.0, "TF32": 495.0}  # issue 8's figures
    assert results.PEAK_PCIE_GBPS == 64.0


def row(**overrides):
    fields = dict(
        name="fp32_chain_50",
        experiment="chain",
        value=50.0,
        unit="TFLOP/s",
        reference=67.0,
        reference_kind="published peak",
        bound="upper",
        ratio_of="rate / published FP32 peak",
        times=[0.128, 0.128, 0.129],
        wall_times=[0.129, 0.129, 0.130],
        precision="FP32",
        setting="torch.backends.cuda.matmul.allow_tf32 = False",
        rel_error=2e-6,
    )
    return results.make_row(**{**fields, **overrides})


def test_a_rate_above_its_published_peak_is_flagged():
    assert row()["flags"] == [] and row()["ratio"] == pytest.approx(50 / 67)
    flags = row(value=100.0)["flags"]
    assert len(flags) == 1 and "IMPOSSIBLE" in flags[0] and "1.49x" in flags[0]
    assert row(value=100.0, bound=None)["flags"] == []  # a measured peak is no hard ceiling


def test_a_time_below_its_ideal_is_a_timing_bug_beyond_the_noise_allowance():
    def overlap(value):
        return row(value=value, unit="s", reference=0.128, reference_kind="ideal", bound="lower")

    assert overlap(0.130)["flags"] == []
    assert "within the noise allowance" in overlap(0.127)["flags"][0]
    assert "TIMING BUG" in overlap(0.100)["flags"][0]
    assert results.ideal_flags(0.0869, 0.0629) == []  # the seed's 'both' was slower than one


def test_noise_clock_and_precision_flags():
    assert "noisy" in row(times=[1.0, 2.0, 3.0])["flags"][0]
    assert "exceeds the host" in row(wall_times=[0.01] * 3)["flags"][0]
    assert "TF32's or worse" in row(rel_error=3e-4)["flags"][0]
    assert "not in effect" in row(precision="TF32", rel_error=1e-6, reference=495.0)["flags"][0]
    assert row(precision="TF32", rel_error=3e-4, reference=495.0)["flags"] == []
    assert "not finite" in results.precision_flags("FP32", float("nan"))[0]


def test_make_row_refuses_unknown_units_and_kinds():
    with pytest.raises(ValueError):
        row(unit="furlongs")
    with pytest.raises(ValueError):
        row(reference_kind="a guess")


def test_the_writer_rewrites_whole_files_after_each_row(tmp_path):
    path = tmp_path / "deep" / "h200.json"
    writer = results.ResultsWriter([path], {"label": "x"}, date="2026-01-01T00:00:00+00:00")
    writer.add(row(), elapsed_s=1.234)
    first = json.loads(path.read_text())
    assert [r["name"] for r in first["rows"]] == ["fp32_chain_50"] and first["complete"] is False
    assert first["elapsed_s"] == 1.23
    writer.add(row(name="tf32_chain_50"), elapsed_s=2.0)
    writer.finish(3.0, gpu_state_after={"clocks.sm": "1980 MHz"})
    last = json.loads(path.read_text())
    assert len(last["rows"]) == 2 and last["complete"] is False  # most rows are missing
    assert last["machine"]["gpu_state_after"] == {"clocks.sm": "1980 MHz"}
    assert list(path.parent.iterdir()) == [path]  # no temporary file left behind


def test_the_table_shows_each_row_its_ratio_and_flags():
    table = results.format_table([row(), row(name="too_fast", value=100.0)])
    lines = table.splitlines()
    assert lines[0].startswith("row")
    assert any(line.startswith("fp32_chain_50") and "0.746" in line for line in lines)
    assert "50.0 TFLOP/s" in table and "published peak 67.0 TFLOP/s" in table
    assert any(line.strip().startswith("! IMPOSSIBLE") for line in lines)
    assert "128.00 ms" in results.format_row(row(value=0.128, unit="s", reference=0.1))


# --- The validator, on hand-made files ---------------------------------------------------------


def hand_made_results() -> dict:
    """A valid file: every expected row with plausible H200 numbers (made up, not measured)."""
    machine = {key: "stand-in" for key in results.MACHINE_KEYS}
    writer = results.ResultsWriter([], machine, date="2026-11-20T10:00:00+00:00")
    for name in results.expected_row_names():
        if "copy_p" in name:
            fields = dict(value=52.0, unit="GB/s", reference=64.0, reference_kind="published peak")
            fields["bound"] = "upper"
        elif name.endswith(("_vs_one", "_then_copy", "_vs_max")):
            fields = dict(value=0.25, unit="s", reference=0.24, reference_kind="ideal")
            fields["bound"] = "lower"
        elif name.endswith(("_vs_serial", "_vs_sum", "_empty")):
            fields = dict(value=0.2, unit="s", reference=0.25, reference_kind="baseline")
        else:
            fields = dict(value=50.0, unit="TFLOP/s", reference=67.0, bound="upper")
            fields["reference_kind"] = "published peak"
        fields.update(name=name, experiment=name, ratio_of="x / y", times=[0.1] * 5)
        writer.data["rows"].append(results.make_row(**fields))
    return writer.data


def test_the_validator_accepts_a_valid_file():
    data = hand_made_results()
    assert results.validate_results(data) == []
    assert results.validate_results(json.loads(json.dumps(data))) == []


def broken(change) -> list[str]:
    data = copy.deepcopy(hand_made_results())
    change(data)
    return results.validate_results(data)


def rows_named(data, name):
    return next(r for r in data["rows"] if r["name"] == name)


def test_the_validator_finds_a_missing_row_unless_partial_is_allowed():
    def drop(data):
        del data["rows"][-1]

    assert broken(drop) == ["row 'timer_overhead_empty' is missing"]
    data = hand_made_results()
    del data["rows"][5:]
    assert results.validate_results(data, require_complete=False) == []


def test_the_validator_finds_a_rate_above_its_peak():
    def too_fast(data):
        r = rows_named(data, "tf32_chain_50")
        r["value"], r["ratio"] = 600.0, 600.0 / 67.0

    errors = broken(too_fast)
    assert len(errors) == 1 and "tf32_chain_50" in errors[0] and "above its peak" in errors[0]


def test_the_validator_finds_a_time_below_its_ideal():
    def faster_than_ideal(data):
        r = rows_named(data, "fp32_compute_while_copy_vs_max")
        r["value"], r["ratio"] = 0.12, 0.5

    errors = broken(faster_than_ideal)
    assert len(errors) == 1 and "timing bug" in errors[0]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: d.update(schema="other/1"), "schema"),
        (lambda d: d["machine"].pop("driver_version"), "machine lacks 'driver_version'"),
        (lambda d: d.update(date="yesterday"), "not an ISO date"),
        (lambda d: d.update(rows={}), "no list of rows"),
        (lambda d: d["rows"].append(copy.deepcopy(d["rows"][0])), "more than once"),
        (lambda d: d["rows"][0].pop("ratio"), "lacks 'ratio'"),
        (lambda d: d["rows"][0].pop("bound"), "lacks 'bound'"),
        (lambda d: d["rows"][0].update(value="fast"), "'value' has the wrong type"),
        (lambda d: d["rows"][0].update(ratio=0.1), "is not value / reference"),
        (lambda d: d["rows"][0].update(unit="furlongs"), "unit 'furlongs'"),
        (lambda d: d["rows"][0].update(reference=float("nan")), "finite and positive"),
        (lambda d: d["rows"][0]["measured"].pop("times_s"), "measured lacks"),
        (lambda d: d["rows"][0]["measured"].update(runs=99), "does not match"),
    ],
)
def test_the_validator_finds_each_schema_fault(change, words):
    errors = broken(change)
    assert errors and any(words in e for e in errors), errors


def test_validate_on_the_command_line_needs_no_torch(tmp_path):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(hand_made_results()))
    data = hand_made_results()
    data["rows"].pop()
    bad.write_text(json.dumps(data))
    assert run_script("--validate", str(good)).returncode == reference.EXIT_OK
    done = run_script("--validate", str(bad))
    assert done.returncode == reference.EXIT_INVALID_FILE
    assert "timer_overhead_empty" in done.stderr and "INVALID" in done.stdout
    assert run_script("--validate", str(bad), "--allow-partial").returncode == reference.EXIT_OK
    missing = run_script("--validate", str(tmp_path / "nothing.json"))
    assert missing.returncode == reference.EXIT_INVALID_FILE and "cannot read" in missing.stderr


def test_the_validator_reads_a_written_valid_file_an_invalid_one_and_the_committed_one(tmp_path):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    writer = results.ResultsWriter([good], hand_made_results()["machine"], date="2026-11-20")
    writer.data = hand_made_results()
    writer.write()
    committed = [COMMITTED] if COMMITTED.exists() else []  # none committed yet
    for path in [good, *committed]:
        assert results.validate_file(path) == [], path
    data = hand_made_results()
    r = rows_named(data, "tf32_chain_50")
    r["value"], r["ratio"] = 600.0, 600.0 / 67.0
    bad.write_text(json.dumps(data))
    errors = results.validate_file(bad)
    assert len(errors) == 1 and "tf32_chain_50" in errors[0] and "above its peak" in errors[0]
    (tmp_path / "cut.json").write_text(good.read_text()[:100])
    assert results.validate_file(tmp_path / "cut.json") != []


def test_the_books_rereads_follow_the_scripts_own_phrases():
    """references.NOTE_REREADS re-reads the script's words in committed rows: each phrase it looks
    for must still be what the script writes, or a new run's row would pass unread."""
    from d2lhelpers import references

    steady = [1.0] * 5
    written = {
        references.PAGEABLE_MECHANISM: reference.PAGEABLE_NOTE,
        references.GROUP_PEAK: reference.group_rates_words(375.0, 358.0, 330.0),
        references.BEYOND_SPREAD: reference.streams_vs_serial_words([0.97] * 5, steady),
        references.WITHIN_SPREAD: reference.streams_vs_serial_words(
            [0.80, 0.9, 0.94, 1, 1.1], steady
        ),
        references.SHARED_SMS: reference.SHARED_SMS_NOTE,
        references.TIMING_BUG: reference.OVERLAP_FLOOR_NOTE,
    }
    assert set(written) == {phrase for phrase, _ in references.NOTE_REREADS}
    for phrase, notes in written.items():
        assert phrase in notes, (phrase, notes)
    assert reference.GROUP_PEAK == references.GROUP_PEAK
    # each is re-read, not passed through as the script wrote it
    row = {"value": 0.97, "reference": 1.0}
    for phrase, notes in written.items():
        reread = references.reread_notes({**row, "notes": notes})
        if phrase == references.PAGEABLE_MECHANISM:  # already with its source: kept as written
            assert reread == notes and references.PAGEABLE_SOURCE.strip() in notes
        else:
            assert reread != notes, phrase
    # read 143: the mechanism labelled, the floor read with its noise and its three causes
    shared = references.reread_notes({"notes": reference.SHARED_SMS_NOTE})
    assert shared.startswith(
        "1.0 would need a second chip's compute: the two streams share one chip's SMs, so 2.0 "
        "where one chain alone keeps them all busy (expected, not measured: the script traced no "
        "SM occupancy); the row beside"
    )
    floor = references.reread_notes({"notes": reference.OVERLAP_FLOOR_NOTE})
    assert floor == (
        "below 1.0 beyond the noise is not a result (possible causes, not measured: a timing "
        "error, a change in the machine's speed between the runs, or the floor's premise "
        "failing); the exact floor adds the pipeline's fill and drain (components.pipeline_floor_s)"
    )
    # the group's words are read by the book's rule (the pattern found, not the fallback)
    said = references.reread_notes({"notes": written[references.GROUP_PEAK]})
    assert "1.05x that group's best single product, above it within the noise" in said
