"""Run every notebook on one CPU core and check that no printed statement contradicts its numbers.

    make one-core            # or: .venv/bin/python -m tests.one_core [notebooks/NAME.ipynb ...]

Each notebook runs in a fresh kernel whose CPU affinity is one core (set in a child process before
the kernel starts, so the kernel and every worker process it starts inherit it). Then every
printed output is read as a sceptical learner would:

- every cell runs without an error;
- a time below its ideal ("0.94x ideal"), a share above 100% or below 0 (hidden, overlap,
  efficiency, bubble, utilisation), a share above the ceiling printed beside it ("85% ± 31%
  ceiling 75%", "hiding 80% ... at most 75%") and a rate above the peak are printed only beside
  a flag (WARNING / impossible / not a result) in the same output, or, for a rate above the
  peak, with the words that it is above it by less than the noise;
- a rate above the machine's baseline (which the devices can at best match) likewise;
- the machine's baseline is one measurement per run: every output that prints it prints the
  same number, unless it says the baseline was measured again;
- a sentence about this machine's cores names the usable cores (1 here): no "2 CPU cores", no
  "on 2 cores", no "at most 2 can compute at the same time";
- a traced overlap ("at the same time for 100%") and the time it hid ("hidden: 8%") printed in
  one output do not disagree by more than 50 points, unless a sentence says why ("disagree");
- an output that says a run is "not a result" does not also say it checks a worked answer
  (notebook 02's Try-it: "... as the worked answer says").

Lines quoting committed reference results (a table titled "Reference results (committed runs,
not this one)", up to its end, or lines like "[4 logical CPU devices ...]" or with a "·" label)
are not about this run.

Not part of `make test` (it takes minutes); CI runs it as `make one-core`. With
ONE_CORE_KEEP=folder the executed notebooks are kept there, to read what was printed.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLAG = re.compile(r"WARNING|impossible|not a result|untrustworthy|cannot be true", re.I)
SHARE_WORDS = re.compile(r"hidden|overlap|efficien|bubble|utili[sz]|busy|of the peak", re.I)
# a percentage read as a share; a "±N%" beside it is its noise, which may exceed 100%
PERCENT = re.compile(r"(?<![\w.±])(?<!± )(-?\d+(?:\.\d+)?)\s?%")
# an asymmetric band, "-5%/+4%" (the pipeline's bubble): its noise, not two shares
BAND = re.compile(r"-\d+(?:\.\d+)?%/\+\d+(?:\.\d+)?%")
TIMES_IDEAL = re.compile(r"(\d+(?:\.\d+)?)x ideal")
OF_PEAK = re.compile(r"= (\d+(?:\.\d+)?) of the (?:peak|ceiling)")
OF_BASELINE = re.compile(r"= (\d+(?:\.\d+)?) of the usable cores' baseline")
WITHIN_NOISE = re.compile(r"by less than the noise|within the noise")
# not "(peak or baseline)", a cause's words, after which a peak's rate may follow (one-core 132)
BASELINE = re.compile(r"baseline\b(?!\)).*?(\d+(?:\.\d+)?) ([kMGT]?FLOP/s)")
REFERENCE_TITLE = "Reference results (committed runs, not this one)"
CORES = re.compile(r"(\d+) (?:usable )?(?:CPU )?cores?\b")
HIDDEN = re.compile(r"hidden(?: by overlap)?: (-?\d+(?:\.\d+)?)%")
TRACED = re.compile(r"traced|at the same time")
DISAGREE = 50  # percentage points between a traced overlap and the time it hid
AT_ONCE = re.compile(r"at most (\d+) (?:ops )?(?:can )?compute at the same time")
# A share, then its own ceiling on the same line (notebooks 02 and 05: 1 - launch / min(parts)).
ABOVE_CEILING = re.compile(
    r"(-?\d+(?:\.\d+)?)%(?: ± \d+(?:\.\d+)?%)?[^%\n]*?(?:ceiling|at most) (\d+(?:\.\d+)?)%"
)
SERVED_ABOVE = re.compile(r"saturation is \d+(?:\.\d+)?x its measured capacity: higher beyond")

_RUN = """
import os, sys
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

source, target = sys.argv[1], sys.argv[2]
notebook = nbformat.read(source, as_version=4)
client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                        resources={"metadata": {"path": os.path.dirname(source)}})
try:
    client.execute()
except CellExecutionError as error:
    print("CELL ERROR:", str(error)[-3000:], file=sys.stderr)
nbformat.write(notebook, target)
"""


def html_to_text(markup: str) -> str:
    """An HTML table or paragraphs as lines of text (cells separated by two spaces)."""
    markup = re.sub(r"</(p|tr|h\d|li|div)>|<br\s*/?>", "\n", markup, flags=re.I)
    markup = re.sub(r"</t[dh]>", "  ", markup, flags=re.I)
    text = html.unescape(re.sub(r"<[^>]+>", "", markup))
    return "\n".join(line.rstrip() for line in text.splitlines())


def output_texts(notebook: dict) -> list[tuple[int, str]]:
    """(cell number, text) of every output: streams, results (HTML as text), errors."""
    found = []
    for number, cell in enumerate(notebook["cells"], start=1):
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind == "stream":
                found.append((number, "".join(output.get("text", ""))))
            elif kind == "error":
                found.append((number, f"ERROR {output.get('ename')}: {output.get('evalue')}"))
            elif kind in ("execute_result", "display_data"):
                data = output.get("data", {})
                if "text/html" in data:
                    found.append((number, html_to_text("".join(data["text/html"]))))
                elif "text/plain" in data:
                    found.append((number, "".join(data["text/plain"])))
    return found


def _is_reference_line(line: str) -> bool:
    """A line quoting another machine's committed results, not a sentence about this one."""
    return line.lstrip().startswith("[") or "·" in line


