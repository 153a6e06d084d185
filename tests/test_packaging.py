"""The install paths agree: conda's environment.yml installs exactly pyproject.toml's deps."""

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).parent.parent


def test_environment_yml_installs_this_project_and_nothing_else():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = [d for d in env["dependencies"] if isinstance(d, dict)]
    assert sorted(d.split("=")[0] for d in conda) == ["pip", "python"]
    assert pip == [{"pip": ["-e .[dev]"]}]
    python = next(d for d in conda if d.startswith("python"))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    minimum = project["requires-python"].removeprefix(">=")
    version = python.split("=")[1]
    assert tuple(map(int, version.split("."))) >= tuple(map(int, minimum.split(".")))


def test_dependencies_named_by_the_readme_are_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {d.split(">")[0].split("=")[0] for d in project["dependencies"]}
    names |= {d.split(">")[0] for d in project["optional-dependencies"]["dev"]}
    assert {
        "tensorflow",
        "jupyterlab",
        "ipywidgets",
        "matplotlib",
        "nbval",
        "pytest",
        "ruff",
    } <= names


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert "make test" in (ROOT / "README.md").read_text()
