import json

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
