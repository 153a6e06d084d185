"""nbval's run of each notebook is also the book's: one run for both in `make test`.

`make test` checks each notebook with nbval and builds the book (tests/test_book.py) from a real
run of each. Both used to run every notebook; now, when the book's browser test is collected
beside the notebooks (and BOOK_DIR names no book built elsewhere), this module:

- starts nbval's kernels as the book build starts its own, with `docs/book/static_panels.py`
  (a panel runs once at its default values and prints its result into its cell, as on the page);
- keeps what each cell sent, and rebuilds the cell's outputs from those messages as a notebook
  front end does (streams joined, `clear_output` and display updates applied);
- after each notebook's last cell, asks its kernel what it ran on (the build's machine cell);
- has pytest-xdist (`--dist loadfile`) give the notebooks and tests/test_book.py to one worker as
  one unit, the notebooks first, so that the book fixture, in the same process, renders these
  runs (`build.py --render-only`).

Without the book's test (`pytest --nbval-lax notebooks/01_two_devices_two_jobs.ipynb`, or
BOOK_DIR set) nbval runs as it comes: plain kernels, nothing kept.

`pages(names)` returns the book's facts for each notebook, or None when a notebook did not run to
its end in this process (a selection, another worker, a kernel that died): the book fixture then
runs every notebook itself, as `make book` does.
"""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

import nbformat
from nbformat.v4 import output_from_msg
from xdist.scheduler import LoadFileScheduling

REPO = Path(__file__).resolve().parent.parent
BOOK_SOURCES = REPO / "docs" / "book"
BOOK_TEST = "tests/test_book.py"
GROUP = "notebooks-and-book"
OUTPUTS = ("stream", "display_data", "execute_result", "error")


def load_build():
    """docs/book/build.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("book_build", BOOK_SOURCES / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = load_build()


class NotebookRun:
    """One notebook as nbval ran it: its cells' outputs, its time, what its kernel ran on."""

    def __init__(self, path: Path):
        self.path = path
        self.notebook = nbformat.read(path, as_version=4)
        self.cells = [c for c in self.notebook.cells if c.cell_type == "code"]
        for cell in self.cells:
            cell.outputs = []
        self.started = time.monotonic()
        self.seconds: float | None = None
        self.current: object = None  # the cell (its index) whose execution is being sent
        self.sent: dict[str, object] = {}  # request id -> cell index, or "machine"
        self.ran: set[int] = set()
        self.machine_outputs: list = []
        self.waiting_clear: set[object] = set()
        self.displays: dict[str, list] = {}  # display id -> outputs showing it

    def outputs_of(self, key) -> list:
        return self.machine_outputs if key == "machine" else self.cells[key].outputs

    def sending(self, request_id: str) -> None:
        self.sent[request_id] = self.current
        if isinstance(self.current, int):
            self.ran.add(self.current)

    def receive(self, message: dict) -> None:
        """Apply one iopub message to the outputs of the cell that asked for it."""
        key = self.sent.get(message.get("parent_header", {}).get("msg_id"))
        kind, content = message["header"]["msg_type"], message["content"]
        if key is None:
            return
        outputs = self.outputs_of(key)
        if kind == "clear_output":
            if content.get("wait"):
                self.waiting_clear.add(key)
            else:
                outputs.clear()
            return
        display_id = content.get("transient", {}).get("display_id")
        if kind == "update_display_data":
            for shown in self.displays.get(display_id, []):
                shown.update(data=content["data"], metadata=content["metadata"])
            return
        if kind not in OUTPUTS:
            return
        if key in self.waiting_clear:
            self.waiting_clear.discard(key)
            outputs.clear()
        output = output_from_msg(message)
        if display_id:
            self.displays.setdefault(display_id, []).append(output)
        last = outputs[-1] if outputs else None
        if kind == "stream" and last and last.output_type == "stream" and last.name == output.name:
            last.text += output.text
        else:
            outputs.append(output)

    def complete(self) -> bool:
        return self.seconds is not None and self.ran == set(range(len(self.cells)))

    def page(self) -> dict:
        machine_cell = nbformat.v4.new_code_cell(build.MACHINE_CELL)
        machine_cell.outputs = self.machine_outputs
        return build.page_facts(
            self.path, self.notebook, self.seconds, build.parse_machine(machine_cell)
        )


