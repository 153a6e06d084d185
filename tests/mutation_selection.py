"""`make mutate`'s choice of lesson tests: those that read numbers given to them, not real runs.

A lesson's verdicts are tested on injected numbers (fast); its real runs (TensorFlow devices,
worker processes, notebooks) take seconds each and would run again for every mutant of every
function they pass through. Loaded by mutmut's pytest (`-p tests.mutation_selection`, in
pyproject.toml's [tool.mutmut]), this deselects from the lesson test modules (tests/test_lNN_*)
every test that asks for a fixture outside `LIGHT_FIXTURES` or whose name says it runs
something (`RUNS`). Other test modules are left alone.
"""

from __future__ import annotations

import re

# pytest's own, and conftest's autouse fixture (every test has it: it only clears a record)
LIGHT_FIXTURES = {"monkeypatch", "capsys", "capfd", "tmp_path", "request", "quiet_stopping_record"}
RUNS = re.compile(r"edited|notebook|wait_past")  # run a notebook, or start processes
LESSON_TESTS = re.compile(r"test_l\d\d_")


def is_real_run(item) -> bool:
    """Whether `item` (a lesson test) runs an experiment rather than reading given numbers."""
    fixtures = set(getattr(item, "fixturenames", ())) - LIGHT_FIXTURES
    callspec = getattr(item, "callspec", None)  # parametrize's arguments are given numbers
    fixtures -= set(callspec.params) if callspec else set()
    return bool(fixtures) or bool(RUNS.search(getattr(item, "originalname", item.name)))


def pytest_collection_modifyitems(config, items):
    kept, dropped = [], []
    for item in items:
        lesson = LESSON_TESTS.search(item.nodeid.split("::")[0])
        (dropped if lesson and is_real_run(item) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
