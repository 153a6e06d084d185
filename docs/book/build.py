"""Build the lessons as a static book (`make book`): run every notebook, then render with Sphinx.

    .venv/bin/python docs/book/build.py          # -> build/book/index.html

1. Each `notebooks/*.ipynb` is copied to `build/book-src/notebooks/` and executed there top to
   bottom (nbclient, one kernel per notebook, one after the other so that their timings do not
   disturb each other). The kernel starts with `static_panels.py`: a panel shows its run at the
   default slider values as printed text, a figure and a table, instead of widgets a static page
   cannot move. The committed notebooks are never written.
2. A last, invisible cell asks the same kernel what it ran on (device summary, TensorFlow,
   cores, date); each page gets that box under its title, compared with the machines of the
   committed reference results (`d2lhelpers/results/*.json`).
3. Widget views are dropped from the executed copies (a static page would show dead sliders).
4. The start page (`index.md` here) gets the lessons in order with their run time measured in
   this build, and the reference results as a table and a plot.
5. Sphinx with MyST-NB (`conf.py` here) renders `build/book/`, with MathJax from a local package;
   nothing is downloaded. Figures get their alt text from the kernel's description of each figure.

The build exits with status 1 when a notebook raised (its page still shows what it printed), so a
broken lesson cannot pass unseen.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

BOOK = Path(__file__).resolve().parent
REPO = BOOK.parent.parent
SOURCE = REPO / "build" / "book-src"
OUT = REPO / "build" / "book"
HOOK = BOOK / "static_panels.py"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
MACHINE_MARK = "D2L_BOOK_MACHINE "
MACHINE_CELL = f"""\
import datetime as _dt, json as _json, platform as _platform
import tensorflow as _tf
import d2lhelpers as _d2l
from d2lhelpers.core.units import usable_cores as _usable_cores
print({MACHINE_MARK!r} + _json.dumps({{
    "summary": _d2l.device_summary(),
    "tensorflow": _tf.__version__,
    "python": _platform.python_version(),
    "cpu_cores": _usable_cores(),
    "processor": _platform.machine(),
    "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
}}))
"""
# TensorFlow's C++ start-up chatter on the kernel's stderr (absl INFO/WARNING lines): not the
# lesson's, and the same on every page. Error and fatal lines (E..., F...) stay.
RUNTIME_LOG = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|[IW]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\] .*)$"
)
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|^Error: ", re.MULTILINE)
LAB_LINE = (
    "Panels show one run at their default settings; the sliders and Run work when you open the "
    "notebook in JupyterLab: `make lab` (their design, which `tests/test_browser.py` checks in a "
    "browser; this page cannot show it)."
)


# --- Running one notebook ---------------------------------------------------------------------


def execute(source: Path, target_dir: Path, timeout: float) -> dict:
    """Run a copy of `source` in `target_dir`; return its page's facts (time, machine, errors)."""
    notebook = nbformat.read(source, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(MACHINE_CELL))
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(target_dir)}},
        extra_arguments=[f"--IPKernelApp.exec_files={HOOK}"],
    )
    start, stopped = time.monotonic(), None
    try:
        client.execute()
    except (CellTimeoutError, DeadKernelError) as error:
        stopped = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    seconds = time.monotonic() - start
    machine = parse_machine(notebook.cells.pop())
    return page_facts(source, notebook, seconds, machine, stopped)


def page_facts(source: Path, notebook, seconds: float, machine, stopped=None) -> dict:
    """A run notebook's page facts; drops its widget views and TensorFlow's log lines.

    Also what `make test` uses for nbval's runs of the notebooks (tests/nbval_book.py)."""
    errors = cell_errors(notebook) + ([stopped] if stopped else [])
    if machine is None:
        errors.append("the build's machine cell printed no machine description")
    stripped = strip_widgets(notebook)
    drop_runtime_logs(notebook)
    title, summary = lesson_summary(notebook)
    return {
        "name": source.stem,
        "title": title or source.stem,
        "summary": summary,
        "notebook": notebook,
        "seconds": seconds,
        "machine": machine,
        "errors": errors,
        "widgets_dropped": stripped,
    }


