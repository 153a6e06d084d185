"""A class on one server: two copies each of notebooks 02 and 06 at once, as two learners would.

    make classroom           # or: .venv/bin/python -m tests.classroom

All four run at the same time, each in its own kernel (and its own worker processes). Each must
finish every cell without an error, notebook 06's all-reduce must report exact sums ("the sums
were exact on every worker", never "WRONG"), no output may print an impossible share as a
result (the one-core check's rules, with this process's usable cores), and when all are done no
process any of them started may be left. Not part of `make test` (four notebooks at once take a
minute or two); CI runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from d2lhelpers.core.units import usable_cores
from tests.conftest import is_running, wait_until_gone
from tests.one_core import _RUN, contradictions, output_texts

ROOT = Path(__file__).resolve().parent.parent
LESSONS = ("02_compute_and_copy.ipynb", "06_multi_process.ipynb")
COPIES = 2
EXACT = "the sums were exact on every worker"  # printed under notebook 06's all-reduce table
MARK_VAR = "D2L_CLASSROOM_RUN"


def marked_processes(mark: str) -> list[int]:
    """Live processes whose environment carries `mark` (every descendant of the runs)."""
    wanted, found = f"{MARK_VAR}={mark}".encode(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if wanted in environ.read().split(b"\0") and is_running(int(entry)):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def run_class(timeout: float = 900) -> list[str]:
    """Start every copy at once; wait for all; return the problems found."""
    import json

    # Every process the runs start (kernels, drivers, workers) inherits this mark.
    mark = f"d2l-classroom-{os.getpid()}"
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        MARK_VAR: mark,
    }
    problems = []
    with tempfile.TemporaryDirectory() as folder:
        runs = []
        for name in LESSONS:
            for copy in range(COPIES):
                target = Path(folder) / f"{copy}-{name}"
                command = [sys.executable, "-c", _RUN, str(ROOT / "notebooks" / name), str(target)]
                process = subprocess.Popen(
                    command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
                )
                runs.append((f"{name} (copy {copy + 1})", target, process))
        began = time.monotonic()
        for label, target, process in runs:
            left = max(1.0, timeout - (time.monotonic() - began))
            try:
                _, stderr = process.communicate(timeout=left)
            except subprocess.TimeoutExpired:
                process.kill()
                problems.append(f"{label}: still running after {timeout:.0f} s")
                continue
            text = stderr.decode(errors="replace")
            if "CELL ERROR" in text or not target.exists():
                problems.append(f"{label}: failed: {text[-800:]}")
                continue
            outputs = output_texts(json.loads(target.read_text()))
            everything = "\n".join(t for _, t in outputs)
            if "06_multi" in label and (EXACT not in everything or "WRONG" in everything):
                problems.append(f"{label}: the all-reduce did not report exact sums")
            problems += [
                f"{label}, cell {n}: {p}"
                for n, t in outputs
                for p in contradictions(t, usable_cores())
            ]
        print(f"{len(runs)} notebooks at once took {time.monotonic() - began:.0f} s", flush=True)
    left = wait_until_gone(marked_processes(mark), timeout=10)
    if left:
        problems.append(f"processes left behind: {left}")
    return problems


def main() -> int:
    problems = run_class()
    print("ok: every copy finished, sums exact, nothing left" if not problems else "PROBLEMS:")
    for problem in problems:
        print(f"  {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
