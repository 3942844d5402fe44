"""Submitting one attempt of a training request exactly once, settling its record, and
cancelling (until Vertex confirms) any job no record will follow.

Intake's attempt 1 and every retry (the lifecycle) call :func:`submit_attempt`; the order of
its steps and what each failure does to the claim are
:func:`shared.app.steps.exactly_once.create_once`'s.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from shared.app.commands import Outcome
from shared.app.context import AttemptPorts, CapacityPorts
from shared.app.ports import Claimed, Submission
from shared.app.steps.cancels import cancel_until_confirmed
from shared.app.steps.exactly_once import create_once
from shared.app.steps.outbox import apply_and_notify
from shared.domain.capacity.model import Situation, Tuning
from shared.domain.capacity.regions import (
    RegionDecision,
    Regions,
    decide_across_regions,
    decide_in_region,
)
from shared.domain.capacity.rule import FALLBACK_DECISION, decide
from shared.domain.capacity.situations import situation_from_record
from shared.domain.decisions.jobs import adoptable
from shared.domain.decisions.recovery import (
    failed,
    parked,
)
from shared.domain.decisions.submissions import (
    next_placement,
    refused_away,
    region_chosen,
    unanswered_away,
)
from shared.domain.model.changes import Change
from shared.domain.model.ids import LABEL_CLAIM, LABEL_REQUEST, label_value, labels_for
from shared.domain.model.records import JobRecord
from shared.domain.model.strategies import AUTO, Strategy
from shared.domain.model.values import clip
from shared.domain.model.vertex_jobs import VertexJob
from shared.domain.request.attempts import attempt_spec
from shared.domain.request.auto_regions import RegionOptions
from shared.domain.request.message import JobRequest
from shared.kernel.errors import (
    BackendRejected,
    BackendUnavailable,
    ClaimExpired,
    QuotaExhausted,
)
from shared.kernel.events import Event, logged
from shared.kernel.logs import get_logger

log = get_logger("submission")


@dataclass(frozen=True)
class Prepared:
    """What an attempt resumes from, and extra record fields; computed once it is claimed."""

    resume_from: str | None = None
    record_extra: dict[str, Any] = field(default_factory=dict)
    # When the previous attempt's job ended, as its attempt document says (None: a first
    # attempt, or not known): only logged, as the recovery gap up to this one's submission.
    previous_ended_at: datetime | None = None


@dataclass(frozen=True)
class AttemptPlan:
    """Where and how one attempt runs; ``prepare`` runs after the claim (it may do I/O)."""

    attempt: int
    strategy: str
    location: str
    prepare: Callable[[], Prepared] = Prepared
    # FLEX_START's maxWaitDuration when the capacity policy chose it (AUTO); None: the body's.
    max_wait_seconds: int | None = None


def decided_plan(
    attempt: int,
    location: str,
    situation: Situation | None,
    prepare: Callable[[], Prepared] = Prepared,
    regional: RegionDecision | None = None,
) -> AttemptPlan:
    """The plan of an AUTO request's attempt: the capacity policy's strategy and max wait,
    with the decision recorded on the record (``capacity``) when the attempt is. With
    ``regional`` (a request allowing several regions), that region's decision, and the
    region and why in the recorded decision (``capacity.location``, ``regionReason``).

    A record whose deadline fields cannot be read any more (hand-edited) runs on STANDARD:
    the one choice that cannot lose the job to capacity. That decision is recorded as final,
    like any other: nothing may give the attempt up or leave it (a decision left from before
    would, at its ``waitUntil``, for ever).
    """
    if regional is not None:
        decision = regional.decision
        location = regional.region
    else:
        decision = decide(situation) if situation is not None else FALLBACK_DECISION
    if situation is None:
        log.warning("AUTO request without a usable deadline: attempt runs on STANDARD")
    capacity = decision.to_dict()
    if regional is not None:
        capacity.update(location=regional.region, regionReason=clip(regional.reason, 500))
    fields = {"maxWaitSeconds": decision.max_wait_seconds, "capacity": capacity}
    log.info(
        f"capacity for attempt {attempt}: {decision.strategy}",
        extra={"fields": {"reason": decision.reason, "maxWait": decision.max_wait_seconds}},
    )

    def prepared() -> Prepared:
        made = prepare()
        return replace(made, record_extra={**made.record_extra, **fields})

    return AttemptPlan(attempt, decision.strategy, location, prepared, decision.max_wait_seconds)


def regional_plan(
    ports: CapacityPorts,
    record: JobRecord,
    attempt: int,
    location: str,
    prepare: Callable[[], Prepared] = Prepared,
) -> tuple[AttemptPlan, JobRecord]:
    """The plan of a retry of an AUTO record (attempt ``attempt``), in the region the region
    rule chooses when the request allows several (:mod:`shared.domain.capacity.regions`);
    with the record as it stands after.

    The region is recorded before anything may create the attempt (``regionChoice``, one
    conditional write, :func:`~shared.domain.decisions.submissions.region_chosen`), and a
    region recorded already is kept: the rule reads the clock, so a redelivery after a crash
    (or a create that timed out and may have happened) could choose another region, and its
    label lookup there would miss the job made in the first. Recorded first, every delivery
    of the attempt looks up and creates in one region.
    """
    situation = auto_situation(ports, record, before=attempt)
    options = RegionOptions.read(record.options)
    home = record.home or ports.settings.location
    # A region that refused a create is left out (home never is: the request names it).
    allowed = tuple(
        r for r in options.allowed(home) if r == home or r not in record.regions_refused
    )
    # Attempt 1 is never moved: no region has history yet, and intake records no region
    # before its create, so a tick taking over an intake that died after its create must
    # look up (and create) where intake did, or it would make a second job elsewhere.
    if situation is None or len(allowed) == 1 or attempt == 1:
        return decided_plan(attempt, location, situation, prepare), record
    regions = Regions(
        current=record.location or home,
        allowed=allowed,
        pinned=options.pinned,
        checkpoint_gb=options.checkpoint_gb,
        egress_usd_per_gb=ports.settings.egress_usd_per_gb,
        gpus=max(1, record.gpus),
    )
    recorded = record.chosen_location(attempt)
    if recorded is not None:
        chosen = decide_in_region(situation, regions, recorded)
        return decided_plan(attempt, recorded, situation, prepare, chosen), record
    chosen = decide_across_regions(situation, regions)
    now = ports.clock()
    written = ports.jobs.write(
        record.request_id,
        lambda rec: region_chosen(rec, attempt, chosen.region, chosen.reason, now),
        record.stored,
    )
    after = written.record if written is not None else record
    recorded = after.chosen_location(attempt)
    if recorded is not None and recorded != chosen.region:
        # Another delivery chose first: its region stands (its create may have happened).
        chosen = decide_in_region(situation, regions, recorded)
    log.info(
        f"region for attempt {attempt}: {chosen.region}",
        extra={"fields": {"reason": chosen.reason, "recorded": recorded is not None}},
    )
    # Not recorded (the record no longer waits for this attempt, or it is not due): the
    # claim refuses it too, so nothing is created on this plan.
    return decided_plan(attempt, chosen.region, situation, prepare, chosen), after


def auto_situation(
    ports: CapacityPorts, record: JobRecord, before: int, running: str | None = None
) -> Situation | None:
    """What the capacity policy knows of an AUTO record: its progress, and attempts 1 to
    ``before - 1``, which ended (their documents read here: AUTO records only; at most
    ``MAX_SWITCHES`` plus the retry budgets of them). ``running``: the strategy of the attempt
    running now, asked at one of its checkpoints; its running time up to the record's latest
    checkpoint counts as saved work then (what a request without ``totalSteps`` has to go
    by)."""
    ended = [ports.jobs.get_attempt(record.request_id, n) or {} for n in range(1, before)]
    now = ports.clock()
    started, saved = record.attempt_started_at, record.latest_checkpoint
    if running is not None and started is not None and saved is not None:
        # Saved up to the checkpoint, not up to now: what ran since is lost if it is left.
        ran = max(0.0, (min(now, saved.at) - started).total_seconds())
        ended.append(
            {
                "strategy": running,
                "runningSeconds": ran,
                "workLostSeconds": 0.0,
                "location": record.location,
            }
        )
    return situation_from_record(
        record,
        ended,
        now,
        ports.prices,
        budgets=ports.retry.for_request(record.options.get("retryPolicy")).budgets,
        backoff=ports.retry.backoff,
        running=running,
        tuning=Tuning().scaled(ports.settings.auto_time_scale),
    )


def submit_attempt(
    request: JobRequest, plan: AttemptPlan, claim: Callable[[], Claimed | None], ports: AttemptPorts
) -> Outcome:
    """Create (or adopt) the Vertex job of one attempt and record it, exactly once.

    The attempt's labels are its idempotency key: a job found under them was created by a
    delivery that died before recording it, and is adopted rather than created again. A fresh
    claim (the first any delivery took of this attempt) skips that lookup, and the record as
    claimed is what recording the job decides on: one Vertex call and one write, no read.

    Raises:
        TransientError: any fault that redelivery may cure.
    """
    try:
        return create_once(_Attempt(request, plan, claim, ports))
    except _GivenUp:
        return Outcome.PARKED


class _Attempt:
    """The steps of one attempt's creation (:class:`~shared.app.steps.exactly_once.Creation`),
    in the order and with the failures :func:`~shared.app.steps.exactly_once.create_once`
    decides."""

    def __init__(
        self,
        request: JobRequest,
        plan: AttemptPlan,
        claim: Callable[[], Claimed | None],
        ports: AttemptPorts,
    ) -> None:
        self.request, self.plan, self.ports = request, plan, ports
        self.claim = claim
        self.request_id = request.request_id
        self.labels = labels_for(self.request_id, plan.attempt)
        self.prepared = functools.cache(plan.prepare)

    def find(self) -> VertexJob | None:
        return _find(self.ports, self.request, self.labels[LABEL_REQUEST], self.plan)

    def create(self, claimed: Claimed) -> VertexJob:
        plan, request = self.plan, self.request
        body = attempt_spec(
            request.kind,
            request.spec,
            run_id=label_value(self.request_id),
            attempt=plan.attempt,
            resume_from=self.prepared().resume_from,
            strategy=plan.strategy,
            max_wait_seconds=plan.max_wait_seconds,
        )
        # Which claim made it: the tick cancels a job an expired claim left once the live
        # claim's own job shows (is_stray), without waiting for that claim to expire.
        made_by = {LABEL_CLAIM: claimed.token} if claimed.token else {}
        labels = {**self.labels, **made_by}
        return self.ports.backend.create(
            replace(request, spec=body),
            labels,
            plan.location,
            before_send=functools.partial(self._still_held, claimed),
        )

    def _still_held(self, claimed: Claimed) -> None:
        """The claim is a lease: once it expired, another delivery may have taken it over,
        looked the attempt up (before this create could land) and created. So a delivery
        whose lookup, checkpoint lookup or request building outlasted its claim (retried
        through an outage, slow under load) sends no create; its redelivery looks up again.
        Checked last before the create is sent (the backend calls it).

        Raises:
            ClaimExpired: the claim expired before the create could be sent.
        """
        now = self.ports.clock()
        if claimed.expires_at is None or now < claimed.expires_at:
            return
        late = (now - claimed.expires_at).total_seconds()
        log.warning(
            "claim expired before the create: nothing created",
            extra={"fields": {"attempt": self.plan.attempt, "lateSeconds": late}},
        )
        raise ClaimExpired(
            f"request {self.request_id!r}: the claim of attempt {self.plan.attempt} expired "
            f"{late:.1f}s before its create could be sent"
        )

    def record(self, claimed: Claimed, job: VertexJob, adopted: bool) -> Outcome:
        ports, plan, request_id, clock = self.ports, self.plan, self.request_id, self.ports.clock
        strategy, extra = plan.strategy, self.prepared().record_extra
        if adopted:
            # An earlier delivery made it, perhaps on another decision (AUTO decides from
            # the time): the record says what Vertex runs, read from the job itself.
            strategy, extra = adopted_fields(job, strategy, extra, clock())
        submission = Submission(
            request_id=request_id,
            attempt=plan.attempt,
            vertex_job=job,
            strategy=strategy,
            location=plan.location,
            resumed_from=self.prepared().resume_from,
            record_extra=extra,
        )
        if not ports.jobs.record_submission(submission, clock(), claimed.stored):
            # Cancelled meanwhile, or another job holds this attempt: no record will ever
            # follow this job, so it must not keep running.
            cancel_until_confirmed(ports, request_id, [job.name])
            assert claimed.token is not None  # create_once runs no step without a token
            ports.jobs.release(request_id, claimed.token, clock())
            log.info("job cancelled: the record will not take it", extra=_job_fields(job))
            return Outcome.CANCELLED
        outcome = Outcome.ADOPTED if adopted else Outcome.SUBMITTED
        ended = self.prepared().previous_ended_at
        gap = {"recoveryGapSeconds": (clock() - ended).total_seconds()} if ended else {}
        event = logged(
            Event.JOB_SUBMITTED,
            attempt=plan.attempt,
            outcome=outcome.value,
            **_job_fields(job, plan)["fields"],
            **gap,
        )
        log.info(f"attempt {plan.attempt} {outcome.value}", extra=event)
        return outcome

    def release(self, token: str) -> None:
        self.ports.jobs.release(self.request_id, token, self.ports.clock())

    def refused(self, token: str, exc: BackendRejected) -> Outcome:
        ports, plan, request_id = self.ports, self.plan, self.request_id
        if _sent_home(ports, request_id, plan, exc):
            self.release(token)
            return Outcome.PARKED
        reason = f"attempt {plan.attempt} refused by Vertex AI: {exc}"
        apply_and_notify(ports, request_id, lambda rec: failed(rec, ports.clock(), reason))
        self.release(token)
        return Outcome.FAILED

    def parked(self, token: str, exc: QuotaExhausted) -> Outcome:
        ports, plan = self.ports, self.plan
        if _sent_home(ports, self.request_id, plan, exc):
            self.release(token)
            return Outcome.PARKED

        def decide(rec: JobRecord) -> Change | None:
            delay = ports.backoff(rec.quota_retries + 1)
            return parked(rec, ports.clock(), plan.attempt, delay, str(exc))

        ports.jobs.apply(self.request_id, decide)
        self.release(token)
        return Outcome.PARKED


class _GivenUp(Exception):
    """The attempt was given up in a region that did not answer (its next one is due)."""


def _find(
    ports: AttemptPorts, request: JobRequest, label: str, plan: AttemptPlan
) -> VertexJob | None:
    """The attempt's job an earlier delivery made, looked up by its labels where the plan
    runs it. A takeover that cannot even look it up there (the region answered neither its
    create nor this lookup) gives the attempt up, when it is away from home."""
    try:
        found = ports.backend.find(label, plan.attempt, plan.location, request.kind)
    except BackendUnavailable as exc:
        if _given_up_away(ports, request.request_id, plan, exc):
            raise _GivenUp from exc
        raise
    return adoptable(found)


def submit_due(
    ports: CapacityPorts,
    record: JobRecord,
    attempt: int,
    prepare: Callable[[], Prepared] = Prepared,
) -> Outcome | None:
    """Submit attempt ``attempt`` of a record whose submission is due (a retry, a parked
    attempt, an admitted one), exactly once: its placement (the fallback ladder's rung, or
    AUTO's decision and region), a claim of that attempt, then :func:`submit_attempt`.
    ``prepare`` (after the claim) says what the attempt resumes from."""
    request_id = record.request_id
    settings = ports.settings
    placement = next_placement(record, settings.location)
    if JobRequest(request_id, str(record.kind), record.request).strategy == AUTO:
        # Across regions, the region is recorded first (the record moves on by a write).
        plan, record = regional_plan(ports, record, attempt, placement.location, prepare)
    else:
        plan = AttemptPlan(attempt, placement.strategy, placement.location, prepare)
    request = JobRequest(request_id, str(record.kind), record.request, location=plan.location)
    claimed_on = record.stored

    def claim() -> Claimed | None:
        # None: not due, or another delivery is submitting it.
        now = ports.clock()
        return ports.jobs.claim_retry(
            request_id, attempt, now, settings.claim_ttl_seconds, claimed_on, location=plan.location
        )

    return submit_attempt(request, plan, claim, ports)


def adopted_fields(
    job: VertexJob, planned: str, extra: dict[str, Any], now: datetime
) -> tuple[str, dict[str, Any]]:
    """The strategy and record fields of an adopted job: its own strategy and max wait when
    Vertex reports them (the plan's otherwise), and for AUTO the decision amended to say so.

    A decision taken for another strategy says nothing of the adopted job: it is no longer
    ``final``, and its ``waitUntil`` is now, so a job still queued is given up at the next
    look and the policy chooses again from what it knows then (a running one is kept).

    Examples:
        >>> from datetime import UTC
        >>> now = datetime(2026, 12, 1, tzinfo=UTC)
        >>> job = VertexJob("p/customJobs/1", "JOB_STATE_QUEUED", {}, strategy="SPOT")
        >>> decision = {"strategy": "STANDARD", "reason": "behind", "final": True}
        >>> strategy, fields = adopted_fields(job, "STANDARD", {"capacity": decision}, now)
        >>> strategy, fields["capacity"]["final"], fields["capacity"]["waitUntil"] == now
        ('SPOT', False, True)
    """
    if job.strategy is None:
        return planned, extra  # Vertex did not say: the plan stands
    strategy = job.strategy
    wait = job.max_wait_seconds if strategy == Strategy.FLEX_START else None
    wait = None if not wait else int(wait)  # 0s: indefinitely, which the record says as null
    if "capacity" not in extra:
        return strategy, extra
    decision = dict(extra["capacity"])
    if decision.get("strategy") != strategy or decision.get("maxWaitSeconds") != wait:
        before = decision.get("strategy")
        decision.update(
            strategy=strategy,
            maxWaitSeconds=wait,
            final=False,
            waitUntil=now,
            reason=f"adopted the job an earlier delivery created on {strategy} "
            f"(this delivery's choice was {before}: {decision.get('reason')})",
        )
    return strategy, {**extra, "capacity": decision, "maxWaitSeconds": wait}


def _job_fields(job: VertexJob, plan: AttemptPlan | None = None) -> dict[str, Any]:
    fields: dict[str, Any] = {"vertexJob": job.name}
    if plan is not None:
        fields.update(strategy=plan.strategy, location=plan.location)
    return {"fields": fields}


def _given_up_away(ports: AttemptPorts, request_id: str, plan: AttemptPlan, exc: Exception) -> bool:
    """Whether the attempt was given up in the region it moved to, which answered neither its
    create nor this lookup (:func:`~shared.domain.decisions.submissions.unanswered_away`);
    False when it is not away from home, and the fault is raised as it always was."""
    now = ports.clock()
    change = ports.jobs.apply(
        request_id, lambda rec: unanswered_away(rec, plan.attempt, plan.location, str(exc), now)
    )
    if change is None:
        return False
    log.warning(f"attempt {plan.attempt} given up in {plan.location}: it does not answer")
    return True


def _sent_home(ports: AttemptPorts, request_id: str, plan: AttemptPlan, exc: Exception) -> bool:
    """Whether a create refused in a region the attempt moved to was sent back to the
    request's location (:func:`~shared.domain.decisions.submissions.refused_away`); False
    when the attempt was not moved, and the refusal counts as it always has."""
    now = ports.clock()
    change = ports.jobs.apply(
        request_id, lambda rec: refused_away(rec, plan.attempt, plan.location, str(exc), now)
    )
    if change is None:
        return False
    log.warning(f"attempt {plan.attempt} refused in {plan.location}: back to its region")
    return True
