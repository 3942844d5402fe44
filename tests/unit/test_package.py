"""The function zip's ``requirements.txt`` is uv.lock's resolution of the function's set.

``./dev package`` writes it with ``uv export``; these tests read ``uv.lock`` themselves (TOML)
and check every pin against it, so a packager that pinned anything else, or left a package
out, fails here. The zip itself is built twice and must be the same bytes.
"""

from __future__ import annotations

import re
import tomllib
import zipfile
from collections.abc import Iterable
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from flexjobs_local.package import EXTRA, REPO, ZIP_NAME, package, runtime_requirements

LOCK = REPO / "uv.lock"
PROJECT = "flexjobs"
# A requirement line of `uv export`: `name==version` (a marker may follow), then its hashes.
_PIN = re.compile(r"^([a-z0-9][a-z0-9._-]*)==([^\s;\\]+)", re.M)
# What only the CLI, the tests, the linters, the benchmarks or the browser test use.
NOT_IN_THE_FUNCTION = (
    "typer",
    "rich",
    "pytest",
    "pytest-timeout",
    "hypothesis",
    "jsonschema",
    "python-hcl2",
    "gcp-storage-emulator",
    "ruff",
    "mypy",
    "types-pyyaml",
    "import-linter",
    "matplotlib",
    "py-spy",
    "selenium",
)


@cache
def lock() -> dict[str, Any]:
    return tomllib.loads(LOCK.read_text(encoding="utf-8"))


def locked_versions() -> dict[str, set[str]]:
    """Every package of the lock, with its versions (a fork can lock two)."""
    versions: dict[str, set[str]] = {}
    for entry in lock()["package"]:
        versions.setdefault(entry["name"], set()).add(entry["version"])
    return versions


def resolution(extras: Iterable[str]) -> set[str]:
    """The packages the lock resolves for the project's base dependencies and ``extras``:
    every dependency followed, with the extras each one asks for, on any platform (markers
    are kept in the export, so it names them all)."""
    entries: dict[str, list[dict[str, Any]]] = {}
    for entry in lock()["package"]:
        entries.setdefault(entry["name"], []).append(entry)
    found: set[str] = set()
    pending: list[tuple[str, tuple[str, ...]]] = [(PROJECT, tuple(extras))]
    seen: set[tuple[str, tuple[str, ...]]] = set()
    while pending:
        name, wanted = pending.pop()
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        if name != PROJECT:
            found.add(name)
        for entry in entries[name]:
            deps = list(entry.get("dependencies", ()))
            for extra in wanted:
                deps += entry.get("optional-dependencies", {}).get(extra, ())
            pending += [(dep["name"], tuple(dep.get("extra", ()))) for dep in deps]
    return found


def pins(requirements: str) -> dict[str, str]:
    """``name -> version`` of every requirement line (a package the lock forks has one line
    per fork, each with its marker: any of them)."""
    return dict(_PIN.findall(requirements))


def check_generated_from_the_lock(requirements: str) -> dict[str, str]:
    """Every pin is the lock's, each with the lock's hashes, and the pins are exactly the
    lock's resolution of the base dependencies and the ``functions`` extra."""
    pinned = pins(requirements)
    versions = locked_versions()
    wrong = [f"{n}=={v}" for n, v in _PIN.findall(requirements) if v not in versions.get(n, ())]
    assert not wrong, f"pinned otherwise than uv.lock: {wrong}"
    assert set(pinned) == resolution([EXTRA])
    blocks = re.split(r"^(?=[a-z0-9])", requirements, flags=re.M)
    assert all("--hash=sha256:" in b for b in blocks if _PIN.match(b))
    assert not set(NOT_IN_THE_FUNCTION) & set(pinned)
    return pinned


def test_the_requirements_are_the_locks_resolution_of_the_functions_set() -> None:
    pinned = check_generated_from_the_lock(runtime_requirements())
    for name in ("functions-framework", "google-cloud-aiplatform", "jinja2", "werkzeug"):
        assert name in pinned


def test_the_check_fails_on_a_pin_the_lock_does_not_hold() -> None:
    requirements = runtime_requirements()
    version = pins(requirements)["jinja2"]
    with pytest.raises(AssertionError, match="jinja2"):
        check_generated_from_the_lock(requirements.replace(f"jinja2=={version}", "jinja2==0.1"))
    with pytest.raises(AssertionError):
        check_generated_from_the_lock(re.sub(r"^jinja2==.*$", "", requirements, flags=re.M))


def test_the_cli_gets_neither_the_function_stack_nor_the_dev_tools() -> None:
    cli = resolution(["cli"])
    assert {"typer", "rich", "google-cloud-pubsub", "google-cloud-firestore"} <= cli
    for name in ("functions-framework", "jinja2", "pytest", "ruff", "matplotlib", "selenium"):
        assert name not in cli


def test_this_environment_is_the_lock() -> None:
    """./dev installs .venv from uv.lock: what the tests import is what the function pins."""
    pinned = pins(runtime_requirements())
    for name in ("functions-framework", "google-cloud-firestore", "pyyaml", "pydantic"):
        assert metadata.version(name) == pinned[name]
    assert metadata.version("ruff") in locked_versions()["ruff"]


def test_two_builds_are_the_same_zip(tmp_path: Path) -> None:
    first = package(tmp_path / "one")
    second = package(tmp_path / "two")
    assert ZIP_NAME.match(first.name)
    assert first.name == second.name
    assert first.read_bytes() == second.read_bytes()
    # The function is main.py and shared/: never the client library or its command line
    # (flexjobs/cli/), nor the local stack.
    with zipfile.ZipFile(first) as archive:
        tops = {name.split("/", 1)[0] for name in archive.namelist()}
    assert tops == {"main.py", "requirements.txt", "shared"}


def test_the_locked_vertex_client_knows_every_name_the_code_sends() -> None:
    """The floor of google-cloud-aiplatform (pyproject.toml) is the first release with all of
    these; the lock must not fall below it."""
    from google.cloud.aiplatform_v1 import types

    from shared.domain.model.strategies import DEPRECATED_STRATEGIES, STRATEGIES
    from shared.domain.request.machines import ALL_ACCELERATORS

    assert set(ALL_ACCELERATORS) <= set(types.AcceleratorType.__members__)
    strategies = set(types.Scheduling.Strategy.__members__)
    assert {*STRATEGIES, *DEPRECATED_STRATEGIES} <= strategies
    assert {"strategy", "max_wait_duration"} <= set(types.Scheduling.meta.fields)
