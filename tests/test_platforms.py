"""macOS and Windows for the single-process lessons: the package imports, and its pure-Python paths
run, with the Linux-only pieces gone; what needs Linux says so in one sentence naming the system.

Tested on Linux only (CI), so the other systems are imitated in a fresh Python: after the
third-party packages are imported (on a Mac or on Windows they bring their own system calls),
`fcntl` and `resource` cannot be imported (as on Windows), `/proc` and `/sys` cannot be opened,
and `os` has no load average and no affinity call. psutil stands in for its own reading of them.
"""

import json

import pytest

from d2lhelpers.core import system
from tests.conftest import run_python

IMITATION = """
import builtins, io, os, sys, types
import numpy, matplotlib, ipywidgets, psutil, platformdirs, filelock, IPython, tensorflow

for name in ("fcntl", "resource"):
    sys.modules[name] = None  # `import fcntl` raises ImportError from here on, as on Windows
real_open = builtins.open

def linux_only_files(file, *args, **kwargs):
    if str(file).startswith(("/proc", "/sys")):
        raise FileNotFoundError(2, "No such file or directory (not Linux)", str(file))
    return real_open(file, *args, **kwargs)

builtins.open = io.open = linux_only_files
del os.getloadavg, os.sched_getaffinity
psutil.virtual_memory = lambda: types.SimpleNamespace(available=6 * 2**30)
"""

PURE_PATHS = """
import importlib, json, pkgutil, tempfile
from pathlib import Path
import d2lhelpers as d2l
from d2lhelpers.core import cache, checks, system
from d2lhelpers.processes.group import WorkerGroup

modules = [m.name for m in pkgutil.walk_packages(d2l.__path__, "d2lhelpers.")]
for name in modules:
    importlib.import_module(name)
folder = Path(tempfile.mkdtemp())
value = cache.cached_measurement(folder / "b.json", lambda: {"x": 1.0}, version=1, keys=["x"])
again = cache.cached_measurement(folder / "b.json", lambda: {"x": 2.0}, version=1, keys=["x"])
try:
    WorkerGroup("d2lhelpers.processes.mwms:allreduce_worker", 1).start()
    refused = ""
except RuntimeError as error:
    refused = str(error)
print(json.dumps({
    "modules": len(modules),
    "memory": checks.available_memory_bytes(),
    "cores": d2l.usable_cores(),
    "cached": again["x"],
    "kept": "not_cached" not in value,
    "summary": d2l.device_summary(),
    "refused": refused,
}))
"""


@pytest.mark.parametrize("platform, name", [("darwin", "macOS"), ("win32", "Windows")])
def test_the_package_imports_and_runs_its_pure_paths_without_linux(platform, name):
    code = IMITATION + f"sys.platform = {platform!r}\n" + PURE_PATHS
    done = run_python(code, timeout=300, unset=("TF_CONFIG",))
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["modules"] > 50
    assert found["memory"] == 6 * 2**30  # psutil's reading; no cgroup file could be opened
    assert found["cores"] >= 1
    assert found["kept"] and found["cached"] == 1.0  # written, locked and read back
    assert "logical CPU" in found["summary"]
    assert found["refused"] == (
        f"Starting worker processes (notebooks 02 and 06) needs Linux (process groups, /proc), "
        f"and this is {name}: the single-process notebooks (01, 03, 04, 05, 07) run here; "
        f"notebooks 02 and 06 need a Linux machine (a Linux VM, WSL 2 or a course server)."
    )


@pytest.mark.parametrize(
    "platform, name",
    [("linux", "Linux"), ("darwin", "macOS"), ("win32", "Windows"), ("freebsd14", "freebsd14")],
)
def test_the_system_is_named_as_learners_know_it(platform, name):
    assert system.system_name(platform) == name
    assert system.is_linux(platform) == (name == "Linux")


def test_only_linux_passes_the_check():
    system.require_linux("anything", "linux")
    with pytest.raises(RuntimeError, match=r"^Worker processes needs Linux .* this is macOS: "):
        system.require_linux("Worker processes", "darwin")