def parse_machine(cell) -> dict | None:
    for output in cell.get("outputs", []):
        for line in output.get("text", "").splitlines():
            if line.startswith(MACHINE_MARK):
                return json.loads(line[len(MACHINE_MARK) :])
    return None


def cell_errors(notebook) -> list[str]:
    """One line per code cell whose output is an error or shows a traceback."""
    found = []
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if output.get("output_type") == "error":
                found.append(f"cell {index}: {output.get('ename')}: {output.get('evalue')}")
            elif TRACEBACK.search(output_text(output)):
                first = TRACEBACK.search(output_text(output)).group(0).strip()
                found.append(f"cell {index}: its output shows {first!r}")
    return found


def output_text(output) -> str:
    data = output.get("data", {})
    text = output.get("text", "") or data.get("text/plain", "") or data.get("text/html", "")
    return "".join(text) if isinstance(text, list) else text


def strip_widgets(notebook) -> int:
    """Drop every widget view (a static page would show dead sliders); return how many."""
    dropped = 0
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        kept = [o for o in cell.outputs if WIDGET_VIEW not in o.get("data", {})]
        dropped += len(cell.outputs) - len(kept)
        cell.outputs = kept
    notebook.metadata.pop("widgets", None)
    return dropped


def drop_runtime_logs(notebook) -> None:
    """Remove TensorFlow's INFO/WARNING log lines from stderr outputs (and outputs left empty)."""
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for output in cell.outputs:
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                lines = output_text(output).splitlines(keepends=True)
                output["text"] = "".join(x for x in lines if not RUNTIME_LOG.match(x.rstrip()))
                if not output["text"].strip():
                    continue
            kept.append(output)
        cell.outputs = kept


# --- What each page says about its machine -----------------------------------------------------


def load_references(directory: Path) -> list[dict]:
    """Every results file (`*.json`) with a machine and rows; each gets its path as `file`."""
    found = []
    for path in sorted(directory.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data.get("machine"), dict) and isinstance(data.get("rows"), list):
            found.append({**data, "file": f"d2lhelpers/results/{path.name}"})
    return found


def described(reference: dict) -> dict:
    """A results file's machine in make bench's keys (the H200 script names them `label`,
    `cpu_count`, and dates the file, not the machine)."""
    machine = dict(reference.get("machine", {}))
    machine.setdefault("summary", machine.get("label", "machine not described"))
    if "cpu_count" in machine:
        machine.setdefault("cpu_cores", machine["cpu_count"])
    if "date" in reference:
        machine.setdefault("date", str(reference["date"])[:10])
    return machine


def device_kind(machine: dict) -> str:
    """The devices a summary names, before its explanation ('4 logical CPU devices sharing 2
    usable CPU cores (no GPU)'), so that a reworded explanation is not a different machine."""
    return str(machine.get("summary", "")).split(":")[0].strip()


def machine_differences(here: dict, reference: dict) -> list[str]:
    """How the reference run's machine differs from this one, in words; [] when alike."""
    there = described(reference)
    differences = []
    if device_kind(there) != device_kind(here):  # read 91: not the summary's wording
        differences.append(f"devices: {device_kind(there) or 'not recorded'}")
    if str(there.get("cpu_cores")) != str(here.get("cpu_cores")):
        differences.append(f"{there.get('cpu_cores', '?')} CPU cores, not {here.get('cpu_cores')}")
    if "tensorflow" not in there:
        differences.append(f"no TensorFlow ({there.get('framework', 'another framework')})")
    elif there["tensorflow"] != here.get("tensorflow"):
        differences.append(f"TensorFlow {there['tensorflow']}, not {here.get('tensorflow')}")
    return differences


