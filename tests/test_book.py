"""The book (`make book`, docs/book/): the build's pieces, then every page in headless Chromium.

The unit tests check the build's own logic on tiny notebooks (no kernel, no Sphinx). The browser
test opens every page of `build/book/` from a local web server, as a reader would: each page loads
with no console error and asks nothing of another host, every image has loaded and has alt text,
no output shows a traceback or a dead widget, every internal link (and its #anchor) resolves, each
lesson page says where it ran and shows every figure of its run, equations are typeset, the search
box finds a lesson, and dark mode and print keep working.

The pages come from a real run of every notebook. In `make test` that is nbval's run of each
(tests/nbval_book.py: the notebooks run in this test's process first, with the book's kernel
hook), rendered with `build.py --render-only`, so no notebook runs again for the book (the
browser test still runs each in JupyterLab). Run alone, the browser
test builds the book itself (5-6 minutes on a busy 2-core machine), and only when `build/book/`
is missing or older than a notebook, the book's sources, the package or the results (under
CI=true always, into a fresh folder): a skipped browser test would prove nothing, and a stale book
would test other code. BOOK_DIR=PATH tests a book built elsewhere instead; BOOK_SCREENSHOTS=DIR
keeps screenshots.
Without Chromium or Playwright the browser test skips, except under CI=true, where it fails.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import nbformat
import pytest

from tests import browser_helpers as browser
from tests.conftest import run_python
from tests.nbval_book import BOOK_SOURCES, build, pages

REPO = Path(__file__).resolve().parent.parent
BUILD_TIMEOUT_S = 1500  # six notebooks on a busy 2-core machine, then Sphinx
ON_CI = os.environ.get("CI", "").lower() == "true"


def notebook(*cells, widgets=False):
    made = nbformat.v4.new_notebook(cells=list(cells))
    if widgets:
        made.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    return made


def code(source="x", outputs=()):
    cell = nbformat.v4.new_code_cell(source)
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
    return cell


def stream(text, name="stdout"):
    return {"output_type": "stream", "name": name, "text": text}


def display(data):
    return {"output_type": "display_data", "data": data, "metadata": {}}


MACHINE = {
    "summary": "4 logical CPU devices sharing 2 CPU cores (no GPU): ...",
    "tensorflow": "2.21.0",
    "python": "3.11.7",
    "cpu_cores": 2,
    "processor": "x86_64",
    "date": "2026-12-01 10:00 UTC",
}


# --- The build's pieces ------------------------------------------------------------------------


def test_widget_views_and_their_state_are_dropped_and_counted():
    view = display(
        {"application/vnd.jupyter.widget-view+json": {"model_id": "a"}, "text/plain": "VBox()"}
    )
    made = notebook(code(outputs=[view, stream("kept\n")]), widgets=True)
    assert build.strip_widgets(made) == 1
    assert [o["output_type"] for o in made.cells[0].outputs] == ["stream"]
    assert "widgets" not in made.metadata


def test_tensorflow_log_chatter_is_dropped_but_its_errors_and_warnings_of_python_stay():
    chatter = (
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
        "I0000 00:00:1796121545.706135   14863 cudart_stub.cc:31] Could not find cuda drivers\n"
    )
    kept = "E0000 00:00:17.1 1 x.cc:3] a real error\nUserWarning: something\n"
    made = notebook(
        code(outputs=[stream(chatter, "stderr")]), code(outputs=[stream(kept, "stderr")])
    )
    build.drop_runtime_logs(made)
    assert made.cells[0].outputs == []
    assert made.cells[1].outputs[0]["text"] == kept


def test_errors_are_found_in_error_outputs_and_in_printed_tracebacks():
    error = {"output_type": "error", "ename": "ValueError", "evalue": "bad", "traceback": []}
    printed = stream("Error: ValueError: size too large\n")
    made = notebook(
        code(outputs=[stream("fine\n")]), code(outputs=[error]), code(outputs=[printed])
    )
    found = build.cell_errors(made)
    assert found[0] == "cell 1: ValueError: bad"
    assert found[1].startswith("cell 2:") and len(found) == 2


def test_the_machine_cell_is_read_from_its_marked_line():
    cell = code(outputs=[stream("noise\n" + build.MACHINE_MARK + json.dumps(MACHINE) + "\n")])
    assert build.parse_machine(cell) == MACHINE
    assert build.parse_machine(code(outputs=[stream("no mark\n")])) is None


def test_reference_machines_are_compared_field_by_field():
    same = {"machine": {**MACHINE, "date": "2026-11-29"}}
    assert build.machine_differences(MACHINE, same) == []
    gpu = {"machine": {"summary": "1 H200", "cpu_cores": 16, "framework": "PyTorch 2.9"}}
    differences = build.machine_differences(MACHINE, gpu)
    assert differences == ["devices: 1 H200", "16 CPU cores, not 2", "no TensorFlow (PyTorch 2.9)"]
    reworded = {"machine": {**MACHINE, "summary": MACHINE["summary"].split(":")[0] + ": other."}}
    assert build.machine_differences(MACHINE, reworded) == []  # read 91: the words, not the kind
    older = {"machine": {**MACHINE, "tensorflow": "2.20.0"}}
    assert build.machine_differences(MACHINE, older) == ["TensorFlow 2.20.0, not 2.21.0"]


def test_each_page_says_where_it_ran_how_the_references_differ_and_how_to_move_the_sliders():
    references = [
        {"file": "results/a.json", "machine": {**MACHINE, "date": "2026-11-29"}},
        {"file": "results/b.json", "machine": {"summary": "1 H200", "cpu_cores": 16}},
    ]
    box = build.machine_box({"machine": MACHINE, "seconds": 12.4}, references)
    assert MACHINE["summary"] in box and "TensorFlow 2.21.0" in box and "ran in 12 s" in box
    assert "Reference results from the same machine kind (results/a.json" in box
    assert "from another machine** (results/b.json" in box and "16 CPU cores, not 2" in box
    assert "`make lab`" in box
    unknown = build.machine_box({"machine": None, "seconds": 1}, [])
    assert "unknown" in unknown and "No committed reference results" in unknown


def test_the_h200_scripts_file_is_described_in_the_same_words():
    """The H200 script names its machine `label` and `cpu_count` and dates the file, not the
    machine; the box and the table read them as make bench's keys."""
    h200 = {
        "file": "d2lhelpers/results/h200-pytorch.json",
        "date": "2026-12-04T13:14:54+00:00",
        "machine": {"label": "NVIDIA H200 · PyTorch 2.11", "cpu_count": 16, "framework": "PyTorch"},
        "rows": [
            {
                "name": "tf32_compute_then_copy",
                "ratio": 0.998,
                "goal": "report",
                "ratio_of": "sequential / (run + copy)",
                "flags": ["below its ideal by 0.2%, within the noise allowance (2%)"],
            }
        ],
    }
    assert build.machine_differences(MACHINE, h200) == [
        "devices: NVIDIA H200 · PyTorch 2.11",
        "16 CPU cores, not 2",
        "no TensorFlow (PyTorch)",
    ]
    box = build.machine_box({"machine": MACHINE, "seconds": 3}, [h200])
    assert "(d2lhelpers/results/h200-pytorch.json, 2026-12-04)" in box
    table = build.references_table([h200])
    assert "1.00<br>sequential / (run + copy); below its ideal by 0.2%" in table
    assert (
        "- `d2lhelpers/results/h200-pytorch.json`: NVIDIA H200 · PyTorch 2.11 (PyTorch, 16 CPU"
        in table
    )


