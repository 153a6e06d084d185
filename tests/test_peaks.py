import datetime
import json
import multiprocessing
import threading
import time
from pathlib import Path

import pytest

import d2lhelpers as d2l
from d2lhelpers.timing import peaks
from d2lhelpers.timing.benchmark import MeasuredPeak


def test_device_peak_is_measured_once_for_all_logical_cpus(devices, monkeypatch):
    rate = d2l.device_peak_rate(devices[0])
    assert 1e8 < rate < 1e13
    monkeypatch.setattr(peaks, "best_chain_rate", lambda *a: (_ for _ in ()).throw(AssertionError))
    assert d2l.device_peak_rate(devices[3]) == rate  # cached: identical devices


def test_device_peak_can_remeasure_itself_and_keeps_the_higher(devices, monkeypatch):
    monkeypatch.setattr(peaks, "_device_peaks", {})
    rates = iter([5e9, 8e9, 6e9])
    monkeypatch.setattr(peaks, "best_chain_rate", lambda device, sizes: (next(rates), 256))
    peak = peaks.device_peak_rate(devices[0])
    assert isinstance(peak, MeasuredPeak) and peak == 5e9
    assert peak.remeasure() == 8e9  # measured higher: the first one was low
    assert peaks.device_peak_rate(devices[1]) == 8e9  # and kept for every logical CPU
    assert (2 * peak).remeasure() == 16e9  # measured 6e9 now, but the best seen stays 8e9


def test_best_chain_rate_reports_the_best_size(devices):
    rate, size = peaks.best_chain_rate(devices[0], (64, 128))
    assert size in (64, 128) and rate > 0
    rate, size, noise = peaks.best_chain(devices[0], (64,))
    assert size == 64 and rate > 0 and noise >= 0


def test_machine_baseline_runs_in_a_subprocess_and_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("D2LHELPERS_CACHE", str(tmp_path))
    monkeypatch.setattr(peaks, "machine_busy", lambda: None)  # this test is about the subprocess
    monkeypatch.setattr(peaks, "NOISY_IQR", float("inf"))
    first = d2l.machine_baseline_rate()
    assert first["device"] == "/CPU:0" and first["flops_per_s"] > 1e8
    (cached,) = tmp_path.glob("baseline-*.json")
    assert json.loads(cached.read_text()) == first
    assert d2l.machine_baseline_rate() == first  # no second subprocess


def test_describe_devices_says_what_each_device_is(devices, monkeypatch):
    fake = {"device": "/CPU:0", "size": 1024, "flops_per_s": 2e11, "measured_at": "today"}
    monkeypatch.setattr(peaks, "machine_baseline_rate", lambda: fake)
    text = d2l.describe_devices()
    assert text.count("logical CPU") == 4 and text.count("measured peak") == 4
    assert "Fair baseline" in text and "200.0 GFLOP/s" in text and "(measured today)." in text
    monkeypatch.setattr(peaks, "machine_baseline_rate", lambda: {**fake, "not_cached": "not kept"})
    assert "(measured today; not kept)." in d2l.describe_devices()


# --- The safe cache, with a fake measurement --------------------------------------------------