def machine_box(run: dict, references: list[dict]) -> str:
    """The MyST box under each page's title: where it ran, and how the references differ."""
    here = run["machine"]
    if here is None:
        lines = ["- **Executed on:** unknown (the build could not ask the kernel)"]
    else:
        lines = [
            f"- **Executed on:** {here['summary']}",
            f"- TensorFlow {here['tensorflow']} · Python {here['python']} · {here['processor']}"
            f" · {here['date']} · this notebook ran in {run['seconds']:.0f} s",
        ]
    for reference in references:
        label, date = reference["file"], described(reference).get("date", "undated")
        differences = machine_differences(here or {}, reference)
        if differences:
            lines.append(
                # read 119: 'the reference results' named two files; each is named by its own
                f"- **Reference results from another machine** ({label}, {date}): "
                + "; ".join(differences)
            )
        else:
            lines.append(
                f"- Reference results from the same machine kind ({label}, {date}): the same "
                "configuration, not necessarily the same speed (compare the rates, not the labels)."
            )
    if not references:
        lines.append("- No committed reference results (`d2lhelpers/results/`) to compare with.")
    lines.append(f"- {LAB_LINE}")
    body = "\n".join(lines)
    return f":::{{admonition}} Built from a real run\n:class: note d2l-machine\n\n{body}\n:::\n"


def add_machine_box(notebook, box: str) -> None:
    """Put `box` right under the page's title (the first `# ` line), else first."""
    for cell in notebook.cells:
        if cell.cell_type == "markdown" and cell.source.lstrip().startswith("# "):
            title, _, rest = cell.source.lstrip().partition("\n")
            cell.source = f"{title}\n\n{box}\n{rest}"
            return
    notebook.cells.insert(0, nbformat.v4.new_markdown_cell(box))


# --- The start page ----------------------------------------------------------------------------


def lesson_summary(notebook) -> tuple[str, str]:
    """(title, first paragraph) from a notebook's first markdown cell."""
    for cell in notebook.cells:
        if cell.cell_type == "markdown" and cell.source.strip():
            lines = cell.source.strip().splitlines()
            title = lines[0].lstrip("# ").strip() if lines[0].startswith("#") else ""
            body = "\n".join(lines[1:] if title else lines).strip()
            paragraph = body.split("\n\n")[0].replace("**The idea in one minute.**", "")
            return title, " ".join(paragraph.split())
    return "", ""


def lessons_table(runs: list[dict]) -> str:
    rows = ["| lesson | what it teaches and measures | ran here in |", "|---|---|---|"]
    for run in runs:
        link = f"[{run['title']}](notebooks/{run['name']}.ipynb)"
        status = f"{run['seconds']:.0f} s" + (" (raised an error)" if run["errors"] else "")
        rows.append(f"| {link} | {cell_text(run['summary'])} | {status} |")
    total = sum(run["seconds"] for run in runs)
    rows.append(
        f"| **all {len(runs)}** | one after the other, kernel starts included | {total:.0f} s |"
    )
    return "\n".join(rows)


