"""Retry budgets, backoff and the capacity fallback ladder.

Each failure class charges one *budget group*; each group has its own budget, so a run of
preemptions cannot use up the retries meant for stockouts:

=================  ===========================  =======
group              failure classes              default
=================  ===========================  =======
``preemption``     preempted                    6
``capacity``       stockout, max-wait-expired   3
``infrastructure`` infrastructure               3
``user``           user-error                   0
(none)             cancelled, unknown           never
=================  ===========================  =======

``unknown`` never retries: a failure no rule recognises is more often a bug in the job (a bad
argument, a missing file) than a passing fault, and every blind retry rents GPUs again. An
operator who learns that some message is transient adds a failure rule for it instead (see
:mod:`shared.domain.policy.failures`).

A request may override budgets with its optional ``retryPolicy`` object, for example
``{"preemption": 10, "capacity": 1}``; groups it leaves out keep their defaults.

The optional ``fallback`` list is a ladder of placements to use once capacity failures pile up,
for example ``[{"afterCapacityFailures": 2, "strategy": "STANDARD"},
{"afterCapacityFailures": 3, "location": "europe-west4"}]``. Rungs apply cumulatively in
order: with 3 capacity failures both rungs are reached, so the job runs as STANDARD in
europe-west4 (a later rung overrides only the fields it sets).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from shared.domain.model.bounds import Count
from shared.domain.model.strategies import STRATEGIES
from shared.domain.model.values import is_int
from shared.domain.policy.failures import DEFAULT_RULES, FailureClass, RuleTable, classify
from shared.kernel.errors import FieldError, InvalidRequest
from shared.kernel.regions import REGION_HINT, is_region

PREEMPTION = "preemption"
CAPACITY = "capacity"
INFRASTRUCTURE = "infrastructure"
USER = "user"
GROUPS = (PREEMPTION, CAPACITY, INFRASTRUCTURE, USER)

# A request may raise a budget, but not without bound: every retry rents GPUs again.
MAX_RETRIES_PER_GROUP = 100
MAX_FALLBACK_RUNGS = 10
#: A group's budget in a request's ``retryPolicy``, and a rung's ``afterCapacityFailures``:
#: these checks and the request's model (its JSON Schema) read the same bounds.
RETRY_BUDGET = Count(0, MAX_RETRIES_PER_GROUP)
RUNG_THRESHOLD = Count(1, MAX_RETRIES_PER_GROUP)

GROUP_OF: Mapping[FailureClass, str | None] = {
    FailureClass.PREEMPTED: PREEMPTION,
    FailureClass.STOCKOUT: CAPACITY,
    FailureClass.MAX_WAIT_EXPIRED: CAPACITY,
    FailureClass.INFRASTRUCTURE: INFRASTRUCTURE,
    FailureClass.USER_ERROR: USER,
    FailureClass.CANCELLED: None,
    FailureClass.UNKNOWN: None,
}


@dataclass(frozen=True)
class Budgets:
    """Retries allowed per budget group. Build from a request with :meth:`from_request`.

    Examples:
        >>> Budgets.from_request({"preemption": 10}).budget("preemption")
        10
        >>> Budgets.from_request(None).budget("capacity")
        3
    """

    preemption: int = 6
    capacity: int = 3
    infrastructure: int = 3
    user: int = 0

    def budget(self, group: str) -> int:
        """Retries allowed in ``group`` (one of :data:`GROUPS`)."""
        if group not in GROUPS:
            raise ValueError(f"unknown budget group {group!r}; expected one of {GROUPS}")
        value: int = getattr(self, group)
        return value

    @classmethod
    def from_request(cls, raw: object, defaults: Budgets | None = None) -> Budgets:
        """Build the budgets from a request's optional ``retryPolicy`` value; groups it leaves
        out keep ``defaults`` (the operator's, else flexjobs').

        Raises:
            InvalidRequest: with every problem, at paths such as ``retryPolicy.preemption``.
        """
        errors = check_retry_policy(raw)
        if errors:
            raise InvalidRequest(errors)
        base = defaults or cls()
        if raw is None:
            return base
        assert isinstance(raw, Mapping)
        return replace(base, **{group: int(raw[group]) for group in GROUPS if group in raw})

    def to_dict(self) -> dict[str, int]:
        return {group: self.budget(group) for group in GROUPS}


def _range(count: Count) -> str:
    return f"{count.minimum} to {count.maximum}"


def check_retry_policy(raw: object) -> list[FieldError]:
    """Return every problem with a request's ``retryPolicy`` value ([] when it is valid)."""
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        return [FieldError("retryPolicy", f"must be an object with keys {', '.join(GROUPS)}")]
    errors: list[FieldError] = []
    for key in sorted(raw, key=str):
        path = f"retryPolicy.{key}"
        if key not in GROUPS:
            errors.append(FieldError(path, f"unknown budget group; allowed: {', '.join(GROUPS)}"))
            continue
        if not RETRY_BUDGET.holds(raw[key]):
            errors.append(FieldError(path, f"must be an integer from {_range(RETRY_BUDGET)}"))
    return errors


