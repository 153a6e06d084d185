"""`make mutate`'s choice of tests: the lessons' tests on given numbers stay, their real runs go."""

import re
from pathlib import Path
from types import SimpleNamespace

from tests import mutation_selection


def _item(nodeid, fixtures, params=None):
    name = nodeid.split("::")[-1]
    item = SimpleNamespace(nodeid=nodeid, fixturenames=fixtures, name=name, originalname=name)
    if params is not None:  # pytest gives parametrized items a callspec
        item.callspec = SimpleNamespace(params=params)
    return item


def test_every_autouse_fixture_counts_as_light():
    # An autouse fixture is in every test's fixtures: were it not light, every lesson test would
    # be dropped and each lesson module's mutants would have no test at all (as happened once).
    conftest = (Path(__file__).parent / "conftest.py").read_text()
    autouse = re.findall(r"@pytest\.fixture\([^)]*autouse=True[^)]*\)\s*def (\w+)", conftest)
    assert autouse and set(autouse) <= mutation_selection.LIGHT_FIXTURES


def test_lesson_tests_on_given_numbers_are_kept_and_real_runs_dropped():
    kept = _item("tests/test_l05_collectives.py::test_verdict", ["quiet_stopping_record"])
    real = _item("tests/test_l05_collectives.py::test_sweep_runs", ["quiet_stopping_record", "two"])
    notebook = _item("tests/test_l02_compute_copy.py::test_the_notebook_cell", ["monkeypatch"])
    other = _item("tests/test_costs.py::test_fit", ["quiet_stopping_record", "tmp_path", "x"])
    # parametrize's arguments are in fixturenames too: given numbers, not fixtures (stop 40:
    # every parametrized lesson test was dropped, and its module's mutants went untested)
    given = _item(
        "tests/test_l02_compute_copy.py::test_text[2]", ["cores", "name"], {"cores": 2, "name": "a"}
    )
    heavy = _item("tests/test_l05_collectives.py::test_run[2]", ["devices", "n"], {"n": 2})
    items = [kept, real, notebook, other, given, heavy]
    dropped = []
    config = SimpleNamespace(
        hook=SimpleNamespace(pytest_deselected=lambda items: dropped.extend(items))
    )
    mutation_selection.pytest_collection_modifyitems(config, items)
    assert items == [kept, other, given] and dropped == [real, notebook, heavy]
