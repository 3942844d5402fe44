"""Classify why a Vertex AI job ended, so the retry policy knows which budget to charge.

A failure is classified by an ordered rule table: the **first** rule that matches wins, and a
failure no rule matches is :attr:`FailureClass.UNKNOWN`. A rule matches when *any* of its
conditions holds:

* ``states``: the Vertex job state name, compared case-insensitively (``JOB_STATE_EXPIRED``);
* ``codes``: the ``google.rpc.Code`` number of the job's ``error`` (8 is RESOURCE_EXHAUSTED);
* ``messages``: a substring of the job's error message, compared case-insensitively.

The default table, in order (order matters: a preemption reported with code 8 is a
preemption, not a stockout, because the preemption rule comes first):

1. **cancelled**: state ``JOB_STATE_CANCELLED``.
2. **max-wait-expired**: state ``JOB_STATE_EXPIRED``, or a message naming the max wait
   duration (``max wait duration``, ``maxWaitDuration``, ``max_wait_duration``).
3. **preempted**: a message containing ``preempt`` (``preempted``, ``Preemption``...).
4. **stockout**: ``STOCKOUT``, ``ZONE_RESOURCE_POOL_EXHAUSTED``, ``resource pool exhausted``,
   ``does not have enough resources``, or error code 8 (RESOURCE_EXHAUSTED).
5. **user-error**: ``exited with a non-zero status`` (the training code itself failed).
6. **infrastructure**: error code 13 (INTERNAL) or 14 (UNAVAILABLE), or ``Internal error``.

Operators can replace the table with :func:`load_rules` (JSON or YAML), for example::

    {"includeDefaults": true,
     "rules": [{"class": "stockout", "messages": ["no capacity left"]}]}

``includeDefaults: true`` puts the default rules *after* the custom ones, so custom rules win.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import yaml

MAX_RPC_CODE = 16  # google.rpc.Code runs from 0 (OK) to 16 (UNAUTHENTICATED).


class FailureClass(StrEnum):
    """Why a job ended without success; each value is also its wire form."""

    PREEMPTED = "preempted"
    STOCKOUT = "stockout"
    MAX_WAIT_EXPIRED = "max-wait-expired"
    USER_ERROR = "user-error"
    INFRASTRUCTURE = "infrastructure"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class FailureRule:
    """One row of the rule table: ``failure`` applies when any condition matches.

    States are kept upper-case and messages lower-case so matching is case-insensitive.

    Examples:
        >>> rule = FailureRule(FailureClass.STOCKOUT, codes=frozenset({8}))
        >>> rule.matches("JOB_STATE_FAILED", 8, None)
        True
    """

    failure: FailureClass
    states: frozenset[str] = frozenset()
    codes: frozenset[int] = frozenset()
    messages: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (self.states or self.codes or self.messages):
            raise ValueError("a failure rule needs at least one state, code or message")
        object.__setattr__(self, "states", frozenset(s.upper() for s in self.states))
        object.__setattr__(self, "messages", tuple(m.lower() for m in self.messages))

    def matches(self, state: str, code: int | None, message: str | None) -> bool:
        """True when the state, the code or a message substring matches this rule."""
        if state and state.upper() in self.states:
            return True
        if code is not None and code in self.codes:
            return True
        if message:
            lowered = message.lower()
            return any(fragment in lowered for fragment in self.messages)
        return False


RuleTable = tuple[FailureRule, ...]

DEFAULT_RULES: RuleTable = (
    FailureRule(FailureClass.CANCELLED, states=frozenset({"JOB_STATE_CANCELLED"})),
    FailureRule(
        FailureClass.MAX_WAIT_EXPIRED,
        states=frozenset({"JOB_STATE_EXPIRED"}),
        messages=("max wait duration", "maxwaitduration", "max_wait_duration"),
    ),
    FailureRule(FailureClass.PREEMPTED, messages=("preempt",)),
    FailureRule(
        FailureClass.STOCKOUT,
        codes=frozenset({8}),
        messages=(
            "stockout",
            "zone_resource_pool_exhausted",
            "resource pool exhausted",
            "does not have enough resources",
        ),
    ),
    FailureRule(FailureClass.USER_ERROR, messages=("exited with a non-zero status",)),
    FailureRule(
        FailureClass.INFRASTRUCTURE, codes=frozenset({13, 14}), messages=("internal error",)
    ),
)


def classify(
    state: str,
    code: int | None,
    message: str | None,
    rules: Sequence[FailureRule] = DEFAULT_RULES,
) -> FailureClass:
    """Return the class of the first rule matching a finished job, else ``UNKNOWN``.

    Args:
        state: the Vertex job state name, such as ``JOB_STATE_FAILED``.
        code: the ``google.rpc.Code`` of the job's ``error``, if any.
        message: the job's error message, if any.
        rules: the ordered rule table; :data:`DEFAULT_RULES` unless configured.

    Examples:
        >>> classify("JOB_STATE_FAILED", 8, "The replica was preempted")
        <FailureClass.PREEMPTED: 'preempted'>
        >>> classify("JOB_STATE_FAILED", 8, "ZONE_RESOURCE_POOL_EXHAUSTED")
        <FailureClass.STOCKOUT: 'stockout'>
        >>> classify("JOB_STATE_FAILED", 3, "bad argument")
        <FailureClass.UNKNOWN: 'unknown'>
    """
    for rule in rules:
        if rule.matches(state, code, message):
            return rule.failure
    return FailureClass.UNKNOWN


class InvalidRules(ValueError):
    """A failure-rule document that cannot be used; it lists every problem found.

    Examples:
        >>> InvalidRules(["rules[0].class: is required"]).problems
        ['rules[0].class: is required']
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid failure rules: " + "; ".join(self.problems))