def test_the_box_goes_under_the_title():
    made = notebook(nbformat.v4.new_markdown_cell("# 07 · Title\n\nThe idea.\n\nMore."), code())
    build.add_machine_box(made, "BOX")
    assert made.cells[0].source.startswith("# 07 · Title\n\nBOX\n")
    assert made.cells[0].source.endswith("The idea.\n\nMore.")
    assert build.lesson_summary(made) == ("07 · Title", "BOX")  # the box is first once added
    fresh = notebook(nbformat.v4.new_markdown_cell("# T\n**The idea in one minute.** A b.\n\nC."))
    assert build.lesson_summary(fresh) == ("T", "A b.")


def test_reference_results_table_lists_every_row_of_every_machine():
    references = [
        {
            "file": "results/a.json",
            "machine": {"summary": "A", "tensorflow": "2.21.0"},
            "rows": [
                {"name": "x / y", "ratio": 0.5, "goal": "<= 1", "detail": "d|e", "verdict": "ok"},
                {"name": "only a", "ratio": 2.0, "goal": "report"},
                {"name": "overhead", "ratio": 0.0041912, "goal": "<= 0.01"},
            ],
        },
        {
            "file": "results/b.json",
            "machine": {"summary": "B"},
            "rows": [{"name": "x / y", "ratio": 1.25}],
        },
    ]
    table = build.references_table(references)
    assert "| x / y | <= 1 | 0.50 **ok**<br>d\\|e | 1.25 |" in table
    assert "| only a | report | 2.00 | — |" in table
    assert "| overhead | <= 0.01 | 0.0042 | — |" in table  # not 0.00
    assert "- `results/a.json`: A (TensorFlow 2.21.0)" in table
    assert "No reference results" in build.references_table([])


