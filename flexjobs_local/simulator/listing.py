"""List filtering and paging for the simulator, following AIP-160 as Vertex AI uses it.

Supported grammar (a subset of AIP-160, enough for what Vertex documents for ``List*Jobs``)::

    expression := sequence ("AND" sequence)*
    sequence   := factor factor*            (juxtaposition means AND)
    factor     := term ("OR" term)*         (OR binds tighter than AND, as AIP-160 says)
    term       := ["NOT"] simple
    simple     := "(" expression ")" | comparison
    comparison := field op value            op in = != : < <= > >=

Fields: ``labels.KEY`` (``=``, ``!=``, ``:VALUE``, ``:*`` for presence), ``state``,
``display_name`` (``=``/``!=``), and ``create_time``/``update_time``/``start_time``/``end_time``
(any op, RFC 3339 value). Anything else raises :class:`FilterError`.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000

_TIME_FIELDS = ("create_time", "update_time", "start_time", "end_time")
_FIELD_ALIASES = {
    "displayName": "display_name",
    "createTime": "create_time",
    "updateTime": "update_time",
    "startTime": "start_time",
    "endTime": "end_time",
}
_TOKEN = re.compile(
    r"""\s*(?:
        (?P<lparen>\()
      | (?P<rparen>\))
      | (?P<op><=|>=|!=|=|<|>|:)
      | (?P<string>"(?:[^"\\]|\\.)*")
      | (?P<word>[^\s()"=!<>:]+)
    )""",
    re.VERBOSE,
)

Record = Mapping[str, Any]
"""What a predicate sees: labels (dict), state (enum name), display_name, *_time (epoch s)."""
Predicate = Callable[[Record], bool]


class FilterError(ValueError):
    """The filter string uses syntax or fields the simulator (and Vertex) does not support."""


class PageTokenError(ValueError):
    """The page token was not issued by this simulator."""


@dataclass(frozen=True)
class _Token:
    kind: str  # lparen, rparen, op, string, word
    text: str


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise FilterError(f"Unsupported filter syntax at position {pos}: {text[pos:]!r}")
        kind = match.lastgroup
        assert kind is not None  # every alternative is a named group
        tokens.append(_Token(kind, match.group(kind)))
        pos = match.end()
    return tokens


def _unquote(token: _Token) -> str:
    if token.kind == "string":
        return re.sub(r"\\(.)", r"\1", token.text[1:-1])
    return token.text


def _parse_time(value: str) -> float:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError as exc:
        raise FilterError(f"Invalid RFC 3339 timestamp in filter: {value!r}") from exc


_COMPARATORS: dict[str, Callable[[float, float], bool]] = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


class _Parser:
    def __init__(self, text: str, valid_states: frozenset[str]) -> None:
        self._tokens = _tokenize(text)
        self._pos = 0
        self._valid_states = valid_states

    def parse(self) -> Predicate:
        if not self._tokens:
            return lambda _record: True
        predicate = self._expression()
        if self._pos != len(self._tokens):
            raise FilterError(f"Unexpected token in filter: {self._tokens[self._pos].text!r}")
        return predicate

    def _peek(self) -> _Token | None:
        return self._tokens[self._pos] if self._pos < len(self._tokens) else None

    def _next(self) -> _Token:
        token = self._peek()
        if token is None:
            raise FilterError("Filter ended unexpectedly")
        self._pos += 1
        return token

    def _is_keyword(self, word: str) -> bool:
        token = self._peek()
        return token is not None and token.kind == "word" and token.text == word

    def _expression(self) -> Predicate:
        parts = [self._sequence()]
        while self._is_keyword("AND"):
            self._pos += 1
            parts.append(self._sequence())
        return _all(parts)

    def _sequence(self) -> Predicate:
        parts = [self._factor()]
        while True:
            token = self._peek()
            if token is None or token.kind == "rparen" or self._is_keyword("AND"):
                break
            parts.append(self._factor())
        return _all(parts)

    def _factor(self) -> Predicate:
        parts = [self._term()]
        while self._is_keyword("OR"):
            self._pos += 1
            parts.append(self._term())
        return _any(parts)

    def _term(self) -> Predicate:
        if self._is_keyword("NOT"):
            self._pos += 1
            inner = self._simple()
            return lambda record: not inner(record)
        return self._simple()

    def _simple(self) -> Predicate:
        token = self._next()
        if token.kind == "lparen":
            inner = self._expression()
            if self._next().kind != "rparen":
                raise FilterError("Missing ')' in filter")
            return inner
        if token.kind != "word" or token.text in ("AND", "OR", "NOT"):
            raise FilterError(f"Expected a field name in filter, got {token.text!r}")
        op = self._next()
        if op.kind != "op":
            raise FilterError(f"Expected a comparison operator after {token.text!r}")
        value = self._next()
        if value.kind not in ("word", "string"):
            raise FilterError(f"Expected a value after {token.text}{op.text}")
        return self._comparison(token.text, op.text, _unquote(value), value.kind == "word")

    def _comparison(self, field: str, op: str, value: str, bare: bool) -> Predicate:
        field = _FIELD_ALIASES.get(field, field)
        if field.startswith("labels.") and len(field) > len("labels."):
            return _label_predicate(field[len("labels.") :], op, value, bare)
        if field == "state":
            if op not in ("=", "!="):
                raise FilterError(f"Operator {op!r} is not supported for state")
            if value not in self._valid_states:
                raise FilterError(f"Unknown state in filter: {value!r}")
            want = op == "="
            return lambda record: (record["state"] == value) == want
        if field == "display_name":
            if op not in ("=", "!="):
                raise FilterError(f"Operator {op!r} is not supported for display_name")
            want = op == "="
            return lambda record: (record["display_name"] == value) == want
        if field in _TIME_FIELDS:
            if op == ":":
                raise FilterError(f"Operator ':' is not supported for {field}")
            bound = _parse_time(value)
            compare = _COMPARATORS[op]
            return lambda record: record[field] is not None and compare(record[field], bound)
        raise FilterError(f"Unsupported filter field: {field!r}")


def _label_predicate(key: str, op: str, value: str, bare: bool) -> Predicate:
    if op == ":" and value == "*" and bare:
        return lambda record: key in record["labels"]
    if op in ("=", ":"):
        return lambda record: record["labels"].get(key) == value
    if op == "!=":
        return lambda record: record["labels"].get(key) != value
    raise FilterError(f"Operator {op!r} is not supported for labels")


def _all(parts: list[Predicate]) -> Predicate:
    if len(parts) == 1:
        return parts[0]
    return lambda record: all(part(record) for part in parts)


def _any(parts: list[Predicate]) -> Predicate:
    if len(parts) == 1:
        return parts[0]
    return lambda record: any(part(record) for part in parts)


def parse_filter(text: str, valid_states: frozenset[str]) -> Predicate:
    """Compile a list filter into a predicate over :data:`Record` mappings.

    Examples:
        >>> p = parse_filter('labels.team="a" AND state!=JOB_STATE_FAILED', frozenset(
        ...     {"JOB_STATE_FAILED", "JOB_STATE_RUNNING"}))
        >>> p({"labels": {"team": "a"}, "state": "JOB_STATE_RUNNING"})
        True

    Raises:
        FilterError: the filter is malformed or uses an unsupported field or operator.
    """
    return _Parser(text, valid_states).parse()


def encode_page_token(offset: int) -> str:
    """Opaque token for the page that starts at ``offset``."""
    return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode().rstrip("=")


def decode_page_token(token: str) -> int:
    """Offset encoded by :func:`encode_page_token`; empty token means the first page.

    Raises:
        PageTokenError: the token is not one this simulator issued.
    """
    if not token:
        return 0
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise PageTokenError(f"Invalid page token: {token!r}") from exc
    prefix, _, number = text.partition(":")
    if prefix != "offset" or not number.isdigit():
        raise PageTokenError(f"Invalid page token: {token!r}")
    return int(number)


def paginate(items: list[Any], page_size: int, page_token: str) -> tuple[list[Any], str]:
    """Slice ``items`` into one page; returns the page and the next token ("" on the last page).

    Raises:
        PageTokenError: bad token.
        ValueError: negative page size.
    """
    if page_size < 0:
        raise ValueError("page_size must not be negative")
    size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
    offset = decode_page_token(page_token)
    page = items[offset : offset + size]
    next_token = encode_page_token(offset + size) if offset + size < len(items) else ""
    return page, next_token
