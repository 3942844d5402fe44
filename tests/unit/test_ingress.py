"""The pure parts of ingress: schedule slots and series turns, request files, checkpoint
uploads, and unwrapping both deliveries of a storage event."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

import pytest
from cloudevents.http import CloudEvent

from shared.domain.decisions.submissions import checkpoint_progress
from shared.domain.model.checkpoint import Checkpoint
from shared.domain.model.records import JobRecord
from shared.domain.model.states import JobState
from shared.domain.policy.checkpoints import completed_by
from shared.domain.request.files import Format, StoredObject, messages, request_format
from shared.domain.request.schedule import (
    Concurrency,
    Move,
    Slot,
    check_not_ahead,
    expand,
    read_slot,
    schedule_time,
    slot_start,
    turn,
)
from shared.ingress.envelopes import unwrap_object_event
from shared.kernel.errors import InvalidRequest
from tests.events import gcs_notification, object_resource, pubsub_cloud_event, storage_cloud_event

T0 = datetime(2026, 11, 30, tzinfo=UTC)
DAY = timedelta(days=1)

# -- slots --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2026-11-30T02:00:07Z", datetime(2026, 11, 30, 2, 0, 7, tzinfo=UTC)),
        ("2026-11-30T02:00:07.123456789Z", datetime(2026, 11, 30, 2, 0, 7, 123456, tzinfo=UTC)),
        ("2026-11-30T03:00:07+01:00", datetime(2026, 11, 30, 2, 0, 7, tzinfo=UTC)),
        ("2026-11-30T02:00:07.5z", datetime(2026, 11, 30, 2, 0, 7, 500000, tzinfo=UTC)),
    ],
)
def test_schedule_time_reads_rfc3339_as_pubsub_and_people_write_it(raw, expected):
    assert schedule_time({"scheduleTime": raw}, None) == expected


@pytest.mark.parametrize("raw", ["2026-11-30T02:00:07", "yesterday", "2026-13-01T00:00:00Z"])
def test_schedule_time_refuses_what_is_not_an_instant(raw):
    with pytest.raises(ValueError):
        schedule_time({"scheduleTime": raw}, None)


def test_the_attribute_wins_over_the_publish_time():
    when = schedule_time({"scheduleTime": "2026-01-01T00:00:00Z"}, "2026-11-30T02:00:00Z")
    assert when.year == 2026 and when.month == 1
    assert schedule_time({}, "2026-11-30T02:00:00Z").month == 11


@pytest.mark.parametrize(
    ("when", "seconds", "expected"),
    [
        (datetime(2026, 11, 30, 23, 59, 59, tzinfo=UTC), 86400, "20261130T000000Z"),
        (datetime(2026, 12, 1, 0, 0, 0, tzinfo=UTC), 86400, "20261201T000000Z"),
        (datetime(2026, 11, 30, 2, 14, 59, tzinfo=UTC), 900, "20261130T020000Z"),
        (datetime(2026, 11, 30, 2, 15, 0, tzinfo=UTC), 900, "20261130T021500Z"),
    ],
)
def test_slots_floor_the_schedule_time(when, seconds, expected):
    assert expand("{slot}", slot_start(when, seconds)) == expected


def test_every_slot_placeholder_is_expanded():
    assert expand("a-{slot}-b-{slot}", T0) == "a-20261130T000000Z-b-20261130T000000Z"


def test_read_slot_needs_both_the_schedule_and_the_placeholder():
    attrs = {"scheduleTime": "2026-11-30T02:00:00Z"}
    assert read_slot("plain", None, attrs, None) == (None, [])
    _, errors = read_slot("x-{slot}", None, attrs, None)
    assert [e.path for e in errors] == ["requestId"]
    _, errors = read_slot("x", {"slotSeconds": 60}, attrs, None)
    assert [e.path for e in errors] == ["schedule"]
    slot, errors = read_slot("x-{slot}", {}, attrs, None)
    assert errors == [] and slot == Slot(
        "x-{slot}", datetime(2026, 11, 30, 2, tzinfo=UTC), Concurrency.ALLOW
    )


@pytest.mark.parametrize(
    "raw", [[], "daily", {"slotSeconds": True}, {"slotSeconds": 1.5}, {"slotSeconds": 10**9}]
)
def test_malformed_schedules_are_refused(raw):
    _, errors = read_slot("x-{slot}", raw, {"scheduleTime": "2026-11-30T02:00:00Z"}, None)
    assert errors and errors[0].path.startswith("schedule")


# -- series turns -------------------------------------------------------------------------

SERIES = "n-{slot}"


def slot(day: int, concurrency: Concurrency = Concurrency.FORBID) -> Slot:
    return Slot(SERIES, T0 + day * DAY, concurrency)


def held(day: int, holder: str, updated: datetime = T0) -> dict:
    return {"series": SERIES, "current": holder, "slot": T0 + day * DAY, "updatedAt": updated}


def decide(series, current, s, request_id="me", now=T0 + timedelta(hours=1)):
    return turn(series, current, s, request_id, now=now, claim_seconds=120)


def test_a_new_series_is_taken():
    made = decide(None, None, slot(1))
    assert made.move is Move.RUN
    assert made.write == {
        "series": SERIES,
        "current": "me",
        "slot": T0 + DAY,
        "updatedAt": T0 + timedelta(hours=1),
    }


def test_the_holder_runs_again_without_writing():
    assert decide(held(1, "me"), JobState.QUEUED, slot(1)) == decide(held(1, "me"), None, slot(1))
    assert decide(held(1, "me"), None, slot(1)).write is None


@pytest.mark.parametrize("state", [s for s in JobState if s.terminal])
def test_a_holder_that_ended_hands_over(state):
    made = decide(held(0, "old"), state, slot(1))
    assert made.move is Move.RUN and made.write is not None


@pytest.mark.parametrize("state", [s for s in JobState if not s.terminal])
@pytest.mark.parametrize(
    ("concurrency", "move"), [(Concurrency.FORBID, Move.SKIP), (Concurrency.REPLACE, Move.REPLACE)]
)
def test_an_active_holder_is_skipped_over_or_replaced(state, concurrency, move):
    made = decide(held(0, "old"), state, slot(1, concurrency))
    assert (made.move, made.other, made.write) == (move, "old", None)


@pytest.mark.parametrize("concurrency", [Concurrency.FORBID, Concurrency.REPLACE])
def test_an_older_slot_never_cancels_or_joins_an_active_newer_one(concurrency):
    made = decide(held(2, "newer"), JobState.RUNNING, slot(1, concurrency))
    assert (made.move, made.other) == (Move.SKIP, "newer")


def test_an_older_slot_runs_once_the_series_is_idle():
    """A backfill (scheduleTime in the past) runs when nothing of its series is active."""
    made = decide(held(2, "newer"), JobState.SUCCEEDED, slot(1, Concurrency.FORBID))
    assert made.move is Move.RUN and made.write is not None


def test_a_slot_in_the_future_is_refused():
    now = T0 + timedelta(hours=1)
    assert check_not_ahead(slot(0), now) == []
    assert check_not_ahead(Slot(SERIES, now + timedelta(minutes=4), Concurrency.FORBID), now) == []
    (error,) = check_not_ahead(slot(3650), now)
    assert error.path == "scheduleTime" and "future" in error.message


def test_a_holder_without_a_record_is_waited_for_while_a_claim_could_live():
    fresh = held(0, "old", updated=T0 + timedelta(minutes=59))
    assert decide(fresh, None, slot(1)).move is Move.WAIT
    dead = held(0, "old", updated=T0)
    assert decide(dead, None, slot(1)).move is Move.RUN


# -- request files ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("requests/a.json", Format.JSON),
        ("requests/team/b.JSONL", Format.JSONL),
        ("requests/c.yaml", Format.YAML),
        ("requests/c.yml", Format.YAML),
        ("requests/d.txt", None),
        ("requests/", None),
        ("requests/dir.json/", None),
        ("requests/no-suffix", None),
        ("requests.json", None),
        ("other/a.json", None),
    ],
)
def test_request_files_are_named_by_prefix_and_suffix(name, fmt):
    assert request_format(name, "requests/") == fmt


LIMIT = 256 * 1024
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def test_jsonl_lines_keep_their_numbers_and_skip_blank_lines():
    data = b'\xef\xbb\xbf{"a": 1}\r\n   \n{"b": 2}'
    parts = messages(Format.JSONL, data, "r", max_bytes=LIMIT)
    assert [(p.line, p.data.strip()) for p in parts] == [(1, b'{"a": 1}'), (3, b'{"b": 2}')]


def test_jsonl_lines_end_at_newlines_only():
    # Issue 20: U+2028 is legal inside a JSON string; str.splitlines() splits there, which
    # the CLI did (refusing a file the upload path accepts, and shifting line numbers).
    data = '{"a": "x\u2028y"}\n{"b": "\u0085"}\n'.encode()
    parts = messages(Format.JSONL, data, "r", max_bytes=LIMIT)
    assert [(p.line, json.loads(p.data)) for p in parts] == [
        (1, {"a": "x\u2028y"}),
        (2, {"b": "\u0085"}),
    ]


def test_a_file_of_too_many_requests_fails_as_a_whole():
    from shared.domain.request.files import MAX_FILE_REQUESTS

    assert (
        len(messages(Format.JSONL, b"{}\n" * MAX_FILE_REQUESTS, "r", max_bytes=LIMIT))
        == MAX_FILE_REQUESTS
    )
    with pytest.raises(InvalidRequest, match="split it"):
        messages(Format.JSONL, b"{}\n" * (MAX_FILE_REQUESTS + 1), "r", max_bytes=LIMIT)


def test_a_json_file_is_one_message_as_is():
    assert [p.data for p in messages(Format.JSON, b"not even json", "r", max_bytes=LIMIT)] == [
        b"not even json"
    ]


def test_a_yaml_file_that_is_no_gcloud_config_fails_as_a_whole():
    with pytest.raises(InvalidRequest):
        messages(Format.YAML, b"- just\n- a list\n", "r", max_bytes=LIMIT)


def test_stored_object_reads_the_resource():
    resource = object_resource("requests/a.json", "42", 10, customTime="2026-11-30T01:00:00Z")
    resource["timeCreated"] = "2026-11-30T00:59:00Z"
    obj = StoredObject.of("b", "requests/a.json", "42", resource, NOW)
    assert obj.size == 10
    assert obj.written_at == datetime(2026, 11, 30, 1, tzinfo=UTC)
    assert obj.uri == "gs://b/requests/a.json#42"
    assert obj.request_id() == "gcs:b/requests/a.json#42"
    digest = hashlib.sha256(b"{}").hexdigest()[:32]
    assert obj.request_id(b"{}") == f"gcs:b/requests/a.json#sha256:{digest}"
    assert obj.request_id(b"{}", 3) == f"gcs:b/requests/a.json#sha256:{digest}:3"
    assert StoredObject.of("b", "n", "1", {"size": "big"}, NOW).size is None
    assert StoredObject.of("b", "n", "1", {"size": "\u00b2"}, NOW).size is None
    gzip = StoredObject.of("b", "n", "1", {"contentEncoding": "gzip"}, NOW)
    assert gzip.content_encoding == "gzip"


@pytest.mark.parametrize(
    ("custom", "written"),
    [
        ("2026-11-30T01:00:00Z", "2026-11-30T01:00:00Z"),  # within bounds: taken
        ("2020-01-01T00:00:00Z", "2026-11-30T02:00:00Z"),  # before its creation: the update
        ("2026-12-01T00:04:00Z", "2026-12-01T00:04:00Z"),  # a clock a little ahead: taken
        ("2027-01-01T00:00:00Z", "2026-11-30T02:00:00Z"),  # far ahead of now: the update
    ],
)
def test_custom_time_is_bounded(custom, written):
    resource = {
        "customTime": custom,
        "updated": "2026-11-30T02:00:00Z",
        "timeCreated": "2026-11-30T00:00:00Z",
    }
    obj = StoredObject.of("b", "requests/a.json", "1", resource, NOW)
    assert obj.written_at == datetime.fromisoformat(written)


# -- checkpoint uploads -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "prefix", "uri", "step"),
    [
        (
            "o/checkpoints/step-00000200/commit_success.txt",
            "gs://b/o/checkpoints/",
            "gs://b/o/checkpoints/step-00000200/",
            200,
        ),
        ("ck/200/.metadata", "gs://b/ck/", "gs://b/ck/200/", 200),
        ("ckpt-7/_SUCCESS", "gs://b/", "gs://b/ckpt-7/", 7),
        ("ck/model_step300.safetensors", "gs://b/ck/", "gs://b/ck/model_step300.safetensors", 300),
        ("last.pt", "gs://b/", "gs://b/last.pt", None),
    ],
)
def test_what_completes_a_checkpoint(name, prefix, uri, step):
    found = completed_by("b", name, T0)
    assert found == (prefix, Checkpoint(uri, step, T0))


@pytest.mark.parametrize(
    "name",
    [
        "ck/step-200/state.bin",
        "ck/step-200/__0_0.distcp",
        "ck/step-200/.metadata.tmp",
        "ck/logs/_SUCCESS",
        "ck/200.orbax-checkpoint-tmp-99/commit_success.txt",
        "ck/model-00001-of-00004.safetensors",
        "commit_success.txt",
    ],
)
def test_what_completes_nothing(name):
    assert completed_by("b", name, T0) is None


def record(**fields) -> JobRecord:
    raw = {"requestId": "r", "state": "RUNNING", "attempt": 1, "createdAt": T0, "options": "{}"}
    return JobRecord.decode({**raw, **fields})


def test_checkpoint_progress_records_news_only():
    cp = Checkpoint("gs://b/ck/step-2/", 2, T0 + DAY)
    change = checkpoint_progress(record(options='{"totalSteps": 4}'), cp, T0 + DAY)
    assert change is not None and change.state is JobState.RUNNING
    assert change.record["progress"] == 0.5
    assert change.record["latestCheckpoint"] == cp.to_dict()
    same = record(latestCheckpoint=cp.to_dict())
    assert checkpoint_progress(same, cp, T0 + DAY) is None


def test_checkpoint_progress_is_capped_at_one():
    cp = Checkpoint("gs://b/ck/step-9/", 9, T0 + DAY)
    change = checkpoint_progress(record(options='{"totalSteps": 4}'), cp, T0 + DAY)
    assert change is not None and change.record["progress"] == 1.0


def test_checkpoint_progress_skips_ended_unknown_and_other_runs_records():
    cp = Checkpoint("gs://b/ck/step-2/", 2, T0 + DAY)
    assert checkpoint_progress(record(state="SUCCEEDED"), cp, T0) is None
    assert checkpoint_progress(record(state="BOGUS"), cp, T0) is None
    old = Checkpoint("gs://b/ck/step-2/", 2, T0 - DAY)
    assert checkpoint_progress(record(), old, T0) is None
    # A request that named checkpointUri resumes from what is there, whoever wrote it.
    explicit = record(options='{"checkpointUri": "gs://b/ck/"}')
    assert checkpoint_progress(explicit, old, T0) is not None


def test_a_stepless_checkpoint_drops_a_progress_it_cannot_update():
    stepped = Checkpoint("gs://b/ck/step-2/", 2, T0 + DAY)
    stepless = Checkpoint("gs://b/ck/last.ckpt", None, T0 + 2 * DAY)
    current = record(options='{"totalSteps": 4}', latestCheckpoint=stepped.to_dict(), progress=0.5)
    change = checkpoint_progress(current, stepless, T0)
    assert change is not None and "progress" in change.deletes


def test_stepless_checkpoints_advance_by_time():
    first = Checkpoint("gs://b/ck/a.pt", None, T0 + DAY)
    later = Checkpoint("gs://b/ck/b.pt", None, T0 + 2 * DAY)
    assert checkpoint_progress(record(latestCheckpoint=first.to_dict()), later, T0) is not None
    assert checkpoint_progress(record(latestCheckpoint=later.to_dict()), first, T0) is None


# -- the two deliveries of a storage event -------------------------------------------------


def test_an_eventarc_finalize_is_unwrapped():
    resource = object_resource("requests/a.json", "42", 10)
    event = unwrap_object_event(storage_cloud_event(resource))
    assert (event.finalized, event.bucket, event.name, event.generation) == (
        True,
        "flexjobs-uploads",
        "requests/a.json",
        "42",
    )
    assert event.resource["size"] == "10"


def test_an_eventarc_finalize_falls_back_on_source_and_subject():
    resource = object_resource("requests/a.json", "42", 10)
    event = storage_cloud_event(resource)
    event.data = {"generation": "42"}
    unwrapped = unwrap_object_event(event)
    assert (unwrapped.bucket, unwrapped.name) == ("flexjobs-uploads", "requests/a.json")


def test_a_notification_is_unwrapped_from_its_attributes():
    resource = object_resource("requests/a.json", "42", 10)
    body = gcs_notification(resource, payload=False)
    event = CloudEvent(
        {"type": "google.cloud.pubsub.topic.v1.messagePublished", "source": "s", "id": "1"}, body
    )
    unwrapped = unwrap_object_event(event)
    assert (unwrapped.finalized, unwrapped.name, unwrapped.generation) == (
        True,
        "requests/a.json",
        "42",
    )
    assert unwrapped.resource == {}


@pytest.mark.parametrize(
    "event_type", ["OBJECT_DELETE", "OBJECT_METADATA_UPDATE", "OBJECT_ARCHIVE"]
)
def test_other_notifications_are_not_finalizes(event_type):
    body = gcs_notification(object_resource("a", "1", 1), event_type=event_type)
    event = CloudEvent(
        {"type": "google.cloud.pubsub.topic.v1.messagePublished", "source": "s", "id": "1"}, body
    )
    assert unwrap_object_event(event).finalized is False


@pytest.mark.parametrize("generation", ["latest", "\u00b2", "", "-1"])
def test_a_finalize_without_a_generation_is_refused(generation):
    resource = object_resource("requests/a.json", "42", 10)
    resource["generation"] = generation
    event = storage_cloud_event(resource)
    with pytest.raises(InvalidRequest):
        unwrap_object_event(event)


def test_a_request_message_is_not_a_storage_event():
    event = pubsub_cloud_event({"requestId": "x"})
    assert unwrap_object_event(event).finalized is False
