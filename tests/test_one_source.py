"""One source: each module saved from the notebooks (`#@save MODULE` cells) is exactly those cells.

`make lib` writes them (tools/save_lib.py); these tests fail when a notebook and the package
differ, and show that the check catches an edited cell, a hand-edited module and an orphan.
"""

import json
import shutil
import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import save_lib  # noqa: E402


def test_the_package_holds_exactly_what_the_notebooks_save():
    found = save_lib.differences()
    assert found == [], "".join(found) + "\nrun `make lib` to write the notebooks' cells"


def _notebook(cells):
    return {
        "cells": [{"cell_type": "code", "source": s, "metadata": {}, "outputs": []} for s in cells],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "d2lhelpers").mkdir()
    cells = [
        "#@save demo.chains\n'''Chains of matmuls.'''\ndef chain(x, n):\n    return tf.eye(n)\n",
        "x = 1  # not saved",
        "#@save demo.chains\ndef twice(x):\n    return d2l.cpu(), 2 * x\n",
    ]
    (tmp_path / "notebooks" / "01_demo.ipynb").write_text(json.dumps(_notebook(cells)))
    for path, text in save_lib.saved_modules(
        tmp_path / "notebooks", tmp_path / "d2lhelpers"
    ).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_a_saved_module_is_its_cells_with_their_imports(tree):
    text = (tree / "d2lhelpers" / "demo" / "chains.py").read_text()
    assert text.startswith('"""Chains of matmuls."""')
    assert "import tensorflow as tf" in text and "import d2lhelpers as d2l" in text
    assert text.index("def chain(") < text.index("def twice(") and "x = 1" not in text
    assert "notebooks/01_demo.ipynb" in text
    assert save_lib.differences(tree / "notebooks", tree / "d2lhelpers") == []


def test_an_edited_cell_is_caught(tree):
    path = tree / "notebooks" / "01_demo.ipynb"
    notebook = json.loads(path.read_text())
    notebook["cells"][2]["source"] = "#@save demo.chains\ndef twice(x):\n    return 3 * x\n"
    path.write_text(json.dumps(notebook))
    found = save_lib.differences(tree / "notebooks", tree / "d2lhelpers")
    assert len(found) == 1 and "+    return 3 * x" in found[0]


def test_a_hand_edited_module_and_an_orphan_are_caught(tree):
    module = tree / "d2lhelpers" / "demo" / "chains.py"
    module.write_text(module.read_text() + "\nEXTRA = 1\n")
    shutil.copy(module, tree / "d2lhelpers" / "demo" / "old.py")
    found = save_lib.differences(tree / "notebooks", tree / "d2lhelpers")
    assert any("-EXTRA = 1" in f for f in found)
    assert any("demo/old.py: generated, but no notebook saves it" in f for f in found)


def test_d2l_at_a_saved_cells_top_level_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="at a cell's top level"):
        save_lib.module_text("demo.bad", [("01.ipynb", "LIMIT = d2l.MAX\n")])
    with pytest.raises(SystemExit, match="at a cell's top level"):
        save_lib.module_text("demo.bad", [("01.ipynb", "def f(x=d2l.MAX):\n    return x\n")])


def test_only_saved_modules_import_the_front_door():
    """A hand-written module reaching `d2l.` would bypass the layers (pyproject's contract lets
    saved modules import the front door, and no other module)."""
    import ast

    saved = set(save_lib.generated_files())
    importers = []
    for path in (ROOT / "d2lhelpers").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if "d2lhelpers" in names and path not in saved:
                importers.append(str(path.relative_to(ROOT)))
    assert importers == []
