"""AUTO's situations, read from records: the work left, what earlier attempts cost, and when a
running or queued attempt should be left."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from shared.domain.capacity.model import (
    MAX_SWITCHES,
    STANDARD,
    AttemptOutcome,
    CapacityDecision,
    Prices,
    Situation,
    Tuning,
)
from shared.domain.capacity.regions import CROSS_REGION_SECONDS_PER_GB, DEFAULT_CHECKPOINT_GB
from shared.domain.capacity.rule import decide
from shared.domain.decisions.recovery import work_lost_seconds
from shared.domain.model.records import JobRecord
from shared.domain.model.states import JobState, from_vertex
from shared.domain.policy.pricing import PriceTable
from shared.domain.policy.retry import CAPACITY, PREEMPTION, Backoff, Budgets
from shared.domain.request.auto_regions import RegionOptions
from shared.domain.request.deadlines import DeadlineOptions

# --- the lifecycle's questions -----------------------------------------------------------------


def waited_in_vain(
    record: JobRecord, job_name: str, vertex_state: str, now: datetime
) -> str | None:
    """Why to give up the AUTO record's current attempt, still queued for capacity past its
    decision's ``waitUntil`` (the reason recorded with the switch); None to let it wait.

    Vertex ends a FLEX_START wait itself at ``maxWaitDuration``; ``waitUntil`` is the
    policy's earlier look (:data:`FLEX_REVISIT_SECONDS`), and the only bound a Spot attempt
    has. An attempt that runs, or is being cancelled or switched already, is left alone.

    Examples:
        >>> from datetime import UTC
        >>> due = datetime(2026, 12, 1, 9, tzinfo=UTC)
        >>> record = JobRecord.decode({"state": "QUEUED", "vertexJob": "j", "strategy": "SPOT",
        ...                            "capacity": {"waitUntil": due}})
        >>> waited_in_vain(record, "j", "JOB_STATE_PENDING", due)
        'no SPOT capacity by 09:00:00Z: the capacity policy chooses again'
        >>> waited_in_vain(record, "j", "JOB_STATE_RUNNING", due) is None
        True
    """
    wait_until = record.capacity.get("waitUntil")
    if not isinstance(wait_until, datetime) or now < wait_until:
        return None
    if record.state is not JobState.QUEUED or record.vertex_job != job_name:
        return None
    if from_vertex(vertex_state) is not JobState.QUEUED:
        return None  # it started (or ended) meanwhile: the settlement takes it from here
    if record.yielding or record.cancel_requested:
        return None
    at = wait_until.astimezone(UTC)
    return f"no {record.strategy} capacity by {at:%H:%M:%S}Z: the capacity policy chooses again"


def switch_from_on_demand(s: Situation) -> CapacityDecision | None:
    """Asked at a checkpoint of a running on-demand attempt: the decision to leave it (the
    checkpoint just saved the work, so leaving loses next to nothing), or None to keep it."""
    decision = decide(replace(s, running=STANDARD))
    return None if decision.keep or decision.strategy == STANDARD else decision


# --- building the situation from what flexjobs records ---------------------------------------


def remaining_work(
    options: DeadlineOptions,
    progress: float | None,
    history: Sequence[AttemptOutcome],
) -> float:
    """The work the latest complete checkpoint has not saved, in seconds.

    With ``totalSteps`` the record's ``progress`` (checkpoint step / total) says it exactly.
    Without, it is inferred from the attempts: each saved its running time less the work it
    lost, its restart overhead, and the time it spent reading its checkpoint across regions
    (which saved nothing either).

    Examples:
        >>> from datetime import UTC
        >>> options = DeadlineOptions(datetime(2026, 12, 3, tzinfo=UTC), 36000, 1800, 600)
        >>> remaining_work(options, 0.25, ())
        27000.0
        >>> remaining_work(options, None, (AttemptOutcome("SPOT", "preempted", 7800, 0, 1200),))
        30000.0
        >>> moved = AttemptOutcome("SPOT", "preempted", 7800, 0, 1200, "us-east1", 800)
        >>> remaining_work(options, None, (moved,))
        30800.0
    """
    work = float(options.work_seconds)
    if progress is not None:
        return work * (1.0 - min(1.0, max(0.0, progress)))
    overhead = options.restart_overhead_seconds
    saved = sum(
        max(0.0, a.running_seconds - a.lost_seconds - float(overhead) - a.transfer_seconds)
        for a in history
        if a.running_seconds > 0
    )
    return max(0.0, work - saved)


def _left(budgets: Budgets | None, used: Mapping[str, int], group: str) -> int | None:
    return None if budgets is None else max(0, budgets.budget(group) - used.get(group, 0))


def retry_delay(backoff: Backoff | None, used: Mapping[str, int]) -> float:
    """The longest the retry after a failure of the next attempt may wait: the backoff's
    window for the next retry of either budget a cheap attempt's failure charges (a
    preemption, or a capacity failure: a stockout, a FLEX_START wait expired).

    Examples:
        >>> retry_delay(Backoff(base_seconds=60, cap_seconds=1800), {"preemption": 7})
        1800.0
        >>> retry_delay(Backoff(base_seconds=60, cap_seconds=1800), {})
        60.0
    """
    if backoff is None:
        return 0.0
    return max(backoff.window(used.get(group, 0) + 1) for group in (PREEMPTION, CAPACITY))


def situation_from_record(
    record: JobRecord,
    attempts: Sequence[Mapping[str, Any]],
    now: datetime,
    prices: PriceTable | None,
    *,
    budgets: Budgets | None = None,
    backoff: Backoff | None = None,
    running: str | None = None,
    tuning: Tuning = Tuning(),
) -> Situation | None:
    """The situation of an AUTO record: for a retry (``running`` None) or at a checkpoint of
    its running attempt. None when its options carry no usable deadline.

    ``attempts`` are the ``attempts/{n}`` documents of the attempts that ended (for a retry:
    all but the next; at a checkpoint: all but the running one), oldest first, with their
    ``workLostSeconds`` already accounted. ``budgets`` are the request's retry budgets (the
    retry policy's, with its ``retryPolicy`` applied), ``backoff`` its retry backoff (None:
    retries wait nothing).
    """
    options = DeadlineOptions.read(record.options)
    if options is None:
        return None
    history = tuple(
        _with_transfer(_with_lost(AttemptOutcome.from_attempt(a), a, record), a, record)
        for a in attempts
    )
    return Situation(
        now=now,
        deadline=options.deadline,
        origin=record.created_at or now,
        work_seconds=float(options.work_seconds),
        remaining_seconds=remaining_work(options, record.progress, history),
        restart_overhead_seconds=float(options.restart_overhead_seconds),
        checkpoint_interval_seconds=_float(options.checkpoint_interval_seconds),
        prices=Prices.of(prices, record.accelerator_type),
        history=history,
        running=running,
        preemptions_left=_left(budgets, record.retries, PREEMPTION),
        capacity_failures_left=_left(budgets, record.retries, CAPACITY),
        switches_left=max(0, MAX_SWITCHES - record.switches),
        tuning=tuning,
        retry_delay_seconds=retry_delay(backoff, record.retries),
    )


def _with_lost(
    outcome: AttemptOutcome, attempt: Mapping[str, Any], record: JobRecord
) -> AttemptOutcome:
    """``outcome`` with the running time no complete checkpoint saved, for an ended attempt
    whose ``workLostSeconds`` is not written yet (it is written when the next attempt is
    submitted, after this plan): what the latest checkpoint says, as that write will
    (:func:`~shared.domain.decisions.recovery.work_lost_seconds`), never counted as done."""
    if "workLostSeconds" in attempt or not isinstance(attempt.get("endedAt"), datetime):
        return outcome
    resumed = attempt.get("resumedFrom")
    lost = work_lost_seconds(
        dict(attempt), record.latest_checkpoint, resumed if isinstance(resumed, str) else None
    )
    return replace(outcome, lost_seconds=lost)


def _with_transfer(
    outcome: AttemptOutcome, attempt: Mapping[str, Any], record: JobRecord
) -> AttemptOutcome:
    """``outcome`` with the time its attempt spent reading its checkpoint across regions: an
    attempt that resumed (``resumedFrom``) in a region other than the checkpoint's (the
    record's home) read ``checkpointSizeGb`` at :data:`CROSS_REGION_SECONDS_PER_GB` first."""
    home = record.home
    where = outcome.location
    if not attempt.get("resumedFrom") or home is None or where is None or where == home:
        return outcome
    gb = RegionOptions.read(record.options).checkpoint_gb or DEFAULT_CHECKPOINT_GB
    return replace(outcome, transfer_seconds=gb * CROSS_REGION_SECONDS_PER_GB)


def situation_for_first_attempt(
    options: Mapping[str, Any],
    accelerator: str | None,
    origin: datetime,
    now: datetime,
    prices: PriceTable | None,
    *,
    budgets: Budgets | None = None,
    backoff: Backoff | None = None,
    tuning: Tuning = Tuning(),
) -> Situation | None:
    """The situation of attempt 1 of an AUTO request: nothing done, no history.

    ``origin`` is when the request was made (its publish time, else ``now``); ``accelerator``
    its GPU (:func:`shared.domain.request.attempts.gpu_shape`). None without a usable deadline.
    """
    read = DeadlineOptions.read(options)
    if read is None:
        return None
    return Situation(
        now=now,
        deadline=read.deadline,
        origin=origin,
        work_seconds=float(read.work_seconds),
        remaining_seconds=float(read.work_seconds),
        restart_overhead_seconds=float(read.restart_overhead_seconds),
        checkpoint_interval_seconds=_float(read.checkpoint_interval_seconds),
        prices=Prices.of(prices, accelerator),
        preemptions_left=_left(budgets, {}, PREEMPTION),
        capacity_failures_left=_left(budgets, {}, CAPACITY),
        tuning=tuning,
        retry_delay_seconds=retry_delay(backoff, {}),
    )


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)