@dataclass(frozen=True)
class RetryDecision:
    """Whether to resubmit after a failure, and the budget arithmetic behind it.

    ``used_after`` is the group's spent retries once this decision is applied: one more
    than before when ``retry`` is true, unchanged otherwise.
    """

    retry: bool
    group: str | None
    used_after: int
    budget: int
    reason: str


def decide(
    policy: Budgets,
    failure: FailureClass,
    used: Mapping[str, int],
    groups: Mapping[FailureClass, str | None] = GROUP_OF,
) -> RetryDecision:
    """Decide whether ``failure`` may be retried, given the retries ``used`` per group.

    Examples:
        >>> d = decide(Budgets(), FailureClass.PREEMPTED, {"preemption": 2})
        >>> d.retry, d.used_after, d.reason
        (True, 3, 'preempted: retry 3 of 6')
        >>> decide(Budgets(), FailureClass.USER_ERROR, {}).retry
        False
    """
    group = groups[failure]
    if group is None:
        why = (
            "cancelled by a user: never retried"
            if failure is FailureClass.CANCELLED
            else "unknown failure: never retried (add a failure rule if it is transient)"
        )
        return RetryDecision(False, None, 0, 0, why)
    spent = used.get(group, 0)
    if not is_int(spent) or spent < 0:
        raise ValueError(f"retries used in {group!r} must be a non-negative integer: {spent!r}")
    budget = policy.budget(group)
    if spent < budget:
        return RetryDecision(
            True, group, spent + 1, budget, f"{failure.value}: retry {spent + 1} of {budget}"
        )
    if budget == 0:
        reason = f"{failure.value}: not retried ({group} budget is 0)"
    else:
        reason = f"{failure.value}: {group} budget exhausted ({spent} of {budget} retries used)"
    return RetryDecision(False, group, spent, budget, reason)


def backoff_seconds(retry_number: int, base: float, cap: float, rand: Callable[[], float]) -> float:
    """Seconds to wait before retry ``retry_number`` (1 for the first retry): full jitter.

    ``uniform(0, min(cap, base * 2 ** (retry_number - 1)))``, after "Exponential Backoff And
    Jitter" (AWS Architecture Blog): spreading retries over the whole window keeps many
    preempted jobs from resubmitting in lock-step. ``base`` 0 disables backoff (exactly 0).

    Args:
        retry_number: 1 for the first retry, 2 for the second...
        base: the window of the first retry, in seconds.
        cap: the largest window, in seconds.
        rand: returns a float in [0, 1), such as ``random.random``.

    Examples:
        >>> backoff_seconds(3, base=10, cap=300, rand=lambda: 0.5)
        20.0
        >>> backoff_seconds(10, base=10, cap=300, rand=lambda: 1.0)
        300.0
        >>> backoff_seconds(1, base=0, cap=300, rand=lambda: 0.9)
        0.0
    """
    if retry_number < 1:
        raise ValueError(f"retry_number counts from 1, got {retry_number}")
    if base < 0 or cap < 0:
        raise ValueError(f"base and cap must be non-negative, got base={base} cap={cap}")
    if base == 0:
        return 0.0
    fraction = rand()
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"rand() must return a value in [0, 1], got {fraction}")
    # 2.0 ** 1024 overflows; far below that the window is already pinned at the cap.
    exponent = min(retry_number - 1, 1000)
    window = min(cap, base * 2.0**exponent)
    return fraction * window


