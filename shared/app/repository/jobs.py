"""The job repository: every write the services make to a job record, as a pure decision
applied in one transaction of a small store.

The stores (:class:`~shared.app.ports.JobStore`, :class:`~shared.app.ports.AttemptStore`,
:class:`~shared.app.ports.AdmissionStore`, :class:`~shared.app.ports.SeriesStore`,
:class:`~shared.app.ports.DeploymentStore`...) know storage only: get, a conditional create, a
transaction that applies one decision, and a few queries. What each write means (a claim
seen, a submission recorded, a read lease taken) is decided here by the domain's pure
functions, once for Firestore and the in-memory fakes alike.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.app.ports import AdmissionStore, AttemptStore, JobStore, SeriesStore, WatchStore
from shared.app.repository.claims import claim_record, new_claim
from shared.domain.admission.config import Queues, Resource
from shared.domain.admission.ledger import (
    ADMISSION_REASON,
    Entry,
    Ledger,
    Stage,
    admit_one,
    healed,
    released,
)
from shared.domain.admission.line import (
    MAX_LINE_CHANGED,
    Waiter,
    built_line,
    headed,
    synced_line,
)
from shared.domain.admission.rule import Workload
from shared.domain.decisions.hints import HintAction, take_hint
from shared.domain.decisions.submissions import (
    MAX_NOTIFIED,
    Claimed,
    Submission,
    checkpoint_progress,
    first_claim_of,
    job_settled,
    new_record,
    notification,
    pending_attempt,
    skipped_record,
    submission_change,
    submission_claimable,
)
from shared.domain.model.changes import Change, Decided, Written
from shared.domain.model.checkpoint import Checkpoint
from shared.domain.model.records import JobRecord, Stored
from shared.domain.model.states import JobState
from shared.domain.model.watch import Watch, key_of
from shared.domain.request.message import JobRequest
from shared.domain.request.schedule import Slot, Turn, turn
from shared.kernel.errors import WatchTooLarge
from shared.kernel.logs import get_logger

log = get_logger("admission")

Decide = Callable[[JobRecord], Change | Decided[Change, Any] | None]


def _holder(current: JobRecord) -> tuple[str, ...]:
    """The promise of a trailing read to forget, when the record holds one."""
    return ("hintHolder",) if current.hint_holder else ()


def _same(current: JobRecord, fields: dict[str, Any], deletes: tuple[str, ...] = ()) -> Change:
    """A change that keeps the record's state."""
    return Change(state=current.state, record=fields, deletes=deletes)


