"""Admission service: a request waits in its queue until the queue (or its cohort) and the
project's quota have room for its GPUs, and only then is its job created in Vertex AI.

On when an instance has a queue file (``FLEXJOBS_QUEUES``); off otherwise, and then nothing
here runs: creates go straight to Vertex AI, and a quota refusal parks as before.

- **Intake** (:func:`enter_queue`) checks the request's ``queue`` and ``priority`` and
  refuses one that could never be admitted (:func:`~shared.domain.admission.demand.admission_of`),
  records it as QUEUED with reason ``admission``, then runs a pass.
- **A pass** (:func:`admit_waiting`) reads the ledger and the waiting records, orders them by
  :func:`~shared.domain.admission.rule.admit` (priority, fair share, arrival) and admits each
  in one conditional batch with its record (:meth:`AdmissionRecords.admit`); an admitted
  request is then created by the exactly-once routine every due submission uses
  (:func:`~shared.app.steps.attempts.submit_due`). The order is computed on a snapshot; the
  quota is checked again on each admission's fresh read, so racing passes never admit past it.
- **Release** (:func:`release`): a record that ended gives its GPUs back, and a pass runs. The
  tick also heals the ledger against the active records and runs a pass every minute
  (:func:`tick`).
- **Preemption** (opt-in per queue, :func:`preempt_for`): when the highest-priority head held
  may take GPUs from running jobs of a lower priority
  (:func:`~shared.domain.admission.preemption.choose_victims`), each victim is ended by
  choice, as AUTO's switches are (:func:`~shared.app.steps.switches.yield_attempt`: marked,
  then cancelled). Its CANCELLED end puts it back to waiting with no budget charged
  (:func:`~shared.domain.decisions.recovery.settle`) and gives its GPUs back; the held head
  takes them in the pass that follows. Victims still being cancelled count as freed, so the
  next pass (a tick, a release) never ends more jobs for the same GPUs. One head per pass:
  the next is looked at once the GPUs it would share have moved.

A request with no GPUs (a CPU-only job) holds no quota: it is never queued.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from shared.app.commands import Outcome
from shared.app.context import CapacityPorts
from shared.app.ports import MAX_WAITING_ELSEWHERE, MAX_WAITING_PER_QUEUE, QuotaLimits
from shared.app.repository.jobs import AdmissionRecords
from shared.app.steps.attempts import submit_due
from shared.app.steps.outbox import apply_and_notify, flush_outbox
from shared.app.steps.sweep import Sweep
from shared.app.steps.switches import yield_attempt
from shared.domain.admission.config import Queues, Resource, pool_of
from shared.domain.admission.demand import admission_of, demand_of
from shared.domain.admission.estimate import Running
from shared.domain.admission.ledger import (
    MAX_OBSERVED,
    Entry,
    Ledger,
    admission_fields,
    demand_from_list,
    entry_of,
    heal_candidates,
    held_reason,
    hold_limit,
    holds_quota,
    jobs_of,
)
from shared.domain.admission.line import Waiter, within_bound, without
from shared.domain.admission.preemption import choose_victims
from shared.domain.admission.quota import Ceiling, Demand, add
from shared.domain.admission.rule import (
    Plan,
    Standing,
    Workload,
    admit,
    never_fits,
    order_key,
    queue_order,
)
from shared.domain.admission.summary import summarise
from shared.domain.decisions.recovery import PREEMPTED, failed
from shared.domain.decisions.submissions import pending_attempt
from shared.domain.model.records import JobRecord
from shared.domain.model.states import JobState, from_vertex
from shared.domain.model.values import clip
from shared.domain.model.watch import Watch, key_of
from shared.domain.request.message import JobRequest
from shared.kernel.errors import (
    FieldError,
    FlexjobsError,
    InvalidRequest,
    JobGone,
    QuotaUnreadable,
)
from shared.kernel.events import Event, logged
from shared.kernel.logs import get_logger, request_context

log = get_logger("admission")

#: The tick reads the project's quota limits at most this often (a failed read counts too:
#: an API that is down or not enabled is asked again after as long).
QUOTA_READ_EVERY: Final = timedelta(minutes=10)

#: Submits one admitted request (intake: the due-submission routine; the tick: run_retry).
Submit = Callable[[str], object]


def demand_for(request: JobRequest, strategy: str, location: str) -> Demand:
    """The GPUs a request holds at once, on the pool ``strategy`` draws on (for AUTO: the
    strategy its first decision chose)."""
    return demand_of(request.kind, request.spec, region=location, pool=pool_of(strategy))


def enter_queue(
    request: JobRequest,
    demand: Demand,
    ports: CapacityPorts,
    queues: Queues,
) -> Outcome | None:
    """Record a request as waiting in its queue, then run a pass; None when a record of it
    exists already (a duplicate delivery, or a cancel that came first: the caller's case).

    Raises:
        InvalidRequest: an unknown queue, a priority the queue does not allow, or a demand
            that could never be admitted (it is refused and recorded, never left waiting).
    """
    admissions = ports.jobs.admissions
    # Refused only when the queue file itself can never fit it: a quota read lower than its
    # demand holds it, saying so, as it holds those already waiting (_fail_inadmissible).
    ceiling = Ceiling.of(queues, {})
    options = request.options
    chosen = admission_of(queues, options.get("queue"), options.get("priority"), demand, ceiling)
    waiting = admissions.count_waiting(chosen.queue)
    if waiting >= MAX_WAITING_PER_QUEUE and ports.jobs.get(request.request_id) is None:
        raise InvalidRequest(
            [
                FieldError(
                    "queue",
                    f"queue {chosen.queue!r} has {waiting} requests waiting, the most one "
                    f"queue holds ({MAX_WAITING_PER_QUEUE}); submit it again once some have "
                    "been admitted",
                )
            ]
        )
    now = ports.clock()
    run = options.get("estimatedRunSeconds")
    run_seconds = run if isinstance(run, int) and not isinstance(run, bool) and run > 0 else None
    limit = hold_limit(
        request.kind,
        request.strategy,
        request.max_wait_seconds,
        request.timeout_seconds,
        ladder=bool(options.get("fallback")),
    )
    fields = admission_fields(
        chosen.queue, chosen.priority, demand, now, run_seconds, limit_seconds=limit
    )
    if admissions.enter(request, fields, now) is None:
        return None
    log.info(
        f"waiting for admission in queue {chosen.queue}",
        extra=logged(
            Event.JOB_WAITING,
            queue=chosen.queue,
            priority=chosen.priority,
            gpus=sum(demand.values()),
        ),
    )
    admitted = admit_waiting(ports, queues, lambda rid: submit_admitted(ports, rid))
    if request.request_id in admitted:
        return Outcome.SUBMITTED
    return Outcome.WAITING


def submit_admitted(ports: CapacityPorts, request_id: str) -> Outcome | None:
    """Create an admitted request's first attempt, exactly once (the claim refuses it when
    another delivery, or the tick, is creating it already).

    A preempted request admitted again resumes from its checkpoint, which only the
    lifecycle's retry finds (:func:`shared.app.services.settle.run_retry`): it is left due for the
    tick, never created here from scratch."""
    record = ports.jobs.get(request_id)
    if record is None or pending_attempt(record) != 1:
        return None
    return submit_due(ports, record, 1)


def admit_waiting(ports: CapacityPorts, queues: Queues, submit: Submit) -> list[str]:
    """One admission pass: admit what fits, in the rule's order, and create each admitted
    request; returns the requestIds admitted and created. Each admission and each create is
    isolated: one that fails is logged and left for the next pass (an admitted request whose
    create failed is a due submission the tick finishes)."""
    return _pass(ports, queues, submit)[0]


#: What a pass between ticks (an intake, a release) weighs of each queue's line: its first
#: this many in the queue's order (:func:`~shared.domain.admission.rule.queue_order`). Every
#: queue's head is weighed, so no backlog hides another queue; only a backfill from deeper
#: in a line waits for the tick's pass, which weighs every line whole.
PASS_WINDOW: Final = 25
#: A pass between ticks saves the line once its sync read at least this many records: the
#: next sync then starts from this one's mark. Fewer, and the stamps keep them for the next.
SAVE_AFTER: Final = 8


@dataclass
class _Waiting:
    """The records a pass decides on, and the line it saves after (None: read whole, no
    line to save; ``version``: what the save must still find)."""

    records: list[Waiter]
    line: Watch | None = None
    version: Any = None
    dirty: bool = False
    #: The queues whose whole line this pass read from the records (a saved head that ran
    #: dry): weighed past their bound.
    refilled: frozenset[str] = frozenset()


def _pass(
    ports: CapacityPorts,
    queues: Queues,
    submit: Submit,
    *,
    tick: tuple[Sequence[JobRecord], Any] | None = None,
    whole: bool = False,
) -> tuple[list[str], list[Workload]]:
    """:func:`admit_waiting`, and the workloads still waiting after it (for the tick's
    summary, so the line is read once per tick). ``tick``: the tick's active records and the
    mark they were read as of (the watch list's): the line is built from them and saved,
    which heals it; otherwise the pass reads the saved line. ``whole`` (the tick's): every
    line is weighed whole; otherwise each queue's first :data:`PASS_WINDOW`."""
    admissions = ports.jobs.admissions
    now = ports.clock()
    ledger = admissions.ledger()
    sweep = Sweep("admission")
    found = _read_line(ports, queues, now, tick)
    if tick is None:
        found = _refilled(ports, found)
    waiting = _lines(ports, queues, sweep, now, found.records, confirm=whole)
    reading = ports.quota_limits is not None
    if reading:
        ledger = _read_unasked(ports, queues, ledger, waiting, now) or ledger
    left: set[str] = set()  # ended while they waited, taken out of the line by this pass
    for ended in (r for r in waiting if r.ended):
        # Ended while it waited, before records said so (admission.stage ENDED): out of
        # the line, so it neither holds its queue nor fills the read's bound.
        if sweep.each(ended.request_id, "ended", admissions.leave_line, ended.request_id, now):
            left.add(ended.request_id)  # out of its line now (a failed write stays in it)
    workloads = waiting_workloads(waiting)
    weighed = workloads if whole else _windowed(workloads, found.line, found.refilled)
    admitted: list[str] = []
    gone: set[str] = set()  # left the line in this pass: admitted, or failed as inadmissible
    plan = None
    standing = Standing(
        usage=ledger.usage(),
        ceiling=ledger.ceiling(queues, reading=reading),
        decayed=ledger.decayed_now(now, queues.half_life_seconds),
        # Backfill (rule 4): the estimate of starts replays the rule without it (no ``now``).
        now=now,
        releases=ledger.releases(),
    )
    if weighed:
        plan = admit(queues, standing, weighed)
    for workload in plan.admitted if plan is not None else ():
        with request_context(workload.request_id):
            if not sweep.each(
                workload.request_id,
                "admit",
                functools.partial(admissions.admit, reading=reading),
                workload,
                queues,
                now,
            ):
                continue  # no longer waiting, or no longer fits on the fresh read
            admitted.append(workload.request_id)
            gone.add(workload.request_id)
            log.info(
                f"admitted in queue {workload.queue}",
                extra=logged(
                    Event.JOB_ADMITTED,
                    queue=workload.queue,
                    priority=workload.priority,
                    gpus=sum(workload.demand.values()),
                    waitedSeconds=(now - workload.arrival).total_seconds(),
                ),
            )
            sweep.each(
                workload.request_id,
                "notify",
                flush_outbox,
                workload.request_id,
                ports.jobs,
                ports.notifier,
            )
            if sweep.each(workload.request_id, "create", submit, workload.request_id) is None:
                # Not created here (its create failed, or is left to the tick): due.
                admitted.remove(workload.request_id)
    if plan is not None:
        _note_held(plan, waiting, admissions, sweep, now)
        gone.update(_fail_inadmissible(ports, queues, plan, waiting, sweep))
        if plan.held:
            sweep.each(None, "preempt", preempt_for, ports, queues, plan, standing)
    if found.line is not None and found.dirty:
        line = without(found.line, gone | left, now)
        # The tick's line heals: it is written over one a pass saved meanwhile.
        save = functools.partial(admissions.save_line, over=tick is not None)
        sweep.each(None, "save line", save, line, found.version)
    return admitted, [w for w in workloads if w.request_id not in gone]


def _read_line(
    ports: CapacityPorts,
    queues: Queues,
    now: datetime,
    tick: tuple[Sequence[JobRecord], Any] | None,
) -> _Waiting:
    """The waiting records: from the tick's active records (and the line built from them,
    to save), else from the saved line synced, else read whole (no line yet, or one that
    does not read: the tick writes it)."""
    admissions = ports.jobs.admissions
    if tick is not None:
        active, mark = tick
        waiting = [r for r in active if r.awaiting_admission]
        if mark is None:  # the tick read every record whole (no watch list): no mark
            return _Waiting([Waiter.of_record(r) for r in waiting])
        stored = [r.stored for r in waiting]
        entries = [(key, s) for s in stored if s is not None and (key := key_of(s)) is not None]
        if len(entries) == len(waiting):  # else a record has no stored form: read whole
            rebuilt = admissions.rebuilt(entries, mark, now)
            if rebuilt is not None:
                return _Waiting(rebuilt.waiters(), rebuilt.line, rebuilt.version, dirty=True)
        return _Waiting(_read_whole(ports, queues))
    found = admissions.line(now)
    if found is not None:
        # Saved once a sync reads enough to be worth a write (the stamps keep whatever it
        # did not save for the next sync): writing the whole line after every intake would
        # cost each intake the line's encoding.
        worth = found.reads >= SAVE_AFTER
        return _Waiting(found.waiters(), found.line, found.version, dirty=worth)
    return _Waiting(_read_whole(ports, queues))


def _refilled(ports: CapacityPorts, found: _Waiting) -> _Waiting:
    """The waiting records with the whole line, read from the records, of each queue whose
    saved head ran dry: fewer than :data:`PASS_WINDOW` of it still wait at or before its
    bound. Past its bound wait requests the saved line does not hold; weighed without them,
    its head might be one of those, and another queue's lower priority would go first
    (found by review). Rare: more than half of a queue's saved head left between two ticks."""
    line = found.line
    if line is None or not line.bounds:
        return found
    left: Counter[str] = Counter()
    for w in found.records:  # one pass: this runs on every intake
        name = str(w.admission.get("queue"))
        if name in line.bounds and w.awaiting_admission and not w.cancel_requested:
            left[name] += within_bound(line, name, w.order)
    dry = [name for name in sorted(line.bounds) if left[name] < PASS_WINDOW]
    if not dry:
        return found
    admissions = ports.jobs.admissions
    kept = [w for w in found.records if str(w.admission.get("queue")) not in dry]
    read = [w for name in dry for w in admissions.waiting(name, MAX_WAITING_PER_QUEUE)]
    log.info(
        "a saved queue head ran dry: its line read from the records",
        extra={"fields": {"queues": dry, "read": len(read)}},
    )
    return dataclasses.replace(found, records=kept + read, refilled=frozenset(dry))


def _read_whole(ports: CapacityPorts, queues: Queues) -> list[Waiter]:
    """Each queue's line read from the records, as many as it may hold and then some (to end
    those past it), and the oldest waiting anywhere (those of a queue the file no longer
    names): what a pass reads when there is no line to read."""
    admissions = ports.jobs.admissions
    records = [
        r
        for name in sorted(queues.queues)
        for r in admissions.waiting(name, MAX_WAITING_PER_QUEUE + MAX_WAITING_ELSEWHERE)
    ]
    elsewhere = admissions.waiting(None, MAX_WAITING_ELSEWHERE)
    return records + [r for r in elsewhere if r.admission.get("queue") not in queues.queues]


def _windowed(
    workloads: Sequence[Workload], line: Watch | None, whole: frozenset[str] = frozenset()
) -> list[Workload]:
    """Each queue's first :data:`PASS_WINDOW` in its order, of what ``line`` holds of it
    whole: none past the queue's bound (:func:`~shared.domain.admission.line.within_bound`),
    where requests it never held may stand ahead of those that joined since; a queue in
    ``whole`` was read whole from the records."""
    by_queue: dict[str, list[Workload]] = defaultdict(list)
    for workload in workloads:
        order = order_key(workload.priority, workload.arrival, workload.request_id)
        if line is None or workload.queue in whole or within_bound(line, workload.queue, order):
            by_queue[workload.queue].append(workload)
    return [w for line in by_queue.values() for w in queue_order(line)[:PASS_WINDOW]]


def _lines(
    ports: CapacityPorts,
    queues: Queues,
    sweep: Sweep,
    now: datetime,
    waiting: Sequence[Waiter],
    *,
    confirm: bool,
) -> list[Waiter]:
    """Every queue's whole line, oldest first: a pass never decides on part of one (a queue's
    backlog hiding another queue's requests). A line past :data:`MAX_WAITING_PER_QUEUE` (two
    intakes that raced past the count) ends its newest requests, saying why: refused late,
    never left waiting unseen; only with ``confirm`` (the tick's pass), and only as many as
    a count of the records confirms, so a line that drifted (a record deleted by hand) never
    ends a request intake accepted. Records waiting in a queue the file no longer names are
    kept, at most :data:`MAX_WAITING_ELSEWHERE` (oldest first) per pass: each fails, saying
    why."""
    by_queue: dict[str, list[Waiter]] = defaultdict(list)
    for record in waiting:
        by_queue[str(record.admission.get("queue"))].append(record)
    kept: list[Waiter] = []
    elsewhere: list[Waiter] = []
    for name, line in sorted(by_queue.items()):
        line.sort(key=_arrival)
        if name not in queues.queues:
            elsewhere += line
            continue
        excess = len(line) - MAX_WAITING_PER_QUEUE
        if excess > 0 and confirm:
            # A failed count ends nobody (0): the next tick counts again.
            counted = sweep.read(f"count {name}", ports.jobs.admissions.count_waiting, 0, name)
            excess = min(excess, counted - MAX_WAITING_PER_QUEUE)
        for late in line[len(line) - excess :] if excess > 0 and confirm else []:
            reason = (
                f"queue {name!r} holds more than {MAX_WAITING_PER_QUEUE} waiting requests; "
                "this one came past the limit"
            )
            sweep.each(
                late.request_id,
                "queue full",
                apply_and_notify,
                ports,
                late.request_id,
                lambda rec, why=reason: failed(rec, now, why) if rec.awaiting_admission else None,
            )
        kept += line[:MAX_WAITING_PER_QUEUE]
    elsewhere.sort(key=_arrival)
    return kept + elsewhere[:MAX_WAITING_ELSEWHERE]


def _arrival(record: Waiter) -> tuple[datetime, str]:
    since = record.admission.get("waitingSince")
    return (since if isinstance(since, datetime) else _NEVER, record.request_id)


#: Where a record with no arrival time goes in its line's order: first.
_NEVER = datetime.min.replace(tzinfo=UTC)


def _read_unasked(
    ports: CapacityPorts,
    queues: Queues,
    ledger: Ledger,
    waiting: Sequence[Waiter],
    now: datetime,
) -> Ledger | None:
    """Read the quota limits of the resources the waiting records ask for that were never
    asked of the quota system (a (region, accelerator, pool) first asked for since the last
    read), before anything is admitted on them; the ledger after the read (None: none to
    read, or a read failed within :data:`QUOTA_READ_EVERY`, which is not tried again: those
    requests wait, saying so, as for any quota not read)."""
    ceiling = ledger.ceiling(queues, reading=True)
    unasked = sorted(
        {resource for record in waiting for resource in record.demand if ceiling.unread(resource)}
    )
    if not unasked or ports.quota_limits is None:
        return None
    failed_lately = (
        ledger.unreadable is not None
        and ledger.observed_at is not None
        and now - ledger.observed_at < QUOTA_READ_EVERY
    )
    if failed_lately:
        return None
    read_limits(ports, ports.quota_limits, unasked[:MAX_OBSERVED], now)
    return ports.jobs.admissions.ledger()


def waiting_workloads(waiting: Sequence[Waiter]) -> list[Workload]:
    """The workloads of the records waiting in their queues (none that ended or is being
    cancelled: a record that ended waits for nothing). A retry waiting out its backoff is
    one (``Workload.not_before``): the rule holds it until then, so that what it waits for
    is kept from lower priorities, as for any held head."""
    return [
        w
        for r in waiting
        if r.awaiting_admission and not r.cancel_requested and (w := r.workload()) is not None
    ]


def preempt_for(ports: CapacityPorts, queues: Queues, plan: Plan, standing: Standing) -> list[str]:
    """End the running jobs the highest-priority held head of a preempting queue may take
    GPUs from, so that it fits (see the module docstring); returns the victims' requestIds.
    Nobody is ended when the victims already being cancelled free enough, or when no set of
    allowed victims makes it fit. Decided on a fresh read of the ledger, not the pass's
    snapshot: what was released meanwhile, or admitted earlier in this pass, counts."""
    ledger: Ledger | None = None
    for held in sorted(plan.held, key=lambda h: -h.workload.priority):
        workload = held.workload
        if workload.not_before is not None and workload.not_before > ports.clock():
            continue  # a retry in its backoff: victims ended now would free GPUs it may not use
        queue = queues.queues.get(workload.queue)
        if queue is None or not (queue.preemption.within_queue or queue.preemption.within_cohort):
            continue
        if ledger is None:
            ledger = ports.jobs.admissions.ledger()
            standing = dataclasses.replace(standing, usage=ledger.usage())
        running, freeing, records = _running(ports, queues, ledger, queue.name, queue.cohort)
        usage: dict[str, dict[Resource, int]] = {q: dict(h) for q, h in standing.usage.items()}
        for entry in freeing:
            add(usage, entry.queue, entry.demand, -1)
        victims = choose_victims(
            queues, dataclasses.replace(standing, usage=usage), running, workload
        )
        if victims is None:
            continue  # nobody it may end makes it fit: a lower head may still
        if not _still_waits(ports, ledger, workload.request_id):
            continue  # admitted, cancelled or ended since the pass read it: nobody is ended
        sweep = Sweep("preemption")
        ended: list[str] = []
        for victim in victims:
            reason = (
                f"preempted by {workload.request_id} (priority {workload.priority}) "
                f"in queue {workload.queue}"
            )
            with request_context(victim.request_id):
                record = records[victim.request_id]
                if sweep.each(victim.request_id, "preempt", _preempt, ports, record, reason):
                    ended.append(victim.request_id)
        if ended:
            log.info(
                f"preempted for {workload.request_id}",
                extra={"fields": {"victims": ended, "queue": workload.queue}},
            )
        return ended  # one head per pass ((): it fits once the freeing ones have ended)
    return []


def _still_waits(ports: CapacityPorts, ledger: Ledger, request_id: str) -> bool:
    """Whether a head the pass found held still waits, on a fresh read of its record and
    the ledger read for its victims: running jobs are never ended for a request that was
    admitted, cancelled or ended since the pass read the line."""
    if request_id in ledger.held:
        return False
    record = ports.jobs.get(request_id)
    return record is not None and record.awaiting_admission and not record.cancel_requested


def _running(
    ports: CapacityPorts, queues: Queues, ledger: Ledger, queue: str, cohort: str | None
) -> tuple[list[Running], list[Entry], dict[str, JobRecord]]:
    """The admitted jobs a head of ``queue`` could preempt (its own queue's, and its
    cohort's), read fresh, with their records as read; and the entries of those already
    ended or being preempted (their GPUs count as freed)."""
    running: list[Running] = []
    freeing: list[Entry] = []
    records: dict[str, JobRecord] = {}
    for request_id, entry in sorted(ledger.held.items()):
        other = queues.queues.get(entry.queue)
        if other is None or (entry.queue != queue and (cohort is None or other.cohort != cohort)):
            continue
        record = ports.jobs.get(request_id)
        if record is None:
            continue
        if record.state.terminal or record.yielding.get("why") == PREEMPTED:
            # Ended (a cancelled job still CANCELLING keeps its entry until Vertex ends
            # it) or being preempted: its GPUs are on their way back.
            freeing.append(entry)
            continue
        if record.state is not JobState.RUNNING or not record.vertex_job:
            continue  # not yet created, or waiting in Vertex: nothing to end
        if record.yielding or record.cancel_requested:
            continue
        priority = record.admission.get("priority")
        if not isinstance(priority, int) or isinstance(priority, bool):
            continue
        saved = record.latest_checkpoint
        records[request_id] = record
        running.append(
            Running(
                request_id,
                entry.queue,
                priority,
                entry.demand,
                started=record.attempt_started_at,
                checkpoint=saved.at if saved is not None else None,
            )
        )
    return running, freeing, records


def _preempt(ports: CapacityPorts, record: JobRecord, reason: str) -> bool:
    """End one victim's running attempt by choice, decided on the record as
    :func:`_running` read it (the write is conditional on it: a record that moved on is
    read again); True when this call marked it."""
    if not record.vertex_job:
        return False
    return yield_attempt(
        ports, record.request_id, record.vertex_job, why=PREEMPTED, reason=reason, known=record
    )


def _note_held(
    plan: Plan,
    waiting: Sequence[Waiter],
    admissions: AdmissionRecords,
    sweep: Sweep,
    now: datetime,
) -> None:
    """Record on each held head what it waits for (one write per queue at most, and only
    when it changed: a head whose record, as the line holds it, says so already costs no
    read)."""
    held_by = {r.request_id: r.admission.get("heldBy") for r in waiting}
    for held in plan.held:
        reason = held_reason(str(s) for s in held.shortfalls)
        later = held.workload.not_before
        if later is not None and later > now:
            reason = held_reason([f"its retry's backoff, until {later.isoformat()}", reason])
        request_id = held.workload.request_id
        if held_by.get(request_id) != reason:
            sweep.each(request_id, "held", admissions.note_held, request_id, reason, now)


def _fail_inadmissible(
    ports: CapacityPorts,
    queues: Queues,
    plan: Plan,
    waiting: Sequence[Waiter],
    sweep: Sweep,
) -> list[str]:
    """A waiting request that can never be admitted under the queue file (it changed since
    the request arrived) fails with the reason, rather than wait for ever. One that only the
    project's quota as last read from the Cloud Quotas API keeps out waits, saying so: one
    read (a default dimension, a limit lowered for a day) must not end accepted work for
    good, and the next read may lift it. Returns the requestIds failed."""
    configured = Ceiling.of(queues, {})
    admissions = ports.jobs.admissions
    held_by = {r.request_id: r.admission.get("heldBy") for r in waiting}
    failed_ids: list[str] = []
    for workload in plan.inadmissible:
        if not never_fits(queues, configured, workload):
            why = "the project's quota as read from the Cloud Quotas API is below its demand"
            rid = workload.request_id
            if held_by.get(rid) != why:
                sweep.each(rid, "held", admissions.note_held, rid, why, ports.clock())
            continue
        reason = (
            f"can never be admitted in queue {workload.queue!r} as the queue file now stands "
            f"(it changed since the request arrived)"
        )
        now = ports.clock()
        done = sweep.each(
            workload.request_id,
            "inadmissible",
            apply_and_notify,
            ports,
            workload.request_id,
            lambda rec, why=reason, at=now: (
                failed(rec, at, why) if rec.awaiting_admission else None
            ),
        )
        if done is not None:
            failed_ids.append(workload.request_id)
    return failed_ids


def release(
    ports: CapacityPorts, queues: Queues, request_ids: Sequence[str], submit: Submit
) -> None:
    """Give back the GPUs of records that ended, then run a pass when any were held."""
    if ports.jobs.admissions.release(list(request_ids)):
        log.info("admission released", extra={"fields": {"requestIds": list(request_ids)[:10]}})
        admit_waiting(ports, queues, submit)


def resources_in_use(queues: Queues, ledger: Ledger, active: Sequence[JobRecord]) -> list[Resource]:
    """The (region, accelerator, pool) resources whose quota admission may weigh: the queues'
    quotas, the file's ``projectQuota``, what the ledger holds and what the active records ask
    (waiting ones included); sorted, at most :data:`MAX_OBSERVED`."""
    found: set[Resource] = set(queues.project_quota)
    for queue in queues.queues.values():
        found.update(queue.quotas)
    for entry in ledger.held.values():
        found.update(entry.demand)
    for record in active:
        found.update(demand_from_list(record.admission.get("demand")))
    return sorted(found)[:MAX_OBSERVED]


def observe_quota(
    ports: CapacityPorts, queues: Queues, limits: QuotaLimits, active: Sequence[JobRecord]
) -> str | None:
    """Read the project's quota limits when the last read (``observedAt``) is
    :data:`QUOTA_READ_EVERY` old or more, and cache them in the ledger: every admission's
    ceiling until the next read (:meth:`Ceiling.of`: where nothing was read, the file's
    ``projectQuota`` applies). A read that fails keeps the last limits read, records why
    (``quotaUnreadable``) and logs a warning: a failed read never lifts the ceiling.

    Returns why the read failed (None: read, or not due)."""
    admissions = ports.jobs.admissions
    now = ports.clock()
    ledger = admissions.ledger()
    if ledger.observed_at is not None and now - ledger.observed_at < QUOTA_READ_EVERY:
        return None
    return read_limits(ports, limits, resources_in_use(queues, ledger, active), now)


def read_limits(
    ports: CapacityPorts, limits: QuotaLimits, resources: Sequence[Resource], now: datetime
) -> str | None:
    """One read of ``resources``' limits from the quota system, cached in the ledger beside
    what earlier reads learned (:meth:`~shared.domain.admission.ledger.Ledger.with_limits`).
    A read that fails keeps the limits read before, records why (``quotaUnreadable``) and
    logs a warning: a failed read never lifts the ceiling. Returns why it failed (None:
    read)."""
    admissions = ports.jobs.admissions
    try:
        read = dict(limits.limits(resources))
    except QuotaUnreadable as exc:
        reason = clip(str(exc), 500) or type(exc).__name__
        admissions.observe_quota({}, (), reason, now)
        log.warning(
            "quota limits unreadable: the last limits read stay, the queue file's elsewhere",
            extra={"fields": {"reason": reason, "asked": len(resources)}},
        )
        return reason
    asked = set(resources)
    kept = {r: n for r, n in sorted(read.items()) if r in asked}
    admissions.observe_quota(kept, asked, None, now)
    log.info(
        "quota limits read",
        extra={
            "fields": {
                "read": len(kept),
                "asked": len(resources),
                "limits": {str(r): n for r, n in list(kept.items())[:20]},
            }
        },
    )
    return None


def tick(
    ports: CapacityPorts,
    queues: Queues,
    active: Sequence[JobRecord],
    submit: Submit,
    *,
    quota: QuotaLimits | None = None,
    read: bool = True,
    mark: Any = None,
) -> list[str]:
    """The tick's share: read the quota limits when due (``quota``; None: never read),
    heal the ledger against the active records the tick read, then run a pass over every
    line whole. ``read``: ``active`` is every active record as of ``mark`` (the watch
    list's; None: read whole, with no mark), so the pass takes the waiting records from them
    and saves the line built from them (False: the tick's read failed, and the pass reads
    the saved line). Returns the requestIds admitted. The read is isolated: one that fails
    never stops the pass."""
    if quota is not None:
        Sweep("admission").each(None, "quota", observe_quota, ports, queues, quota, active)
    admissions = ports.jobs.admissions
    admitted: dict[str, Entry] = {}
    for record in active:
        entry = entry_of({"admission": record.admission})
        if entry is not None:
            admitted[record.request_id] = entry
    seen = admissions.ledger()
    drop, restore = heal_candidates(seen, admitted)
    # Confirmed on a fresh read each. Dropped: the entry of a record gone, of one that ended
    # and whose jobs Vertex has ended (a cancelled running job's GPUs come back here, at the
    # first tick that reads its job ended: holds_quota), and of one waiting again. Otherwise
    # normally none: the ledger and its records are written in one batch; a hand edit or a
    # deleted record leaves them apart. Each drop names the entry it saw (``at``), so one
    # admitted again meanwhile is kept.
    confirmed_drop: dict[str, datetime] = {}
    confirmed_restore: dict[str, Entry] = {}
    ended: list[str] = []  # given back as they should be (a confirmed cancel): not a heal
    for request_id in drop:
        fresh = ports.jobs.get(request_id)
        if fresh is None or (
            not holds_quota(fresh, _live_jobs(ports, fresh))
            if fresh.state.terminal
            else entry_of({"admission": fresh.admission}) is None
        ):
            confirmed_drop[request_id] = seen.held[request_id].at
            if fresh is not None and fresh.state.terminal:
                ended.append(request_id)
    for request_id in restore:
        fresh = ports.jobs.get(request_id)
        entry = entry_of({"admission": fresh.admission}) if fresh is not None else None
        if fresh is not None and not fresh.state.terminal and entry is not None:
            confirmed_restore[request_id] = entry
    if admissions.heal(confirmed_drop, confirmed_restore):
        healed_ids = sorted(set(confirmed_drop) - set(ended))
        fields = {"released": ended[:10], "dropped": healed_ids[:10]}
        fields["restored"] = sorted(confirmed_restore)[:10]
        if healed_ids or confirmed_restore:
            log.warning("admission ledger healed", extra={"fields": fields})
        else:
            log.info("admission released at the tick", extra={"fields": fields})
    admitted_now, still_waiting = _pass(
        ports, queues, submit, tick=(active, mark) if read else None, whole=True
    )
    Sweep("admission").each(
        None, "summary", summarise_for_operators, ports, queues, active, still_waiting
    )
    return admitted_now


def _live_jobs(ports: CapacityPorts, record: JobRecord) -> set[str] | None:
    """Of an ended record's Vertex jobs, those Vertex has not ended yet (a cancelled one goes
    CANCELLING first), read one by one: nothing else follows a job whose cancel Vertex
    accepted, and the tick's listing reaches back only to the record's end. None when a
    read fails: not known, so the record keeps its GPUs until a later tick knows."""
    names = sorted(n for n in {*jobs_of(record), *record.pending_cancels} if n)
    live: set[str] = set()
    for name in names:
        try:
            state = from_vertex(ports.backend.get(name).state)
        except JobGone:
            continue  # deleted: it holds nothing
        except FlexjobsError as exc:
            log.warning(
                f"admission: {name} not read, its GPUs kept: {exc}",
                extra={"fields": {"vertexJob": name}},
            )
            return None
        if state is None or not state.terminal:
            live.add(name)
    return live


def summarise_for_operators(
    ports: CapacityPorts,
    queues: Queues,
    active: Sequence[JobRecord],
    waiting: Sequence[Workload],
) -> dict[str, object]:
    """Write what ``flexjobs queues``, ``flexjobs status`` and the page show of admission
    (:mod:`shared.domain.admission.summary`), from a fresh read of the ledger, the
    workloads the tick's pass left waiting (``waiting``: read once per tick), and the active
    records the tick read (their expected ends: ``attemptStartedAt``
    plus the request's ``estimatedRunSeconds``, kept as ``admission.runSeconds``, where it
    names one: AUTO requests)."""
    admissions = ports.jobs.admissions
    now = ports.clock()
    ledger = admissions.ledger()
    by_id = {r.request_id: r for r in active}
    running = [
        _expected(request_id, entry, by_id.get(request_id))
        for request_id, entry in sorted(ledger.held.items())
    ]
    standing = Standing(
        usage=ledger.usage(),
        ceiling=ledger.ceiling(queues, reading=ports.quota_limits is not None),
        decayed=ledger.decayed_now(now, queues.half_life_seconds),
    )
    document = summarise(queues, standing, waiting, running, now=now, unreadable=ledger.unreadable)
    admissions.write_summary(document)
    return document


def _expected(request_id: str, entry: Entry, record: JobRecord | None) -> Running:
    """A ledger entry as a running workload, with its expected end where it is known."""
    end = None
    if record is not None and record.attempt_started_at is not None:
        seconds = record.admission.get("runSeconds")
        if isinstance(seconds, int) and not isinstance(seconds, bool) and seconds > 0:
            end = record.attempt_started_at + timedelta(seconds=seconds)
    priority = record.admission.get("priority") if record is not None else None
    return Running(
        request_id,
        entry.queue,
        priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        entry.demand,
        started=record.attempt_started_at if record is not None else None,
        expected_end=end,
    )