def _no_jitter() -> float:
    return 0.5


@dataclass(frozen=True)
class Backoff:
    """How long a retry waits: full jitter between 0 and ``min(cap, base * 2^(n-1))``.

    ``jitter`` returns a float in [0, 1]; the bootstrap passes ``random.random``, tests a
    constant.

    Examples:
        >>> Backoff(base_seconds=10, cap_seconds=300).seconds(3)
        20.0
    """

    base_seconds: float = 60.0
    cap_seconds: float = 1800.0
    jitter: Callable[[], float] = _no_jitter

    def seconds(self, retry_number: int) -> float:
        """Seconds before retry ``retry_number`` (1 for the first)."""
        return backoff_seconds(retry_number, self.base_seconds, self.cap_seconds, self.jitter)

    def window(self, retry_number: int) -> float:
        """The longest retry ``retry_number`` may wait: its jitter's whole window (what a
        deadline must allow for, whatever the jitter draws).

        Examples:
            >>> Backoff(base_seconds=60, cap_seconds=1800).window(8)
            1800.0
        """
        return backoff_seconds(retry_number, self.base_seconds, self.cap_seconds, lambda: 1.0)


@dataclass(frozen=True)
class RetryPolicy:
    """The one retry policy: what a failure is, which budget it charges, how many retries each
    budget holds, and how long a retry waits. Declared once (the bootstrap builds it from the
    settings); a request may only change its budgets (:meth:`for_request`).

    Examples:
        >>> policy = RetryPolicy(backoff=Backoff(base_seconds=0))
        >>> failure = policy.classify("JOB_STATE_FAILED", 14, "The replica was preempted")
        >>> failure, policy.decide(failure, {}).reason, policy.backoff.seconds(1)
        (<FailureClass.PREEMPTED: 'preempted'>, 'preempted: retry 1 of 6', 0.0)
    """

    rules: RuleTable = DEFAULT_RULES
    groups: Mapping[FailureClass, str | None] = field(default_factory=lambda: dict(GROUP_OF))
    budgets: Budgets = field(default_factory=Budgets)
    backoff: Backoff = field(default_factory=Backoff)

    def classify(self, state: str, code: int | None, message: str | None) -> FailureClass:
        """The failure class of an ended job (the first rule of the table that matches)."""
        return classify(state, code, message, self.rules)

    def for_request(self, raw: object) -> RetryPolicy:
        """This policy with a request's ``retryPolicy`` budgets applied.

        Raises:
            InvalidRequest: the request's ``retryPolicy`` does not validate.
        """
        return replace(self, budgets=Budgets.from_request(raw, self.budgets))

    def decide(self, failure: FailureClass, used: Mapping[str, int]) -> RetryDecision:
        """Whether ``failure`` may be retried, given the retries ``used`` per group."""
        return decide(self.budgets, failure, used, self.groups)


@dataclass(frozen=True)
class FallbackRung:
    """One rung of the ladder: from ``after_capacity_failures`` on, use these fields."""

    after_capacity_failures: int
    strategy: str | None = None
    location: str | None = None


@dataclass(frozen=True)
class Placement:
    """Where and how an attempt runs."""

    strategy: str
    location: str


_RUNG_KEYS = {"afterCapacityFailures", "strategy", "location"}