class JobRecords:
    """The job records: every write the services make, over the stores of the records
    (:class:`~shared.app.ports.JobStore`), their attempts, the series they run in, and the
    admissions (:attr:`admissions`, over the ledger's store).

    ``watch_store`` is held for the tick's watch step (:mod:`shared.app.steps.watch`), which
    reads it with ``job_store``: the watch list decides no write of a record, so nothing here
    wraps it.
    """

    def __init__(
        self,
        *,
        job_store: JobStore,
        attempt_store: AttemptStore,
        admission_store: AdmissionStore,
        watch_store: WatchStore,
        series_store: SeriesStore,
        default_location: str,
    ) -> None:
        self.job_store = job_store
        self.attempt_store = attempt_store
        self.watch_store = watch_store
        self.series_store = series_store
        self._default_location = default_location
        self.admissions = AdmissionRecords(job_store, admission_store, default_location)

    # -- reads and queries: the stores' own ---------------------------------------------------

    def get(self, request_id: str) -> JobRecord | None:
        """The record, with its version (so that the next write may skip its read)."""
        stored = self.job_store.read(request_id)
        return None if stored is None else _decoded(stored)

    def read(self, request_id: str) -> Stored | None:
        """The record as stored, with its version, undecoded; None when there is none."""
        return self.job_store.read(request_id)

    def get_attempt(self, request_id: str, attempt: int) -> dict[str, Any] | None:
        return self.attempt_store.get_attempt(request_id, attempt)

    def by_job_id(self, job_id: str) -> JobRecord | None:
        """The record one of whose attempts is Vertex job ``job_id`` (one query)."""
        stored = self.job_store.find_by_job_id(job_id)
        return None if stored is None else _decoded(stored)

    def due_submissions(self, now: datetime) -> list[str]:
        return self.job_store.due_submissions(now)

    def with_outbox(self) -> list[str]:
        return self.job_store.with_outbox()

    def with_pending_cancels(self) -> list[str]:
        return self.job_store.with_pending_cancels()

    def write(
        self, request_id: str, decide: Decide, known: Stored | None = None
    ) -> Written[Change, JobRecord] | None:
        """Apply ``decide`` to the record, decoded, in one conditional write; the change and
        the record after it (None: no record). ``known``: the record as last read or written,
        decided on without a read (see :meth:`~shared.app.ports.JobStore.transact`); a partial one
        (a tick's page) is read whole first: no decision is made on some of a record."""
        done = self._transact(request_id, decide, known)
        return None if done is None else Written(done.change, _decoded(done.record), done.result)

    def apply(self, request_id: str, decide: Decide, known: Stored | None = None) -> Change | None:
        """:meth:`write`, for the change alone (None: nothing to write, or no record): the
        record after it is not decoded, as nobody reads it."""
        done = self._transact(request_id, decide, known)
        return None if done is None else done.change

    def _transact(
        self, request_id: str, decide: Decide, known: Stored | None
    ) -> Written[Change, Stored] | None:
        if known is not None and known.partial:
            known = None
        return self.job_store.transact(request_id, lambda raw: decide(JobRecord.decode(raw)), known)

    # -- writes: a pure decision each ----------------------------------------------------------

    def claim(self, request: JobRequest, now: datetime, ttl_seconds: float) -> Claimed:
        """Create the record in ACCEPTED with a claim, or report the existing one.

        Raises:
            SubmissionInProgress: another live claim holds the request.
        """
        rid = request.request_id

        def write(
            fields_of: Callable[[dict[str, Any]], dict[str, Any] | None], known: Stored | None
        ) -> tuple[bool, Stored | None]:
            done = self.job_store.transact(
                rid, lambda raw: _keeping_state(JobRecord.decode(raw), fields_of(raw)), known
            )
            return (False, None) if done is None else (done.change is not None, done.record)

        return claim_record(
            new_record(request, self._default_location, now),
            read=lambda: self.job_store.read(rid),
            create=lambda record: self.job_store.create(rid, record),
            write=write,
            settled=lambda raw: job_settled(JobRecord.decode(raw)),
            now=now,
            ttl_seconds=ttl_seconds,
            attempt=1,
        )

    def create_tombstone(self, request_id: str, record: Mapping[str, Any]) -> bool:
        """Create ``record`` only if no record exists; False when one does."""
        return self.job_store.create(request_id, dict(record)) is not None

    def record_submission(
        self, submission: Submission, now: datetime, known: Stored | None = None
    ) -> bool:
        """Record the Vertex job of an attempt; False when the record will not take it (see
        :func:`~shared.domain.decisions.submissions.submission_change`): the caller must cancel it.
        ``known``: the record as claimed (its one write then needs no read)."""

        def decide(current: JobRecord) -> Decided[Change, bool]:
            plan = submission_change(current, submission, now)
            if not plan.record:
                return Decided(None, plan.recorded)
            state = JobState(plan.record["state"])
            change = Change(
                state,
                plan.record,
                plan.attempt,
                deletes=plan.deletes,
                attempt_no=submission.attempt,
            )
            return Decided(change, plan.recorded)

        written = self._transact(submission.request_id, decide, known)
        # No record at all (deleted by hand after the claim): no record will ever follow the
        # job either, so the caller cancels it, as for any job a record will not take.
        return written is not None and bool(written.result)

    def release(self, request_id: str, token: str, now: datetime) -> None:
        """Give up a claim this delivery holds, so a redelivery need not wait for its TTL.

        The claim is expired, not deleted: the next claim of the same attempt must know that
        one was held before, and look up what it may have created."""

        def decide(current: JobRecord) -> Change | None:
            held = current.claim
            if held is None or held.token != token or not held.live(now):
                return None  # not ours, or expired already: nothing to give up
            claim: dict[str, Any] = {"token": token, "expiresAt": now}
            if held.attempt is not None:
                claim["attempt"] = held.attempt
            return _same(current, {"claim": claim, "updatedAt": now})

        self.apply(request_id, decide)

    def claim_retry(
        self,
        request_id: str,
        attempt: int,
        now: datetime,
        ttl_seconds: float,
        known: Stored | None = None,
        *,
        location: str | None = None,
    ) -> Claimed | None:
        """Claim the submission of ``attempt`` in ``location`` (the plan's region); None when
        it may not be (see :func:`~shared.domain.decisions.submissions.submission_claimable`).
        The claim is ``fresh`` when no delivery claimed this attempt before
        (:func:`~shared.domain.decisions.submissions.first_claim_of`)."""
        token, claim = new_claim(now, ttl_seconds, attempt)

        def decide(current: JobRecord) -> Decided[Change, bool] | None:
            if not submission_claimable(current, attempt, now, location):
                return None
            taken = _same(current, {"claim": claim, "updatedAt": now})
            return Decided(taken, first_claim_of(current, attempt))

        written = self.write(request_id, decide, known)
        if written is None or written.change is None:
            return None
        return Claimed(
            token=token,
            fresh=bool(written.result),
            stored=written.record.stored,
            expires_at=claim["expiresAt"],
        )

    def update_attempt(self, request_id: str, attempt: int, fields: Mapping[str, Any]) -> None:
        """Merge ``fields`` into attempt document ``attempt`` (one write, no read)."""
        self.attempt_store.update_attempt(request_id, attempt, dict(fields))

    def begin_read(
        self,
        request_id: str,
        now: datetime,
        interval_seconds: float,
        published: datetime,
        known: Stored | None = None,
        *,
        message_id: str | None = None,
    ) -> tuple[HintAction, datetime | None, JobRecord | None]:
        """Apply :func:`~shared.domain.decisions.hints.take_hint`; returns the action, the read
        lease's start before this hint (for a trailing read) and the record after it."""

        def decide(current: JobRecord) -> Decided[Change, tuple[HintAction, datetime | None]]:
            action, fields = take_hint(current, published, now, interval_seconds, message_id)
            # A read begun ends any promise of one: its holder is forgotten with it.
            gone = ("hintHolder",) if action is HintAction.READ and current.hint_holder else ()
            taken = (action, current.last_read_at)
            return Decided(_same(current, fields, gone) if fields else None, taken)

        written = self.write(request_id, decide, known)
        if written is None:  # no record: no lease, so the hint reads at once
            return HintAction.READ, None, None
        action, lease_start = written.result
        return action, lease_start, written.record

    def renew_read(self, request_id: str, now: datetime) -> None:
        """Start a trailing read: the lease now dates from ``now``, nothing is pending."""
        self.apply(
            request_id,
            lambda cur: _same(
                cur,
                {"lastReadAt": now, "previousReadAt": cur.last_read_at, "hintPending": False},
                _holder(cur),
            ),
        )

    def release_reader(self, request_id: str) -> None:
        """Drop the read lease (after a failed read), so the next hint reads at once."""
        self.apply(
            request_id,
            lambda cur: _same(cur, {"lastReadAt": None, "hintPending": False}, _holder(cur)),
        )

    def take_turn(
        self, request: JobRequest, slot: Slot, now: datetime, claim_seconds: float
    ) -> Turn:
        """Decide, in one transaction over the series document and its current request's
        record, what a scheduled slot does (see :func:`~shared.domain.request.schedule.turn`)."""

        def decide(
            series: dict[str, Any] | None, current: dict[str, Any] | None
        ) -> Decided[dict[str, Any], Turn]:
            state = JobRecord.decode(current).state if current is not None else None
            made = turn(
                series, state, slot, request.request_id, now=now, claim_seconds=claim_seconds
            )
            return Decided(made.write, made)

        return self.series_store.transact_series(slot.series, decide)

    def record_skipped(self, request: JobRequest, holder: str, now: datetime) -> bool:
        """Record a slot that does not run (SKIPPED); False when its record exists already."""
        record = skipped_record(request, holder, self._default_location, now)
        return self.job_store.create(request.request_id, record) is not None

    def watching(self, prefix: str) -> list[JobRecord]:
        """The active records whose checkpoints go under ``prefix``."""
        return [JobRecord.decode(r) for r in self.job_store.with_checkpoint_prefix(prefix)]

    def record_checkpoint(
        self, request_id: str, checkpoint: Checkpoint, now: datetime
    ) -> JobRecord | None:
        """Record a checkpoint an upload completed, when it is news (see
        :func:`~shared.domain.decisions.submissions.checkpoint_progress`); the record after it, or
        None when nothing was written."""
        written = self.write(
            request_id, lambda current: checkpoint_progress(current, checkpoint, now)
        )
        return None if written is None or written.change is None else written.record

    def drop_from_outbox(
        self, request_id: str, sent: list[dict[str, Any]], known: Stored | None = None
    ) -> Written[Change, JobRecord] | None:
        """Move notifications once published from the outbox to ``notified`` (the latest
        :data:`MAX_NOTIFIED`: what the status page shows a job produced); the record after."""

        def decide(current: JobRecord) -> Change:
            left = [m for m in current.outbox if m not in sent]
            done = [m for m in current.outbox if m in sent]
            notified = [*current.notified, *done][-MAX_NOTIFIED:]
            fields = {"outbox": left, "outboxPending": bool(left), "notified": notified}
            return _same(current, fields)

        return self.write(request_id, decide, known)


