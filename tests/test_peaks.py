import json

import d2lhelpers as d2l
from d2lhelpers import peaks


def test_device_peak_is_measured_once_for_all_logical_cpus(devices, monkeypatch):
    rate = d2l.device_peak_rate(devices[0])
    assert 1e8 < rate < 1e13
    monkeypatch.setattr(peaks, "best_chain_rate", lambda *a: (_ for _ in ()).throw(AssertionError))
    assert d2l.device_peak_rate(devices[3]) == rate  # cached: identical devices


def test_best_chain_rate_reports_the_best_size(devices):
    rate, size = peaks.best_chain_rate(devices[0], (64, 128))
    assert size in (64, 128) and rate > 0


def test_machine_baseline_runs_in_a_subprocess_and_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("D2LHELPERS_CACHE", str(tmp_path))
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
    assert "Fair baseline" in text and "200.0 GFLOP/s" in text
