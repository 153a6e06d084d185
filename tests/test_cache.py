"""The cache of measured values: safe between kernels, and never a reason for a lesson to stop.

A fake measurement stands in for the baseline (`Counting`); the folder's failures are real where a
test can make them (a file where the folder should be, a lock held by another process) and
injected where it cannot (a full disk, a read-only file system, another user's lock file).
"""

import datetime
import errno
import json
import multiprocessing
import os
import threading
import time
from pathlib import Path

import pytest

from d2lhelpers.core import cache
from d2lhelpers.timing import peaks

VERSION, KEYS = 7, ("device", "size", "flops_per_s", "measured_at")


def cached(path, measure, **options):
    return cache.cached_measurement(path, measure, version=VERSION, keys=KEYS, **options)


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


# --- where the cache lives ----------------------------------------------------------------------


def test_cache_dir_honours_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("D2LHELPERS_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "d2lhelpers"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # the XDG spec: ignore relative ones
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "d2lhelpers"
    monkeypatch.setenv("D2LHELPERS_CACHE", str(tmp_path / "mine"))
    assert cache.cache_dir() == tmp_path / "mine"


def test_cache_dir_without_xdg_is_under_home(monkeypatch, tmp_path):
    monkeypatch.delenv("D2LHELPERS_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / ".cache" / "d2lhelpers"


def test_cache_dir_on_macos_and_windows_is_platformdirs_own(monkeypatch, tmp_path):
    monkeypatch.delenv("D2LHELPERS_CACHE", raising=False)
    mac = tmp_path / "Library" / "Caches" / "d2lhelpers"
    monkeypatch.setattr(cache.platformdirs, "user_cache_path", lambda name, appauthor: mac)
    assert cache.cache_dir() == mac


# --- what is kept, what is measured again ---------------------------------------------------------


def test_a_cached_value_is_read_back_without_measuring(tmp_path):
    path, measure = tmp_path / "b.json", Counting()
    first = cached(path, measure, busy=not_busy)
    assert measure.calls == 1 and "not_cached" not in first and "from_cache" not in first
    again = cached(path, measure, busy=not_busy)
    assert again == {**first, "from_cache": True}  # says this run did not measure it
    assert measure.calls == 1
    assert cached(path, measure, refresh=True, busy=not_busy) != {}
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
    result = cached(path, measure, busy=not_busy)
    assert measure.calls == 1 and result["flops_per_s"] == 1e11
    assert json.loads(path.read_text()) == result  # replaced by a good one


@pytest.mark.parametrize("content", ["", '{"device": "/CPU:0", "size": 2', "[1, 2, 3]"])
def test_a_corrupt_file_is_deleted_even_when_the_new_value_is_not_kept(tmp_path, content):
    path = tmp_path / "b.json"
    path.write_text(content)
    result = cached(path, Counting(), busy=lambda: "the machine was busy")
    assert result["not_cached"] == "not kept: the machine was busy"
    assert not path.exists()


def test_a_value_older_than_the_limit_is_measured_again(tmp_path):
    path, measure = tmp_path / "b.json", Counting()
    old = cached(path, measure, busy=not_busy)
    read = lambda now: cache.read_cache(path, VERSION, KEYS, now=now)  # noqa: E731
    assert read(old["saved_at"] + cache.MAX_AGE_S - 1) == old
    assert read(old["saved_at"] + cache.MAX_AGE_S + 1) is None
    assert read(old["saved_at"] - 10) is None  # from the future: a bad clock
    assert path.exists()  # old, not corrupt: kept until a new value replaces it


def test_read_cache_edges(tmp_path):
    path, saved = tmp_path / "b.json", 1000.0
    good = {k: "x" for k in KEYS} | {"version": VERSION}
    path.write_text(json.dumps(good | {"saved_at": saved}))
    assert cache.read_cache(path, VERSION, KEYS, now=saved) is not None  # just written
    assert cache.read_cache(path, VERSION, KEYS, max_age_s=10, now=saved + 10) is not None
    assert cache.read_cache(path, VERSION + 1, KEYS, now=saved) is None
    assert cache.read_cache(path, VERSION, (*KEYS, "missing"), now=saved) is None
    path.write_text(json.dumps(good | {"saved_at": "yesterday"}))
    assert cache.read_cache(path, VERSION, KEYS, now=saved) is None
    assert path.exists()  # not deleted without the lock held
    assert cache.read_cache(path, VERSION, KEYS, now=saved, discard_corrupt=True) is None
    assert not path.exists()


def test_a_value_measured_on_a_busy_machine_or_noisy_is_not_kept(tmp_path):
    path, measure = tmp_path / "b.json", Counting()
    busy = cached(path, measure, busy=lambda: "the machine was busy")
    assert busy["not_cached"] == "not kept: the machine was busy" and not path.exists()
    noisy = cached(path, Counting(noise=0.3), busy=not_busy, noisy_above=0.1)
    assert noisy["not_cached"] == "not kept: the measurement was noisy (IQR 30% of the median)"
    assert not path.exists()
    cached(path, measure, busy=not_busy)
    assert path.exists() and measure.calls == 2


def test_cached_measurement_asks_machine_busy_by_default_and_keeps_a_quiet_value(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(cache, "machine_busy", lambda: "the machine was busy (test)")
    busy = cached(tmp_path / "a.json", Counting())
    assert busy["not_cached"] == "not kept: the machine was busy (test)"

    def without_noise():
        return {"device": "/CPU:0", "size": 256, "flops_per_s": 1.0}

    kept = cached(tmp_path / "b.json", without_noise, busy=not_busy, noisy_above=0.1)
    assert "not_cached" not in kept and (tmp_path / "b.json").exists()
    assert datetime.datetime.fromisoformat(kept["measured_at"]).year >= 2024
    assert kept["version"] == VERSION
    at_limit = cached(tmp_path / "c.json", Counting(noise=0.1), busy=not_busy, noisy_above=0.1)
    assert "not_cached" not in at_limit


def test_machine_busy_compares_the_load_with_the_usable_cores(monkeypatch):
    monkeypatch.setattr(cache.os, "getloadavg", lambda: (2.5, 0.0, 0.0))
    assert cache.machine_busy(cores=2) == (
        "the load average, 2.5, was above 2 usable CPU cores (it counts the whole machine and "
        "this run's own threads)"
    )
    assert cache.machine_busy(cores=3) is None
    monkeypatch.setattr(cache.os, "getloadavg", lambda: (1.5, 0.0, 0.0))
    assert "1.5, was above 1 usable CPU core (it" in cache.machine_busy(cores=1)
    # read 175: '1.0, was above 1': printed with the decimals that show it above
    monkeypatch.setattr(cache.os, "getloadavg", lambda: (1.04, 0.0, 0.0))
    assert "the load average, 1.04, was above 1 usable" in cache.machine_busy(cores=1)
    monkeypatch.setattr(cache.os, "getloadavg", lambda: (1.00001, 0.0, 0.0))  # review: the edge
    assert "the load average, 1.00001, was above 1 usable" in cache.machine_busy(cores=1)

    def no_load():
        raise OSError

    monkeypatch.setattr(cache.os, "getloadavg", no_load)
    assert cache.machine_busy(cores=1) is None
    monkeypatch.delattr(cache.os, "getloadavg")  # Windows has no load average
    assert cache.machine_busy(cores=1) is None


def test_machine_busy_uses_the_usable_cores_and_a_load_equal_to_them_is_not_busy(monkeypatch):
    monkeypatch.setattr(cache.os, "getloadavg", lambda: (2.0, 0.0, 0.0))
    assert cache.machine_busy(cores=2) is None
    monkeypatch.setattr(cache, "usable_cores", lambda: 1)
    assert cache.machine_busy().startswith("the load average, 2.0, was above 1 usable CPU core")


# --- many kernels at once -----------------------------------------------------------------------


def test_concurrent_first_calls_in_threads_measure_once(tmp_path):
    path, measure = tmp_path / "b.json", Counting(seconds=0.3)
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(cached(path, measure, busy=not_busy)))
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

    result = cached(path, measure, busy=not_busy)
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
    cache.write_atomically(path, big)
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
        cache.write_atomically(path, {**big, "i": i})
    stop.set()
    reader.join(timeout=30)
    assert errors == [] and json.loads(path.read_text())["i"] == 39
    assert [p.name for p in tmp_path.iterdir()] == ["b.json"]


def test_write_atomically_writes_beside_the_file_and_cleans_up_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "deep" / "er" / "b.json"
    replaced = []
    real_replace = cache.os.replace

    def spy(src, dst):
        replaced.append((Path(src), Path(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(cache.os, "replace", spy)
    cache.write_atomically(path, {"a": 1})
    ((src, dst),) = replaced
    assert dst == path and src.parent == path.parent
    assert src.name.startswith(".b.json.") and src.name.endswith(".tmp")
    assert json.loads(path.read_text()) == {"a": 1}

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(cache.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        cache.write_atomically(path, {"a": 2})
    assert [p.name for p in path.parent.iterdir()] == ["b.json"]
    assert json.loads(path.read_text()) == {"a": 1}


# --- a cache that never stops a lesson ------------------------------------------------------------


def test_a_folder_that_cannot_be_made_is_measured_and_not_kept(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("where the cache folder should be")
    path, measure = blocker / "d2lhelpers" / "b.json", Counting()
    result = cached(path, measure, busy=not_busy)
    assert measure.calls == 1 and result["flops_per_s"] == 1e11
    assert result["not_cached"].startswith(
        f"not kept: the cache folder {path.parent} could not be written ("
    )
    assert "\n" not in result["not_cached"]


@pytest.mark.parametrize(
    "where, code",
    [
        ("lock", errno.EROFS),  # a read-only file system: the lock file cannot be made
        ("lock", errno.EACCES),  # a lock file (or folder) of another user
        ("write", errno.ENOSPC),  # a full disk: the lock was made, the value does not fit
        ("write", errno.EROFS),
    ],
)
def test_an_unwritable_or_full_cache_measures_and_says_why_it_was_not_kept(
    tmp_path, monkeypatch, where, code
):
    def refuse(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    if where == "lock":
        monkeypatch.setattr(cache.os, "open", refuse)
    else:
        monkeypatch.setattr(cache, "write_atomically", refuse)
    path, measure = tmp_path / "b.json", Counting()
    result = cached(path, measure, busy=not_busy)
    assert measure.calls == 1 and result["flops_per_s"] == 1e11
    assert result["not_cached"] == (
        f"not kept: the cache folder {tmp_path} could not be written ({os.strerror(code)})"
    )
    assert not path.exists()


def test_the_folders_reason_wins_over_a_busy_machine(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(cache.os, "open", refuse)
    result = cached(tmp_path / "b.json", Counting(), busy=lambda: "the machine was busy")
    assert result["not_cached"] == (
        f"not kept: the cache folder {tmp_path} could not be written (Permission denied)"
    )


def test_the_measurements_own_errors_are_raised_not_hidden(tmp_path):
    def broken():
        raise OSError(errno.ENOENT, "the subprocess could not start")

    with pytest.raises(OSError, match="could not start"):
        cached(tmp_path / "b.json", broken, busy=not_busy)


def _hold_the_lock(path, held, release):
    with cache.cache_lock(path):
        held.set()
        release.wait(30)


def test_a_lock_held_too_long_by_another_process_measures_without_it(tmp_path, monkeypatch):
    path, measure = tmp_path / "b.json", Counting()
    fork = multiprocessing.get_context("fork")
    held, release = fork.Event(), fork.Event()
    holder = fork.Process(target=_hold_the_lock, args=(path, held, release))
    holder.start()
    try:
        assert held.wait(30)
        monkeypatch.setattr(cache, "LOCK_WAIT_S", 0.3)
        started = time.monotonic()
        result = cached(path, measure, busy=not_busy)
        assert time.monotonic() - started < 10
    finally:
        release.set()
        holder.join(timeout=30)
    assert measure.calls == 1 and result["flops_per_s"] == 1e11
    assert result["not_cached"] == "not kept: another process held the cache's lock for over 0.3 s"
    assert not path.exists()


def test_the_baseline_line_says_it_was_not_kept_when_the_folder_is_unwritable(
    tmp_path, monkeypatch
):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("D2LHELPERS_CACHE", str(blocker / "cache"))
    fake = {"device": "/CPU:0", "size": 256, "flops_per_s": 2e11, "noise": 0.0}
    monkeypatch.setattr(peaks, "_measure_baseline", lambda: fake)
    monkeypatch.setattr(peaks, "machine_busy", lambda: None)
    monkeypatch.setattr(peaks, "setup_devices", lambda: [])  # the baseline's line only
    baseline = peaks.machine_baseline_rate()
    assert baseline["flops_per_s"] == 2e11
    assert baseline["not_cached"].startswith("not kept: the cache folder")
    line = peaks.describe_devices([]).splitlines()[-1]
    assert line.startswith("Fair baseline") and "; not kept: the cache folder" in line


def test_an_unwritable_lock_file_is_found_out_before_waiting_for_the_lock(tmp_path, monkeypatch):
    waited = []

    class RetriesUntilTimeout:  # filelock on Windows: EACCES reads as "held", retried till timeout
        def __init__(self, path, timeout):
            self.timeout = timeout

        def __enter__(self):
            waited.append(self.timeout)  # recorded, not slept: whether it waited, not how long
            raise cache.filelock.Timeout("lock")

        def __exit__(self, *exc):
            return False

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(cache.filelock, "FileLock", RetriesUntilTimeout)
    monkeypatch.setattr(cache.os, "open", refuse)
    result = cached(tmp_path / "b.json", Counting(), busy=not_busy)
    assert waited == []  # the unwritable file was found before any wait for the lock
    assert result["not_cached"].endswith("could not be written (Permission denied)")
