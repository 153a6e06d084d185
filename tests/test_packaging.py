"""The install paths agree: the learner's (`make lab`, environment.yml) and the developer's
(`make test`) install pyproject.toml's dependencies, pinned by constraints.txt, with TensorFlow
capped below the next minor release. (tests/test_wheel.py builds and installs the wheel.)"""

import importlib.metadata
import importlib.util
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS = PROJECT["optional-dependencies"]
TESTED_TENSORFLOW = SpecifierSet(">=2.21,<2.22")
TENSORFLOW = ("tensorflow", "tensorflow-cpu")


def requirements(*groups: str) -> list[Requirement]:
    lines = [line for g in groups for line in (PROJECT["dependencies"] if g == "" else EXTRAS[g])]
    return [Requirement(line) for line in lines]


def pins() -> dict[str, Version]:
    found = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            found[canonical(name)] = Version(version)
    return found


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_environment_yml_installs_this_project_as_make_lab_does():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = [d for d in env["dependencies"] if isinstance(d, dict)]
    assert sorted(d.split("=")[0] for d in conda) == ["pip", "python"]
    assert pip == [{"pip": ["-c constraints.txt", "-e .[cpu]"]}]
    python = next(d for d in conda if d.startswith("python"))
    minimum = PROJECT["requires-python"].removeprefix(">=")
    version = python.split("=")[1]
    assert tuple(map(int, version.split("."))) >= tuple(map(int, minimum.split(".")))


def test_dependencies_named_by_the_readme_are_declared():
    names = {r.name for r in requirements("", "cpu", "cuda", "dev")}
    assert {
        "tensorflow",
        "tensorflow-cpu",
        "jupyterlab",
        "ipywidgets",
        "matplotlib",
        "psutil",
        "platformdirs",
        "filelock",
        "nbval",
        "pytest",
        "ruff",
    } <= names


def test_the_learners_install_has_no_developer_tools_and_tensorflow_comes_from_one_extra():
    runtime = {r.name for r in requirements("")}
    assert not runtime & {r.name for r in requirements("dev")}
    assert not runtime & set(TENSORFLOW)  # from [cpu] or [cuda], never twice
    cpu = {r.name: r for r in requirements("cpu")}
    linux = {"sys_platform": "linux", "platform_machine": "x86_64"}
    mac = {"sys_platform": "darwin", "platform_machine": "arm64"}
    assert [n for n, r in cpu.items() if r.marker.evaluate(linux)] == ["tensorflow-cpu"]
    assert [n for n, r in cpu.items() if r.marker.evaluate(mac)] == ["tensorflow"]
    (cuda,) = requirements("cuda")
    assert cuda.name == "tensorflow" and cuda.extras == {"and-cuda"}


def test_tensorflow_is_capped_below_the_next_minor_release_everywhere():
    tensorflow = [r for r in requirements("cpu", "cuda") if r.name in TENSORFLOW]
    assert len(tensorflow) == 3 and all(r.specifier == TESTED_TENSORFLOW for r in tensorflow)
    for above in ("2.22.0", "2.22.0rc0", "3.0"):
        assert not TESTED_TENSORFLOW.contains(above, prereleases=True)
    pinned = pins()
    assert pinned["tensorflow"] == pinned["tensorflow-cpu"]
    assert pinned["tensorflow"] in TESTED_TENSORFLOW


@pytest.mark.parametrize("name", TENSORFLOW)
def test_no_tensorflow_above_the_cap_is_installed_here(name):
    try:
        installed = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{name} is not installed here")
    assert Version(installed) in TESTED_TENSORFLOW


def test_constraints_pin_every_dependency_within_its_range():
    pinned = pins()
    for requirement in requirements("", "cpu", "dev"):
        if requirement.marker and not requirement.marker.evaluate():
            continue
        name = canonical(requirement.name)
        assert name in pinned, f"{name} is not pinned: run `make lock`"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (name, pinned[name])


def test_make_lab_installs_the_runtime_only_and_make_test_adds_dev_both_pinned():
    makefile = (ROOT / "Makefile").read_text()
    recipes = dict(re.findall(r"^(\S+):[^\n]*\n((?:\t[^\n]*\n)+)", makefile, re.MULTILINE))
    assert re.search(r"^lab: \$\(LAB_READY\)", makefile, re.MULTILINE)
    assert re.search(r"^test: lint", makefile, re.MULTILINE)
    assert re.search(r"^lint: \$\(READY\)", makefile, re.MULTILINE)
    assert re.search(r"^\$\(READY\): \$\(LAB_READY\)", makefile, re.MULTILINE)
    lab = recipes["$(LAB_READY)"]
    assert "-e '.[$(TF)]'" in lab and ",dev]" not in lab and "[dev]" not in lab
    assert ",dev]" in recipes["$(READY)"]
    for install in re.findall(r"^INSTALL = (.*)$", makefile, re.MULTILINE):
        assert "-c $(CONSTRAINTS)" in install
    assert "tools/lock.py" in recipes["lock"]
    assert "$(UNINSTALL) $(OTHER_TF)" in lab  # never two TensorFlow builds in one .venv
    assert re.search(r"nvidia-smi -L .*,cuda,cpu\)", makefile), "the TensorFlow build's choice"


def load_lock_tool():
    spec = importlib.util.spec_from_file_location("lock", ROOT / "tools" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_lock_merges_both_builds_resolutions_and_writes_sorted_lines():
    lock = load_lock_tool()
    assert lock.canonical("Jinja2") == lock.canonical("jinja2") == "jinja2"
    assert lock.canonical("ruamel.yaml_clib") == "ruamel-yaml-clib"
    cpu = {"tensorflow-cpu": "2.21.0", "numpy": "2.4.6"}
    cuda = {"tensorflow": "2.21.0", "numpy": "2.4.6", "nvidia-nccl-cu12": "2.32.3"}
    pinned = lock.merge(cpu, cuda)
    lines = lock.constraints_text(pinned).splitlines()
    body = [line for line in lines if not line.startswith("#")]
    assert body == [
        "numpy==2.4.6",
        "nvidia-nccl-cu12==2.32.3",
        "tensorflow==2.21.0",
        "tensorflow-cpu==2.21.0",
    ]
    with pytest.raises(ValueError, match="differ: {'numpy': \\('2.4.6', '2.3.0'\\)}"):
        lock.merge(cpu, {**cuda, "numpy": "2.3.0"})
    with pytest.raises(ValueError, match="tensorflow 2.21.1 and tensorflow-cpu 2.21.0"):
        lock.merge(cpu, {**cuda, "tensorflow": "2.21.1"})


def test_the_cuda_builds_libraries_are_pinned_too():
    nvidia = [name for name in pins() if name.startswith("nvidia-") and name.endswith("-cu12")]
    assert len(nvidia) >= 10, "run `make lock`: the [cuda] resolution is missing"


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert "make test" in (ROOT / "README.md").read_text()


def test_the_tensorflow_the_package_expects_is_the_one_pyproject_caps():
    from d2lhelpers import _tf_settings

    tested = Version(_tf_settings.TESTED_TENSORFLOW)
    assert SpecifierSet(f">={tested},<{tested.major}.{tested.minor + 1}") == TESTED_TENSORFLOW
    assert _tf_settings.untested_tensorflow("2.21.0") == ""
    assert _tf_settings.untested_tensorflow("2.21.3") == ""
    for other in ("2.22.0", "2.19.1", "2.22.0rc0"):
        note = _tf_settings.untested_tensorflow(other)
        assert note.startswith(f"TensorFlow {other} is installed, but these lessons are tested")
        assert "pip install 'd2lhelpers[cpu]'" in note
