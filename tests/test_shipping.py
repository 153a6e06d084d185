"""A notebook's functions run in the workers: their source (and their callees') is shipped."""

import textwrap

import pytest

from d2lhelpers.processes import mwms
from d2lhelpers.processes.group import WorkerGroup
from d2lhelpers.processes.shipping import called_names, function_sources, worker_call
from tests.conftest import started_by_this_process

CELLS = """
LIMIT = 7


def helper(x):
    return x + 1


def unused():
    return 0


def work(context):
    def inner():
        return helper(context.index)

    return {"value": inner() * 10, "limit": LIMIT}
"""


@pytest.fixture
def cell_namespace(tmp_path):
    """Functions defined as a kernel's cells define them: in one namespace, with source."""
    path = tmp_path / "cells.py"
    path.write_text(textwrap.dedent(CELLS))
    namespace = {"__name__": "__main__"}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace


def test_the_sources_are_the_function_and_its_callees_first(cell_namespace):
    sources = function_sources(cell_namespace["work"])
    assert [s.split("(")[0] for s in sources] == ["def helper", "def work"]  # no `unused`
    assert "helper" in called_names(cell_namespace["work"].__code__)  # seen in the nested def


def test_the_packages_own_function_ships_nothing(cell_namespace):
    assert worker_call(mwms.allreduce_worker, mwms.__name__) == (
        "d2lhelpers.processes.mwms:allreduce_worker",
        [],
    )
    target, sources = worker_call(cell_namespace["work"], mwms.__name__)
    assert target == "d2lhelpers.processes.mwms:work" and len(sources) == 2
    with pytest.raises(TypeError, match="def"):
        worker_call(print, mwms.__name__)


def test_a_worker_runs_the_shipped_function(cell_namespace, tmp_path):
    # Shipped into a module that has LIMIT = 3: the cell's own constant is not shipped, the
    # module's is seen; the cell's functions are.
    module = tmp_path / "target_module.py"
    module.write_text("LIMIT = 3\n")
    _, sources = worker_call(cell_namespace["work"], "elsewhere")
    with WorkerGroup(f"{module}:work", 2, sources=sources, ready_timeout=30) as group:
        results = group.results(timeout=30)
    assert results == [{"value": 10, "limit": 3}, {"value": 20, "limit": 3}]
    assert started_by_this_process() == []
