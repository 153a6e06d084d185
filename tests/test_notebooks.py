"""Every committed notebook: kernelspec, only the outputs nbval checks, no widget state; and
`make lab` works on git-ignored copies, so a learner's runs never touch them."""

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).parent.parent
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_clean(path):
    notebook = json.loads(path.read_text())
    assert notebook["metadata"]["kernelspec"]["name"] == "python3"
    assert "widgets" not in notebook["metadata"], "stored widget state"
    checked = 0
    for i, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        if "NBVAL_CHECK_OUTPUT" in source:
            checked += 1
            assert cell["outputs"], f"cell {i} is checked by nbval but has no stored output"
        else:
            assert not cell["outputs"], f"cell {i} stores outputs nbval does not check"
            assert cell.get("execution_count") is None
        for output in cell["outputs"]:
            assert "image/png" not in output.get("data", {}), f"cell {i} stores an image"
    assert checked >= 1, "no deterministic cell is checked"


def make(*args: str, cwd: Path = REPO) -> str:
    done = subprocess.run(["make", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout


def test_make_lab_serves_git_ignored_working_copies_not_the_lessons():
    plan = make("-n", "lab")
    assert "jupyter lab" in plan and "--ServerApp.root_dir=work" in plan
    assert ("--allow-root" in plan) == (os.geteuid() == 0)
    ignored = subprocess.run(["git", "check-ignore", "-q", "work/01.ipynb"], cwd=REPO, check=False)
    assert ignored.returncode == 0, "work/ is not git-ignored: a learner's outputs would show"


def test_working_copies_are_made_once_kept_and_reset_on_request(tmp_path):
    work = tmp_path / "work"
    make(f"WORK={work}", "work")
    assert sorted(p.name for p in work.iterdir()) == [p.name for p in NOTEBOOKS]
    copy = work / NOTEBOOKS[0].name
    copy.write_text('{"learner": "edits"}')
    make(f"WORK={work}", "work")
    assert copy.read_text() == '{"learner": "edits"}', "make lab overwrote a learner's copy"
    make(f"WORK={work}", "reset-work")
    assert copy.read_bytes() == NOTEBOOKS[0].read_bytes()
