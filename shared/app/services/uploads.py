"""Uploads: a Cloud Storage object event becomes requests, checkpoint progress, or nothing.

Requests and checkpoints never share trust: request files come only from the request bucket
(``FLEXJOBS_REQUEST_BUCKET``), and nothing in it ever counts as a checkpoint; every other
bucket's objects are checkpoints at most. So whoever may upload a request cannot steer a
job's checkpoints, and a training job that writes checkpoints cannot submit requests.

* A **request file** (in the request bucket, under ``FLEXJOBS_UPLOAD_PREFIX``; see
  :mod:`shared.domain.request.files`) is read once, at the generation the event names, and each of
  its messages is submitted exactly as a Pub/Sub message is
  (:func:`shared.app.services.intake.submit`), with ``source: "gcs"`` and the ``object`` (and
  ``.jsonl`` ``line``) on its record or rejection. One bad line is rejected on its own; a file
  that cannot be read at all gets one rejection.
* A **checkpoint** completed by the upload (a step's marker, or a single-file checkpoint)
  counts only for the active jobs whose record holds its prefix (``checkpointPrefix``, one
  indexed query), and only once its own listing, read here, confirms a complete checkpoint
  (the event only says where to look): then ``latestCheckpoint`` and ``progress`` are
  recorded, with no Vertex call, and an on-demand AUTO attempt may be left.
* Anything else is acknowledged with a debug log.

Transient faults raise (the event is redelivered, and every request in it is exactly-once);
bad content never does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from shared.app.commands import Outcome, SubmitJob
from shared.app.context import Uploads
from shared.app.services import intake as intake_service
from shared.app.services.intake import reject
from shared.app.steps.sweep import Sweep
from shared.app.steps.switches import leave_on_demand
from shared.domain.model.checkpoint import Checkpoint
from shared.domain.model.delivery import Delivery, ObjectEvent
from shared.domain.model.records import JobRecord
from shared.domain.policy.checkpoints import completed_by
from shared.domain.request.files import FileMessage, Format, StoredObject, messages, request_format
from shared.kernel.errors import FieldError, InvalidRequest, ObjectGone, reading_untrusted
from shared.kernel.logs import get_logger

log = get_logger("uploads")

T = TypeVar("T")
R = TypeVar("R")


class Seen(StrEnum):
    """What an object event turned out to be."""

    REQUESTS = "requests"
    CHECKPOINT = "checkpoint"
    IGNORED = "ignored"


@dataclass(frozen=True)
class Received:
    """The result of one object event: what it was, the outcome of each request of a file,
    and the requestIds whose record took a checkpoint."""

    seen: Seen
    outcomes: tuple[Outcome, ...] = ()
    progressed: tuple[str, ...] = ()


def receive(event: ObjectEvent, uploads: Uploads) -> Received:
    """Carry out one object event (see the module docstring).

    Raises:
        TransientError: Cloud Storage, Firestore, Vertex AI or Pub/Sub failed for now; the
            event is redelivered.
    """
    brief = {"fields": {"eventType": event.event_type, "object": event.name}}
    if not event.finalized:
        log.debug("not a new object: acknowledged", extra=brief)
        return Received(Seen.IGNORED)
    intake = uploads.intake
    settings = intake.settings
    obj = StoredObject.of(
        event.bucket, event.name, event.generation, event.resource, intake.clock()
    )
    if obj.bucket == settings.request_bucket:
        fmt = request_format(obj.name, settings.upload_prefix)
        if fmt is None:
            # Never a checkpoint: whoever uploads requests must not steer a job's progress.
            log.debug("an object of the request bucket that is no request file", extra=brief)
            return Received(Seen.IGNORED)
        return Received(Seen.REQUESTS, outcomes=submit_file(obj, fmt, uploads))
    found = completed_by(obj.bucket, obj.name, obj.written_at or intake.clock())
    if found is None:
        if settings.request_bucket is None and request_format(obj.name, settings.upload_prefix):
            log.warning("FLEXJOBS_REQUEST_BUCKET is not set: no request file is taken", extra=brief)
        else:
            log.debug("not a checkpoint: acknowledged", extra=brief)
        return Received(Seen.IGNORED)
    return Received(Seen.CHECKPOINT, progressed=record_progress(*found, uploads))


def submit_file(obj: StoredObject, fmt: Format, uploads: Uploads) -> tuple[Outcome, ...]:
    """Submit every request of a file; one rejection when the file cannot be read at all.

    Whatever reading the file raises, but a transient fault of Cloud Storage, refuses it:
    bad content is recorded and acknowledged, never redelivered.
    """
    intake = uploads.intake
    whole = _submission(obj, FileMessage(b""), None)
    limit = intake.settings.max_upload_bytes
    try:
        if obj.size is not None and obj.size > limit:
            raise InvalidRequest([_too_large(obj.size, limit)])  # refused unread
        if obj.content_encoding not in (None, "identity"):
            # Stored compressed: its size says nothing of what it inflates to.
            problem = f"is stored with Content-Encoding {obj.content_encoding}; upload it plain"
            raise InvalidRequest([FieldError("$", problem)])
        data = uploads.objects.read(obj.bucket, obj.name, obj.generation, limit)
        if len(data) > limit:
            raise InvalidRequest([_too_large(len(data), limit, at_least=True)])
        whole = _submission(obj, FileMessage(data), data)
        with reading_untrusted("the file"):
            budget = intake.settings.max_message_bytes
            parts = messages(fmt, data, obj.request_id(data), max_bytes=budget)
    except ObjectGone as exc:
        reject(whole, InvalidRequest([FieldError("$", f"cannot be read: {exc}")]), intake)
        return (Outcome.REJECTED,)
    except InvalidRequest as err:
        reject(whole, err, intake)
        return (Outcome.REJECTED,)
    log.info("request file read", extra={"fields": {"object": obj.uri, "requests": len(parts)}})

    commands = [_submission(obj, part, data) for part in parts]
    sweep = Sweep("upload", then="redelivered")
    done = sweep.each_of(
        "submit",
        functools.partial(intake_service.submit, intake=intake),
        commands,
        key=lambda c: c.message.message_id,
        workers=uploads.workers,
    )
    sweep.raise_failure()
    return tuple(outcome for outcome in done if outcome is not None)


def record_progress(prefix: str, checkpoint: Checkpoint, uploads: Uploads) -> tuple[str, ...]:
    """Record a completed checkpoint on the active jobs writing under ``prefix``, once its
    own listing confirms it.

    The event only says where to look (a marker alone, or a forged event, proves nothing): a
    checkpoint that its listing does not show complete moves no job, and the time recorded is
    the listing's. Each job is isolated: one that fails is logged and the others are still
    recorded; then a failure is raised (a retryable one first), so the event is redelivered.
    A redelivery finds the checkpoint recorded already, and still asks what a recorded
    checkpoint asks (whether to leave on-demand), so a failure there is retried too.
    """
    intake = uploads.intake
    watchers = intake.jobs.watching(prefix)
    fields: dict[str, object] = {"uri": checkpoint.uri, "step": checkpoint.step}
    if not watchers:
        log.debug("checkpoint of no active job: acknowledged", extra={"fields": fields})
        return ()
    confirmed = uploads.checkpoints.confirm(checkpoint)
    if confirmed is None:
        log.warning(
            "checkpoint event not confirmed by its listing: no job moved", extra={"fields": fields}
        )
        return ()
    now = intake.clock()
    progressed: list[str] = []

    def take(record: JobRecord) -> None:
        """Record it on one job, and ask whether to leave on-demand there."""
        after = intake.jobs.record_checkpoint(record.request_id, confirmed, now)
        if after is not None:
            progressed.append(record.request_id)
        elif not _recorded(record, confirmed):
            return  # an older checkpoint, or another run's: nothing to ask
        # Just after a checkpoint, leaving an on-demand attempt loses next to nothing.
        leave_on_demand(intake, after or record)

    sweep = Sweep("checkpoint", then="redelivered")
    sweep.each_of("record checkpoint", take, watchers, key=lambda record: record.request_id)
    sweep.raise_failure()
    log.info("checkpoint recorded", extra={"fields": {**fields, "jobs": progressed}})
    return tuple(progressed)


def _recorded(record: JobRecord, checkpoint: Checkpoint) -> bool:
    """Is ``checkpoint`` the record's latest already (a redelivered event)?"""
    latest = record.latest_checkpoint
    return latest is not None and latest.uri == checkpoint.uri


def _submission(obj: StoredObject, part: FileMessage, data: bytes | None) -> SubmitJob:
    """One message of a file as a submission; ``data``: the file's bytes (None: not read)."""
    origin = {"object": obj.uri, **({"line": part.line} if part.line is not None else {})}
    return SubmitJob(message=_message(obj, part, data), source="gcs", origin=origin)


def _message(obj: StoredObject, part: FileMessage, data: bytes | None) -> Delivery:
    """A file's message as a Pub/Sub message: its default requestId as the attribute (a
    ``requestId`` in the message wins), the object's write time as the publish time. The
    default id derives from the bytes the message came from: its line's, else the file's."""
    request_id = obj.request_id(part.data if part.line is not None else data, part.line)
    return Delivery(
        data=part.data,
        message_id=request_id,
        attributes={"requestId": request_id},
        publish_time=obj.written_at.isoformat() if obj.written_at else None,
    )


def _too_large(size: int, limit: int, *, at_least: bool = False) -> FieldError:
    amount = f"over {limit}" if at_least else str(size)
    return FieldError("$", f"the file is {amount} bytes; FLEXJOBS_MAX_UPLOAD_BYTES is {limit}")
