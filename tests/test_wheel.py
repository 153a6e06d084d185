"""The package as a learner gets it outside this repository: a wheel, installed, run elsewhere.

The wheel is built from a copy of the package's sources (so the repository gets no build/ or
egg-info), installed into a fresh virtual environment with no source tree on its path, imported
from another folder, and notebook 03 runs there top to bottom with a read-only cache folder (it
reads the machine's baseline through the cache, as notebook 01 does, in a third of the time).
To stay fast, the fresh environment installs only the wheel and borrows this environment's
installed dependencies: a `.pth` line adds their folder to its path. A folder added that way is
not a site folder, so its `.pth` files (this checkout's editable install among them) are not run.

The read-only folder is a real one: a read-only bind mount in a mount namespace of its own when
running as root (`unshare -m`, as root can write to any folder whatever its mode), a folder
without write permission otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "d2lhelpers"
NOTEBOOK = ROOT / "notebooks" / "03_mlp_across_devices.ipynb"
NOTEBOOK_TIMEOUT_S = 600
BUILD_FILES = ("pyproject.toml", "README.md")


def run(command, **options) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, **options)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def clean_environment(**extra) -> dict:
    """This process's environment without anything that would put the source tree on the path."""
    drop = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    for name in BUILD_FILES:
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(PACKAGE, source / "d2lhelpers", ignore=shutil.ignore_patterns("__pycache__"))
    build = f"from setuptools import build_meta; print(build_meta.build_wheel({str(out)!r}))"
    built = run([sys.executable, "-c", build], cwd=source, env=clean_environment())
    return out / built.stdout.strip().splitlines()[-1]


def package_files() -> dict[str, bytes]:
    """What the wheel must hold: every module of every sub-package, and the reference results."""
    files = [p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts]
    files += sorted((PACKAGE / "results").glob("*.json"))
    return {p.relative_to(ROOT).as_posix(): p.read_bytes() for p in files}


def test_the_wheel_holds_every_module_and_the_reference_results(wheel):
    with zipfile.ZipFile(wheel) as archive:
        held = {name: archive.read(name) for name in archive.namelist()}
    expected = package_files()
    missing = sorted(set(expected) - set(held))
    assert not missing, f"not in the wheel: {missing}"
    assert {name: held[name] for name in expected} == expected  # the same bytes
    assert any(name.startswith("d2lhelpers/results/") for name in expected)
    outside = [n for n in held if not n.startswith(("d2lhelpers/", "d2lhelpers-"))]
    assert not outside, f"the wheel holds files outside the package: {outside}"


