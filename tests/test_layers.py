"""The layout rules, checked: the import contracts can fail, modules stay small, one core count."""

import ast
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "d2lhelpers"
LINT_IMPORTS = pathlib.Path(sys.executable).parent / "lint-imports"


def lint_imports(tree: pathlib.Path) -> subprocess.CompletedProcess:
    """Run the project's import contract (pyproject.toml) over the package copied to `tree`."""
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def package_copy(tmp_path):
    shutil.copytree(PACKAGE, tmp_path / "d2lhelpers", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed")
def test_the_contract_holds_for_the_package(package_copy):
    result = lint_imports(package_copy)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed")
def test_a_lower_layer_importing_a_higher_one_breaks_the_contract(package_copy):
    mechanism = package_copy / "d2lhelpers" / "timing" / "benchmark.py"
    lesson = sorted((PACKAGE / "lessons").glob("l0*"))[0].stem
    mechanism.write_text(
        mechanism.read_text() + f"\n\ndef _late():\n    from d2lhelpers.lessons import {lesson}\n"
    )
    result = lint_imports(package_copy)
    assert result.returncode == 1
    assert "Layers:" in result.stdout and "BROKEN" in result.stdout


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed")
def test_an_import_cycle_inside_a_function_breaks_the_contract(package_copy):
    costs = package_copy / "d2lhelpers" / "collectives" / "costs.py"
    costs.write_text(
        costs.read_text() + "\n\ndef _late():\n    from d2lhelpers.collectives import algorithms\n"
    )
    assert "import algorithms" not in (PACKAGE / "collectives" / "costs.py").read_text()
    algorithms = (PACKAGE / "collectives" / "algorithms.py").read_text()
    assert "d2lhelpers.collectives.costs import" in algorithms
    result = lint_imports(package_copy)
    assert result.returncode == 1
    assert "No import cycle" in result.stdout and "BROKEN" in result.stdout


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed")
def test_a_lesson_importing_another_lesson_breaks_the_contract(package_copy):
    panel = package_copy / "d2lhelpers" / "lessons" / "l03_mlp_across_devices.py"
    panel.write_text(
        panel.read_text() + "\n\ndef _late():\n    from d2lhelpers.lessons import l01_two_devices\n"
    )
    result = lint_imports(package_copy)
    assert result.returncode == 1
    assert "No lesson imports another lesson BROKEN" in result.stdout


def test_every_module_says_its_one_job_first():
    """One job per file (not a line cap): each module's docstring opens with the job it does."""
    silent = [
        str(p.relative_to(ROOT))
        for p in PACKAGE.rglob("*.py")
        if p.read_text().strip() and not ast.get_docstring(ast.parse(p.read_text()))
    ]
    assert silent == []


def test_the_usable_core_count_has_one_home():
    asks = re.compile(r"os\.cpu_count\(|os\.sched_getaffinity\(")
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in [*PACKAGE.rglob("*.py"), *(ROOT / "benchmarks").glob("run_all.py")]
        if p.name != "units.py"
        for i, line in enumerate(p.read_text().splitlines(), start=1)
        if asks.search(line)
    ]
    assert found == []


def _public_classes() -> dict[str, list[str]]:
    """Each public class name defined in the package, and the modules defining it."""
    found: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found.setdefault(node.name, []).append(module)
    return found


def test_no_two_public_classes_share_a_name():
    assert {name: where for name, where in _public_classes().items() if len(where) > 1} == {}


def test_every_result_is_named_for_what_it_is():
    """One naming rule: a class an experiment returns, which prints as a table, ends in Result."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            bases = [getattr(b, "id", getattr(b, "attr", "")) for b in getattr(node, "bases", [])]
            if isinstance(node, ast.ClassDef) and "Reported" in bases:
                found.append(node.name)
    assert found and [name for name in found if not name.endswith("Result")] == []


D2L_NAMES = {"Benchmark", "cpu", "try_all_gpus"}  # d2l's own
TOLD_TO_CALL = {"setup_devices"}  # refusals tell a learner to call it (in a new kernel)


def test_the_front_door_exports_what_the_notebooks_use_and_nothing_else():
    import json

    import d2lhelpers as d2l

    used = set()
    for notebook in (ROOT / "notebooks").glob("*.ipynb"):
        for cell in json.loads(notebook.read_text())["cells"]:
            if cell["cell_type"] == "code":
                used |= set(re.findall(r"\bd2l\.([A-Za-z_]\w*)", "".join(cell["source"])))
    exported = set(d2l.__all__)
    assert used - exported == set(), "a notebook calls a name the front door does not export"
    assert exported - used - D2L_NAMES - TOLD_TO_CALL == set(), "exported, but no notebook uses it"
    assert len(d2l.__all__) == len(exported), "a name listed twice"
    # review: `__all__` is built from the imports, so a name imported twice is the repeat to
    # catch (the line above cannot fail on a list made from a dict's keys)
    import ast

    tree = ast.parse((ROOT / "d2lhelpers" / "__init__.py").read_text())
    imported = [a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom)
                for a in n.names if not (a.asname or a.name).startswith("_")]  # fmt: skip
    assert len(imported) == len(set(imported)), "a name imported twice into the front door"
    assert set(imported) == exported, "__all__ is every name the front door imports"
    objects = [id(getattr(d2l, name)) for name in exported]
    assert len(set(objects)) == len(objects), "an alias: one object exported under two names"
