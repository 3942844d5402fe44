"""Build the deployable function source: one zip, named by its content hash.

Cloud Functions builds a Python function from a source tree with ``main.py`` at its root and
a ``requirements.txt`` beside it. The zip holds exactly that:

* ``main.py``, from ``functions/main.py``;
* the ``shared/`` package (its modules and package data: ``*.json``, ``*.yaml``, and the
  status page's templates and stylesheet: ``*.html``, ``*.svg``, ``*.css``);
* ``requirements.txt``: the runtime dependencies of ``pyproject.toml`` and everything they
  require, each pinned to the version installed here (``name==version``), so the function
  runs what the tests ran. No dev tools, no embedded stack, no CLI.

The zip is byte-for-byte reproducible (sorted entries, fixed times and modes), and its name
carries the first 16 hex digits of its SHA-256: an unchanged tree yields the same file, and
Terraform redeploys only when the code changed.

Run ``./dev package`` (``python -m flexjobs_local.package [--out dist]``); it prints the path.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import io
import re
import sys
import tomllib
import zipfile
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
NAME = "flexjobs-functions"
# What a function needs from shared/: its code and the data files it loads at run time.
SHARED_SUFFIXES = (".py", ".json", ".yaml", ".html", ".svg", ".css")
# The zip's name, for scripts and tests that look for the built artifact.
ZIP_NAME = re.compile(rf"^{NAME}-[0-9a-f]{{16}}\.zip$")
# 1980-01-01, the earliest time a zip entry can hold: every build writes the same bytes.
EPOCH = (1980, 1, 1, 0, 0, 0)


def imported_modules(files: dict[str, bytes]) -> set[str]:
    """Every absolute import in the function source (lazy imports inside functions too),
    less the standard library and flexjobs' own ``shared``."""
    modules: set[str] = set()
    for name, data in files.items():
        if not name.endswith(".py"):
            continue
        for node in ast.walk(ast.parse(data, filename=name)):
            if isinstance(node, ast.Import):
                modules.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module)
                modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    ours = sys.stdlib_module_names | {"shared"}
    return {m for m in modules if m.split(".")[0] not in ours}


def _module_index() -> dict[str, str]:
    """Dotted module or package → the installed distribution that provides it."""
    index: dict[str, str] = {}
    for distribution in metadata.distributions():
        for file in distribution.files or ():
            parts = file.parts
            if not parts or parts[0].endswith((".dist-info", ".data")) or file.suffix != ".py":
                continue
            dotted = ".".join((*parts[:-1], file.stem)).removesuffix(".__init__")
            index.setdefault(dotted, distribution.metadata["Name"])
            for depth in range(1, len(parts)):
                index.setdefault(".".join(parts[:depth]) + ".*", distribution.metadata["Name"])
    return index


def function_distributions(files: dict[str, bytes], declared: Iterable[str]) -> set[str]:
    """The distributions the function source imports, each one the project declares.

    Raises:
        ValueError: the source imports a module no declared dependency provides.
    """
    index = _module_index()
    wanted = {canonicalize_name(Requirement(text).name) for text in declared}
    found: set[str] = set()
    for module in sorted(imported_modules(files)):
        provider = index.get(module) or index.get(f"{module}.*")
        if provider is None:
            continue  # a name imported from a module (``from a import b``), not a module
        name = canonicalize_name(provider)
        if name not in wanted:
            continue  # provided by a dependency of a declared one (google.protobuf, ...)
        found.add(name)
    if not found:
        raise ValueError("the function source imports none of the declared dependencies")
    return found


def runtime_requirements(
    files: dict[str, bytes] | None = None, pyproject: Path = REPO / "pyproject.toml"
) -> list[str]:
    """``name==version`` for every dependency the function source imports and all they
    require, as installed here.

    Only the declared dependencies the function code imports count: the CLI's (Typer, Rich)
    are dependencies of the package too, and must not ship with the function. Environment
    markers are evaluated for this interpreter (the function's runtime is the same Python
    minor version as CI's), and extras are followed where a requirement names them.

    Raises:
        metadata.PackageNotFoundError: a dependency is not installed here.
    """
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    roots = function_distributions(files or source_files(), project["dependencies"])
    pinned: dict[str, str] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    pending = [Requirement(name) for name in sorted(roots)]
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        # Keyed on the extras too: a package reached again with an extra brings more.
        key = (name, frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        distribution = metadata.distribution(requirement.name)
        pinned[name] = distribution.version
        for text in distribution.requires or ():
            child = Requirement(text)
            if _applies(child, requirement.extras):
                pending.append(child)
    return [f"{name}=={version}" for name, version in sorted(pinned.items())]


#: The function's runtime (python311 on Linux), whatever interpreter builds the zip.
RUNTIME = {
    "python_version": "3.11",
    "python_full_version": "3.11.9",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
}


def _applies(requirement: Requirement, extras: Iterable[str]) -> bool:
    """Whether a dependency's marker holds on the function's runtime, for the extras its
    parent was asked for."""
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({**RUNTIME, "extra": extra}) for extra in ("", *extras))


def source_files(repo: Path = REPO) -> dict[str, bytes]:
    """The files of the function source, by their path in the zip."""
    files = {"main.py": (repo / "functions" / "main.py").read_bytes()}
    for path in sorted((repo / "shared").rglob("*")):
        if path.is_file() and path.suffix in SHARED_SUFFIXES and "__pycache__" not in path.parts:
            files[path.relative_to(repo).as_posix()] = path.read_bytes()
    return files


def build_zip(files: dict[str, bytes]) -> bytes:
    """A reproducible zip of ``files``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, files[name])
    return buffer.getvalue()


def package(out: Path, repo: Path = REPO) -> Path:
    """Write the function source zip into ``out``; returns its path."""
    files = source_files(repo)
    requirements = "\n".join(runtime_requirements(files, repo / "pyproject.toml")) + "\n"
    files["requirements.txt"] = requirements.encode()
    data = build_zip(files)
    digest = hashlib.sha256(data).hexdigest()[:16]
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{NAME}-{digest}.zip"
    if not target.exists():
        target.write_bytes(data)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flexjobs_local.package", description=__doc__)
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="default: dist/")
    args = parser.parse_args(argv)
    print(package(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
