"""How the ``flexjobs`` command prints: records as a table, JSON or YAML (``--format``), one-line
errors, and the exit code of each library error (decided here, once).

Exit codes: 0 success; 1 a request did not succeed, or an unknown requestId; 2 an invalid
request (or a usage error); 3 a configuration or connection problem; 124 ``--timeout`` passed;
130 interrupted.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console, RenderableType

from shared.kernel.errors import (
    ConfigurationError,
    FlexjobsError,
    InvalidRequest,
    RequestNotFound,
    TransientError,
)
from shared.status.display import jsonable

OK = 0
NOT_SUCCEEDED = 1
INVALID = 2
CONFIGURATION = 3


class CliError(Exception):
    """A failure the user can act on: printed as one line, exit ``code``."""

    def __init__(self, message: str, code: int = CONFIGURATION) -> None:
        super().__init__(message)
        self.code = code


def exit_code(exc: FlexjobsError) -> int:
    """The documented exit code of a library error (the one mapping)."""
    if isinstance(exc, InvalidRequest):
        return INVALID
    if isinstance(exc, RequestNotFound):
        return NOT_SUCCEEDED
    if isinstance(exc, ConfigurationError | TransientError):
        # Configuration or connection: no project, no credentials, an emulator not reachable,
        # a topic not found, permission denied, a service unavailable.
        return CONFIGURATION
    return NOT_SUCCEEDED


class OutputFormat(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


class InputFormat(StrEnum):
    json = "json"
    jsonl = "jsonl"
    yaml = "yaml"


FormatOpt = Annotated[
    OutputFormat,
    typer.Option("--format", help="Output: a table, JSON or YAML.", case_sensitive=False),
]
#: The deprecated spelling of ``--format json`` (kept for scripts; hidden from help).
JsonOpt = Annotated[bool, typer.Option("--json", hidden=True, help="Same as --format json.")]


def chosen(fmt: OutputFormat, as_json: bool) -> OutputFormat:
    return OutputFormat.json if as_json else fmt


def out() -> Console:
    # Piped output is not cut to 80 columns: a table of requestIds stays readable in a log.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def err() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def emit(value: Any, fmt: OutputFormat, table: Callable[[], RenderableType]) -> None:
    """Print ``value`` (records as stored) in ``fmt``; ``table()`` draws it for people. JSON
    is one line (an object or an array), times in RFC 3339 UTC; YAML is the same data."""
    if fmt is OutputFormat.json:
        sys.stdout.write(json.dumps(jsonable(value)) + "\n")
    elif fmt is OutputFormat.yaml:
        sys.stdout.write(yaml.safe_dump(jsonable(value), sort_keys=False, allow_unicode=True))
    else:
        out().print(table())