def test_image_alt_text_comes_from_the_figure_with_the_same_bytes():
    png = base64.b64encode(b"\x89PNG fake bytes").decode()
    digest = hashlib.sha256(base64.b64decode(png)).hexdigest()
    image = display({"image/png": png, "text/plain": "Figure: speedup x: devices, y: time"})
    made = notebook(code(outputs=[image]))
    descriptions = build.figure_descriptions(made)
    assert descriptions == {digest: "Figure: speedup x: devices, y: time"}
    page = (
        f'<p><img alt="../_images/{digest}.png" src="../_images/{digest}.png" /></p>'
        f'<img alt="x.png" src="../_images/{"0" * 64}.png" /><img src="logo.svg" alt="logo">'
    )
    fixed = build.set_alt_texts(page, descriptions, 'A figure of "01"')
    assert f'alt="Figure: speedup x: devices, y: time" src="../_images/{digest}.png"' in fixed
    assert 'alt="A figure of &quot;01&quot;"' in fixed  # an unknown image gets the fallback
    assert '<img src="logo.svg" alt="logo">' in fixed  # not an output image: left alone


def test_a_panel_shows_its_default_run_in_the_cell_and_runs_again_only_for_new_values():
    hook = BOOK_SOURCES / "static_panels.py"
    done = run_python(
        f"""
        from IPython.core.interactiveshell import InteractiveShell
        from IPython.utils.capture import capture_output
        shell = InteractiveShell.instance()
        exec(open({str(hook)!r}).read())
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from IPython.core.pylabtools import select_figure_formats
        from d2lhelpers.ui.panel import Panel, slider

        select_figure_formats(shell, {{"png"}})  # as the inline backend: drops Figure printers

        runs = []
        class Result:
            verdict = "the verdict"
            def __init__(self, n): self.n = n
            def _repr_html_(self): return f"<table><td>n={{self.n}}</td></table>"
        def experiment(progress, n):
            runs.append(n)
            return Result(n)
        def show(result):
            figure, axes = plt.subplots()
            axes.set_title(f"run with n={{result.n}}")
            axes.set_xlabel("devices")
            return figure
        panel = Panel("My panel", {{"n": slider("n", 2, 1, 4)}}, experiment, show)
        with capture_output() as shown:
            shell.display_formatter.format(panel)
        print("RUNS", runs)
        print("TEXT", repr(shown.stdout))
        for output in shown.outputs:
            print("OUT", sorted(output.data), output.data.get("text/plain", "")[:60])
        print("HTML", shown.outputs[0].data["text/html"])
        first = panel.run()
        print("AGAIN", runs, first.n)
        panel.sliders["n"].value = 3
        with capture_output() as again:
            panel.run()
        print("NEW", runs, repr(again.stdout), len(again.outputs))
        # a panel showing the run of the cells above (at its values): printed, not run again
        above = Panel("Above", {{"n": slider("n", 2, 1, 4)}}, experiment, show)
        print("MISMATCH", above.show_run(Result(3), {{"n": 3}}), above.result)
        print("SHOWN", above.show_run(Result(2), {{"n": 2}}))
        with capture_output() as adopted:
            shell.display_formatter.format(above)
        print("ADOPTED", runs, repr(adopted.stdout), above.run().n, runs)
        print("ADOPTED HTML", adopted.outputs[0].data["text/html"])
        """,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "RUNS [2]" in out  # displaying the panel ran it once, at the default value
    assert "TEXT 'the verdict\\n'" in out  # printed into the cell, not into a widget
    # the figure as PNG, as an <img> whose alt holds its words (JupyterLab), and as those words
    assert "OUT ['image/png', 'text/html', 'text/plain'] Figure: run with n=2, x: devices" in out
    assert "OUT ['text/html', 'text/plain']" in out and "My panel" in out
    assert "n = 2 (slider from 1 to 4)" in out and "<code>make lab</code>" in out
    assert "AGAIN [2] 2" in out  # run() at the same values: the shown run, not a second one
    assert "NEW [2, 3] 'the verdict\\n' 2" in out
    assert "MISMATCH False None" in out and "SHOWN True" in out  # only at the sliders' values
    assert "ADOPTED [2, 3] 'the verdict\\n' 2 [2, 3]" in out  # no run at display, nor after
    assert "(n = 2 (slider from 1 to 4)), the run of the cells above at these values" in out


# --- The built book in a browser -------------------------------------------------------------


def book_inputs() -> list[Path]:
    globs = ["notebooks/*.ipynb", "docs/book/**/*", "d2lhelpers/**/*"]
    found = [p for pattern in globs for p in REPO.glob(pattern) if p.is_file()]
    return [p for p in found if "__pycache__" not in p.parts]


def stale(book: Path) -> bool:
    index = book / "index.html"
    if not index.exists():
        return True
    built = index.stat().st_mtime
    return any(p.stat().st_mtime > built for p in book_inputs())


def chromium_or_skip():
    if importlib.util.find_spec("playwright") is None:
        message = "the playwright package is missing: `make` installs it with the [dev] extras"
    elif not browser.CHROMIUM.exists():
        message = f"{browser.CHROMIUM} is missing: `apt-get install -y chromium` to run this test"
    elif importlib.util.find_spec("myst_nb") is None:
        message = "myst-nb is missing: `make` installs it with the [dev] extras"
    else:
        return
    if ON_CI:
        pytest.fail(f"CI=true and {message}")
    pytest.skip(message)


@pytest.fixture(scope="session")
def book(tmp_path_factory, request) -> Path:
    """The built book: BOOK_DIR; else the pages of nbval's runs of the notebooks in this process
    (tests/nbval_book.py); else build/book, built now if missing or stale (fresh on CI)."""
    chromium_or_skip()
    if os.environ.get("BOOK_DIR"):
        return Path(os.environ["BOOK_DIR"])
    path = tmp_path_factory.mktemp("book") / "html" if ON_CI else REPO / "build" / "book"
    source = path.parent / "book-src" if ON_CI else REPO / "build" / "book-src"
    runs = pages(sorted((REPO / "notebooks").glob("*.ipynb")))
    if runs is None and not ON_CI and not stale(path):
        return path
    command = [sys.executable, str(BOOK_SOURCES / "build.py"), "--out", path, "--source", source]
    if runs is not None:  # every notebook ran under nbval in this process: render those runs
        shutil.rmtree(source, ignore_errors=True)
        build.save_runs(runs, source)
        command.append("--render-only")
    start = time.monotonic()
    done = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
    )
    log = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, f"make book failed:\n{log}"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        how = "from nbval's runs" if runs is not None else "running every notebook"
        reporter.write_line(f"[book] built {how} in {time.monotonic() - start:.0f} s: {path}")
    return path


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site(book):
    handler = functools.partial(QuietHandler, directory=str(book))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def chromium(site, tmp_path_factory):
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    context = None
    try:
        context = playwright.chromium.launch_persistent_context(
            tmp_path_factory.mktemp("chromium-profile"),
            executable_path=str(browser.CHROMIUM),
            args=browser.CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1280, "height": 900},
        )
        yield context
    finally:
        if context is not None:
            context.close()
        playwright.stop()