def cell_text(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def references_table(references: list[dict]) -> str:
    """One row per benchmark ratio, one column per committed machine."""
    if not references:
        return "No reference results are committed yet (`d2lhelpers/results/*.json`)."
    names: list[str] = []
    for reference in references:
        names += [r["name"] for r in reference["rows"] if r.get("name") not in names]
    header = "| ratio | goal | " + " | ".join(f"`{r['file']}`" for r in references) + " |"
    rows = [header, "|---|---|" + "---|" * len(references)]
    for name in names:
        goal, cells = "", []
        for reference in references:
            row = next((r for r in reference["rows"] if r.get("name") == name), None)
            if row is None or not isinstance(row.get("ratio"), int | float):
                cells.append("—")
                continue
            goal = goal or row.get("goal", "")
            verdict = f" **{row['verdict']}**" if row.get("verdict") else ""
            said = row.get("detail") or "; ".join([row.get("ratio_of", ""), *row.get("flags", [])])
            detail = f"<br>{said}" if said.strip("; ") else ""
            cells.append(f"{ratio_text(row['ratio'])}{verdict}{detail}")
        rows.append(
            f"| {cell_text(name)} | {cell_text(goal)} | {' | '.join(map(cell_text, cells))} |"
        )
    machines = "\n".join(
        f"- `{r['file']}`: {described(r)['summary']} ({', '.join(machine_facts(described(r)))})"
        for r in references
    )
    return f"{machines}\n\n" + "\n".join(rows)


def ratio_text(ratio: float) -> str:
    """Two decimals, or two significant digits for a small ratio (0.0042, not 0.00)."""
    return f"{ratio:.2f}" if abs(ratio) >= 0.1 or ratio == 0 else f"{ratio:.2g}"


def machine_facts(machine: dict) -> list[str]:
    facts = []
    if "tensorflow" in machine:
        facts.append(f"TensorFlow {machine['tensorflow']}")
    for key, label in (("framework", ""), ("cpu_cores", " CPU cores"), ("date", "")):
        if key in machine:
            facts.append(f"{machine[key]}{label}")
    return facts


def references_plot(references: list[dict], path: Path) -> str | None:
    """A bar chart of every reference ratio per machine; returns its alt text."""
    if not references:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names: list[str] = []
    for reference in references:
        names += [r["name"] for r in reference["rows"] if r.get("name") not in names]
    height = 0.8 / len(references)
    figure, axes = plt.subplots(figsize=(9, 0.32 * len(names) + 1.2))
    for i, reference in enumerate(references):
        ratios = {r["name"]: r.get("ratio") for r in reference["rows"]}
        ys = [n - 0.4 + height * (i + 0.5) for n in range(len(names))]
        values = [
            ratios.get(name) if isinstance(ratios.get(name), int | float) else 0 for name in names
        ]
        axes.barh(ys, values, height=height, label=reference["file"])
    axes.axvline(1.0, color="grey", linewidth=1, linestyle="--")
    axes.set_yticks(range(len(names)), [n if len(n) < 60 else n[:57] + "..." for n in names])
    axes.invert_yaxis()
    axes.tick_params(axis="y", labelsize=7)
    axes.set_xlabel("ratio (1.0 = the dashed line)")
    axes.set_title("Committed reference results: every ratio, per machine")
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    files = ", ".join(r["file"] for r in references)
    return (
        f"Bar chart of the {len(names)} benchmark ratios of the committed reference results "
        f"({files}), one bar per machine, with a dashed line at 1.0; the table below lists them."
    )


def start_page(runs: list[dict], references: list[dict], plot_alt: str | None) -> str:
    template = (BOOK / "index.md").read_text()
    machine = next((run["machine"] for run in runs if run["machine"]), None)
    built = (
        f"{machine['summary']} TensorFlow {machine['tensorflow']}, Python {machine['python']}, "
        f"{machine['date']}."
        if machine
        else "the build could not tell."
    )
    plot = f"![{plot_alt}](_generated/references.png)\n" if plot_alt else ""
    toctree = "\n".join(f"notebooks/{run['name']}" for run in runs)
    replacements = {
        "{{ count }}": {1: "One", 2: "Two", 3: "Three", 4: "Four", 5: "Five", 6: "Six"}.get(
            len(runs), str(len(runs))
        ),
        "{{ built_on }}": built,
        "{{ lessons }}": lessons_table(runs),
        "{{ references_plot }}": plot,
        "{{ references_table }}": references_table(references),
        "{{ toctree }}": toctree,
    }
    for key, value in replacements.items():
        template = template.replace(key, value)
    return template


# --- Alt text after Sphinx ---------------------------------------------------------------------


def figure_descriptions(notebook) -> dict[str, str]:
    """sha256 of each PNG output -> the kernel's description of that figure (MyST-NB names the
    image files by this hash)."""
    found = {}
    for cell in notebook.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            png = output.get("data", {}).get("image/png")
            if png:
                digest = hashlib.sha256(base64.b64decode(png)).hexdigest()
                found[digest] = output_text(
                    {"data": {"text/plain": output["data"].get("text/plain", "")}}
                )
    return found


IMG = re.compile(r"<img\b[^>]*>")


def set_alt_texts(html_text: str, descriptions: dict[str, str], fallback: str) -> str:
    """Give each output image (named by its hash) the kernel's description as alt text."""

    def replace(match: re.Match) -> str:
        tag = match.group(0)
        source = re.search(r'src="[^"]*/([0-9a-f]{64})\.png"', tag)
        if not source:
            return tag
        text = descriptions.get(source.group(1), "")
        alt = text if text.startswith("Figure") else fallback
        alt_attribute = f'alt="{html.escape(alt, quote=True)}"'
        if re.search(r'\balt="[^"]*"', tag):
            return re.sub(r'\balt="[^"]*"', alt_attribute, tag, count=1)
        return tag.replace("<img", f"<img {alt_attribute}", 1)

    return IMG.sub(replace, html_text)


# --- The whole build ---------------------------------------------------------------------------


RUN_FACTS = ("name", "title", "summary", "seconds", "machine", "errors")


def run_all(notebooks: list[Path], source: Path, timeout: float) -> list[dict]:
    """Execute every notebook into `source`, add each page's machine box, and keep the facts."""
    shutil.rmtree(source, ignore_errors=True)
    (source / "notebooks").mkdir(parents=True)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    runs = []
    for path in notebooks:
        print(f"running {path.name} ...", flush=True)
        run = execute(path, source / "notebooks", timeout)
        runs.append(run)
        print(f"  {run['seconds']:.1f} s" + "".join(f"\n  ERROR {e}" for e in run["errors"]))
        if run["widgets_dropped"]:
            print(
                f"  note: {run['widgets_dropped']} widget view(s) dropped (a page cannot move them)"
            )
    save_runs(runs, source)
    return runs


def save_runs(runs: list[dict], source: Path) -> None:
    """Write the run notebooks, each with its machine box, and their facts into `source`, where
    `--render-only` finds them."""
    references = load_references(REPO / "d2lhelpers" / "results")
    (source / "notebooks").mkdir(parents=True, exist_ok=True)
    for run in runs:
        add_machine_box(run["notebook"], machine_box(run, references))
        nbformat.write(run["notebook"], source / "notebooks" / f"{run['name']}.ipynb")
    facts = [{key: run[key] for key in RUN_FACTS} for run in runs]
    (source / "runs.json").write_text(json.dumps(facts, indent=1))


def load_runs(source: Path) -> list[dict]:
    """The runs of an earlier build in `source` (for --render-only)."""
    facts = json.loads((source / "runs.json").read_text())
    for run in facts:
        run["notebook"] = nbformat.read(source / "notebooks" / f"{run['name']}.ipynb", as_version=4)
    return facts


def build(
    notebooks: list[Path], source: Path, out: Path, timeout: float, render_only: bool = False
) -> int:
    began = time.monotonic()
    runs = load_runs(source) if render_only else run_all(notebooks, source, timeout)
    references = load_references(REPO / "d2lhelpers" / "results")
    plot_alt = references_plot(references, source / "_generated" / "references.png")
    (source / "index.md").write_text(start_page(runs, references, plot_alt))
    shutil.rmtree(out, ignore_errors=True)
    sphinx = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-c", BOOK, source, out]
    print("rendering with Sphinx ...", flush=True)
    subprocess.run(sphinx, check=True)
    for run in runs:
        page = out / "notebooks" / f"{run['name']}.html"
        if page.exists():
            fallback = f"A figure of the lesson {run['title']}"
            descriptions = figure_descriptions(run["notebook"])
            page.write_text(set_alt_texts(page.read_text(), descriptions, fallback))
    (out / "build-info.json").write_text(
        json.dumps(
            {
                "built": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "seconds": round(time.monotonic() - began, 1),
                "render_only": render_only,  # then the notebooks ran in an earlier build
                "notebooks": {r["name"]: round(r["seconds"], 1) for r in runs},
                "errors": {r["name"]: r["errors"] for r in runs if r["errors"]},
            },
            indent=1,
        )
    )
    print(f"book: {out / 'index.html'} ({time.monotonic() - began:.0f} s in all)")
    failed = [run["name"] for run in runs if run["errors"]]
    if failed:
        print(f"FAILED: {', '.join(failed)} raised an error (see their pages)", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    parser.add_argument("--source", type=Path, default=SOURCE, help="where the run copies go")
    parser.add_argument("--out", type=Path, default=OUT, help="where the HTML goes")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per cell at most")
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="run no notebook: render the runs already in --source again (after editing the "
        "start page or conf.py)",
    )
    args = parser.parse_args(argv)
    notebooks = args.notebooks or sorted((REPO / "notebooks").glob("*.ipynb"))
    paths = [p.resolve() for p in notebooks]
    return build(paths, args.source.resolve(), args.out.resolve(), args.timeout, args.render_only)


if __name__ == "__main__":
    sys.exit(main())
