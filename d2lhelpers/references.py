"""Reference results beside the learner's own: committed runs on other machines, and the seeds'.

`d2lhelpers/results/*.json` holds runs of `make bench` (TensorFlow, CPU) and of the H200 script
(PyTorch); each is labelled by machine and framework. They are package data, read with
`importlib.resources`, so an installed wheel shows them as the repository does; `make bench`
writes its new results into the same folder of the repository. The seeds' published numbers are
kept here verbatim, so a notebook can show all three side by side.
"""

from __future__ import annotations

import json
from importlib import resources
from importlib.resources.abc import Traversable

from d2lhelpers.core.units import BYTES_PER_FLOAT

RESULTS_DIR = resources.files("d2lhelpers") / "results"

SEED_000 = {  # d2l "Automatic Parallelism", TensorFlow tab; 2 GPUs, model not stated
    "GPU1 time": 0.0629,
    "GPU2 time": 0.0668,
    "GPU1 & GPU2": 0.0869,
    "Run on GPU1": 0.0557,
    "Copy to CPU": 2.1474,
    "Run on GPU1 and copy to CPU": 2.5692,
}

SEED_000_SIZE, SEED_000_MATMULS = 4000, 50  # run(x): 50 products of one 4000x4000 float32 matrix


def seed_copy_rate() -> float:
    """The seed's own device-to-host rate, B/s: its 50 results copied in 'Copy to CPU'."""
    results = SEED_000_MATMULS * SEED_000_SIZE**2 * BYTES_PER_FLOAT
    return results / SEED_000["Copy to CPU"]


def seed_final_copy_s() -> float:
    """What the `.numpy()` in every seed timing costs: one 4000x4000 result at the seed's own
    copy rate (about 43 ms of the 62.9 ms 'GPU1 time')."""
    return SEED_000_SIZE**2 * BYTES_PER_FLOAT / seed_copy_rate()


def seed_compute_s(label: str) -> float:
    """A seed timing less its final `.numpy()` copy: the time its GPU work can have taken."""
    return SEED_000[label] - seed_final_copy_s()


# Which rows of each results file belong to a notebook's topic (substrings of row names).
TOPICS = {
    "concurrency": ("concurrent", "two_streams", "workload rate", "chain_vs_best"),
    "copy": ("compute_then_copy", "compute_while_copy", "copy_pinned", "run and copy", "copy"),
    "allreduce": ("all-reduce",),
    "split": ("tensor parallel", "pipeline", "MLP"),
}


def load_results(directory: Traversable = RESULTS_DIR) -> list[dict]:
    """Every results file (`*.json`), in name order; none when the folder is missing."""
    if not directory.is_dir():
        return []
    files = sorted((p for p in directory.iterdir() if p.name.endswith(".json")), key=str)
    return [json.loads(p.read_text(encoding="utf-8")) for p in files]


def machine_label(result: dict) -> str:
    machine = result.get("machine", {})
    if "label" in machine:
        return machine["label"]
    return (
        f"{machine.get('summary', 'unknown machine')} · TensorFlow {machine.get('tensorflow', '?')}"
    )


def reference_lines(topic: str, results: list[dict] | None = None) -> list[str]:
    """One line per matching row of every results file: machine, row, ratio and detail."""
    keys = TOPICS[topic]
    lines = []
    for result in load_results() if results is None else results:
        label = machine_label(result)
        for row in result.get("rows", []):
            if any(k in row["name"] for k in keys):
                detail = row.get("detail") or row.get("notes", "")
                lines.append(f"[{label}] {row['name']}: {row['ratio']:.2f}  {detail}".rstrip())
    return lines or [f"no reference results for '{topic}' in {RESULTS_DIR} yet"]


def reference_table(topic: str) -> str:
    return "\n".join(reference_lines(topic))