def screenshot_dir(tmp_path_factory) -> Path:
    chosen = os.environ.get("BOOK_SCREENSHOTS")
    path = Path(chosen) if chosen else tmp_path_factory.mktemp("book-shots")
    path.mkdir(parents=True, exist_ok=True)
    return path


PAGE_FACTS_JS = """() => {
    const images = [...document.images].map(i => ({
        src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0, alt: i.alt,
        output: !!i.closest('.cell_output'),
    }));
    const links = [...document.querySelectorAll('a[href]')].map(a => a.href);
    const outputs = [...document.querySelectorAll('.cell_output')].map(e => e.innerText);
    return {
        images, links, outputs,
        text: document.body.innerText,
        tracebacks: document.querySelectorAll('.cell_output .traceback, .output.traceback').length,
        widgets: document.querySelectorAll('.jupyter-widgets, .widget-slider, button.widget-button')
            .length,
        math: document.querySelectorAll('.math').length,
        typeset: document.querySelectorAll('mjx-container').length,
        machine: [...document.querySelectorAll('.d2l-machine')].map(e => e.innerText),
        staticPanels: document.querySelectorAll('.d2l-static-panel').length,
    };
}"""


def open_page(context, url: str, external: list[str]):
    """Open `url`; record console errors, page errors, failed loads and any other host asked."""
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed: {r.url} {r.failure}"))

    def route(route):
        host = urllib.parse.urlparse(route.request.url).hostname
        if host not in (None, "127.0.0.1"):
            external.append(route.request.url)
            return route.abort()
        return route.continue_()

    page.route("**/*", route)
    page.goto(url, wait_until="load", timeout=60_000)
    page.wait_for_load_state("networkidle", timeout=30_000)
    math = page.evaluate("document.querySelectorAll('.math').length")
    if math:  # MathJax typesets after load
        page.wait_for_function(
            "n => document.querySelectorAll('mjx-container').length >= n", arg=math, timeout=30_000
        )
    return page, problems


