"""What the status page says about records: a row per job, the totals, a job's attempts and
notifications (pure: records in, typed figures out; the templates only format them).

Figures come from the records as the lifecycle wrote them: an ended attempt's queued and
running time, GPU-seconds and cost are on its record (``queuedSeconds``, ``gpuSeconds``,
``cost``...). An attempt still queued or running has none yet, so its time so far is added
from ``attemptSubmittedAt`` / ``attemptStartedAt`` (:func:`shared.domain.request.attempts.usage`,
the same accounting an ended attempt gets) and priced with the same table.

Examples:
    >>> from datetime import UTC
    >>> from shared.domain.policy.pricing import PriceTable
    >>> prices = PriceTable.load(
    ...     "accelerators: {NVIDIA_L4: {STANDARD: 1.0, SPOT: 0.4, FLEX_START: 0.5}}")
    >>> t0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    >>> raw = {"requestId": "r1", "state": "RUNNING", "gpus": 2, "strategy": "SPOT",
    ...        "acceleratorType": "NVIDIA_L4", "attemptSubmittedAt": t0,
    ...        "attemptStartedAt": t0 + timedelta(minutes=30), "vertexJob": "p/customJobs/1"}
    >>> row = job_row(raw, t0 + timedelta(hours=2), prices)
    >>> row.queued_seconds, row.running_seconds, row.gpu_seconds, row.cost_usd, row.savings_usd
    (1800.0, 5400.0, 10800.0, 1.2, 1.8)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from shared.domain.model.records import JobRecord
from shared.domain.model.states import JobState
from shared.domain.model.tally import Tally
from shared.domain.policy.pricing import PriceTable
from shared.domain.request.attempts import usage

ACTIVE_STATES = tuple(s.value for s in JobState if not s.terminal)
#: The windows the totals cover.
WINDOWS = (("24 hours", timedelta(hours=24)), ("7 days", timedelta(days=7)))


@dataclass(frozen=True)
class Money:
    """What some GPU time cost, what on-demand capacity would have, and the difference."""

    cost_usd: float = 0.0
    on_demand_usd: float = 0.0
    savings_usd: float = 0.0
    # False when some of it has no price (an accelerator or strategy not in the table).
    priced: bool = True

    def __add__(self, other: Money) -> Money:
        return Money(
            round(self.cost_usd + other.cost_usd, 2),
            round(self.on_demand_usd + other.on_demand_usd, 2),
            round(self.savings_usd + other.savings_usd, 2),
            self.priced and other.priced,
        )

    @classmethod
    def of(cls, cost: Mapping[str, Any]) -> Money:
        """A record's or attempt's ``cost`` map (``{costUsd, onDemandUsd, savingsUsd,
        priced}``); a missing one is nothing spent."""
        if not cost:
            return cls()
        return cls(
            _number(cost.get("costUsd")),
            _number(cost.get("onDemandUsd")),
            _number(cost.get("savingsUsd")),
            bool(cost.get("priced", True)),
        )


@dataclass(frozen=True)
class JobRow:
    """One job as the list shows it: ended attempts plus the current one so far."""

    request_id: str
    display_name: str | None
    kind: str | None
    state: str
    attempt: int
    accelerator: str | None
    gpus: int
    strategy: str | None
    created_at: datetime | None
    queued_seconds: float
    running_seconds: float
    gpu_seconds: float
    money: Money
    # True when the figures include an attempt still queued or running.
    live: bool

    @property
    def cost_usd(self) -> float:
        return self.money.cost_usd

    @property
    def savings_usd(self) -> float:
        return self.money.savings_usd


def current_usage(record: JobRecord, now: datetime) -> dict[str, float] | None:
    """Queued and running seconds and GPU-seconds of the attempt now queued or running, or
    None when no attempt is (RETRYING, ended, or a RUNNING record that predates
    ``attemptStartedAt``, whose split is unknown)."""
    if record.state not in (JobState.QUEUED, JobState.RUNNING) or not record.vertex_job:
        return None
    started = record.attempt_started_at
    if record.state is JobState.RUNNING and started is None:
        return None
    submitted = record.vertex_create_time or record.attempt_submitted_at
    return usage(submitted, started, now, record.gpus)


def job_row(raw: Mapping[str, Any], now: datetime, prices: PriceTable) -> JobRow:
    """The list's row of a stored record (read with :data:`~shared.status.listing.LIST_FIELDS`)."""
    record = JobRecord.decode(raw)
    totals = record.totals
    queued = totals.get("queuedSeconds", 0.0)
    running = totals.get("runningSeconds", 0.0)
    gpu = totals.get("gpuSeconds", 0.0)
    money = Money.of(record.cost)
    live = current_usage(record, now)
    if live is not None:
        queued += live["queuedSeconds"]
        running += live["runningSeconds"]
        gpu += live["gpuSeconds"]
        money += _priced(record, live["gpuSeconds"], prices)
    return JobRow(
        request_id=record.request_id,
        display_name=record.display_name,
        kind=record.kind,
        state=record.state.value if record.state_known else str(raw.get("state") or "UNKNOWN"),
        attempt=record.attempt,
        accelerator=record.accelerator_type,
        gpus=record.gpus,
        strategy=record.strategy,
        created_at=record.created_at,
        queued_seconds=queued,
        running_seconds=running,
        gpu_seconds=gpu,
        money=money,
        live=live is not None,
    )


