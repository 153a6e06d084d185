"""Run a lesson's cells as a learner would after editing one: the edit must change what runs.

`run_edited("01_two_devices_two_jobs", {"old text": "new text"}, until="panel.run()")` runs the
notebook's code cells, with the edit applied, up to and including the first cell that contains
`until`, in a fresh kernel started in notebooks/, and returns the executed cells' text outputs.
"""

from __future__ import annotations

import nbformat
from nbclient import NotebookClient

from tests.conftest import ROOT

NOTEBOOKS = ROOT / "notebooks"


def run_edited(name: str, edits: dict[str, str], until: str, timeout: int = 300) -> list[str]:
    """The text outputs of each code cell run (one string per cell), the edits applied."""
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    source = "\n".join(c.source for c in notebook.cells if c.cell_type == "code")
    for old in edits:
        assert source.count(old) == 1, f"{old!r} is not in {name} exactly once"
    cells = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        for old, new in edits.items():
            cell.source = cell.source.replace(old, new)
        cell.outputs = []
        cells.append(cell)
        if until in cell.source:
            break
    else:
        raise AssertionError(f"no cell of {name} contains {until!r}")
    notebook.cells = cells
    NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": NOTEBOOKS}},
    ).execute()
    return ["".join(_text(o) for o in cell.outputs) for cell in notebook.cells]


def _text(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    data = output.get("data", {})
    return data.get("text/plain", "") + "\n"
