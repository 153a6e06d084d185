"""Admission: refusals name the limit and the largest value that fits, before anything runs."""

import pytest

from d2lhelpers.core import checks as admission
from d2lhelpers.core.checks import (
    MEMORY_SHARE,
    available_memory_bytes,
    largest_fitting,
    max_worker_processes,
    require_count,
    require_memory,
    require_processes,
    require_sweep,
)
from d2lhelpers.core.units import GiB, MiB
from tests.conftest import Built, builds_nothing


def test_require_count_accepts_whole_numbers_in_range():
    assert require_count("steps", 3) == 3 and require_count("steps", 1) == 1
    assert require_count("steps", 8, high=8) == 8 and require_count("repeats", 0, low=0) == 0
    numpy = pytest.importorskip("numpy")
    value = require_count("size", numpy.int64(512))
    assert value == 512 and type(value) is int


@pytest.mark.parametrize("value", [512.5, 4.0, "4", None, True, [1], 1j])
def test_require_count_refuses_other_types_naming_the_value(value):
    with pytest.raises(TypeError, match=r"^size must be a whole number, got "):
        require_count("size", value)


def test_require_count_refuses_out_of_range_naming_the_limits():
    with pytest.raises(ValueError, match=r"^steps must be at least 1, got 0$"):
        require_count("steps", 0)
    with pytest.raises(ValueError, match=r"^steps must be at least 1, got -3$"):
        require_count("steps", -3)
    with pytest.raises(
        ValueError, match=r"^workers must be at least 2 and at most 8, got 9: choose 8 or fewer$"
    ):
        require_count("workers", 9, low=2, high=8)
    with pytest.raises(ValueError, match=r"and at most 8, got 1$"):
        require_count("workers", 1, low=2, high=8)


def test_require_sweep():
    assert require_sweep("sizes", (4096, 8)) == [4096, 8]
    assert require_sweep("sizes", iter([1])) == [1]
    with pytest.raises(ValueError, match="sizes must list at least one value"):
        require_sweep("sizes", ())
    with pytest.raises(ValueError, match=r"sizes\[1\] must be at least 1 and at most 4096"):
        require_sweep("sizes", [4096, 2**33], high=4096)
    with pytest.raises(TypeError, match=r"sizes\[0\] must be a whole number"):
        require_sweep("sizes", [512.5])
    for wrong in ("4096", None, 4096):
        with pytest.raises(TypeError, match="sizes must be a list of whole numbers"):
            require_sweep("sizes", wrong)


def test_available_memory_is_the_systems_or_a_lower_cgroup_limit(tmp_path):
    system = 4 * GiB
    assert available_memory_bytes(system, cgroups=()) == 4 * GiB
    limit, usage = tmp_path / "memory.max", tmp_path / "memory.current"
    limit.write_text(f"{2 * GiB}\n")
    usage.write_text(f"{512 * MiB}\n")
    assert available_memory_bytes(system, cgroups=[(limit, usage)]) == 2 * GiB - 512 * MiB
    limit.write_text("max\n")  # no limit
    assert available_memory_bytes(system, cgroups=[(limit, usage)]) == 4 * GiB
    limit.write_text(f"{8 * GiB}\n")  # a limit above what the machine has: the machine wins
    assert available_memory_bytes(system, cgroups=[(limit, usage)]) == 4 * GiB
    limit.write_text(f"{GiB}\n")
    usage.write_text(f"{2 * GiB}\n")  # over its limit: nothing left, not a negative number
    assert available_memory_bytes(system, cgroups=[(limit, usage)]) == 0
    missing = [(tmp_path / "none", tmp_path / "none2")]
    assert available_memory_bytes(system, cgroups=missing) == 4 * GiB


def test_available_memory_asks_psutil_on_any_system(monkeypatch):
    reading = type("Memory", (), {"available": 3 * GiB})()
    monkeypatch.setattr(admission.psutil, "virtual_memory", lambda: reading)
    assert available_memory_bytes(cgroups=()) == 3 * GiB
    monkeypatch.undo()
    assert available_memory_bytes() > 0