def test_cache_dir_honours_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("D2LHELPERS_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert peaks.cache_dir() == tmp_path / "d2lhelpers"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # the XDG spec: ignore relative ones
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert peaks.cache_dir() == tmp_path / "home" / ".cache" / "d2lhelpers"
    monkeypatch.setenv("D2LHELPERS_CACHE", str(tmp_path / "mine"))
    assert peaks.cache_dir() == tmp_path / "mine"


class Counting:
    """A fake measurement: counts its calls, takes `seconds`, returns a fixed baseline."""

    def __init__(self, seconds=0.0, noise=0.01, rate=1e11):
        self.calls, self.seconds, self.noise, self.rate = 0, seconds, noise, rate
        self.lock = threading.Lock()

    def __call__(self):
        with self.lock:
            self.calls += 1
        time.sleep(self.seconds)
        return {"device": "/CPU:0", "size": 256, "flops_per_s": self.rate, "noise": self.noise}


def not_busy():
    return None


def test_a_cached_value_is_read_back_without_measuring(tmp_path):
    path, measure = tmp_path / "b.json", Counting()
    first = peaks.cached_measurement(path, measure, busy=not_busy)
    assert measure.calls == 1 and "not_cached" not in first
    assert peaks.cached_measurement(path, measure, busy=not_busy) == first
    assert measure.calls == 1
    assert peaks.cached_measurement(path, measure, refresh=True, busy=not_busy) != {}
    assert measure.calls == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json", "b.json.lock"]  # no temp file


@pytest.mark.parametrize(
    "content",
    [
        "",  # empty: a writer died before its first byte
        '{"device": "/CPU:0", "size": 2',  # cut short
        "\x00\x00\x00",
        "[1, 2, 3]",
        '{"version": 1, "device": "/CPU:0", "size": 256, "flops_per_s": 1.0, '
        '"measured_at": "x", "saved_at": 1.0}',  # another version
    ],
)
def test_a_corrupt_empty_or_old_version_file_is_measured_again(tmp_path, content):
    path, measure = tmp_path / "b.json", Counting()
    path.write_text(content)
    result = peaks.cached_measurement(path, measure, busy=not_busy)
    assert measure.calls == 1 and result["flops_per_s"] == 1e11
    assert json.loads(path.read_text()) == result  # replaced by a good one


def test_a_value_older_than_the_limit_is_measured_again(tmp_path):
    path, measure = tmp_path / "b.json", Counting()
    old = peaks.cached_measurement(path, measure, busy=not_busy)
    assert peaks.read_cache(path, now=old["saved_at"] + peaks.CACHE_MAX_AGE_S - 1) == old
    assert peaks.read_cache(path, now=old["saved_at"] + peaks.CACHE_MAX_AGE_S + 1) is None
    assert peaks.read_cache(path, now=old["saved_at"] - 10) is None  # from the future: a bad clock


def test_a_value_measured_on_a_busy_machine_or_noisy_is_not_kept(tmp_path):
    path, measure = tmp_path / "b.json", Counting()
    busy = peaks.cached_measurement(path, measure, busy=lambda: "the machine was busy")
    assert busy["not_cached"] == "not kept: the machine was busy" and not path.exists()
    noisy = peaks.cached_measurement(path, Counting(noise=0.3), busy=not_busy)
    assert noisy["not_cached"] == "not kept: the measurement was noisy (IQR 30% of the median)"
    assert not path.exists()
    peaks.cached_measurement(path, measure, busy=not_busy)
    assert path.exists() and measure.calls == 2


def test_machine_busy_compares_the_load_with_the_usable_cores(monkeypatch):
    monkeypatch.setattr(peaks.os, "getloadavg", lambda: (2.5, 0.0, 0.0))
    assert peaks.machine_busy(cores=2) == (
        "the machine was busy (load average 2.5 on 2 usable CPU cores)"
    )
    assert peaks.machine_busy(cores=3) is None
    monkeypatch.setattr(peaks.os, "getloadavg", lambda: (1.5, 0.0, 0.0))
    assert "on 1 usable CPU core)" in peaks.machine_busy(cores=1)

    def no_load():
        raise OSError

    monkeypatch.setattr(peaks.os, "getloadavg", no_load)
    assert peaks.machine_busy(cores=1) is None


def test_concurrent_first_calls_in_threads_measure_once(tmp_path):
    path, measure = tmp_path / "b.json", Counting(seconds=0.3)
    results = []
    threads = [
        threading.Thread(
            target=lambda: results.append(peaks.cached_measurement(path, measure, busy=not_busy))
        )
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert measure.calls == 1 and len(results) == 4
    assert all(r == results[0] for r in results)


def _measure_in_a_process(path, log):
    def measure():
        with open(log, "a") as f:
            f.write("measured\n")
        time.sleep(0.3)
        return {"device": "/CPU:0", "size": 256, "flops_per_s": 1e11, "noise": 0.0}

    result = peaks.cached_measurement(path, measure, busy=not_busy)
    with open(log, "a") as f:
        f.write(json.dumps(result["flops_per_s"]) + "\n")


def test_concurrent_first_calls_in_processes_measure_once(tmp_path):
    path, log = tmp_path / "b.json", tmp_path / "log"
    fork = multiprocessing.get_context("fork")  # the child touches files only, never TensorFlow
    workers = [fork.Process(target=_measure_in_a_process, args=(path, log)) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    assert [w.exitcode for w in workers] == [0, 0, 0]
    lines = log.read_text().splitlines()
    assert lines.count("measured") == 1 and lines.count("100000000000.0") == 3


def test_a_reader_during_writes_sees_a_whole_file(tmp_path):
    path = tmp_path / "b.json"
    big = {"device": "/CPU:0", "padding": "x" * 200_000}
    peaks.write_atomically(path, big)
    stop, errors = threading.Event(), []

    def read():
        while not stop.is_set():
            try:
                json.loads(path.read_text())
            except (OSError, ValueError) as error:
                errors.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(40):
        peaks.write_atomically(path, {**big, "i": i})
    stop.set()
    reader.join(timeout=30)
    assert errors == [] and json.loads(path.read_text())["i"] == 39
    assert [p.name for p in tmp_path.iterdir()] == ["b.json"]


# --- Edges found by mutation testing (make mutate) ---------------------------------------------


def test_device_peaks_are_kept_per_kind_or_per_physical_device(monkeypatch):
    import types

    monkeypatch.setattr(peaks, "_device_peaks", {})
    asked = []

    def fake(device, sizes):
        asked.append((device.name, sizes))
        return 1e9 * len(asked), sizes[0]

    monkeypatch.setattr(peaks, "best_chain_rate", fake)
    vgpu = [types.SimpleNamespace(name=f"/GPU:{i}", kind="virtual GPU") for i in range(2)]
    gpus = [types.SimpleNamespace(name=f"/GPU:{i}", kind="GPU") for i in range(2)]
    cpu = types.SimpleNamespace(name="/CPU:0", kind="logical CPU")
    assert peaks.device_peak_rate(vgpu[0]) == peaks.device_peak_rate(vgpu[1]) == 1e9
    assert peaks.device_peak_rate(gpus[0]) == 2e9 and peaks.device_peak_rate(gpus[1]) == 3e9
    assert peaks.device_peak_rate(cpu) == 4e9
    assert asked == [
        ("/GPU:0", peaks.GPU_SIZES),
        ("/GPU:0", peaks.GPU_SIZES),
        ("/GPU:1", peaks.GPU_SIZES),
        ("/CPU:0", peaks.CPU_SIZES),
    ]
    assert peaks.device_peak_rate(gpus[1]).remeasure() == 5e9
    assert asked[-1] == ("/GPU:1", peaks.GPU_SIZES)


def test_cache_dir_without_xdg_is_under_home(monkeypatch, tmp_path):
    monkeypatch.delenv("D2LHELPERS_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert peaks.cache_dir() == tmp_path / ".cache" / "d2lhelpers"


def test_machine_busy_uses_the_usable_cores_and_a_load_equal_to_them_is_not_busy(monkeypatch):
    monkeypatch.setattr(peaks.os, "getloadavg", lambda: (2.0, 0.0, 0.0))
    assert peaks.machine_busy(cores=2) is None
    monkeypatch.setattr(peaks, "usable_cores", lambda: 1)
    assert peaks.machine_busy() == "the machine was busy (load average 2.0 on 1 usable CPU core)"


def test_read_cache_edges(tmp_path):
    path, saved = tmp_path / "b.json", 1000.0
    good = {k: "x" for k in peaks.BASELINE_KEYS} | {"version": peaks.CACHE_VERSION}
    path.write_text(json.dumps(good | {"saved_at": saved}))
    assert peaks.read_cache(path, now=saved) is not None  # just written
    assert peaks.read_cache(path, max_age_s=10, now=saved + 10) is not None  # exactly the age
    path.write_text(json.dumps(good | {"saved_at": "yesterday"}))
    assert peaks.read_cache(path, now=saved) is None


def test_write_atomically_writes_beside_the_file_and_cleans_up_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "deep" / "er" / "b.json"
    replaced = []
    real_replace = peaks.os.replace

    def spy(src, dst):
        replaced.append((Path(src), Path(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(peaks.os, "replace", spy)
    peaks.write_atomically(path, {"a": 1})
    ((src, dst),) = replaced
    assert dst == path and src.parent == path.parent
    assert src.name.startswith(".b.json.") and src.name.endswith(".tmp")
    assert json.loads(path.read_text()) == {"a": 1}

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(peaks.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        peaks.write_atomically(path, {"a": 2})
    assert [p.name for p in path.parent.iterdir()] == ["b.json"]
    assert json.loads(path.read_text()) == {"a": 1}


def test_cached_measurement_asks_machine_busy_by_default_and_keeps_a_quiet_value(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(peaks, "machine_busy", lambda: "the machine was busy (test)")
    busy = peaks.cached_measurement(tmp_path / "a.json", Counting())
    assert busy["not_cached"] == "not kept: the machine was busy (test)"

    def without_noise():
        return {"device": "/CPU:0", "size": 256, "flops_per_s": 1.0}

    kept = peaks.cached_measurement(tmp_path / "b.json", without_noise, busy=not_busy)
    assert "not_cached" not in kept and (tmp_path / "b.json").exists()
    assert datetime.datetime.fromisoformat(kept["measured_at"]).year >= 2024
    at_limit = peaks.cached_measurement(
        tmp_path / "c.json", Counting(noise=peaks.NOISY_IQR), busy=not_busy
    )
    assert "not_cached" not in at_limit
