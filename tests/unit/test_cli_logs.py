"""``flexjobs logs`` offline: the entries the simulator keeps, served as ``entries:list`` serves
them, and the command's reader over them (each entry shown once, attempt by attempt)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from flexjobs import Client
from flexjobs.cli.logs import LoggingApi, Reader, job_filter, show_logs
from flexjobs.cli.output import CliError
from flexjobs_local.simulator.common import StateChanged
from flexjobs_local.simulator.engine import Engine
from flexjobs_local.simulator.logs import JobLogs
from shared.kernel.config import Settings
from tests.fakes import (
    InMemoryAttemptStore,
    InMemoryJobStore,
    InMemoryJobViews,
    InMemoryRejectionLog,
)

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC).timestamp()


def changed(job_id: str, state: str, at: float, resource: str = "CustomJob") -> StateChanged:
    return StateChanged(
        resource,
        f"projects/p/locations/l/customJobs/{job_id}",
        "p",
        "l",
        job_id,
        state,
        at,
        None,
        None,
    )


@pytest.fixture
def logs() -> JobLogs:
    return JobLogs(Engine(), "p")


class SimulatorApi(LoggingApi):
    """The command's Logging API, answered by the simulator's entries in process."""

    def __init__(self, logs: JobLogs) -> None:
        super().__init__("p", 5.0)
        self.logs = logs
        self.filters: list[str] = []

    def page(self, filter_text: str, token: str | None) -> dict[str, Any]:
        self.filters.append(filter_text)
        body: dict[str, Any] = {"resourceNames": ["projects/p"], "filter": filter_text}
        return self.logs.list_entries({**body, "pageSize": 2, "pageToken": token})


def test_the_simulator_answers_entries_list_for_one_job(logs: JobLogs) -> None:
    for i, state in enumerate(("JOB_STATE_QUEUED", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED")):
        logs._on_event(changed("7", state, T0 + i))
    logs._on_event(changed("8", "JOB_STATE_QUEUED", T0))
    logs._on_event(changed("9", "JOB_STATE_QUEUED", T0, resource="TrainingPipeline"))
    body = {"resourceNames": ["projects/p"], "filter": job_filter("7"), "pageSize": 2}
    first = logs.list_entries(body)
    assert [e["textPayload"] for e in first["entries"]] == ["Job is queued.", "Job is running."]
    assert first["entries"][0]["resource"]["type"] == "ml_job"
    rest = logs.list_entries({**body, "pageToken": first["nextPageToken"]})
    assert [e["textPayload"] for e in rest["entries"]] == ["Job completed successfully."]
    assert "nextPageToken" not in rest
    newest = logs.list_entries({**body, "orderBy": "timestamp desc", "pageSize": 1})
    assert newest["entries"][0]["textPayload"] == "Job completed successfully."
    later = logs.list_entries({**body, "filter": job_filter("7", "2026-12-02T09:00:01Z")})
    assert len(later["entries"]) == 2
    assert logs.list_entries({**body, "filter": job_filter("9")})["entries"] == []


@pytest.mark.parametrize(
    "change",
    [
        {"filter": 'textPayload:"x"'},
        {"filter": 'severity>"INFO"'},
        {"orderBy": "insertId"},
        {"pageSize": 5000},
        {"pageToken": "not-a-token"},
        {"resourceNames": ["projects/other"]},
    ],
)
def test_the_simulator_refuses_what_it_does_not_read(logs: JobLogs, change: dict[str, Any]) -> None:
    from flexjobs_local.simulator.logs import BadFilter

    body = {"resourceNames": ["projects/p"], "filter": job_filter("7"), **change}
    with pytest.raises(BadFilter):
        logs.list_entries(body)


def test_the_reader_shows_each_entry_once_across_reads(logs: JobLogs) -> None:
    reader = Reader(SimulatorApi(logs))
    logs._on_event(changed("7", "JOB_STATE_QUEUED", T0))
    logs._on_event(changed("7", "JOB_STATE_PENDING", T0 + 1))
    assert [e["textPayload"] for e in reader.new_entries("7")] == [
        "Job is queued.",
        "Waiting for job to be provisioned.",
    ]
    assert reader.new_entries("7") == []
    # A second line at the instant last shown, and one after it: both new, once.
    logs._on_event(changed("7", "JOB_STATE_RUNNING", T0 + 1))
    logs._on_event(changed("7", "JOB_STATE_SUCCEEDED", T0 + 2))
    assert [e["textPayload"] for e in reader.new_entries("7")] == [
        "Job is running.",
        "Job completed successfully.",
    ]
    assert reader.new_entries("7") == []


def client_with(record: dict[str, Any], attempts: list[dict[str, Any]]) -> Client:
    jobs = InMemoryJobStore()
    jobs.create(record["requestId"], record)
    for a in attempts:
        InMemoryAttemptStore(jobs.database).update_attempt(record["requestId"], a["attempt"], a)
    return Client(
        "p",
        settings=Settings(project=""),
        views=InMemoryJobViews(jobs.database),
        rejections=InMemoryRejectionLog(),
    )


def test_logs_reads_every_attempts_job_in_order(logs: JobLogs) -> None:
    client = client_with(
        {"requestId": "r1", "kind": "customJob", "state": "SUCCEEDED", "attempt": 2},
        [
            {"attempt": 1, "vertexJob": "projects/p/locations/l/customJobs/7"},
            {"attempt": 2, "vertexJob": "projects/p/locations/l/customJobs/8"},
        ],
    )
    logs._on_event(changed("8", "JOB_STATE_SUCCEEDED", T0 + 9))
    logs._on_event(changed("7", "JOB_STATE_FAILED", T0))
    lines: list[str] = []
    api = SimulatorApi(logs)
    assert show_logs(client, "r1", lines.append, follow=True, api=api, sleep=pytest.fail) == 0
    assert lines == [
        "2026-12-02T09:00:00.000000Z ERROR    [attempt 1] Job failed.",
        "2026-12-02T09:00:09.000000Z INFO     [attempt 2] Job completed successfully.",
    ]


def test_logs_of_a_deployment_say_there_are_none() -> None:
    client = client_with({"requestId": "d1", "kind": "deployModel", "state": "DEPLOYED"}, [])
    with pytest.raises(CliError, match="no ml_job entries"):
        show_logs(client, "d1", print)


def test_following_a_request_not_recorded_yet_waits_for_its_record(logs: JobLogs) -> None:
    import flexjobs

    client = client_with({"requestId": "other", "kind": "customJob", "state": "RUNNING"}, [])
    views = client.views
    waits: list[float] = []

    def record_appears(seconds: float) -> None:
        # The record is written while the command waits, as intake writes it after a publish.
        waits.append(seconds)
        InMemoryJobStore(views.database).create(  # type: ignore[attr-defined]
            "r1", {"requestId": "r1", "kind": "customJob", "state": "SUCCEEDED"}
        )

    assert show_logs(client, "r1", print, follow=True, sleep=record_appears) == 0
    assert waits == [2.0]
    with pytest.raises(flexjobs.RequestNotFound):
        show_logs(client, "nobody", print)