@dataclass(frozen=True)
class Line:
    """The admission line as a pass reads it: its entries as of ``line.mark``, the version a
    save must still find, and how many records the sync read."""

    line: Watch
    version: Any
    reads: int

    def waiters(self) -> list[Waiter]:
        """The records in the line, as a pass weighs them."""
        return [Waiter.of(s.raw) for s in self.line.active.values()]


class AdmissionRecords:
    """The admission ledger and the records it admits, written together (one batch each,
    :meth:`~shared.app.ports.AdmissionStore.transact_ledger`), and the records' own writes
    while they wait (over the :class:`~shared.app.ports.JobStore`); the decisions are
    :mod:`shared.domain.admission.ledger`'s."""

    def __init__(
        self, job_store: JobStore, admission_store: AdmissionStore, default_location: str
    ) -> None:
        self.job_store = job_store
        self.admission_store = admission_store
        self._default_location = default_location

    def ledger(self) -> Ledger:
        stored = self.admission_store.read_ledger()
        return Ledger.decode(stored.raw if stored is not None else None)

    def write_summary(self, document: dict[str, Any]) -> None:
        """Write what operators see (:func:`~shared.domain.admission.summary.summarise`)."""
        self.admission_store.write_admission_summary(document)

    def waiting(self, queue: str | None, most: int) -> list[Waiter]:
        """The records waiting for admission in ``queue`` (None: in any), oldest first, at
        most ``most``."""
        return [Waiter.of(s.raw) for s in self.admission_store.waiting_admission(queue, most)]

    def count_waiting(self, queue: str) -> int:
        """How many records wait for admission in ``queue``."""
        return self.admission_store.count_waiting(queue)

    def line(self, now: datetime) -> Line | None:
        """The admission line as saved, brought up to date with the records stamped since its
        mark (:mod:`shared.domain.admission.line`); None when there is none that reads, or
        more changed since its mark than a sync holds (the caller reads the line whole)."""
        saved = self.admission_store.read_line()
        if saved.watch is None:
            return None
        changed = self.admission_store.line_changed_since(
            saved.watch.mark, saved.at, MAX_LINE_CHANGED
        )
        if len(changed) > MAX_LINE_CHANGED:
            return None
        keyed = [(key, s) for s in changed if (key := key_of(s)) is not None]
        return Line(synced_line(saved.watch, keyed, saved.at, now), saved.version, len(changed))

    def rebuilt(self, records: list[tuple[str, Stored]], mark: Any, now: datetime) -> Line | None:
        """The line built from ``records`` (every active record, read as of ``mark``: the
        tick's watch list), brought up to date with the records stamped since, as of a fresh
        read of the saved line (whose version a save must still find): what changed while
        the tick listed and settled jobs (an admission, a cancel) is weighed as it is now.
        None when more changed since ``mark`` than a sync holds."""
        saved = self.admission_store.read_line()
        changed = self.admission_store.line_changed_since(mark, saved.at, MAX_LINE_CHANGED)
        if len(changed) > MAX_LINE_CHANGED:
            return None
        keyed = [(key, s) for s in changed if (key := key_of(s)) is not None]
        line = synced_line(built_line(records, mark, now), keyed, saved.at, now)
        return Line(line, saved.version, len(changed))

    def line_version(self) -> Any:
        """The saved line's version (what :meth:`save_line` must still find)."""
        return self.admission_store.read_line().version

    def save_line(self, line: Watch, version: Any, *, over: bool = False) -> bool:
        """Save the line if no other pass saved since ``version``; a line past its stored
        bound is not saved (passes keep syncing from the saved one's mark, and read the
        records whole once more changed than a sync holds), saying so. ``over`` (the tick's
        heal): a line another pass saved meanwhile is written over, once (a line as of an
        older mark only makes the next sync read more)."""
        # Saved as each queue's head and bound: what a pass between ticks weighs.
        saved = headed(line)
        try:
            if self.admission_store.save_line(saved, version):
                return True
            if not over:
                return False
            return self.admission_store.save_line(saved, self.line_version())
        except WatchTooLarge as exc:
            log.warning(f"admission line not saved: {exc}")
            return False

    def enter(
        self, request: JobRequest, admission: Mapping[str, Any], now: datetime
    ) -> Stored | None:
        """Create the record of a request that waits for admission (QUEUED, reason
        ``admission``, attempt 1, nothing due); None when a record exists already."""
        record = {
            **new_record(request, self._default_location, now),
            "state": JobState.QUEUED.value,
            "reason": ADMISSION_REASON,
            "admission": dict(admission),
        }
        return self.job_store.create(request.request_id, record)

    def admit(self, workload: Workload, queues: Queues, now: datetime, *, reading: bool) -> bool:
        """Admit ``workload`` if it still waits and still fits what the ledger holds now
        (decided on a fresh read of both); True when admitted. ``reading``: the quota is
        read from Cloud Quotas (a resource never asked is not admitted on)."""

        def decide(
            raw: dict[str, Any] | None, record: dict[str, Any] | None
        ) -> tuple[dict[str, Any] | None, Change | None] | None:
            if record is None:
                return None
            ledger = Ledger.decode(raw).with_decay(now, queues.half_life_seconds)
            ceiling = ledger.ceiling(queues, reading=reading)
            made = admit_one(ledger, queues, workload, record, ceiling=ceiling, now=now)
            if made is None:
                return None
            # ADMITTED is told through the record's outbox, so it is published exactly when
            # the admission is written (by whoever flushes the outbox next).
            current = JobRecord.decode(record)
            attempt = pending_attempt(current) or 1
            message = notification(
                workload.request_id, "ADMITTED", attempt, f"queue {workload.queue}"
            )
            outbox = [*current.outbox, message]
            fields = {**made.record, "outbox": outbox, "outboxPending": True}
            return made.ledger.to_dict(), Change(state=current.state, record=fields)

        return self.admission_store.transact_ledger(workload.request_id, decide)

    def release(self, request_ids: list[str]) -> bool:
        """Give back the entries of ``request_ids`` (records that ended); True when any was
        held."""

        def decide(
            raw: dict[str, Any] | None, _record: dict[str, Any] | None
        ) -> tuple[dict[str, Any] | None, Change | None] | None:
            after = released(Ledger.decode(raw), request_ids)
            return None if after is None else (after.to_dict(), None)

        return self.admission_store.transact_ledger(None, decide)

    def heal(self, drop: Mapping[str, datetime], restore: Mapping[str, Entry]) -> bool:
        """Drop the entries of ``drop`` (each as seen: its ``at``) and restore those of
        ``restore``, each confirmed on
        a fresh read of its record (:func:`~shared.domain.admission.ledger.heal_candidates`);
        True when the ledger changed."""

        def decide(
            raw: dict[str, Any] | None, _record: dict[str, Any] | None
        ) -> tuple[dict[str, Any] | None, Change | None] | None:
            after = healed(Ledger.decode(raw), drop, restore)
            return None if after is None else (after.to_dict(), None)

        return self.admission_store.transact_ledger(None, decide)

    def observe_quota(
        self,
        read: Mapping[Resource, int],
        asked: Collection[Resource],
        unreadable: str | None,
        now: datetime,
    ) -> None:
        """Cache the quota limits of ``asked`` as read from the Cloud Quotas API (``read``),
        or why they could not be (``unreadable``: the limits read before stay), for every
        admission until the next read (:meth:`Ledger.with_limits`)."""

        def decide(
            raw: dict[str, Any] | None, _record: dict[str, Any] | None
        ) -> tuple[dict[str, Any] | None, Change | None] | None:
            ledger = Ledger.decode(raw)
            if unreadable is not None:
                after = ledger.replace(observed_at=now, unreadable=unreadable)
            else:
                after = ledger.with_limits(read, asked, now)
            return after.to_dict(), None

        self.admission_store.transact_ledger(None, decide)

    def leave_line(self, request_id: str, now: datetime) -> bool:
        """Take a record that ended while its ``admission.stage`` still says WAITING out of
        its queue's line (stage ENDED): what :func:`~shared.domain.decisions.recovery.finish`
        writes now, for records that ended before it did. True: it is out of the line (by
        this write, or another before it)."""

        def decide(raw: dict[str, Any]) -> Change | None:
            current = JobRecord.decode(raw)
            admission = current.admission
            if not current.state.terminal or admission.get("stage") != Stage.WAITING.value:
                return None
            fields = {"admission": {**admission, "stage": Stage.ENDED.value}, "updatedAt": now}
            return Change(state=current.state, record=fields)

        self.job_store.transact(request_id, decide)
        return True

    def note_held(self, request_id: str, held_by: str, now: datetime) -> None:
        """Record what a held request waits for (``admission.heldBy``), when it changed."""

        def decide(raw: dict[str, Any]) -> Change | None:
            current = JobRecord.decode(raw)
            admission = current.admission
            if admission.get("stage") != Stage.WAITING.value or admission.get("heldBy") == held_by:
                return None
            fields = {"admission": {**admission, "heldBy": held_by}, "updatedAt": now}
            return Change(state=current.state, record=fields)

        self.job_store.transact(request_id, decide)


def _decoded(stored: Stored) -> JobRecord:
    return JobRecord.decode(stored.raw, stored)


def _keeping_state(current: JobRecord, fields: dict[str, Any] | None) -> Change | None:
    return None if fields is None else _same(current, fields)
