"""Reading untrusted JSON values, with every problem collected in a :class:`Context`.

A request body is untrusted JSON, so each value is type-checked before it is used. Each reader
returns the value, or None when it is missing or unusable; the problem, if any, goes into the
context with its exact path, and checking goes on, so a requester sees every problem at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from shared.domain.model.bounds import Count
from shared.domain.model.values import is_int, kind_of, show
from shared.domain.request.message import parse_duration
from shared.domain.request.validation.guards import Guards
from shared.kernel.errors import FieldError

#: The largest value a google.protobuf.Duration can hold (10,000 years).
MAX_DURATION_SECONDS: Final = 315_576_000_000

_T = TypeVar("_T")

_DURATION_TEXT = re.compile(r"-?[0-9]+(\.[0-9]{1,9})?s")


@dataclass(frozen=True)
class Context:
    """What a check runs with: the guards, the request's location, and the errors found."""

    guards: Guards
    errors: list[FieldError]
    location: str | None = None

    def add(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))


def _present(
    ctx: Context, node: dict[str, Any], key: str, path: str, *, required: bool, what: str
) -> bool:
    """True when ``node`` holds a value at ``key``; a required one missing is reported."""
    if node.get(key) is None:
        if required:
            ctx.add(path, f"is required: {what}")
        return False
    return True


def _read_typed(
    ctx: Context,
    node: dict[str, Any],
    key: str,
    base: str,
    *,
    expected: type[_T],
    noun: str,
    required: bool,
    what: str,
) -> _T | None:
    """The value at ``key`` when it is an ``expected`` (``noun`` names that JSON type)."""
    path = f"{base}.{key}"
    if not _present(ctx, node, key, path, required=required, what=what):
        return None
    value = node[key]
    if not isinstance(value, expected):
        ctx.add(path, f"must be {noun} ({what}), not {kind_of(value)}")
        return None
    return value


def read_str(
    ctx: Context, node: dict[str, Any], key: str, base: str, *, required: bool, what: str
) -> str | None:
    """Read a non-empty string field; report it missing, empty or of the wrong type."""
    value = _read_typed(
        ctx, node, key, base, expected=str, noun="a string", required=required, what=what
    )
    if value is not None and not value.strip():
        ctx.add(f"{base}.{key}", f"must not be empty: {what}")
        return None
    return value


def read_int(
    ctx: Context,
    node: dict[str, Any],
    key: str,
    base: str,
    *,
    required: bool,
    bounds: Count,
    what: str,
) -> int | None:
    """Read an integer field within ``bounds``, the ones the request's model declares for it
    (:mod:`shared.domain.request.wire`); booleans and floats are refused."""
    path = f"{base}.{key}"
    if not _present(ctx, node, key, path, required=required, what=what):
        return None
    value = node[key]
    if not is_int(value):
        ctx.add(path, f"must be a JSON integer ({what}), not {kind_of(value)} {show(value)}")
        return None
    if value < bounds.minimum:
        ctx.add(path, f"must be at least {bounds.minimum} ({what}), not {show(value)}")
        return None
    if bounds.maximum is not None and value > bounds.maximum:
        ctx.add(path, f"must be at most {bounds.maximum} ({what}), not {show(value)}")
        return None
    return int(value)


def read_object(
    ctx: Context, node: dict[str, Any], key: str, base: str, *, required: bool, what: str
) -> dict[str, Any] | None:
    """Read a JSON object field; report it missing (when required) or of the wrong type."""
    return _read_typed(
        ctx, node, key, base, expected=dict, noun="a JSON object", required=required, what=what
    )


def check_bool(ctx: Context, node: dict[str, Any], key: str, base: str) -> None:
    """Report a present ``key`` that is not true or false."""
    if node.get(key) is not None and not isinstance(node[key], bool):
        ctx.add(f"{base}.{key}", f"must be true or false, not {kind_of(node[key])}")


def check_string_list(ctx: Context, node: dict[str, Any], key: str, base: str) -> None:
    """Report a present ``key`` that is not an array of strings, item by item."""
    if node.get(key) is None:
        return
    value = node[key]
    if not isinstance(value, list):
        ctx.add(f"{base}.{key}", f"must be an array of strings, not {kind_of(value)}")
        return
    for i, item in enumerate(value):
        if not isinstance(item, str):
            ctx.add(f"{base}.{key}[{i}]", f"must be a string, not {kind_of(item)}")


def read_duration(
    ctx: Context, node: dict[str, Any], key: str, base: str, *, allow_zero: bool
) -> float | None:
    """Read a protobuf JSON Duration such as ``"1800s"`` or ``"3.5s"``, in seconds."""
    path = f"{base}.{key}"
    if node.get(key) is None:
        return None
    value = node[key]
    example = "a Duration string such as '1800s' or '3.5s'"
    if not isinstance(value, str):
        ctx.add(path, f"must be {example}, not {kind_of(value)} {show(value)}")
        return None
    # parse_duration's pattern tolerates a trailing newline; Vertex does not.
    if not _DURATION_TEXT.fullmatch(value):
        ctx.add(path, f"must be {example}, not {show(value)}")
        return None
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        # Only a digit string too long to convert gets here; the pattern already matched.
        ctx.add(path, f"must be {example}: {exc}")
        return None
    if seconds < 0:
        ctx.add(path, f"must not be negative, not {show(value)}")
        return None
    if seconds > MAX_DURATION_SECONDS:
        ctx.add(path, f"must be at most {MAX_DURATION_SECONDS}s, the largest Duration")
        return None
    if seconds == 0 and not allow_zero:
        ctx.add(path, "must be longer than 0s")
        return None
    return seconds