def test_the_results_are_read_from_the_package_where_make_bench_writes_them():
    from d2lhelpers import references

    assert Path(str(references.RESULTS_DIR)) == PACKAGE / "results"
    assert references.load_results(), "no committed reference results in d2lhelpers/results/"
    assert "RESULTS_DIR /" in (ROOT / "benchmarks" / "run_all.py").read_text()  # bench's output


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment holding the wheel; its python."""
    home = tmp_path_factory.mktemp("fresh")
    venv.create(home / "venv", with_pip=False, symlinks=os.name != "nt")
    python = home / "venv" / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    ask = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(run([str(python), "-c", ask], env=clean_environment()).stdout.strip())
    pip = [sys.executable, "-m", "pip"]
    if subprocess.run([*pip, "--version"], capture_output=True, check=False).returncode == 0:
        install = [*pip, "install", "--quiet", "--no-deps", "--no-index", "--target", str(site)]
    else:  # a venv made by uv has no pip
        install = ["uv", "pip", "install", "--quiet", "--no-deps", "--python", str(python)]
    run([*install, str(wheel)], env=clean_environment())
    borrowed = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    # The dependencies' folders (inside the checkout when .venv is) hold no d2lhelpers package:
    # the editable install there is a finder that only its own .pth file would switch on.
    assert all(
        not (Path(p) / "d2lhelpers").exists() and Path(p).resolve() != ROOT for p in borrowed
    )
    (site / "borrowed_dependencies.pth").write_text("\n".join(sorted(borrowed)) + "\n")
    return python


WHERE_FROM = """
import importlib.metadata, importlib.util, json, sys
import d2lhelpers as d2l
from d2lhelpers import references
print(json.dumps({
    "file": d2l.__file__,
    "path": sys.path,
    "tools": importlib.util.find_spec("tools") is not None,
    "tests": importlib.util.find_spec("tests") is not None,
    "version": importlib.metadata.version("d2lhelpers"),
    "results": len(references.load_results()),
    "lessons": len(d2l.__all__),
}))
"""


def test_the_installed_wheel_imports_from_another_folder_without_the_source_tree(
    installed, tmp_path
):
    done = run([str(installed), "-c", WHERE_FROM], cwd=tmp_path, env=clean_environment())
    found = json.loads(done.stdout.strip().splitlines()[-1])
    site = installed.parent.parent
    assert Path(found["file"]).resolve().is_relative_to(site.resolve()), found["file"]
    sources = [ROOT, *ROOT.iterdir()]  # the checkout and its folders; a .venv inside is not one
    borrowed = {Path(p).resolve() for k in ("purelib", "platlib") for p in [sysconfig.get_path(k)]}
    on_path = [p for p in found["path"] if p and Path(p).resolve() in set(sources) - borrowed]
    assert not on_path, f"the source tree is on the path: {on_path}"
    assert not found["tools"] and not found["tests"], "the repository's folders are importable"
    assert found["version"] and found["results"] >= 1 and found["lessons"] > 50


def read_only_folder(path: Path) -> tuple[list[str], str]:
    """A command prefix under which `path` is a read-only folder, and the error writing gives."""
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        return [], "Permission denied"
    probe = ["unshare", "-m", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"', str(path)]
    if shutil.which("unshare") and subprocess.run([*probe, "true"], check=False).returncode == 0:
        return probe, "Read-only file system"
    message = "running as root without `unshare -m`: no read-only folder can be made here"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


RUN_NOTEBOOK = """
import sys, nbclient, nbformat
notebook = nbformat.read(sys.argv[1], as_version=4)
notebook.cells.append(nbformat.v4.new_code_cell(
    "import d2lhelpers\\nprint('d2lhelpers from', d2lhelpers.__file__)"))
client = nbclient.NotebookClient(notebook, timeout=int(sys.argv[3]), kernel_name="python3")
try:
    client.execute(cwd=sys.argv[4])
finally:
    nbformat.write(notebook, sys.argv[2])
"""


def test_a_notebook_runs_from_the_wheel_with_a_read_only_cache_folder(installed, tmp_path):
    work, jupyter = tmp_path / "work", tmp_path / "jupyter"
    work.mkdir()
    shutil.copy2(NOTEBOOK, work / NOTEBOOK.name)
    kernel = jupyter / "data" / "kernels" / "python3"  # this venv's own kernel, nobody else's
    kernel.mkdir(parents=True)
    spec = {
        "argv": [str(installed), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (the installed wheel)",
        "language": "python",
    }
    (kernel / "kernel.json").write_text(json.dumps(spec))
    prefix, error = read_only_folder(tmp_path / "read-only-cache")
    env = clean_environment(
        D2LHELPERS_CACHE=str(tmp_path / "read-only-cache"),
        JUPYTER_PATH=str(jupyter / "data"),
        JUPYTER_DATA_DIR=str(jupyter / "data"),
        JUPYTER_CONFIG_DIR=str(jupyter / "config"),
        JUPYTER_RUNTIME_DIR=str(jupyter / "runtime"),
    )
    executed = tmp_path / "executed.ipynb"
    script = tmp_path / "run_notebook.py"
    script.write_text(textwrap.dedent(RUN_NOTEBOOK))
    command = [str(installed), str(script), str(work / NOTEBOOK.name), str(executed)]
    done = subprocess.run(
        [*prefix, *command, str(NOTEBOOK_TIMEOUT_S), str(work)],
        cwd=work, env=env, capture_output=True, text=True, timeout=NOTEBOOK_TIMEOUT_S + 60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    cells = json.loads(executed.read_text())["cells"]
    text = "\n".join(
        "".join(output.get("text", "")) + output.get("evalue", "")
        for cell in cells
        for output in cell.get("outputs", [])
    )
    errors = [o for c in cells for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert not errors, errors
    (source,) = [line for line in text.splitlines() if line.startswith("d2lhelpers from ")]
    origin = Path(source.removeprefix("d2lhelpers from ")).resolve()
    assert origin.is_relative_to(installed.parent.parent.resolve()), origin
    cache = tmp_path / "read-only-cache"
    assert f"not kept: the cache folder {cache} could not be written ({error})" in text
    assert not any(cache.iterdir())
