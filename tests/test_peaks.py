import json
import math

import pytest

import d2lhelpers as d2l
from d2lhelpers.core.counts import chain_flops
from d2lhelpers.timing import peaks
from d2lhelpers.timing.benchmark import MeasuredPeak, Measurement


def test_device_peak_is_measured_once_for_all_logical_cpus(devices, monkeypatch):
    rate = d2l.device_peak_rate(devices[0])
    # Its noise is a measurement (IQR / median: above 1 on a busy machine), only its kind is sure.
    assert 1e8 < rate < 1e13 and rate.noise >= 0 and math.isfinite(rate.noise)
    monkeypatch.setattr(peaks, "best_chain", lambda *a: (_ for _ in ()).throw(AssertionError))
    assert d2l.device_peak_rate(devices[3]) == rate  # cached: identical devices


def test_device_peak_can_remeasure_itself_and_keeps_the_higher(devices, monkeypatch):
    monkeypatch.setattr(peaks, "_device_peaks", {})
    found = iter([(5e9, 256, 0.02), (8e9, 512, 0.01), (6e9, 256, 0.3)])
    monkeypatch.setattr(peaks, "best_chain", lambda device, sizes: next(found))
    peak = peaks.device_peak_rate(devices[0])
    assert isinstance(peak, MeasuredPeak) and peak == 5e9 and peak.noise == 0.02
    assert peak.remeasure() == 8e9  # measured higher: the first was low
    assert peak.noise == pytest.approx(3 / 8)  # and the peak is known no better than 5 vs 8
    assert peaks.device_peak_rate(devices[1]).current == 8e9  # and kept for every logical CPU
    two = 2 * peak
    assert two.remeasure() == 12e9  # it says what it measured now: 6e9 a device, x2 ...
    assert two.current == 16e9 and peak.current == 8e9  # ... but the best seen stays 8e9
    assert peak.noise == pytest.approx(3 / 8)


def test_the_peak_is_the_best_sizes_fastest_run_with_that_sizes_noise():
    def timed(times, size):
        return Measurement("peak", times, work=chain_flops(size, peaks.CHAIN_LENGTH))

    small = timed([0.010, 0.010, 0.011, 0.012, 0.012], 256)  # the best median...
    large = timed([0.05, 0.06, 0.08, 0.08, 0.09], 512)  # ... but the fastest single run
    rate, size, noise = peaks.best_of({256: small, 512: large})
    assert size == 512 and rate == pytest.approx(chain_flops(512, peaks.CHAIN_LENGTH) / 0.05)
    assert noise == pytest.approx((0.08 - 0.06) / 0.08)
    assert peaks.best_of({256: small})[1:] == (256, pytest.approx(0.002 / 0.011))


def test_best_chain_times_each_size_on_the_device(devices, monkeypatch):
    timed = []

    def fake_measure(run, label, flops, **options):
        run()  # the chain itself, on the device
        timed.append(flops)
        return Measurement(label, [1.0, 1.0, 2.0] if len(timed) == 1 else [0.5] * 3, work=flops)

    monkeypatch.setattr(peaks, "measure", fake_measure)
    rate, size, noise = peaks.best_chain(devices[0], (64, 32))
    assert timed == [chain_flops(64, peaks.CHAIN_LENGTH), chain_flops(32, peaks.CHAIN_LENGTH)]
    assert (rate, size) == (chain_flops(64, peaks.CHAIN_LENGTH), 64) and noise == 0.5


def test_machine_baseline_runs_in_a_subprocess_and_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("D2LHELPERS_CACHE", str(tmp_path))
    monkeypatch.setattr(peaks, "machine_busy", lambda: None)  # this test is about the subprocess
    monkeypatch.setattr(peaks, "NOISY_IQR", float("inf"))
    first = d2l.machine_baseline_rate()
    assert first["device"] == "/CPU:0" and first["flops_per_s"] > 1e8
    (cached,) = tmp_path.glob("baseline-*.json")
    assert json.loads(cached.read_text()) == first
    assert d2l.machine_baseline_rate() == first  # no second subprocess


def test_the_baseline_is_measured_once_per_run_even_when_not_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("D2LHELPERS_CACHE", str(tmp_path))
    monkeypatch.setattr(peaks, "_baselines", {})
    monkeypatch.setattr(peaks, "machine_busy", lambda: "the machine was busy")
    rates = iter([1e11, 2e11])
    fake = {"device": "/CPU:0", "size": 512, "noise": 0.02}
    monkeypatch.setattr(peaks, "_measure_baseline", lambda: {**fake, "flops_per_s": next(rates)})
    first = d2l.machine_baseline_rate()
    assert first["flops_per_s"] == 1e11 and "not kept" in first["not_cached"]
    assert d2l.machine_baseline_rate() is first  # the same measurement in every cell
    assert d2l.machine_baseline_rate(refresh=True)["flops_per_s"] == 2e11  # only on request


def test_describe_devices_says_what_each_device_is(devices, monkeypatch):
    fake = {"device": "/CPU:0", "size": 1024, "flops_per_s": 2e11, "measured_at": "today"}
    monkeypatch.setattr(peaks, "machine_baseline_rate", lambda: fake)
    text = d2l.describe_devices()
    # One measurement serves the identical logical CPUs: printed once, the others point to it.
    assert text.count("logical CPU") == 4 and text.count("measured peak") == 1
    assert text.count("the peak measured on /device:CPU:0 (identical devices)") == 3
    assert text.count("(noise ") == 2  # the peak's and the baseline's
    assert "Fair baseline" in text and "200.0 GFLOP/s (noise 0%)" in text
    assert "(measured today)." in text
    monkeypatch.setattr(peaks, "machine_baseline_rate", lambda: {**fake, "not_cached": "not kept"})
    assert "(measured today; not kept)." in d2l.describe_devices()
    assert "earlier run" not in text  # measured in this run
    monkeypatch.setattr(peaks, "machine_baseline_rate", lambda: {**fake, "from_cache": True})
    assert f"(measured today; {peaks.FROM_AN_EARLIER_RUN})." in d2l.describe_devices()


# --- Edges found by mutation testing (make mutate) ---------------------------------------------


def test_device_peaks_are_kept_per_kind_or_per_physical_device(monkeypatch):
    import types

    monkeypatch.setattr(peaks, "_device_peaks", {})
    asked = []

    def fake(device, sizes):
        asked.append((device.name, sizes))
        return 1e9 * len(asked), sizes[0], 0.01

    monkeypatch.setattr(peaks, "best_chain", fake)
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