def test_require_memory_names_needed_available_and_allowed():
    require_memory("a run", 0.8 * GiB, available=GiB)  # exactly the share: allowed
    with pytest.raises(ValueError) as error:
        require_memory("setup_devices(10**6)", 6 * GiB, available=GiB)
    assert str(error.value) == (
        "setup_devices(10**6) needs about 6.0 GiB, but only 1.0 GiB is available (at most "
        "819.2 MiB may be used): choose smaller values"
    )
    with pytest.raises(ValueError, match="the largest that fits is width 4096$"):
        require_memory("training", 6 * GiB, available=GiB, largest="width 4096")


def test_require_memory_asks_the_machine_by_default(monkeypatch):
    monkeypatch.setattr(admission, "available_memory_bytes", lambda: 10 * MiB)
    with pytest.raises(ValueError, match="only 10.0 MiB is available"):
        require_memory("a run", 9 * MiB)


def test_largest_fitting_finds_the_largest_size():
    def matrix_bytes(n):
        return 4 * n * n

    available = int(4 * 1000 * 1000 / MEMORY_SHARE) + 1
    assert largest_fitting(matrix_bytes, 1, 10**6, available) == 1000
    assert largest_fitting(matrix_bytes, 1, 500, available) == 500
    assert largest_fitting(matrix_bytes, 2000, 10**6, available) is None
    assert largest_fitting(matrix_bytes, 1000, 1000, available) == 1000


def test_the_worker_cap_is_per_usable_core(monkeypatch):
    assert max_worker_processes(1) == 2 and max_worker_processes(3) == 6
    monkeypatch.setattr(admission, "usable_cores", lambda: 1)
    assert max_worker_processes() == 2
    assert require_processes("the all-reduce", 2) == 2
    with pytest.raises(ValueError) as error:
        require_processes("allreduce_job(n_workers=64)", 64)
    assert str(error.value) == (
        "allreduce_job(n_workers=64) would start 64 worker processes, but at most 2 may run "
        "(2 per usable CPU core): choose 2 or fewer"
    )
    assert require_processes("x", 6, cores=3) == 6
    with pytest.raises(ValueError, match="at least 1"):
        require_processes("x", 0)
    with pytest.raises(TypeError):
        require_processes("x", 2.5)


def test_require_measure_options_checks_before_anything_runs():
    from d2lhelpers.core.checks import require_measure_options

    assert require_measure_options({"min_runs": 3}, budget_s=1.0) == {
        "budget_s": 1.0,
        "min_runs": 3,
    }
    assert require_measure_options({"budget_s": 0.5}, budget_s=1.0) == {"budget_s": 0.5}
    with pytest.raises(ValueError, match="below min_runs"):
        require_measure_options({"min_runs": 5, "max_runs": 2})
    with pytest.raises(TypeError, match="budget_s"):
        require_measure_options({"budget_s": "1"})
    with pytest.raises(ValueError, match="max_runs"):
        require_measure_options({"max_runs": 0})
    with pytest.raises(TypeError, match="unknown measure options"):
        require_measure_options({"repeats": 3})
    with pytest.raises(ValueError, match="at most 600"):
        require_measure_options({"budget_s": 601})


def test_require_rate_and_counts():
    from d2lhelpers.core.checks import require_counts, require_rate

    assert require_rate("device_peak", None) is None
    assert require_rate("device_peak", 1e9) == 1e9
    with pytest.raises(ValueError, match="device_peak must be above 0"):
        require_rate("device_peak", -1.0)
    with pytest.raises(TypeError):
        require_rate("device_peak", None, allow_none=False)
    assert require_counts(a=1, b=7) == {"a": 1, "b": 7}
    with pytest.raises(ValueError, match="b must be at least 1"):
        require_counts(a=1, b=0)


def test_builds_nothing_fails_a_refusal_that_comes_after_the_work():
    """The refusal tests' trap (tests/conftest.py) can fail: a tensor made first is caught."""
    import tensorflow as tf

    def refuses_late():
        tf.zeros(3)
        raise ValueError("too big")

    def refuses_late_and_hides_errors():
        try:
            tf.function(lambda: None)
        except Exception:
            pass  # an `except Exception` in the code cannot hide the trap
        raise ValueError("too big")

    for late in (refuses_late, refuses_late_and_hides_errors):
        with pytest.raises(Built, match="was called before the refusal"):
            with builds_nothing(), pytest.raises(ValueError):
                late()
    with builds_nothing(), pytest.raises(ValueError):
        raise ValueError("refused first")  # nothing built: passes
    assert tf.zeros(3).shape == (3,)  # and the builders are back afterwards