def own_lines(text: str) -> list[str]:
    """The lines of `text` about this machine: a reference table is left out, title to end."""
    lines, quoting = [], False
    for line in text.splitlines():
        quoting = line.startswith(REFERENCE_TITLE) or (quoting and bool(line.strip()))
        if not quoting and not _is_reference_line(line):
            lines.append(line)
    return lines


def baseline_drift(texts: list[tuple[int, str]]) -> list[str]:
    """Outputs of one notebook that print a different machine baseline with no word why."""
    problems, seen = [], None
    for number, text in texts:
        for line in own_lines(text):
            values = BASELINE.findall(line)
            # a baseline measured again names the stale one after it: the first is the one used
            for value in values[:1] if "measured again" in line else values:
                if seen is not None and value != seen and "measured again" not in text:
                    problems.append(
                        f"cell {number}: the baseline is {' '.join(value)} here, "
                        f"{' '.join(seen)} before, with no word why: {line.strip()}"
                    )
                seen = value
    return problems


def contradictions(text: str, cores: int = 1) -> list[str]:
    """What in one output `text` its own numbers contradict, on a process with `cores` cores."""
    problems = []
    flagged = bool(FLAG.search(text))
    hidden = [float(v) for v in HIDDEN.findall(text)]
    traced = [
        float(v)
        for line in text.splitlines()
        if TRACED.search(line) and not HIDDEN.search(line)
        for v in PERCENT.findall(line)
    ]
    if hidden and traced and "disagree" not in text:
        gap = max(abs(h - t) for h in hidden for t in traced)
        if gap > DISAGREE:
            problems.append(
                f"a traced overlap ({', '.join(f'{t:g}%' for t in traced)}) and the time hidden "
                f"({', '.join(f'{h:g}%' for h in hidden)}) disagree by {gap:g} points, unexplained"
            )
    if re.search(r"not a result", text, re.I) and "as the worked answer says" in text:
        problems.append("a run that is not a result is also said to match the worked answer")
    for line in text.splitlines():
        if line.startswith("ERROR "):
            problems.append(f"the cell failed: {line}")
        if SHARE_WORDS.search(line) and not flagged:
            for value in map(float, PERCENT.findall(BAND.sub("", line))):
                if value > 100 or value < 0:
                    problems.append(f"a share of {value:g}% printed without a flag: {line.strip()}")
        for value in map(float, TIMES_IDEAL.findall(line)):
            if value < 1 and not FLAG.search(line):
                problems.append(f"{value:g}x its ideal printed without a flag: {line.strip()}")
        for share, ceiling in ABOVE_CEILING.findall(line):
            if float(share) > float(ceiling) and not flagged:
                problems.append(
                    f"a share of {share}% above its ceiling {ceiling}% printed without a flag: "
                    f"{line.strip()}"
                )
        if SERVED_ABOVE.search(line) and not flagged:  # notebook 07: above all slots busy
            problems.append(f"served above its capacity without a flag: {line.strip()}")
        for value in map(float, OF_PEAK.findall(line)):
            if value > 1 and not flagged and not WITHIN_NOISE.search(line):
                problems.append(
                    f"{value:g} of the peak printed without a flag or its noise: {line.strip()}"
                )
        for value in map(float, OF_BASELINE.findall(line)):
            if value > 1 and not flagged and not WITHIN_NOISE.search(line):
                problems.append(
                    f"{value:g} of the baseline, which it can at best match, printed without a "
                    f"flag or its noise: {line.strip()}"
                )
    for line in own_lines(text):
        for value in map(int, CORES.findall(line)):
            if value != cores:
                problems.append(f"says {value} CPU cores, {cores} usable: {line.strip()}")
        for value in map(int, AT_ONCE.findall(line)):
            if value > cores:
                problems.append(f"says {value} compute at once, {cores} usable: {line.strip()}")
    return problems


def run_on_one_core(path: Path, core: int | None = None, timeout: float = 1800) -> tuple[dict, str]:
    """Execute the notebook at `path` with this process's first usable core only; return the
    executed notebook (as a dict) and the runner's stderr."""
    import json

    core = min(os.sched_getaffinity(0)) if core is None else core
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / path.name
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        done = subprocess.run(
            [sys.executable, "-c", _RUN, str(path.resolve()), str(target)],
            preexec_fn=lambda: os.sched_setaffinity(0, {core}),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=ROOT,
        )
        if not target.exists():
            return {"cells": []}, f"the runner failed ({done.returncode}):\n{done.stderr[-3000:]}"
        return json.loads(target.read_text()), done.stderr


def check_notebook(path: Path) -> list[str]:
    """Every contradiction found in one notebook run on one core, each with its cell number."""
    import json

    notebook, stderr = run_on_one_core(path)
    if os.environ.get("ONE_CORE_KEEP"):
        keep = Path(os.environ["ONE_CORE_KEEP"])
        keep.mkdir(parents=True, exist_ok=True)
        (keep / path.name).write_text(json.dumps(notebook, indent=1))
    texts = output_texts(notebook)
    problems = [f"cell {n}: {p}" for n, text in texts for p in contradictions(text)]
    problems += baseline_drift(texts)
    for marker in ("CELL ERROR", "the runner failed"):
        if marker in stderr:
            problems.insert(0, stderr[stderr.index(marker) :][:500])
    return problems


def main(paths: list[str]) -> int:
    notebooks = [Path(p) for p in paths] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    failed = 0
    for path in notebooks:
        problems = check_notebook(path)
        print(f"{path.name}: {'ok' if not problems else f'{len(problems)} problem(s)'}", flush=True)
        for problem in problems:
            print(f"  {problem}", flush=True)
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