RUNS: dict[str, NotebookRun] = {}  # notebook file name -> its run in this process


def pages(paths: list[Path]) -> list[dict] | None:
    """Each notebook's page facts as `build.execute` returns them, if every one ran here."""
    runs = [RUNS.get(p.name) for p in paths]
    if not all(run is not None and run.complete() for run in runs):
        return None
    return [run.page() for run in runs]


def arrange(items: list) -> None:
    """Put the notebooks' cells before the book's test when the book is tested here, and have
    nbval report to RUNS; called by tests/conftest.py once the items are collected."""
    joined = not os.environ.get("BOOK_DIR") and any(
        item.nodeid.startswith(BOOK_TEST) and "book" in getattr(item, "fixturenames", ())
        for item in items
    )
    notebooks = [item for item in items if is_notebook_cell(item)] if joined else []
    if notebooks:
        book = [item for item in items if item.nodeid.startswith(BOOK_TEST)]
        rest = [item for item in items if item not in notebooks and item not in book]
        items[:] = notebooks + book + rest
        patch_nbval()


class NotebooksWithTheBook(LoadFileScheduling):
    """pytest-xdist's `--dist loadfile`, except that the notebooks and the book's test are one
    unit of work, run by one worker in the order `arrange` left them."""

    def _split_scope(self, nodeid: str) -> str:
        file = super()._split_scope(nodeid)
        return GROUP if file.endswith(".ipynb") or file == BOOK_TEST else file


def is_notebook_cell(item) -> bool:
    return item.nodeid.split("::")[0].endswith(".ipynb")


def patch_nbval() -> None:
    """Make nbval start its kernels with the book's hook and report what they send to RUNS."""
    from nbval import kernel as nbval_kernel
    from nbval import plugin as nbval_plugin

    if getattr(nbval_plugin.IPyNbFile, "_d2l_patched", False):
        return
    start_new_kernel = nbval_kernel.start_new_kernel
    file_setup, file_teardown = nbval_plugin.IPyNbFile.setup, nbval_plugin.IPyNbFile.teardown
    cell_runtest = nbval_plugin.IPyNbCell.runtest
    get_message = nbval_kernel.RunningKernel.get_message

    def start_with_hook(*args, **kwargs):
        kwargs["extra_arguments"] = [f"--IPKernelApp.exec_files={build.HOOK}"]
        return start_new_kernel(*args, **kwargs)

    def setup(self):
        run = RUNS[Path(str(self.fspath)).name] = NotebookRun(Path(str(self.fspath)))
        file_setup(self)
        self.kernel._d2l_run = run

    def teardown(self):
        run = getattr(self.kernel, "_d2l_run", None)
        if run is not None and self.kernel.is_alive() and not self.timed_out:
            run.seconds = time.monotonic() - run.started
            run.current = "machine"
            request = self.kernel.execute_cell_input(build.MACHINE_CELL, allow_stdin=False)
            self.kernel.await_reply(request, timeout=60)
            self.kernel.await_idle(request, 60)
        file_teardown(self)

    def runtest(self):
        run = getattr(self.parent.kernel, "_d2l_run", None)
        if run is not None:
            run.current = self.cell_num
        cell_runtest(self)

    def execute_cell_input(self, cell_input, allow_stdin=None):
        # As a notebook front end sends it: nbval's store_history=False makes IPython read the
        # previous cell for a trailing `;`, and `result.plot();` would show its figure twice.
        request = self.kc.execute(
            cell_input, store_history=True, allow_stdin=allow_stdin, stop_on_error=False
        )
        if getattr(self, "_d2l_run", None) is not None:
            self._d2l_run.sending(request)
        return request

    def message(self, stream, timeout=None):
        got = get_message(self, stream, timeout=timeout)
        if stream == "iopub" and getattr(self, "_d2l_run", None) is not None:
            self._d2l_run.receive(got)
        return got

    nbval_kernel.start_new_kernel = start_with_hook
    nbval_plugin.IPyNbFile.setup, nbval_plugin.IPyNbFile.teardown = setup, teardown
    nbval_plugin.IPyNbCell.runtest = runtest
    nbval_kernel.RunningKernel.execute_cell_input = execute_cell_input
    nbval_kernel.RunningKernel.get_message = message
    nbval_plugin.IPyNbFile._d2l_patched = True
