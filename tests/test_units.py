"""The one home of cores, units and formatting, with the affinity mask and devices faked."""

import math
import types

import pytest

from d2lhelpers.core import units
from d2lhelpers.core.units import (
    BYTES_PER_FLOAT,
    GB,
    GiB,
    KiB,
    MiB,
    cores_phrase,
    device_name,
    device_names,
    format_bytes,
    format_rate,
    format_seconds,
    plural,
    printed_value,
    rate_and_share,
    short_device_name,
    usable_cores,
)


def test_usable_cores_is_the_affinity_mask_not_the_machine(monkeypatch):
    monkeypatch.setattr(units, "cpu_quota_cores", lambda: None)  # this machine's cgroup aside
    monkeypatch.setattr(units.os, "cpu_count", lambda: 64)
    monkeypatch.setattr(units.os, "sched_getaffinity", lambda pid: {3}, raising=False)
    assert usable_cores() == 1
    monkeypatch.setattr(units.os, "sched_getaffinity", lambda pid: {0, 5, 7}, raising=False)
    assert usable_cores() == 3
    monkeypatch.setattr(units.os, "sched_getaffinity", lambda pid: set(), raising=False)
    assert usable_cores() == 1  # never zero
    # another process's mask (a worker this process started), read by its pid
    masks = {0: {0, 1}, 4242: {1}}
    monkeypatch.setattr(units.os, "sched_getaffinity", masks.__getitem__, raising=False)
    assert (usable_cores(), usable_cores(4242)) == (2, 1)


def test_usable_cores_without_an_affinity_call_falls_back_to_the_count(monkeypatch):
    monkeypatch.setattr(units, "cpu_quota_cores", lambda: None)
    monkeypatch.delattr(units.os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(units.os, "cpu_count", lambda: 6)
    assert usable_cores() == 6
    monkeypatch.setattr(units.os, "cpu_count", lambda: None)
    assert usable_cores() == 1


def test_a_cgroup_cpu_quota_caps_the_usable_cores(monkeypatch, tmp_path):
    v2, quota, period = tmp_path / "cpu.max", tmp_path / "quota", tmp_path / "period"
    v2.write_text("150000 100000\n")  # 1.5 cores' worth of CPU time: 2 cores can be busy
    assert units.cpu_quota_cores([(str(v2),)]) == 2
    v2.write_text("max 100000\n")  # no limit
    quota.write_text("50000\n")
    period.write_text("100000\n")
    files = [(str(v2),), (str(quota), str(period))]
    assert units.cpu_quota_cores(files) == 1
    quota.write_text("-1\n")  # cgroup v1's "no limit"
    assert units.cpu_quota_cores(files) is None
    assert units.cpu_quota_cores([(str(tmp_path / "missing"),)]) is None
    monkeypatch.setattr(units.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(units, "cpu_quota_cores", lambda: 2)
    assert usable_cores() == 2
    monkeypatch.setattr(units, "cpu_quota_cores", lambda: None)
    assert usable_cores() == 4


def test_cores_phrase(monkeypatch):
    assert cores_phrase(1) == "1 usable CPU core"
    assert cores_phrase(2) == "2 usable CPU cores"
    monkeypatch.setattr(units, "usable_cores", lambda: 1)
    assert cores_phrase() == "1 usable CPU core"


def test_unit_constants():
    assert (KiB, MiB, GiB) == (2**10, 2**20, 2**30) and GB == 10**9 and BYTES_PER_FLOAT == 4


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (2.5, "2.500 s"),
        (1.0, "1.000 s"),
        (0.999, "999.00 ms"),
        (0.0629, "62.90 ms"),
        (1e-3, "1.00 ms"),
        (9.99e-4, "999.0 µs"),
        (6e-6, "6.0 µs"),
        (1e-6, "1.0 µs"),
        (9e-9, "9.0 ns"),
        (0.0, "0.0 µs"),
    ],
)
def test_format_seconds_at_each_boundary(seconds, text):
    assert format_seconds(seconds) == text


@pytest.mark.parametrize(
    ("rate", "unit", "text"),
    [
        (155e9, "FLOP/s", "155.0 GFLOP/s"),
        (1e12, "FLOP/s", "1.0 TFLOP/s"),
        (999e9, "FLOP/s", "999.0 GFLOP/s"),
        (2.5e6, "B/s", "2.5 MB/s"),
        (1e3, "B/s", "1.0 kB/s"),
        (999.0, "B/s", "999.0 B/s"),
        (12.0, "FLOP/s", "12.0 FLOP/s"),
    ],
)
def test_format_rate_prefixes(rate, unit, text):
    assert format_rate(rate, unit) == text
    assert printed_value(text) == pytest.approx(rate)  # each of these prints exactly


def test_a_share_of_a_rate_prints_digits_that_multiply_back_to_it():
    # read 154: 'the ceiling 347.9 GFLOP/s (2 x the measured peak 174.0 GFLOP/s)'
    assert rate_and_share(347.92e9, 2) == ("347.9 GFLOP/s", "173.96 GFLOP/s")
    assert rate_and_share(348.0e9, 2) == ("348.0 GFLOP/s", "174.0 GFLOP/s")
    assert rate_and_share(1.2e12, 2) == ("1.2 TFLOP/s", "600.0 GFLOP/s")  # across a prefix