def _priced(record: JobRecord, gpu_seconds: float, prices: PriceTable) -> Money:
    if not gpu_seconds:
        return Money()
    if not record.accelerator_type or not record.strategy:
        return Money(priced=False)
    estimate = prices.estimate(record.accelerator_type, record.strategy, gpu_seconds)
    return Money(estimate.cost_usd, estimate.on_demand_usd, estimate.savings_usd, estimate.priced)


@dataclass(frozen=True)
class Window:
    """The jobs that ended in one window, added up."""

    label: str
    since: datetime
    jobs: int
    gpu_seconds: float
    money: Money
    # True when the totals read their bound of records: the figures are a lower bound.
    truncated: bool


@dataclass(frozen=True)
class Totals:
    """The top of the page: active jobs by state, and each window's figures."""

    active: tuple[tuple[str, int], ...]
    windows: tuple[Window, ...]
    as_of: datetime

    @property
    def active_total(self) -> int:
        return sum(count for _, count in self.active)


def totals(
    active: Mapping[str, int], ended: Iterable[Mapping[str, Any]], now: datetime, *, capped: bool
) -> Totals:
    """Totals from the active counts by state and the records that ended in the longest
    window (read newest first; ``capped`` when that read stopped at its bound, which makes
    only the longer windows incomplete: the newest records were all read).

    A job counts in the window in which it ended, with everything its attempts used.
    """
    rows = [(r["endedAt"], r) for r in ended if isinstance(r.get("endedAt"), datetime)]
    oldest = min((at for at, _ in rows), default=None)
    windows = []
    for label, span in WINDOWS:
        since = now - span
        inside = [r for at, r in rows if at >= since]
        money = sum((Money.of(_mapping(r.get("cost"))) for r in inside), Money())
        windows.append(
            Window(
                label=label,
                since=since,
                jobs=len(inside),
                gpu_seconds=sum(_number(r.get("gpuSeconds")) for r in inside),
                money=money,
                truncated=capped and (oldest is None or oldest > since),
            )
        )
    counts = tuple((state, int(active.get(state, 0))) for state in ACTIVE_STATES)
    return Totals(counts, tuple(windows), now)


def tallied(tally: Tally, now: datetime) -> Totals:
    """The totals from the tick's tally (:mod:`shared.domain.model.tally`): its active counts,
    and each window to the tally's 10-minute buckets. Never truncated: the tick added every
    job that ended.

    Examples:
        >>> from datetime import UTC
        >>> from shared.domain.model.tally import built
        >>> t = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
        >>> ended = {"endedAt": t, "gpuSeconds": 60.0, "cost": {"costUsd": 0.5}}
        >>> figures = tallied(built({"QUEUED": 3}, [ended], [], t), t)
        >>> figures.active_total, [(w.label, w.jobs, w.money.cost_usd) for w in figures.windows]
        (3, [('24 hours', 1, 0.5), ('7 days', 1, 0.5)])
    """
    windows = []
    for label, span in WINDOWS:
        since = now - span
        added = tally.window(since)
        money = Money(
            round(added.cost_usd, 2),
            round(added.on_demand_usd, 2),
            round(added.savings_usd, 2),
            added.unpriced == 0,
        )
        windows.append(Window(label, since, added.jobs, added.gpu_seconds, money, False))
    counts = tuple((state, int(tally.active.get(state, 0))) for state in ACTIVE_STATES)
    return Totals(counts, tuple(windows), tally.as_of)