def _check_rung(path: str, raw: object, previous: int | None) -> list[FieldError]:
    if not isinstance(raw, Mapping):
        return [FieldError(path, "must be an object such as {'afterCapacityFailures': 2, ...}")]
    errors = [
        FieldError(f"{path}.{key}", f"unknown field; allowed: {', '.join(sorted(_RUNG_KEYS))}")
        for key in sorted(set(raw) - _RUNG_KEYS, key=str)
    ]
    after = raw.get("afterCapacityFailures")
    if after is None:
        errors.append(FieldError(f"{path}.afterCapacityFailures", "is required"))
    elif not RUNG_THRESHOLD.holds(after):
        errors.append(
            FieldError(
                f"{path}.afterCapacityFailures",
                f"must be an integer from {_range(RUNG_THRESHOLD)}",
            )
        )
    elif previous is not None and after < previous:
        errors.append(
            FieldError(
                f"{path}.afterCapacityFailures",
                f"must not be lower than the previous rung's ({previous}); list rungs in order",
            )
        )
    strategy = raw.get("strategy")
    if strategy is not None and strategy not in STRATEGIES:
        errors.append(FieldError(f"{path}.strategy", f"must be one of {', '.join(STRATEGIES)}"))
    location = raw.get("location")
    if location is not None and not is_region(location):
        errors.append(FieldError(f"{path}.location", f"must be {REGION_HINT}"))
    if strategy is None and location is None:
        errors.append(FieldError(path, "needs a strategy, a location, or both"))
    return errors


def check_fallback(raw: object) -> list[FieldError]:
    """Return every problem with a request's ``fallback`` value ([] when it is valid)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        return [FieldError("fallback", "must be a list of rungs")]
    if len(raw) > MAX_FALLBACK_RUNGS:
        return [FieldError("fallback", f"must have at most {MAX_FALLBACK_RUNGS} rungs")]
    errors: list[FieldError] = []
    previous: int | None = None
    for i, rung in enumerate(raw):
        errors.extend(_check_rung(f"fallback[{i}]", rung, previous))
        after = rung.get("afterCapacityFailures") if isinstance(rung, Mapping) else None
        if is_int(after):
            previous = after
    return errors


def parse_fallback(raw: object) -> tuple[FallbackRung, ...]:
    """Parse a request's ``fallback`` value (None: no ladder).

    Raises:
        InvalidRequest: with every problem, at paths such as ``fallback[0].strategy``.
    """
    errors = check_fallback(raw)
    if errors:
        raise InvalidRequest(errors)
    if raw is None:
        return ()
    assert isinstance(raw, list)
    return tuple(
        FallbackRung(int(r["afterCapacityFailures"]), r.get("strategy"), r.get("location"))
        for r in raw
    )


def placement_for(
    fallback: Sequence[Mapping[str, Any]] | Sequence[FallbackRung] | None,
    capacity_failures: int,
    base_strategy: str,
    base_location: str,
) -> Placement:
    """The placement for the next attempt after ``capacity_failures`` capacity failures.

    Every rung whose threshold is reached applies in order, so the last reached rung wins
    for the fields it sets and earlier rungs still supply the rest.

    Raises:
        InvalidRequest: when ``fallback`` is a raw list that does not validate.

    Examples:
        >>> ladder = [{"afterCapacityFailures": 2, "strategy": "STANDARD"},
        ...           {"afterCapacityFailures": 3, "location": "europe-west4"}]
        >>> placement_for(ladder, 1, "FLEX_START", "us-central1")
        Placement(strategy='FLEX_START', location='us-central1')
        >>> placement_for(ladder, 3, "FLEX_START", "us-central1")
        Placement(strategy='STANDARD', location='europe-west4')
    """
    if capacity_failures < 0:
        raise ValueError(f"capacity_failures must be non-negative, got {capacity_failures}")
    rungs: Sequence[FallbackRung]
    if fallback and all(isinstance(r, FallbackRung) for r in fallback):
        rungs = [r for r in fallback if isinstance(r, FallbackRung)]
    else:
        rungs = parse_fallback(list(fallback) if fallback is not None else None)
    strategy, location = base_strategy, base_location
    for rung in rungs:
        if capacity_failures >= rung.after_capacity_failures:
            strategy = rung.strategy or strategy
            location = rung.location or location
    return Placement(strategy, location)
