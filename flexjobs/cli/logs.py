"""``flexjobs logs ID [--follow]``: a training request's Cloud Logging entries, attempt by attempt.

Vertex writes each job's lines (its containers' output and its own state changes) under
``resource.type="ml_job"`` and ``resource.labels.job_id=<the Vertex job's id>``. This reads them
with the Logging API v2 ``entries:list`` (REST, through google-auth's AuthorizedSession, with
the ``logging.read`` scope), for each attempt's Vertex job in turn. ``--follow`` reads again
every ``interval`` seconds, after the last entry shown, and ends once the request has ended
and its last entries are read.

``FLEXJOBS_LOGGING_ENDPOINT`` points it elsewhere (plain HTTP, no credentials): the embedded
stack sets it to the Vertex simulator, which serves the same call over the entries it keeps
(its jobs' state-change lines; it runs no container, so there is no container output).

Every answer is bounded in bytes (:data:`MAX_ANSWER_BYTES`), and a page in entries.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

from flexjobs import Client, Status
from flexjobs.cli.output import CONFIGURATION, CliError
from shared.domain.model.kinds import kind_named
from shared.kernel.errors import RequestNotFound

ENDPOINT_VARIABLE: Final = "FLEXJOBS_LOGGING_ENDPOINT"
LOGGING_API: Final = "https://logging.googleapis.com"
SCOPE: Final = "https://www.googleapis.com/auth/logging.read"
PAGE_SIZE: Final = 1000
#: An answer is at most a page of entries; a LogEntry is at most 256 KiB, so a page of 1,000
#: could be 256 MiB: the bound refuses a page that large rather than hold it.
MAX_ANSWER_BYTES: Final = 32 * 1024 * 1024
#: Pages read per job and per read; beyond them the read stops and says so.
MAX_PAGES: Final = 100


def job_filter(job_id: str, after: str | None = None) -> str:
    """The Logging filter of one Vertex job's entries (``after``: RFC 3339, inclusive).

    Examples:
        >>> job_filter("123")
        'resource.type="ml_job" AND resource.labels.job_id="123"'
        >>> job_filter("123", "2026-12-02T09:00:00Z")[-38:]
        ' AND timestamp>="2026-12-02T09:00:00Z"'
    """
    text = f'resource.type="ml_job" AND resource.labels.job_id="{_quoted(job_id)}"'
    return text if after is None else f'{text} AND timestamp>="{_quoted(after)}"'


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def line_of(entry: dict[str, Any], attempt: int | None) -> str:
    """One entry as one line: time, severity, attempt, text.

    Examples:
        >>> line_of({"timestamp": "2026-12-02T09:00:00Z", "severity": "INFO",
        ...          "textPayload": "Job is running."}, 2)
        '2026-12-02T09:00:00Z INFO     [attempt 2] Job is running.'
    """
    payload = entry.get("textPayload")
    if payload is None:
        body = entry.get("jsonPayload")
        payload = (
            body.get("message", json.dumps(body)) if isinstance(body, dict) else json.dumps(body)
        )
    severity = str(entry.get("severity") or "DEFAULT")
    where = f"[attempt {attempt}] " if attempt is not None else ""
    return f"{entry.get('timestamp', '?')} {severity:<8} {where}{payload}"


class LoggingApi:
    """``entries:list`` over HTTP: the Google API with credentials, or an endpoint named by
    :data:`ENDPOINT_VARIABLE` without."""

    def __init__(self, project: str, timeout: float, session: Any = None) -> None:
        self.project = project
        self.timeout = timeout
        self.base = os.environ.get(ENDPOINT_VARIABLE) or LOGGING_API
        self._session = session

    def _http(self) -> Any:
        if self._session is None:
            if self.base == LOGGING_API:
                import google.auth
                from google.auth.exceptions import DefaultCredentialsError
                from google.auth.transport.requests import AuthorizedSession

                try:
                    credentials, _ = google.auth.default(scopes=[SCOPE])
                except DefaultCredentialsError as exc:
                    raise CliError(
                        "no Google credentials: run 'gcloud auth application-default login'"
                        " or set GOOGLE_APPLICATION_CREDENTIALS"
                    ) from exc
                self._session = AuthorizedSession(credentials)  # type: ignore[no-untyped-call]
            else:
                import requests

                self._session = requests.Session()
        return self._session

    def page(self, filter_text: str, token: str | None) -> dict[str, Any]:
        import requests

        body: dict[str, Any] = {
            "resourceNames": [f"projects/{self.project}"],
            "filter": filter_text,
            "orderBy": "timestamp asc",
            "pageSize": PAGE_SIZE,
        }
        if token:
            body["pageToken"] = token
        url = f"{self.base.rstrip('/')}/v2/entries:list"
        try:
            with self._http().post(url, json=body, timeout=self.timeout, stream=True) as answer:
                data = _bounded(answer.iter_content(64 * 1024), url)
                status = answer.status_code
        except requests.RequestException as exc:
            raise CliError(f"Cloud Logging at {self.base} is not reachable: {exc}") from exc
        if status != 200:
            raise CliError(f"Cloud Logging answered {status}: {data[:300]!r}", CONFIGURATION)
        try:
            found = json.loads(data)
        except ValueError as exc:
            raise CliError(f"Cloud Logging answered what is not JSON: {exc}") from exc
        if not isinstance(found, dict):
            raise CliError("Cloud Logging answered what is not an object")
        return found


def _bounded(chunks: Iterator[bytes], url: str) -> bytes:
    data = bytearray()
    for chunk in chunks:
        data += chunk
        if len(data) > MAX_ANSWER_BYTES:
            raise CliError(f"{url} answered more than {MAX_ANSWER_BYTES} bytes; stopped reading")
    return bytes(data)


class Reader:
    """Reads each job's entries once: a read starts at the last entry's time and skips the
    entries of that instant already shown (by ``insertId``)."""

    def __init__(self, api: LoggingApi) -> None:
        self.api = api
        self._after: dict[str, str] = {}
        self._seen: dict[str, set[str]] = {}

    def new_entries(self, job_id: str) -> list[dict[str, Any]]:
        fresh: list[dict[str, Any]] = []
        token: str | None = None
        for _ in range(MAX_PAGES):
            found = self.api.page(job_filter(job_id, self._after.get(job_id)), token)
            entries = found.get("entries")
            for entry in entries if isinstance(entries, list) else []:
                if not isinstance(entry, dict):
                    continue
                stamp, key = str(entry.get("timestamp", "")), str(entry.get("insertId", ""))
                if stamp == self._after.get(job_id) and key in self._seen.get(job_id, set()):
                    continue
                if stamp != self._after.get(job_id):
                    self._after[job_id], self._seen[job_id] = stamp, set()
                self._seen[job_id].add(key)
                fresh.append(entry)
            token = found.get("nextPageToken") or None
            if token is None:
                return fresh
        raise CliError(f"more than {MAX_PAGES} pages of entries for job {job_id}; stopped")


def jobs_of(found: Status) -> list[tuple[int | None, str]]:
    """(attempt, Vertex job id) of each attempt that reached Vertex, in attempt order."""
    kind = kind_named(found.kind)
    if found.rejected or kind is None or kind.log_resource != "ml_job":
        what = "a rejected request" if found.rejected else f"a {found.kind or 'request'}"
        raise CliError(f"{found.request_id} is {what}: it has no ml_job entries", code=1)
    jobs: list[tuple[int | None, str]] = []
    for attempt in found.attempts:
        if attempt.vertex_job and (attempt.attempt, attempt.vertex_job) not in jobs:
            jobs.append((attempt.attempt, attempt.vertex_job))
    return [(n, name.rsplit("/", 1)[-1]) for n, name in jobs]


def show_logs(
    client: Client,
    request_id: str,
    emit: Callable[[str], None],
    *,
    follow: bool = False,
    interval: float = 2.0,
    api: LoggingApi | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Print the request's entries; with ``follow``, until it has ended. 0, or 1 when it
    ended otherwise than SUCCEEDED (with ``follow``). Following a request not recorded yet
    (just published) waits for its record, as ``watch`` does."""
    reader = Reader(api or LoggingApi(client.project, client.timeout))
    while True:
        try:
            found = client.status(request_id)
        except RequestNotFound:
            if not follow:
                raise
            sleep(interval)
            continue
        for attempt, job_id in jobs_of(found):
            for entry in reader.new_entries(job_id):
                emit(line_of(entry, attempt))
        if not follow:
            return 0
        if found.terminal:
            # Its last state is recorded after Vertex wrote its last line: this read had it.
            return 0 if found.succeeded else 1
        sleep(interval)
