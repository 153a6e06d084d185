"""Dead code in the package: names nothing uses, with the notebooks and benchmarks as users.

`vulture` reads the package beside the code of every notebook (extracted into a temporary folder)
and the benchmarks; the tests do not count as users, so code only a test calls is reported.
`tools/vulture_allow.py` lists names used by frameworks (IPython's display hooks, widget traits).
Exit status 1 when anything is found (`make lint`).
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
MIN_CONFIDENCE = "60"


def notebook_code(path: pathlib.Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    # IPython's magics and shell escapes are not Python
    lines = [
        ln for cell in code for ln in cell.splitlines() if not ln.lstrip().startswith(("%", "!"))
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        users = []
        for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
            out = pathlib.Path(tmp) / (nb.stem.replace("-", "_") + ".py")
            out.write_text(notebook_code(nb))
            users.append(str(out))
        command = [
            sys.executable,
            "-m",
            "vulture",
            "d2lhelpers",
            "benchmarks",
            "tools/vulture_allow.py",
            *users,
            "--min-confidence",
            MIN_CONFIDENCE,
        ]
        found = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    report = [ln for ln in found.stdout.splitlines() if ln.startswith("d2lhelpers/")]
    print("\n".join(report) or "no dead code in d2lhelpers/")
    return 1 if report else 0


if __name__ == "__main__":
    sys.exit(main())