def pages_of(book: Path) -> list[str]:
    skip = ("_static", "_sources", "_images")
    return sorted(
        str(p.relative_to(book))
        for p in book.rglob("*.html")
        if p.relative_to(book).parts[0] not in skip
    )


def image_outputs(book: Path, name: str) -> int:
    """How many images the executed notebook behind a lesson page holds (its downloadable copy)."""
    copies = list((book / "_sources" / "notebooks").glob(f"{name}.ipynb*"))
    assert copies, f"no executed copy of {name} in {book / '_sources'}"
    made = json.loads(copies[0].read_text())
    return sum(
        "image/png" in output.get("data", {})
        for cell in made["cells"]
        for output in cell.get("outputs", [])
    )


def test_every_page_loads_cleanly_in_chromium(book, site, chromium, tmp_path_factory):
    pages = pages_of(book)
    lessons = sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb"))
    if not os.environ.get("BOOK_DIR"):
        assert [p for p in pages if p.startswith("notebooks/")] == [
            f"notebooks/{n}.html" for n in lessons
        ], "one page per notebook"
    assert "index.html" in pages and "search.html" in pages
    shots = screenshot_dir(tmp_path_factory)
    external: list[str] = []
    links: set[str] = set()
    failures: list[str] = []
    for name in pages:
        page, problems = open_page(chromium, site + name, external)
        facts = page.evaluate(PAGE_FACTS_JS)
        links.update(facts["links"])
        failures += [f"{name}: {p}" for p in problems]
        for image in facts["images"]:
            if not image["ok"]:
                failures.append(f"{name}: image {image['src']} did not load")
            alt = image["alt"].strip()
            if not alt or alt.endswith(".png") or alt == image["src"]:
                failures.append(f"{name}: image {image['src']} has no alt text ({alt!r})")
        if facts["tracebacks"] or "Traceback (most recent call last)" in facts["text"]:
            failures.append(f"{name}: an output shows a traceback")
        errors = [o for o in facts["outputs"] if browser.panel_error(o)]
        failures += [f"{name}: an output shows an error: {o[:200]!r}" for o in errors]
        dead = [o[:60] for o in facts["outputs"] if browser.WIDGET_REPR.match(o.strip())]
        if facts["widgets"] or dead:
            failures.append(f"{name}: a widget that cannot work here: {dead or facts['widgets']}")
        if facts["typeset"] < facts["math"]:
            failures.append(f"{name}: {facts['math']} equations, {facts['typeset']} typeset")
        if name.startswith("notebooks/"):
            failures += lesson_page_failures(book, name, facts)
        if name in ("index.html", f"notebooks/{lessons[0]}.html"):
            page.screenshot(path=str(shots / f"{Path(name).stem}.png"), full_page=True)
        page.close()
    assert not external, f"pages asked other hosts (the book must work offline): {external[:5]}"
    failures += broken_links(chromium, site, links)
    assert not failures, "\n".join(failures)
    print(f"book screenshots in {shots}")


