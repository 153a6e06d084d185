"""Measured values kept on disk between kernels, by a cache that never stops a lesson.

A value is written whole (a temporary file beside it, then `os.replace`), measured once under a
lock however many kernels ask at once (`filelock`: `fcntl` on Linux and macOS, `msvcrt` on
Windows), measured again when its file is empty, too old or of another version, and measured
again and deleted when the file is corrupt. A value measured on a busy machine, or noisier than
the caller allows, is returned but not kept.

Whatever goes wrong with the folder — read-only, full, its lock file another user's, its lock
held longer than `LOCK_WAIT_S` — the value is measured and returned all the same; its
`not_cached` entry says in one line that it was not kept, and why.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import filelock
import platformdirs

from d2lhelpers.core.units import cores_phrase, ratio_beside, usable_cores

MAX_AGE_S = 30 * 24 * 3600  # a month: drivers, TensorFlow and the machine's load change
# Another kernel measuring the same value holds the lock for seconds (the baseline takes 2-10 s
# on 2 cores); a minute means it is stuck or the machine is overloaded: measure without it.
LOCK_WAIT_S = 60.0


def cache_dir() -> Path:
    """`$D2LHELPERS_CACHE`, else this user's cache folder for d2lhelpers (platformdirs):
    `$XDG_CACHE_HOME/d2lhelpers` (absolute only, as the XDG spec says) or `~/.cache/d2lhelpers`
    on Linux, `~/Library/Caches/d2lhelpers` on macOS, `%LOCALAPPDATA%\\d2lhelpers\\Cache` on
    Windows."""
    if os.environ.get("D2LHELPERS_CACHE"):
        return Path(os.environ["D2LHELPERS_CACHE"])
    path = platformdirs.user_cache_path("d2lhelpers", appauthor=False)
    return path if path.is_absolute() else Path.home() / ".cache" / "d2lhelpers"


def load_average() -> float | None:
    """The 1-minute load average, or None where there is none (Windows)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def machine_busy(cores: int | None = None) -> str | None:
    """Why this machine is too busy to measure a value worth keeping, or None when it is not:
    the 1-minute load average above the usable cores (Windows has none: nothing to tell)."""
    cores = usable_cores() if cores is None else cores
    load = load_average()
    if load is None:
        return None
    if load > cores:
        # read 175: '1.0, was above 1': the decimals that do not print the cores' count
        shown = ratio_beside(load, cores, 1)
        return (
            f"the load average, {shown}, was above {cores_phrase(cores)} (it counts the whole "
            "machine and this run's own threads)"
        )
    return None


def read_cache(
    path: Path,
    version: int,
    keys: Iterable[str],
    max_age_s: float = MAX_AGE_S,
    now: float | None = None,
    discard_corrupt: bool = False,
) -> dict | None:
    """The cached dict at `path`, or None when it is missing, empty, corrupt, of another
    `version`, lacks one of `keys` or is older than `max_age_s`. With `discard_corrupt` (the
    lock held), an empty or corrupt file is deleted, so it is gone even if the value measured
    next is not kept."""
    try:
        text = path.read_text()
    except OSError:
        return None
    try:
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError):
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("saved_at"), float):
        if discard_corrupt:
            with contextlib.suppress(OSError):
                path.unlink()
        return None
    if data.get("version") != version or not all(k in data for k in keys):
        return None
    now = time.time() if now is None else now
    return data if 0 <= now - data["saved_at"] <= max_age_s else None


def write_atomically(path: Path, data: dict) -> None:
    """Write `data` as JSON so that a reader sees the old file or the new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False
    ) as f:
        try:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        except OSError:  # a full disk: no half-written temporary file left behind
            f.close()
            os.unlink(f.name)
            raise
    try:
        os.replace(f.name, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(f.name)
        raise


@contextlib.contextmanager
def cache_lock(path: Path, timeout_s: float | None = None):
    """An exclusive lock beside `path` (`<name>.lock`): one measurement at a time per file.
    Raises OSError when the folder or the lock file cannot be written, and `filelock.Timeout`
    (an OSError too) when another process holds the lock longer than `timeout_s`
    (`LOCK_WAIT_S`)."""
    timeout_s = LOCK_WAIT_S if timeout_s is None else timeout_s
    lock_path = path.with_name(path.name + ".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    # filelock retries a lock file it may not open until its timeout: find that out at once.
    os.close(os.open(lock_path, os.O_WRONLY | os.O_CREAT, 0o644))
    with filelock.FileLock(lock_path, timeout=timeout_s):
        yield


def cached_measurement(
    path: Path,
    measure_now: Callable[[], dict],
    *,
    version: int,
    keys: Iterable[str],
    refresh: bool = False,
    busy: Callable[[], str | None] | None = None,
    noisy_above: float = float("inf"),
) -> dict:
    """The measurement cached at `path`, else `measure_now()` under the lock (a caller that
    waited for the lock finds the value another caller measured).

    A value measured while `busy()` names a reason, or whose 'noise' is above `noisy_above`,
    or that the cache cannot hold (see the module's notes), is returned but not kept: it carries
    'not_cached', one line saying why. A value read from the file carries 'from_cache': True
    (this run did not measure it). `measure_now`'s own errors are raised as they are.
    """
    keys = tuple(keys)
    if not refresh and (hit := read_cache(path, version, keys)) is not None:
        return {**hit, "from_cache": True}
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(cache_lock(path))
        except filelock.Timeout:
            reason = f"another process held the cache's lock for over {LOCK_WAIT_S:g} s"
        except OSError as error:
            reason = unwritable(path, error)
        else:
            reason = None
            hit = read_cache(path, version, keys, discard_corrupt=True)
            if not refresh and hit is not None:  # another caller measured it while we waited
                return hit
        result = _measure(measure_now, version, busy, noisy_above)
        if reason is not None:  # the folder's reason: it holds on a quiet machine too
            result["not_cached"] = f"not kept: {reason}"
        elif "not_cached" not in result:
            try:
                write_atomically(path, result)
            except OSError as error:
                result["not_cached"] = f"not kept: {unwritable(path, error)}"
        return result


def unwritable(path: Path, error: OSError) -> str:
    """Why the cache folder could not take a value, in a few words a learner can act on."""
    why = error.strerror or type(error).__name__
    return f"the cache folder {path.parent} could not be written ({why})"


def _measure(measure_now, version, busy, noisy_above) -> dict:
    reason = (machine_busy if busy is None else busy)()
    result = dict(measure_now())
    if reason is None and result.get("noise", 0.0) > noisy_above:
        reason = f"the measurement was noisy (IQR {result['noise']:.0%} of the median)"
    result.update(
        version=version,
        measured_at=datetime.datetime.now().isoformat(timespec="seconds"),
        saved_at=time.time(),
    )
    if reason is not None:
        result["not_cached"] = f"not kept: {reason}"
    return result
