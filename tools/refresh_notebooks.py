"""Run notebooks top to bottom and keep only the outputs nbval checks.

    .venv/bin/python tools/refresh_notebooks.py notebooks/01_*.ipynb

Cells marked `# NBVAL_CHECK_OUTPUT` keep their fresh outputs (they must be deterministic); every
other cell is cleared, widget state is dropped and the python3 kernelspec is set, so committed
notebooks hold no timings and open without a "Select Kernel" dialog.
"""

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def refresh(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    notebook.metadata["kernelspec"] = KERNELSPEC
    NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        if "NBVAL_CHECK_OUTPUT" not in cell.source:
            cell.outputs, cell.execution_count = [], None
        cell.metadata.pop("execution", None)
    notebook.metadata.pop("widgets", None)
    nbformat.write(notebook, path)
    print(f"refreshed {path}")


if __name__ == "__main__":
    for name in sys.argv[1:]:
        refresh(Path(name))
