"""`make lock`: resolve pyproject.toml's dependencies afresh and pin them in constraints.txt.

pip resolves `.[cpu,dev]` (the developer's install, which holds the learner's) as if nothing were
installed, without installing anything (`pip install --dry-run --ignore-installed --report`),
and every package it picks is written as `name==version`. `make lab` and `make test` install
with `-c constraints.txt`, so each install gets exactly these versions of what it needs.

What one resolution cannot see is added by rule rather than resolved: `tensorflow` (the GPU
build, and the only build on macOS and Linux arm64) is pinned to the version of `tensorflow-cpu`
that was picked, with the same dependencies; the NVIDIA libraries of `tensorflow[and-cuda]` are
pinned exactly by TensorFlow itself. (Resolving `[cuda]` here would download gigabytes of CUDA
wheels to read their metadata.) The pins are this machine's resolution: Linux x86_64 and the
Python that runs this script; a package another system needs in addition is left unpinned.

pip 23 or newer (`--report`) is all it needs; it runs with the Python given to make (PYTHON).
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = "cpu,dev"
PROJECT = "d2lhelpers"


def resolve(extras: str = EXTRAS) -> dict[str, str]:
    """{distribution name: version} of everything pip would install for `.[extras]`."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        subprocess.run(
            [
                sys.executable, "-m", "pip", "install", "--quiet", "--dry-run",
                "--ignore-installed", "--report", str(report), f".[{extras}]",
            ],
            cwd=ROOT,
            check=True,
            env={k: v for k, v in os.environ.items() if k != "PIP_CONSTRAINT"},  # fresh, unpinned
        )  # fmt: skip
        picked = json.loads(report.read_text())["install"]
    return {
        canonical(item["metadata"]["name"]): item["metadata"]["version"]
        for item in picked
        if canonical(item["metadata"]["name"]) != PROJECT
    }


def canonical(name: str) -> str:
    """PEP 503's normal form of a distribution name: `Jinja2` and `jinja2` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def with_rules(pins: dict[str, str]) -> dict[str, str]:
    """The pins, with `tensorflow` at `tensorflow-cpu`'s version (see the module's notes)."""
    if "tensorflow-cpu" in pins:
        pins = {**pins, "tensorflow": pins["tensorflow-cpu"]}
    return pins


def constraints_text(pins: dict[str, str]) -> str:
    header = [
        "# Pinned versions for `make lab` and `make test` (pip install -c constraints.txt).",
        "# Written by `make lock` (tools/lock.py): pip's resolution of .[cpu,dev] on "
        f"{platform.system()} {platform.machine()}, Python {platform.python_version()};",
        "# tensorflow follows tensorflow-cpu's version, tensorflow[and-cuda] pins its NVIDIA "
        "libraries itself.",
    ]
    return "\n".join(header + [f"{name}=={pins[name]}" for name in sorted(pins)]) + "\n"


def main(out: str = "constraints.txt") -> None:
    pins = with_rules(resolve())
    path = ROOT / out
    path.write_text(constraints_text(pins))
    print(f"{path.relative_to(ROOT)}: {len(pins)} packages pinned")


if __name__ == "__main__":
    main(*sys.argv[1:])
