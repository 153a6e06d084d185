"""The worker entry: targets named by string resolve, and every such string in the package does."""

import re
from pathlib import Path

import pytest

import d2lhelpers
from d2lhelpers.processes import mwms, real_cluster
from d2lhelpers.processes.worker_main import WorkerContext, is_port_in_use, load_target

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


def test_shipped_sources_replace_the_modules_function_and_see_its_names(tmp_path):
    path = tmp_path / "targets.py"
    path.write_text(
        "LIMIT = 3\ndef helper():\n    return 1\ndef work(context):\n    return helper()\n"
    )
    assert load_target(f"{path}:work")(None) == 1
    edited = ["def helper():\n    return LIMIT * 10\n", "def work(context):\n    return helper()\n"]
    assert load_target(f"{path}:work", edited)(None) == 30  # the shipped helper, the module's name
    # The module's own `work` keeps the module's globals: ship the caller with its callees, as
    # `shipping.function_sources` does.
    assert load_target(f"{path}:work", edited[:1])(None) == 1


def test_a_context_reports_this_processs_memory():
    memory = WorkerContext(0, [1], {}, None).memory()
    assert memory["peak_rss_bytes"] > 10 * 2**20 and 0 < memory["pss_bytes"]