def test_a_rate_is_read_back_from_its_digits():
    assert format_rate(3064.0, "tok/s", 2) == "3.06 ktok/s"
    assert printed_value("3.06 ktok/s") == pytest.approx(3060.0)  # 't' of tok/s is no prefix
    assert printed_value("95.0 tok/s") == 95.0 and printed_value("2.5 TFLOP/s") == 2.5e12


def test_format_rate_of_an_unbounded_rate_says_why():
    assert format_rate(math.inf).startswith("unbounded FLOP/s (the time did not grow")


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (3 * MiB, "3.0 MiB"),
        (1.5 * GiB, "1.5 GiB"),
        (2**40, "1024.0 GiB"),
        (-2048, "-2.0 KiB"),
    ],
)
def test_format_bytes(n, text):
    assert format_bytes(n) == text


def test_device_names_from_devices_or_strings():
    device = types.SimpleNamespace(name="/device:CPU:1")
    assert device_name(device) == "/device:CPU:1" and device_name("/GPU:0") == "/GPU:0"
    assert device_names([device, "/GPU:0"]) == ("/device:CPU:1", "/GPU:0")


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("/device:CPU:1", "CPU:1"),
        ("CPU:0", "CPU:0"),
        ("/job:localhost/replica:0/task:0/device:CPU:2", "CPU:2"),
        ("/job:worker/replica:0/task:1/device:CPU:0", "worker:1 CPU:0"),
        ("/job:worker/replica:0/task:0/device:GPU:3", "worker:0 GPU:3"),
        ("/job:localhost/replica:0/task:1/device:CPU:0", "localhost:1 CPU:0"),
        ("/job:ps", "ps:0"),
    ],
)
def test_short_device_name(name, short):
    assert short_device_name(name) == short
    assert short_device_name(types.SimpleNamespace(name=name)) == short


def test_plural_counts_words_as_a_sentence_does():
    assert plural(1, "matmul") == "1 matmul" and plural(20, "matmul") == "20 matmuls"
    assert plural(3, "branch") == "3 branches" and plural(0, "process") == "0 processes"
    assert plural(2, "box") == "2 boxes" and plural(2, "flash") == "2 flashes"


def test_enough_digits_is_the_fewest_that_show_and_its_fallback_past_the_most():
    from d2lhelpers.core.units import enough_digits

    apart = lambda d: round(0.1004, d) != round(0.1, d)  # noqa: E731
    assert enough_digits(apart, 0, 5) == 4  # the first that shows, not the most
    assert enough_digits(apart, 1, 3) is None  # none within the range: no digits invented
    assert enough_digits(apart, 1, 3, past=4) == 4
    assert enough_digits(lambda d: True, 2, 3, past=4) == 2  # the least, when it already shows


def test_a_percent_beside_its_limit_never_prints_the_limit_itself():
    from d2lhelpers.core.units import percent_beside

    assert percent_beside(0.35, 0.10) == "35%"
    assert percent_beside(0.1004, 0.10) == "10.04%"  # read 97: not '10%' under 'above 10%'
    assert percent_beside(0.104, 0.10) == "10.4%"
    assert percent_beside(0.20, 0.10, least=1) == "20.0%"
    # read 169: a noise of 0.4% printed 'noise 0%' beside a peak
    assert percent_beside(0.004, 0.10) == "0.4%" and percent_beside(0.0004, 0.10) == "0.04%"
    assert percent_beside(0.0, 0.10) == "0%" and percent_beside(1e-9, 0.10) == "less than 0.00001%"
    assert percent_beside(0.1000004, 0.10, least=1) == "10.00004%"  # read 102: not '10.00%'
    assert percent_beside(0.10, 0.10).endswith(
        "(at the limit, above it by less than 0.00001 points)"
    )


def test_a_ratio_is_printed_with_the_digits_that_show_its_side_of_the_limit():
    """Read 113: 'served 1.00x its capacity ... but above 1'."""
    from d2lhelpers.core.units import ratio_beside

    assert ratio_beside(1.004) == "1.004" and ratio_beside(1.04) == "1.04"
    assert ratio_beside(0.9996) == "0.9996" and ratio_beside(0.5) == "0.50"
    assert ratio_beside(1.0) == "1.00 (to 6 decimals)"
    from d2lhelpers.core.units import ratio_and_decimals

    assert ratio_and_decimals(1.004) == ("1.004", 3) and ratio_and_decimals(1.0) == (
        "1.00 (to 6 decimals)",
        2,
    )


def test_a_ratio_past_its_noise_is_printed_apart_from_its_edge():
    from d2lhelpers.core.units import ratio_past_noise

    # Read 116: 111.9 / 104.7 printed '1.1x … beyond the noise of 7%'.
    assert ratio_past_noise(111.9 / 104.7, 0.066) == (
        "1.069x",
        "above the 1.066x its noise of 6.6% allows",
    )
    assert ratio_past_noise(1.25, 0.1) == ("1.25x", "above the 1.10x its noise of 10% allows")
    assert ratio_past_noise(1.05, 0.1)[1] == "within the 1.10x its noise of 10% allows"
    # read 133: one noise printed one way in a warning ('8%' here, '(7.7%)' in its causes)
    assert ratio_past_noise(1.2, 0.077)[1] == "above the 1.08x its noise of 7.7% allows"