def lesson_page_failures(book: Path, name: str, facts: dict) -> list[str]:
    failures = []
    box = " ".join(facts["machine"])
    if "Executed on" not in box or "TensorFlow" not in box or "make lab" not in box:
        failures.append(f"{name}: no box saying where it ran and that sliders work in `make lab`")
    shown = sum(image["output"] and image["ok"] for image in facts["images"])
    expected = image_outputs(book, Path(name).stem)
    if shown != expected or expected == 0:
        failures.append(f"{name}: {shown} output images shown of the run's {expected}")
    source = (REPO / "notebooks" / f"{Path(name).stem}.ipynb").read_text()
    panels = len(re.findall(r"d2l\.\w+_panel\(", source))
    if facts["staticPanels"] != panels:  # each shown as its default run (static_panels.py)
        failures.append(f"{name}: {facts['staticPanels']} panels shown as a run, of {panels}")
    return failures


def broken_links(context, site: str, links: set[str]) -> list[str]:
    """Every link into the site resolves, and so does its #anchor."""
    failures, bodies = [], {}
    for link in sorted(links):
        if not link.startswith(site):
            continue
        target, _, anchor = link.partition("#")
        if target not in bodies:
            answer = context.request.get(target)
            bodies[target] = answer.text() if answer.ok else None
        body = bodies[target]
        if body is None:
            failures.append(f"broken link: {link}")
        elif anchor and not re.search(rf'id="{re.escape(urllib.parse.unquote(anchor))}"', body):
            failures.append(f"link to a missing anchor: {link}")
    return failures


def test_start_page_lists_every_lesson_with_its_run_time_and_the_references(book, site, chromium):
    external: list[str] = []
    page, problems = open_page(chromium, site + "index.html", external)
    table = page.locator("table").first.inner_text()
    for lesson in sorted((REPO / "notebooks").glob("*.ipynb")):
        href = f"notebooks/{lesson.stem}.html"
        assert page.locator(f"article a[href='{href}']").count(), f"no link to {href}"
    assert re.search(r"\d+ s", table), "the lessons' run times measured in the build"
    assert page.locator("article img[src*='references.png']").count() == 1
    assert "make lab" in page.inner_text("article") and "make test" in page.inner_text("article")
    assert page.locator("mjx-container").count() >= 2, "the α-β and bubble equations typeset"
    assert not problems and not external


def test_search_finds_a_lesson(book, site, chromium):
    external: list[str] = []
    page, problems = open_page(chromium, site + "search.html?q=all-reduce", external)
    results = page.locator("#search-results li, ul.search li")
    results.first.wait_for(timeout=30_000)
    assert results.count() >= 1 and not problems and not external


def test_dark_mode_and_print_keep_working(book, site, chromium, tmp_path_factory):
    external: list[str] = []
    page, problems = open_page(chromium, site + "index.html", external)
    page.emulate_media(color_scheme="dark")
    page.reload(wait_until="load")
    page.wait_for_function("document.documentElement.dataset.theme === 'dark'", timeout=10_000)
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    channels = [int(c) for c in re.findall(r"\d+", background)[:3]]
    assert sum(channels) < 3 * 128, f"dark mode, but the page is light: {background}"
    page.screenshot(path=str(screenshot_dir(tmp_path_factory) / "index-dark.png"))
    page.emulate_media(media="print", color_scheme="light")
    sidebar = page.locator(".bd-sidebar-primary")
    assert sidebar.count() == 0 or not sidebar.first.is_visible(), "print shows the navigation"
    # In print the theme swaps the article's title for a print header's; the text stays.
    titles = page.evaluate(
        "[...document.querySelectorAll('h1')].filter(h => h.getBoundingClientRect().height > 0)"
        ".length"
    )
    assert titles >= 1 and page.locator("article p").first.is_visible()
    assert not problems and not external
