"""The worker entry: targets named by string resolve, and every such string in the package does."""

import re
from pathlib import Path

import pytest

import d2lhelpers
from d2lhelpers.processes import mwms, real_cluster
from d2lhelpers.processes.function_source import function_source
from d2lhelpers.processes.group import WorkerGroup
from d2lhelpers.processes.worker_main import WorkerContext, is_port_in_use, load_target
from tests.conftest import started_by_this_process

PACKAGE = Path(d2lhelpers.__file__).parent
TARGET_STRING = re.compile(r"""["'](d2lhelpers(?:\.\w+)+):(\w+)["']""")


def target_strings() -> set[str]:
    """Every 'd2lhelpers.module:function' literal in the package's source."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for module, name in TARGET_STRING.findall(path.read_text()):
            found.add(f"{module}:{name}")
    return found


def test_every_worker_target_named_in_the_package_resolves_to_a_function():
    strings = target_strings()
    assert strings  # the search finds targets at all
    for name in real_cluster.DEFAULT_ARGS:  # what a real host runs is the notebook's function
        assert callable(load_target(f"{mwms.__name__}:{name}"))
    for target in sorted(strings):
        assert callable(load_target(target)), target


def test_load_target_refuses_a_malformed_name_and_reports_a_missing_one():
    with pytest.raises(ValueError, match="module:function"):
        load_target("d2lhelpers.processes.mwms")
    with pytest.raises(AttributeError):
        load_target("d2lhelpers.processes.mwms:no_such_worker")


def test_load_target_by_file_path(tmp_path):
    path = tmp_path / "targets.py"
    path.write_text("def hello(context):\n    return 'hi'\n")
    assert load_target(f"{path}:hello")(None) == "hi"


def test_port_in_use_is_recognised_from_python_and_from_tensorflow():
    import errno

    assert is_port_in_use(OSError(errno.EADDRINUSE, "Address already in use"))
    assert is_port_in_use(RuntimeError("Could not start gRPC server"))
    assert not is_port_in_use(ValueError("something else"))


def test_sent_code_replaces_the_target_and_brings_what_it_uses():
    namespace = {"__name__": "__main__", "Path": Path}  # a class from a module: an import
    linecache_cell(namespace)  # as a notebook's cells define them
    code = function_source(worker=namespace["work"])
    assert "from pathlib import Path as Path" in code["code"]  # the class, by its module
    assert "def helper():" in code["code"] and "LIMIT = 3" in code["code"]  # the cell's own
    assert load_target("no.such.module:work", code)(None) == 32  # the target is not imported


def test_a_worker_runs_the_function_it_was_sent():
    namespace = {"__name__": "__main__"}
    linecache_cell(
        namespace,
        "def helper(i):\n    return i + 1\n\ndef work(context):\n"
        "    return {'value': helper(context.index) * 10}\n",
    )
    code = function_source(worker=namespace["work"])
    with WorkerGroup("d2lhelpers.processes.mwms:work", 2, code=code, ready_timeout=60) as group:
        assert group.results(timeout=60) == [{"value": 10}, {"value": 20}]
    assert started_by_this_process() == []


def test_a_context_reports_this_processs_memory():
    memory = WorkerContext(0, [1], {}, None).memory()
    assert memory["peak_rss_bytes"] > 10 * 2**20 and 0 < memory["pss_bytes"]


def linecache_cell(namespace, cell=None):
    """Define `cell` (or re-define what `namespace` holds) as IPython does: its text kept in
    linecache under a cell's file name, so that `inspect.getsource` reads it."""
    import linecache

    if cell is None:
        cell = "LIMIT = 3\ndef helper():\n    return LIMIT * 10\ndef work(context):\n"
        cell += "    return helper() + len(Path('ab').name)\n"
    filename = f"<ipython-input-{abs(hash(cell))}>"
    linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)
    exec(compile(cell, filename, "exec"), namespace)
