"""The domain does no I/O: it reads no file, and parses only the text or values it is given.

Its data files (the price table, the serving policy table) are package data beside the types
they fill, and an adapter reads each (shared/adapters/packaged_prices.py, serving_table.py).
lint-imports keeps the Google clients out of the domain; this keeps out the reads that need
no client: ``open``, a path's or a resource's read, the modules that reach files, processes or
the network, and ``__file__`` (the way to a file beside a module).
"""

from __future__ import annotations

import ast
from pathlib import Path

DOMAIN = Path(__file__).resolve().parents[2] / "shared" / "domain"
#: Modules that only reach outside the process (files, environment, processes, sockets).
IO_MODULES = {"importlib", "pathlib", "os", "io", "shutil", "tempfile", "glob", "socket"}
IO_MODULES |= {"subprocess", "urllib", "http", "requests", "mmap", "fileinput"}
#: Methods that read or open what a path or a package resource names.
IO_METHODS = {"read_text", "read_bytes", "write_text", "write_bytes", "open", "iterdir"}


def io_in(source: str, name: str) -> list[str]:
    """Each place ``source`` (the file ``name``) reaches outside the process."""
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [f"{where} import {a.name}" for a in node.names if _io_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and _io_module(node.module):
            found.append(f"{where} from {node.module} import")
        elif isinstance(node, ast.Call):
            call = node.func
            if isinstance(call, ast.Name) and call.id == "open":
                found.append(f"{where} open()")
            elif isinstance(call, ast.Attribute) and call.attr in IO_METHODS:
                found.append(f"{where} .{call.attr}()")
        elif isinstance(node, ast.Name) and node.id == "__file__":
            found.append(f"{where} __file__")
    return found


def _io_module(module: str) -> bool:
    return module.partition(".")[0] in IO_MODULES


def test_the_domain_reads_no_file() -> None:
    found = []
    for path in sorted(DOMAIN.rglob("*.py")):
        found += io_in(path.read_text(encoding="utf-8"), path.relative_to(DOMAIN).as_posix())
    assert found == []


def test_the_check_finds_a_read() -> None:
    source = (
        "from importlib import resources\n"
        "import os.path\n"
        "text = resources.files('shared').joinpath('prices.yaml').read_text()\n"
        "with open(__file__) as f: pass\n"
    )
    assert io_in(source, "m.py") == [
        "m.py:1 from importlib import",
        "m.py:2 import os.path",
        "m.py:3 .read_text()",
        "m.py:4 open()",
        "m.py:4 __file__",
    ]
