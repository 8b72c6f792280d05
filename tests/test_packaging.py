"""What ``pip install -e .`` asks of the environment it is installed into."""

from __future__ import annotations

import tomllib

import torch
from packaging.requirements import Requirement
from packaging.version import Version

from tests.util import REPO


def torch_requirement() -> Requirement:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (req,) = [r for r in map(Requirement, deps) if r.name == "torch"]
    return req


def test_torch_is_a_range_that_keeps_the_torch_already_installed():
    spec = torch_requirement().specifier
    assert spec.contains(Version(torch.__version__).base_version)  # make venv's 2.13.0+cpu
    # a user's own torch, older or newer than the one we test on, is kept, not replaced
    assert spec.contains("2.8.0") and spec.contains("2.14.0")
    assert not spec.contains("2.5.0")  # older ones lack what ddiag calls (docs/development.md)


def test_every_data_file_the_analyzer_and_check_env_read_ships_in_the_package():
    # a wheel (or a non-editable install) carries only what package-data names: a data file
    # left out would leave analyze without its emitter knowledge, silently
    from fnmatch import fnmatch

    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = data["package-data"]
    files = [p for top in ("diag", "probes") for p in (REPO / top).rglob("*.tsv")]
    assert files
    for path in files:
        package_dir = next((d for d in path.parents if (d / "__init__.py").is_file()), None)
        package = ".".join(package_dir.relative_to(REPO).parts)
        rel = path.relative_to(package_dir).as_posix()
        assert any(fnmatch(rel, pat) for pat in patterns.get(package, ())), (
            f"{path.relative_to(REPO)} is not in [tool.setuptools.package-data] {package!r}")