_RULE_KEYS = {"class", "states", "codes", "messages"}
_CLASS_VALUES = ", ".join(c.value for c in FailureClass)


def _parse_document(text: str) -> Any:
    """Parse JSON, else YAML; raise :class:`InvalidRules` when it is neither."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as json_exc:
        # Not JSON: YAML is the other documented format, so try it before giving up.
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as yaml_exc:
            raise InvalidRules(
                [f"$: neither JSON ({json_exc}) nor YAML ({yaml_exc})"]
            ) from yaml_exc


def _strings(path: str, value: object, problems: list[str]) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        problems.append(f"{path}: must be a list of non-empty strings")
        return []
    return list(value)


def _codes(path: str, value: object, problems: list[str]) -> list[int]:
    # bool is an int subclass; `true` is never a meaningful rpc code.
    ok = isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_RPC_CODE for v in value
    )
    if not ok:
        problems.append(f"{path}: must be a list of google.rpc codes (integers 0-{MAX_RPC_CODE})")
        return []
    assert isinstance(value, list)
    return list(value)


def _parse_rule(path: str, raw: object, problems: list[str]) -> FailureRule | None:
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: must be an object with 'class' and conditions")
        return None
    before = len(problems)
    for key in sorted(set(raw) - _RULE_KEYS, key=str):
        problems.append(f"{path}.{key}: unknown key; allowed: {', '.join(sorted(_RULE_KEYS))}")
    failure: FailureClass | None = None
    raw_class = raw.get("class")
    if raw_class is None:
        problems.append(f"{path}.class: is required (one of {_CLASS_VALUES})")
    elif raw_class not in {c.value for c in FailureClass}:
        problems.append(f"{path}.class: {raw_class!r} is not one of {_CLASS_VALUES}")
    else:
        failure = FailureClass(raw_class)
    states = _strings(f"{path}.states", raw.get("states", []), problems)
    codes = _codes(f"{path}.codes", raw.get("codes", []), problems)
    messages = _strings(f"{path}.messages", raw.get("messages", []), problems)
    if len(problems) == before and not (states or codes or messages):
        problems.append(f"{path}: needs at least one of states, codes or messages")
    if len(problems) > before or failure is None:
        return None
    return FailureRule(failure, frozenset(states), frozenset(codes), tuple(messages))


def load_rules(text: str) -> RuleTable:
    """Build a rule table from a JSON or YAML document.

    The document is either a list of rules or an object
    ``{"rules": [...], "includeDefaults": false}``. Each rule is
    ``{"class": <FailureClass value>, "states": [...], "codes": [...], "messages": [...]}``
    with at least one condition. With ``includeDefaults: true`` the default rules follow
    the custom ones.

    Raises:
        InvalidRules: listing every problem found, with paths such as ``rules[1].codes``.

    Examples:
        >>> table = load_rules('[{"class": "stockout", "messages": ["no capacity"]}]')
        >>> classify("JOB_STATE_FAILED", None, "No capacity today", table)
        <FailureClass.STOCKOUT: 'stockout'>
    """
    document = _parse_document(text)
    include_defaults = False
    problems: list[str] = []
    if isinstance(document, Mapping):
        for key in sorted(set(document) - {"rules", "includeDefaults"}, key=str):
            problems.append(f"{key}: unknown key; allowed: rules, includeDefaults")
        flag = document.get("includeDefaults", False)
        if not isinstance(flag, bool):
            problems.append("includeDefaults: must be true or false")
        include_defaults = flag is True
        raw_rules = document.get("rules")
    else:
        raw_rules = document
    if not isinstance(raw_rules, list) or not raw_rules:
        problems.append("rules: must be a non-empty list of rules")
        raise InvalidRules(problems)
    parsed = [_parse_rule(f"rules[{i}]", raw, problems) for i, raw in enumerate(raw_rules)]
    if problems:
        raise InvalidRules(problems)
    table = tuple(rule for rule in parsed if rule is not None)
    return table + DEFAULT_RULES if include_defaults else table
