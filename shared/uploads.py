"""Uploads: a Cloud Storage object event becomes requests, checkpoint progress, or nothing.

* A **request file** (under ``FLEXJOBS_UPLOAD_PREFIX``; see :mod:`shared.domain.uploads`) is
  read once, at the generation the event names, and each of its messages is submitted exactly
  as a Pub/Sub message is (:func:`shared.intake.submit_job`), with ``source: "gcs"`` and the
  ``object`` (and ``.jsonl`` ``line``) on its record or rejection. One bad line is rejected on
  its own; a file that cannot be read at all gets one rejection.
* A **checkpoint** completed by the upload (a step's marker, or a single-file checkpoint)
  is recorded on the active jobs writing under its prefix, found by their indexed
  ``checkpointPrefix``: ``latestCheckpoint`` and ``progress``, with no Vertex call.
* Anything else is acknowledged with a debug log.

Transient faults raise (the event is redelivered, and every request in it is exactly-once);
bad content never does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum

from shared.commands import ReceiveUpload, SubmitJob
from shared.domain.checkpoints import Checkpoint, completed_by
from shared.domain.record import JobRecord
from shared.domain.uploads import FileMessage, Format, StoredObject, messages, request_format
from shared.envelopes import PubsubMessage
from shared.errors import FieldError, InvalidRequest, ObjectGone
from shared.exactly_once import Outcome
from shared.intake import Intake, reject, submit_job
from shared.logs import get_logger
from shared.ports import StoredObjects
from shared.submission import leave_on_demand

log = get_logger("uploads")

#: Requests of one file submitted side by side: a long ``.jsonl`` fits the function's timeout.
WORKERS = 4


@dataclass
class Uploads:
    """Ports for :func:`receive_upload`, wired once per instance by the bootstrap."""

    intake: Intake
    objects: StoredObjects
    workers: int = WORKERS


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


def receive_upload(cmd: ReceiveUpload, uploads: Uploads) -> Received:
    """Handle one object event (see the module docstring).

    Raises:
        TransientError: Cloud Storage, Firestore, Vertex AI or Pub/Sub failed for now; the
            event is redelivered.
    """
    event = cmd.event
    brief = {"fields": {"eventType": event.event_type, "object": event.name}}
    if not event.finalized:
        log.debug("not a new object: acknowledged", extra=brief)
        return Received(Seen.IGNORED)
    obj = StoredObject.of(event.bucket, event.name, event.generation, event.resource)
    fmt = request_format(obj.name, uploads.intake.settings.upload_prefix)
    if fmt is not None:
        return Received(Seen.REQUESTS, outcomes=submit_file(obj, fmt, uploads))
    found = completed_by(obj.bucket, obj.name, obj.written_at or uploads.intake.clock())
    if found is None:
        log.debug("neither a request file nor a checkpoint: acknowledged", extra=brief)
        return Received(Seen.IGNORED)
    return Received(Seen.CHECKPOINT, progressed=record_progress(*found, uploads.intake))


def submit_file(obj: StoredObject, fmt: Format, uploads: Uploads) -> tuple[Outcome, ...]:
    """Submit every request of a file; one rejection when the file cannot be read at all."""
    intake = uploads.intake
    whole = _submission(obj, FileMessage(b""))
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
        whole = dataclasses.replace(whole, message=_message(obj, FileMessage(data)))
        parts = messages(fmt, data, obj.request_id())
    except ObjectGone as exc:
        reject(whole, InvalidRequest([FieldError("$", f"cannot be read: {exc}")]), intake)
        return (Outcome.REJECTED,)
    except InvalidRequest as err:
        reject(whole, err, intake)
        return (Outcome.REJECTED,)
    log.info("request file read", extra={"fields": {"object": obj.uri, "requests": len(parts)}})
    return _each([_submission(obj, part) for part in parts], intake, uploads.workers)


def _each(commands: list[SubmitJob], intake: Intake, workers: int) -> tuple[Outcome, ...]:
    """Submit each command; every one is tried even when another fails, then the first
    failure is raised (a retryable one means redelivery, which finds the others done)."""

    def attempt(cmd: SubmitJob) -> Outcome | BaseException:
        try:
            return submit_job(cmd, intake)
        except Exception as exc:  # noqa: BLE001 - re-raised below, after the other requests
            return exc

    run: Callable[[SubmitJob], Outcome | BaseException] = attempt
    if len(commands) <= 1 or workers <= 1:
        results = [run(cmd) for cmd in commands]
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="upload") as pool:
            results = list(pool.map(run, commands))
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        raise _to_raise(failures)
    return tuple(r for r in results if isinstance(r, Outcome))


def _to_raise(failures: list[BaseException]) -> BaseException:
    """Of the failures of a file's requests or a checkpoint's jobs, the one to raise: the first
    that a redelivery may fix (so that none of them is acknowledged away), else the first."""
    return next((f for f in failures if getattr(f, "retryable", True)), failures[0])


def record_progress(prefix: str, checkpoint: Checkpoint, intake: Intake) -> tuple[str, ...]:
    """Record a completed checkpoint on the active jobs writing under ``prefix``.

    Each job is isolated: one that fails is logged and the others are still recorded; then a
    failure is raised (a retryable one first), so the event is redelivered. A redelivery
    finds the checkpoint recorded already, and still asks what a recorded checkpoint asks
    (whether to leave on-demand), so a failure there is retried too.
    """
    now = intake.clock()
    watchers = intake.store.watching(prefix)
    progressed: list[str] = []
    failures: list[BaseException] = []
    for record in watchers:
        try:
            after = intake.store.record_checkpoint(record.request_id, checkpoint, now)
            if after is not None:
                progressed.append(record.request_id)
            elif not _recorded(record, checkpoint):
                continue  # an older checkpoint, or another run's: nothing to ask
            # Just after a checkpoint, leaving an on-demand attempt loses next to nothing.
            leave_on_demand(intake, after or record)
        except Exception as exc:  # noqa: BLE001 - raised below, after the other jobs
            log.warning(
                f"checkpoint not taken, redelivered: {exc}",
                extra={"fields": {"requestId": record.request_id, "uri": checkpoint.uri}},
            )
            failures.append(exc)
    fields = {"uri": checkpoint.uri, "step": checkpoint.step, "jobs": progressed}
    if watchers:
        log.info("checkpoint recorded", extra={"fields": fields})
    else:
        log.debug("checkpoint of no active job: acknowledged", extra={"fields": fields})
    if failures:
        raise _to_raise(failures)
    return tuple(progressed)


def _recorded(record: JobRecord, checkpoint: Checkpoint) -> bool:
    """Is ``checkpoint`` the record's latest already (a redelivered event)?"""
    latest = record.latest_checkpoint
    return latest is not None and latest.uri == checkpoint.uri


def _submission(obj: StoredObject, part: FileMessage) -> SubmitJob:
    origin = {"object": obj.uri, **({"line": part.line} if part.line is not None else {})}
    return SubmitJob(message=_message(obj, part), source="gcs", origin=origin)


def _message(obj: StoredObject, part: FileMessage) -> PubsubMessage:
    """A file's message as a Pub/Sub message: its default requestId as the attribute (a
    ``requestId`` in the message wins), the object's write time as the publish time."""
    request_id = obj.request_id(part.line)
    return PubsubMessage(
        data=part.data,
        message_id=request_id,
        attributes={"requestId": request_id},
        publish_time=obj.written_at.isoformat() if obj.written_at else None,
    )


def _too_large(size: int, limit: int, *, at_least: bool = False) -> FieldError:
    amount = f"over {limit}" if at_least else str(size)
    return FieldError("$", f"the file is {amount} bytes; FLEXJOBS_MAX_UPLOAD_BYTES is {limit}")
