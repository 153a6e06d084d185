"""tests/nbval_book.py: nbval's run of a notebook kept as the book's run, and the xdist groups."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from tests import nbval_book

REPO = Path(__file__).resolve().parent.parent


def tiny_notebook(tmp_path, *sources) -> Path:
    cells = [nbformat.v4.new_markdown_cell("# A tiny lesson\n\nIt prints.")]
    cells += [nbformat.v4.new_code_cell(source) for source in sources]
    path = tmp_path / "09_tiny.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    return path


def message(parent, kind, **content):
    return {"parent_header": {"msg_id": parent}, "header": {"msg_type": kind}, "content": content}


def stream(parent, text, name="stdout"):
    return message(parent, "stream", name=name, text=text)


def display(parent, text, display_id=None):
    transient = {"display_id": display_id} if display_id else {}
    return message(
        parent, "display_data", data={"text/plain": text}, metadata={}, transient=transient
    )


def started(run, *cells):
    """Send each cell's request as nbval does; returns the request ids."""
    ids = []
    for index in cells:
        run.current = index
        ids.append(f"request-{index}")
        run.sending(ids[-1])
    return ids


def texts(outputs) -> list[str]:
    return [o.get("text") or o.get("data", {}).get("text/plain") for o in outputs]


def test_a_cells_messages_become_its_outputs_as_a_front_end_shows_them(tmp_path):
    run = nbval_book.NotebookRun(tiny_notebook(tmp_path, "a", "b"))
    first, second = started(run, 0, 1)
    for got in (
        stream(first, "1 "),
        stream(first, "2\n"),  # one stream, joined
        stream(first, "warn\n", "stderr"),  # another stream: its own output
        display(first, "progress 0/2", display_id="bar"),
        message(first, "status", execution_state="idle"),  # not an output
        stream("someone-else", "ignored\n"),  # not a cell's request
        stream(second, "gone\n"),
        message(second, "clear_output", wait=True),
        stream(second, "kept\n"),  # the waiting clear happens here
        message(
            second,
            "update_display_data",
            data={"text/plain": "progress 2/2"},
            metadata={},
            transient={"display_id": "bar"},
        ),  # fmt: skip
    ):
        run.receive(got)
    assert texts(run.cells[0].outputs) == ["1 2\n", "warn\n", "progress 2/2"]
    assert texts(run.cells[1].outputs) == ["kept\n"]
    run.receive(message(second, "clear_output", wait=False))
    assert run.cells[1].outputs == []


def test_an_error_is_kept_as_the_cells_error_output(tmp_path):
    run = nbval_book.NotebookRun(tiny_notebook(tmp_path, "1/0"))
    (request,) = started(run, 0)
    run.receive(message(request, "error", ename="ZeroDivisionError", evalue="division by zero",
                        traceback=["..."]))  # fmt: skip
    assert run.cells[0].outputs[0].output_type == "error"
    run.seconds, run.machine_outputs = 1.0, []
    facts = run.page()
    assert facts["errors"][0] == "cell 1: ZeroDivisionError: division by zero"


def test_a_page_needs_every_cell_run_and_the_machine_asked(tmp_path, monkeypatch):
    path = tiny_notebook(tmp_path, "print(1)", "print(2)")
    run = nbval_book.NotebookRun(path)
    monkeypatch.setattr(nbval_book, "RUNS", {path.name: run})
    (first,) = started(run, 0)
    run.receive(stream(first, "1\n"))
    assert nbval_book.pages([path]) is None, "a cell never ran"
    started(run, 1)
    assert nbval_book.pages([path]) is None, "its kernel was never asked what it ran on"
    run.seconds = 2.5
    run.current = "machine"
    run.sending("machine-request")
    machine = {"summary": "4 logical CPU devices", "tensorflow": "2.21.0", "python": "3.11.7",
               "cpu_cores": 2, "processor": "x86_64", "date": "2026-12-03 08:00 UTC"}  # fmt: skip
    run.receive(stream("machine-request", nbval_book.build.MACHINE_MARK + json.dumps(machine)))
    (page,) = nbval_book.pages([path])
    assert page["machine"] == machine and page["seconds"] == 2.5 and page["errors"] == []
    assert page["title"] == "A tiny lesson" and texts(page["notebook"].cells[1].outputs) == ["1\n"]
    assert nbval_book.pages([path, tmp_path / "10_never_ran.ipynb"]) is None


class Item:
    def __init__(self, nodeid, fixturenames=()):
        self.nodeid, self.fixturenames = nodeid, fixturenames


def collected():
    return [
        Item("tests/test_browser.py::test_lab"),
        Item("tests/test_book.py::test_pieces"),
        Item("tests/test_book.py::test_pages", ("book", "site")),
        Item("tests/test_a.py::test_one"),
        Item("notebooks/01_x.ipynb::Cell 0"),
        Item("notebooks/01_x.ipynb::Cell 1"),
        Item("notebooks/02_y.ipynb::Cell 0"),
    ]


def test_with_the_books_test_the_notebooks_run_first_and_report(monkeypatch):
    patched = []
    monkeypatch.setattr(nbval_book, "patch_nbval", lambda: patched.append(True))
    monkeypatch.delenv("BOOK_DIR", raising=False)
    items = collected()
    nbval_book.arrange(items)
    assert [i.nodeid for i in items] == [
        "notebooks/01_x.ipynb::Cell 0",
        "notebooks/01_x.ipynb::Cell 1",
        "notebooks/02_y.ipynb::Cell 0",
        "tests/test_book.py::test_pieces",
        "tests/test_book.py::test_pages",
        "tests/test_browser.py::test_lab",
        "tests/test_a.py::test_one",
    ]
    assert patched == [True]


@pytest.mark.parametrize("why", ["no book test", "BOOK_DIR"])
def test_without_the_books_test_the_order_stays_and_nbval_is_untouched(monkeypatch, why):
    patched = []
    monkeypatch.setattr(nbval_book, "patch_nbval", lambda: patched.append(True))
    items = collected()
    if why == "BOOK_DIR":
        monkeypatch.setenv("BOOK_DIR", "/somewhere/built")
    else:
        items = [i for i in items if "test_pages" not in i.nodeid]
    order = [i.nodeid for i in items]
    nbval_book.arrange(items)
    assert [i.nodeid for i in items] == order and not patched


def test_xdist_gives_the_notebooks_and_the_books_test_to_one_worker_other_files_each_alone():
    scheduler = object.__new__(nbval_book.NotebooksWithTheBook)  # its scopes need no workers
    scopes = {item.nodeid: scheduler._split_scope(item.nodeid) for item in collected()}
    assert scopes == {
        "tests/test_browser.py::test_lab": "tests/test_browser.py",
        "tests/test_book.py::test_pieces": nbval_book.GROUP,
        "tests/test_book.py::test_pages": nbval_book.GROUP,
        "tests/test_a.py::test_one": "tests/test_a.py",
        "notebooks/01_x.ipynb::Cell 0": nbval_book.GROUP,
        "notebooks/01_x.ipynb::Cell 1": nbval_book.GROUP,
        "notebooks/02_y.ipynb::Cell 0": nbval_book.GROUP,
    }
