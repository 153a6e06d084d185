"""Run one notebook top to bottom in a fresh kernel; print its wall time and peak memory as JSON.

    .venv/bin/python benchmarks/notebook_cost.py notebooks/01_two_devices_two_jobs.ipynb

Peak memory is the largest resident set among this process's finished children, the kernel
included (the kernel is reaped when the client shuts it down). Processes the kernel itself starts
are reported by the notebook that starts them.
"""

import json
import resource
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def main(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    seconds = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"notebook": path.name, "seconds": seconds, "peak_mib": peak_kib / 1024}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
