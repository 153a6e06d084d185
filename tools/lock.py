"""`make lock`: resolve pyproject.toml's dependencies afresh and pin them in constraints.txt.

pip resolves each install as if nothing were installed, without installing anything
(`pip install --dry-run --ignore-installed --report`), and every package it picks is written as
`name==version`. `make lab` and `make test` install with `-c constraints.txt`, so each install
gets exactly these versions of what it needs, whichever TensorFlow build it takes:

1. `.[cpu,dev]`: the developer's install, which holds the learner's (`tensorflow-cpu`);
2. `.[cuda,dev]`, held to the versions of 1: adds `tensorflow` (the GPU build, and the only
   build on macOS and Linux arm64) and the NVIDIA libraries, which TensorFlow asks for by range.
   pip reads their metadata by HTTP range requests (`--use-feature=fast-deps`, experimental)
   instead of downloading about 3 GB of CUDA wheels; without that feature it downloads them.

The pins are this machine's resolution: Linux x86_64 and the Python that runs this script; a
package another system needs in addition is left unpinned. pip 23 or newer (`--report`) is all
it needs; it runs with the Python given to make (PYTHON).
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
PROJECT = "d2lhelpers"
LAZY = "--use-feature=fast-deps"


def resolve(extras: str, held: dict[str, str] | None = None, lazy: bool = False) -> dict:
    """{distribution: version} of everything pip would install for `.[extras]`, with the
    versions in `held` kept (as constraints)."""
    with tempfile.TemporaryDirectory() as folder:
        report, constraints = Path(folder) / "report.json", Path(folder) / "held.txt"
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in (held or {}).items()))
        command = [
            sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
            "--report", str(report), "-c", str(constraints), f".[{extras}]",
        ]  # fmt: skip
        # A fresh resolution: no constraint file of this machine's pip settings applies.
        env = {k: v for k, v in os.environ.items() if k != "PIP_CONSTRAINT"}
        if not lazy or subprocess.run([*command, LAZY], cwd=ROOT, env=env).returncode != 0:
            subprocess.run(command, cwd=ROOT, env=env, check=True)
        picked = json.loads(report.read_text())["install"]
    return {
        canonical(item["metadata"]["name"]): item["metadata"]["version"]
        for item in picked
        if canonical(item["metadata"]["name"]) != PROJECT
    }


def canonical(name: str) -> str:
    """PEP 503's normal form of a distribution name: `Jinja2` and `jinja2` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def merge(cpu: dict[str, str], cuda: dict[str, str]) -> dict[str, str]:
    """Both resolutions' pins; they must agree on every package they share, and the GPU build
    of TensorFlow must be the CPU build's version."""
    differ = {n: (cpu[n], cuda[n]) for n in cpu.keys() & cuda.keys() if cpu[n] != cuda[n]}
    if differ:
        raise ValueError(f"the [cpu] and [cuda] resolutions differ: {differ}")
    pins = {**cpu, **cuda}
    if pins.get("tensorflow") != pins.get("tensorflow-cpu"):
        raise ValueError(
            f"tensorflow {pins.get('tensorflow')} and tensorflow-cpu {pins.get('tensorflow-cpu')} "
            "were resolved to different versions"
        )
    return pins


def constraints_text(pins: dict[str, str]) -> str:
    header = [
        "# Pinned versions for `make lab` and `make test` (pip install -c constraints.txt).",
        "# Written by `make lock` (tools/lock.py): pip's resolution of .[cpu,dev] and .[cuda,dev]",
        f"# on {platform.system()} {platform.machine()}, Python {platform.python_version()}.",
    ]
    return "\n".join(header + [f"{name}=={pins[name]}" for name in sorted(pins)]) + "\n"


def main(out: str = "constraints.txt") -> None:
    cpu = resolve("cpu,dev")
    held = {n: v for n, v in cpu.items() if n != "tensorflow-cpu"}
    pins = merge(cpu, resolve("cuda,dev", held, lazy=True))
    path = ROOT / out
    path.write_text(constraints_text(pins))
    print(f"{path.relative_to(ROOT)}: {len(pins)} packages pinned")


if __name__ == "__main__":
    main(*sys.argv[1:])