@dataclass(frozen=True)
class AttemptRow:
    """One attempt as the job page's table shows it."""

    number: int
    state: str
    strategy: str | None
    location: str | None
    vertex_job: str | None
    submitted_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    queued_seconds: float | None
    running_seconds: float | None
    gpu_seconds: float | None
    work_lost_seconds: float | None
    money: Money | None
    resumed_from: str | None
    error_class: str | None
    error_message: str | None


def attempt_rows(attempts: Sequence[Mapping[str, Any]]) -> list[AttemptRow]:
    """The attempts' table, by attempt number (stored ids sort as text: "10" < "9")."""
    rows = []
    for doc in sorted(attempts, key=lambda a: _count(a.get("attempt"))):
        cost = doc.get("cost")
        rows.append(
            AttemptRow(
                number=_count(doc.get("attempt")),
                state=str(doc.get("state") or "UNKNOWN"),
                strategy=_text(doc.get("strategy")),
                location=_text(doc.get("location")),
                vertex_job=_text(doc.get("vertexJob")),
                submitted_at=_time(doc.get("submittedAt")),
                started_at=_time(doc.get("startedAt")),
                ended_at=_time(doc.get("endedAt")),
                queued_seconds=_maybe(doc.get("queuedSeconds")),
                running_seconds=_maybe(doc.get("runningSeconds")),
                gpu_seconds=_maybe(doc.get("gpuSeconds")),
                work_lost_seconds=_maybe(doc.get("workLostSeconds")),
                money=Money.of(cost) if isinstance(cost, Mapping) and cost else None,
                resumed_from=_text(doc.get("resumedFrom")),
                error_class=_text(doc.get("errorClass")),
                error_message=_text(doc.get("errorMessage")),
            )
        )
    return rows


@dataclass(frozen=True)
class NotificationRow:
    """A notification a job or a deployment produced: published, or still in its outbox."""

    state: str
    attempt: int
    reason: str | None
    published: bool


class Notifying(Protocol):
    """A record that notifies through its outbox: a job's or a deployment's."""

    @property
    def notified(self) -> tuple[dict[str, Any], ...]: ...

    @property
    def outbox(self) -> tuple[dict[str, Any], ...]: ...


def notifications(record: Notifying) -> list[NotificationRow]:
    """What the record notified (oldest first), then what it has yet to publish."""
    return [
        NotificationRow(
            state=str(m.get("state") or "?"),
            attempt=_count(m.get("attempt")),
            reason=_text(m.get("reason")),
            published=published,
        )
        for published, messages in ((True, record.notified), (False, record.outbox))
        for m in messages
    ]


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _maybe(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _time(value: Any) -> datetime | None:
    return value if isinstance(value, datetime) else None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class DeploymentRow:
    """One Spot deployment as the deployments list shows it."""

    request_id: str
    display_name: str | None
    state: str
    endpoint: str | None
    model: str | None
    spot: str
    created_at: datetime | None
    deployed_at: datetime | None
    ended_at: datetime | None
    reason: str | None


def deployment_row(raw: Mapping[str, Any]) -> DeploymentRow:
    """The list's row of a stored deployment record."""
    spot = raw.get("spot")
    return DeploymentRow(
        request_id=str(raw.get("requestId") or ""),
        display_name=_text(raw.get("displayName")),
        state=str(raw.get("state") or "UNKNOWN"),
        endpoint=_text(raw.get("endpoint")),
        model=_text(raw.get("model")),
        spot="yes" if spot is True else ("no" if spot is False else "-"),
        created_at=_time(raw.get("createdAt")),
        deployed_at=_time(raw.get("deployedAt")),
        ended_at=_time(raw.get("endedAt")),
        reason=_text(raw.get("reason")),
    )
