"""The deadline fields of a training request: what ``scheduling.strategy = AUTO`` runs on.

A request that names AUTO lets flexjobs choose each attempt's capacity
(:mod:`shared.domain.capacity.rule`); it says by when the job must be done and how much work it is:

- ``deadline``: RFC 3339 with an offset (``2026-12-04T09:00:00Z``); after the request's
  publish time, and at most :data:`MAX_DEADLINE_AHEAD` later;
- ``estimatedRunSeconds``: the work, if it ran uninterrupted from the start;
- ``checkpointIntervalSeconds`` (optional): running time between two complete checkpoints,
  so the work a preemption can lose. Absent means nothing is known to be saved, and AUTO then
  takes Spot only when the whole remaining run fits in the slack twice;
- ``restartOverheadSeconds`` (optional, default :data:`DEFAULT_RESTART_OVERHEAD_SECONDS`):
  what each start costs before training makes progress again (provisioning, image pull,
  restoring the checkpoint).

The four are flexjobs' own envelope fields, like ``totalSteps``: JSON integers (not the
int64-as-string spelling of the Vertex bodies, which only the proto3 parser takes). They are
refused without AUTO, since nothing else would honour them, and AUTO is refused without the
first two. These checks take plain values, so :mod:`shared.domain.request.message` can call them
without importing the policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from shared.domain.model.values import parse_rfc3339, show
from shared.kernel.errors import FieldError

DEADLINE_FIELDS: Final = (
    "deadline",
    "estimatedRunSeconds",
    "checkpointIntervalSeconds",
    "restartOverheadSeconds",
)

#: Starting an attempt on Vertex (provisioning a GPU node, pulling the image, restoring a
#: checkpoint) commonly takes several minutes; 10 minutes is a cautious default.
DEFAULT_RESTART_OVERHEAD_SECONDS: Final = 600
#: A deadline further out than this is refused: such a job is better submitted later, and the
#: record would wait on capacity for longer than anyone watches it.
MAX_DEADLINE_AHEAD: Final = timedelta(days=30)
#: The work and the interval are bounded by the deadline anyway; this keeps the arithmetic
#: plain and the messages short.
MAX_WORK_SECONDS: Final = int(MAX_DEADLINE_AHEAD.total_seconds())
MAX_RESTART_OVERHEAD_SECONDS: Final = 86_400


@dataclass(frozen=True)
class DeadlineOptions:
    """The deadline fields of a valid request, typed (see the module docstring).

    Examples:
        >>> options = DeadlineOptions.read({"deadline": "2026-12-04T09:00:00Z",
        ...                                 "estimatedRunSeconds": 86400})
        >>> options.deadline.isoformat(), options.restart_overhead_seconds
        ('2026-12-04T09:00:00+00:00', 600)
    """

    deadline: datetime
    work_seconds: int
    checkpoint_interval_seconds: int | None = None
    restart_overhead_seconds: int = DEFAULT_RESTART_OVERHEAD_SECONDS

    @classmethod
    def read(cls, options: Mapping[str, object]) -> DeadlineOptions | None:
        """The deadline fields of stored options; None when the request has none usable.

        Options were validated at intake; anything unreadable here (a hand-edited record)
        reads as no deadline, so the caller falls back to its default strategy.
        """
        deadline = parse_rfc3339(options.get("deadline"))
        work = _int(options.get("estimatedRunSeconds"))
        if deadline is None or work is None or work < 1:
            return None
        interval = _int(options.get("checkpointIntervalSeconds"))
        overhead = _int(options.get("restartOverheadSeconds"))
        return cls(
            deadline=deadline,
            work_seconds=work,
            checkpoint_interval_seconds=interval if interval is not None and interval > 0 else None,
            restart_overhead_seconds=(
                overhead
                if overhead is not None and overhead >= 0
                else DEFAULT_RESTART_OVERHEAD_SECONDS
            ),
        )


def _int(value: object) -> int | None:
    """A JSON integer, else None (a boolean is no count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _seconds(
    options: Mapping[str, object], key: str, *, minimum: int, maximum: int
) -> tuple[int | None, list[FieldError]]:
    raw = options.get(key)
    if raw is None:
        return None, []
    value = _int(raw)
    if value is None or not minimum <= value <= maximum:
        message = f"must be an integer from {minimum} to {maximum} (seconds), not {show(raw)}"
        return None, [FieldError(key, message)]
    return value, []


def check_deadline_options(
    options: Mapping[str, object],
    *,
    auto: bool,
    strategy_path: str,
    published_at: datetime | None,
    timeout_seconds: float | None,
    scheduled: bool,
) -> list[FieldError]:
    """Every problem with a training request's deadline fields; empty means valid.

    ``auto`` says the request's strategy is AUTO (named at ``strategy_path``).
    ``published_at`` is when the request was published: a deadline is checked against it, so
    every delivery of one message gets the same verdict; None skips those checks.
    ``timeout_seconds`` is the request's ``scheduling.timeout``: one attempt never runs longer.

    Examples:
        >>> from datetime import UTC
        >>> at = datetime(2026, 12, 1, tzinfo=UTC)
        >>> def check(options, auto=True):
        ...     errors = check_deadline_options(
        ...         options, auto=auto, strategy_path="customJob.jobSpec.scheduling.strategy",
        ...         published_at=at, timeout_seconds=604800, scheduled=False)
        ...     return [e.path for e in errors]
        >>> check({"deadline": "2026-12-03T00:00:00Z", "estimatedRunSeconds": 86400})
        []
        >>> check({"deadline": "2026-12-01T12:00:00Z", "estimatedRunSeconds": 86400})
        ['deadline']
        >>> check({"estimatedRunSeconds": 86400}, auto=False)
        ['estimatedRunSeconds']
    """
    present = [key for key in DEADLINE_FIELDS if options.get(key) is not None]
    if not auto:
        return [
            FieldError(
                key,
                f"applies only when {strategy_path} is AUTO (nothing else would honour it); "
                "remove it or set the strategy to AUTO",
            )
            for key in present
        ]
    errors: list[FieldError] = []
    for key in ("deadline", "estimatedRunSeconds"):
        if options.get(key) is None:
            errors.append(FieldError(key, f"is required when {strategy_path} is AUTO"))
    raw_deadline = options.get("deadline")
    deadline = parse_rfc3339(raw_deadline)
    if raw_deadline is not None and deadline is None:
        errors.append(
            FieldError(
                "deadline",
                "must be an RFC 3339 time with an offset, such as 2026-12-04T09:00:00Z, "
                f"not {show(raw_deadline)}",
            )
        )
    if scheduled and raw_deadline is not None:
        errors.append(
            FieldError(
                "deadline",
                "cannot serve a scheduled request: every slot would get the same deadline",
            )
        )
    work, problems = _seconds(options, "estimatedRunSeconds", minimum=1, maximum=MAX_WORK_SECONDS)
    errors += problems
    _, problems = _seconds(
        options, "checkpointIntervalSeconds", minimum=1, maximum=MAX_WORK_SECONDS
    )
    errors += problems
    overhead, problems = _seconds(
        options, "restartOverheadSeconds", minimum=0, maximum=MAX_RESTART_OVERHEAD_SECONDS
    )
    errors += problems
    if work is None:
        return errors
    run = work + (DEFAULT_RESTART_OVERHEAD_SECONDS if overhead is None else overhead)
    if timeout_seconds is not None and run > timeout_seconds:
        errors.append(
            FieldError(
                "estimatedRunSeconds",
                f"plus the restart overhead is {run}s, longer than scheduling.timeout "
                f"({timeout_seconds:g}s): the on-demand attempt that guarantees the deadline "
                "would be cut off",
            )
        )
    if deadline is not None and published_at is not None:
        errors += _check_deadline_reachable(deadline, published_at, run)
    return errors


def _check_deadline_reachable(
    deadline: datetime, published_at: datetime, run_seconds: int
) -> list[FieldError]:
    if deadline <= published_at:
        when = _stamp(published_at)
        message = f"must be in the future; the request was published at {when}"
        return [FieldError("deadline", message)]
    if deadline - published_at > MAX_DEADLINE_AHEAD:
        days = MAX_DEADLINE_AHEAD.days
        return [FieldError("deadline", f"must be at most {days} days after the request")]
    finish = published_at + timedelta(seconds=run_seconds)
    if finish > deadline:
        return [
            FieldError(
                "deadline",
                f"cannot be met even on on-demand capacity: started at {_stamp(published_at)}, "
                f"the run (estimatedRunSeconds plus the restart overhead, {run_seconds}s) ends "
                f"at {_stamp(finish)}, after {_stamp(deadline)}",
            )
        ]
    return []


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")
