"""Build the deployable function source: one zip, named by its content hash.

Cloud Functions builds a Python function from a source tree with ``main.py`` at its root and
a ``requirements.txt`` beside it. The zip holds exactly that:

* ``main.py``, from ``functions/main.py``;
* the ``shared/`` package, at any depth (its modules and package data: ``*.json``, ``*.yaml``,
  and the status page's templates and stylesheet: ``*.html``, ``*.svg``, ``*.css``);
* ``requirements.txt``: ``uv.lock``'s resolution of the base dependencies and the
  ``functions`` extra of ``pyproject.toml``, written by ``uv export`` (every package pinned
  ``name==version`` with the lock's hashes, so the build verifies each file against the lock
  and the function runs what the tests ran). No dev tools, no embedded stack, no CLI.

The zip is byte-for-byte reproducible (sorted entries, fixed times and modes; the lock fixes
the requirements), and its name carries the first 16 hex digits of its SHA-256: an unchanged
tree and lock yield the same file, and Terraform redeploys only when the code changed.

Run ``./dev package`` (``python -m flexjobs_local.package [--out dist]``); it prints the path.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NAME = "flexjobs-functions"
# The extra of pyproject.toml that, with the base dependencies, is what a function installs.
EXTRA = "functions"
# What a function needs from shared/: its code and the data files it loads at run time.
SHARED_SUFFIXES = (".py", ".json", ".yaml", ".html", ".svg", ".css")
# The zip's name, for scripts and tests that look for the built artifact.
ZIP_NAME = re.compile(rf"^{NAME}-[0-9a-f]{{16}}\.zip$")
# 1980-01-01, the earliest time a zip entry can hold: every build writes the same bytes.
EPOCH = (1980, 1, 1, 0, 0, 0)
HEADER = f"# Written by ./dev package from uv.lock (the base dependencies and [{EXTRA}]).\n"


def uv(repo: Path = REPO) -> str:
    """The uv that ./dev installs into ``.venv-uv``, else one on ``PATH`` (uv itself refuses
    to run at another version than pyproject's ``required-version``).

    Raises:
        FileNotFoundError: no uv anywhere; ``./dev install`` brings it.
    """
    local = repo / ".venv-uv" / "bin" / "uv"
    found = str(local) if local.exists() else shutil.which("uv")
    if found is None:
        raise FileNotFoundError("uv is not installed: run ./dev install (it installs .venv-uv)")
    return found


def runtime_requirements(repo: Path = REPO) -> str:
    """The zip's ``requirements.txt``: what ``uv.lock`` resolves for the function.

    ``--locked`` refuses a lock that no longer matches ``pyproject.toml`` (run ``./dev lock``)
    and ``--offline`` reads nothing but the lock: the same lock gives the same text on any day.
    Environment markers stay as the lock has them; pip evaluates them on the function's
    runtime.

    Raises:
        subprocess.CalledProcessError: uv refused (a stale lock, or no lock).
    """
    done = subprocess.run(
        [
            uv(repo),
            "export",
            "--locked",
            "--offline",
            "--quiet",
            "--format=requirements.txt",
            "--no-header",
            "--no-emit-project",
            "--no-dev",
            f"--extra={EXTRA}",
            f"--project={repo}",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        done.check_returncode()
    return HEADER + done.stdout


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
    files["requirements.txt"] = runtime_requirements(repo).encode()
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
    try:
        print(package(args.out))
    except (FileNotFoundError, subprocess.CalledProcessError) as exc:
        # uv said why on stderr (a stale lock: run ./dev lock); no traceback on top of it.
        print(f"flexjobs_local.package: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
