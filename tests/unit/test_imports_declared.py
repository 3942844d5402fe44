"""Every module the shipped code imports comes from a distribution pyproject.toml declares.

A module that only arrives as another distribution's dependency (Flask through
functions-framework, proto-plus through the Google clients) can leave with that one's next
release: the deployed function then fails at import. Each part of the code may use the base
dependencies and the extras its install has: the functions (``shared/``, ``functions/``) the
``functions`` extra, the client library none, the ``flexjobs`` command (``flexjobs/cli/``)
``cli``, and the local stack (``flexjobs_local/``) ``cli`` and ``dev``.

The imports are read from the source (every ``import``, also inside functions and under
TYPE_CHECKING), and each is traced to the installed distributions that ship it (their
RECORD files): so this runs in the dev environment, which ./dev installs from uv.lock.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections import defaultdict
from functools import cache
from importlib import metadata
from pathlib import Path, PurePosixPath

REPO = Path(__file__).resolve().parents[2]
#: The code's own top-level packages: never a distribution's.
OWN = {"shared", "functions", "flexjobs", "flexjobs_local", "benchmarks", "tests", "main"}
#: Each part of the code, with the extras its install has (besides the base dependencies).
PARTS = {
    "shared": ("functions",),
    "functions": ("functions",),
    "flexjobs": (),
    "flexjobs/cli": ("cli",),
    "flexjobs_local": ("cli", "dev"),
}


def _name(requirement: str) -> tuple[str, tuple[str, ...]]:
    """A requirement's normalized distribution name and the extras it asks for."""
    match = re.match(r"\s*([A-Za-z0-9._-]+)\s*(?:\[([^\]]*)\])?", requirement)
    assert match, requirement
    extras = tuple(e.strip() for e in (match.group(2) or "").split(",") if e.strip())
    return _normal(match.group(1)), extras


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(extras: tuple[str, ...]) -> set[str]:
    """The distributions the base dependencies and ``extras`` declare (an extra naming the
    project itself, as dev names flexjobs[functions,cli], brings those extras' too)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    optional = project["optional-dependencies"]
    names: set[str] = set()
    pending, seen = [*project["dependencies"]], set(extras)
    for extra in extras:
        pending += optional[extra]
    while pending:
        name, asked = _name(pending.pop())
        if name == _normal(project["name"]):
            for extra in set(asked) - seen:
                seen.add(extra)
                pending += optional[extra]
        else:
            names.add(name)
    return names


@cache
def owners() -> dict[str, frozenset[str]]:
    """Dotted module name → the installed distributions that ship a file of it."""
    found: dict[str, set[str]] = defaultdict(set)
    for dist in metadata.distributions():
        name = _normal(dist.metadata["Name"])
        for file in dist.files or ():
            path = PurePosixPath(str(file))
            if path.suffix not in (".py", ".pyi", ".so"):
                continue
            parts = path.with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            for i in range(1, len(parts) + 1):
                found[".".join(parts[:i])].add(name)
    return {name: frozenset(dists) for name, dists in found.items()}


def imported(folder: Path) -> dict[str, set[str]]:
    """Module → the files of ``folder`` importing it, third-party modules only. For
    ``from a.b import c`` the module is ``a.b.c`` when that is a module, else ``a.b``."""
    found: dict[str, set[str]] = defaultdict(set)
    # A part inside another (flexjobs/cli in flexjobs) is checked on its own, with its extras.
    inner = [REPO / part for part in PARTS if (REPO / part).parent == folder]
    for path in sorted(folder.rglob("*.py")):
        if any(path.is_relative_to(other) for other in inner):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [
                    f"{node.module}.{alias.name}"
                    if f"{node.module}.{alias.name}" in owners()
                    else node.module
                    for alias in node.names
                ]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                if top not in sys.stdlib_module_names and top not in OWN | {"__future__"}:
                    found[name].add(path.relative_to(REPO).as_posix())
    return found


def undeclared(folder: Path, allowed: set[str]) -> list[str]:
    """Each import of ``folder`` no distribution of ``allowed`` ships, with its files."""
    problems = []
    for module, files in sorted(imported(folder).items()):
        parts = module.split(".")
        shipped = next(
            (
                owners()[p]
                for i in range(len(parts), 0, -1)
                if (p := ".".join(parts[:i])) in owners()
            ),
            frozenset(),
        )
        if not shipped & allowed:
            problems.append(f"{module} ({sorted(shipped) or 'not installed'}): {sorted(files)}")
    return problems


def test_every_import_of_the_shipped_code_is_declared() -> None:
    for part, extras in PARTS.items():
        assert undeclared(REPO / part, declared(extras)) == [], part


def test_the_check_finds_a_module_only_another_distribution_brings() -> None:
    allowed = declared(("functions",)) - {"flask", "proto-plus"}
    assert undeclared(REPO / "shared", allowed) == [
        "flask (['flask']): ['shared/ingress/acknowledgement.py']",
        "proto.datetime_helpers (['proto-plus']): ['shared/adapters/vertex/jobs.py']",
    ]
    assert "typer" in declared(("cli",)) and "typer" in declared(("dev",))
    assert "functions-framework" not in declared(())
