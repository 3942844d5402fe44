"""The status page: every job, its attempts on a timeline, and what cheap capacity saved.

A read-only site, rendered on the server from the Firestore records (Jinja2, autoescaped; no
script anywhere), served by the HTTP function ``status_page``:

==============================  ===========================================================
``/``                           jobs, newest first; ``state`` (repeatable), ``age`` (30m,
                                24h, 7d), ``limit`` and ``cursor``; the totals on top
``/jobs/<requestId>``           the record, its attempts as an SVG timeline, the attempts'
                                table and the notifications it produced
``/deployments``                Spot deployments, newest first (``limit``, ``cursor``)
``/deployments/<requestId>``    one deployment: the record, its serving capacity as an SVG
                                step chart, the changes' table and its notifications
``/queues``                     admission queues: each queue's quota, usage, borrowing and
                                waiting line, and the project's quota with its source
``/api/queues``                 the same as JSON (the tick's ``admission/summary``)
``/api/jobs``                   the list and the totals as JSON (same parameters)
``/api/jobs/<requestId>``       the record, its attempts and notifications as JSON
``/assets/status.css``          the stylesheet (so that no style is inline)
==============================  ===========================================================

Only GET and HEAD are answered (405 with ``Allow`` otherwise). A query string is checked
before anything is read: a problem answers 400 naming each bad parameter. An unknown id
answers 404, a Firestore failure 503 (logged), and every answer carries the security headers
(:data:`SECURITY_HEADERS`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from werkzeug.wrappers import Request, Response

from shared.domain.admission.summary import place_of
from shared.domain.model.ids import check_request_id
from shared.domain.model.records import DeploymentRecord, JobRecord
from shared.domain.model.tally import NEWEST, Tally, first_ids
from shared.domain.policy.pricing import PriceTable
from shared.domain.serving.model import HISTORY_LIMIT
from shared.kernel.errors import FieldError, InvalidRequest, StoreUnavailable
from shared.kernel.logs import get_logger
from shared.status.display import (
    duration,
    gpu_hours,
    jsonable,
    serving_history,
    serving_text,
    when,
)
from shared.status.listing import (
    DEFAULT_PAGE_SIZE,
    JOB_STATES,
    MAX_ATTEMPTS,
    MAX_TOTALED,
    Filters,
    Listing,
    Page,
    attempt_numbers,
    next_cursor,
    read_filters,
)
from shared.status.overview import (
    ACTIVE_STATES,
    WINDOWS,
    JobRow,
    Totals,
    attempt_rows,
    deployment_row,
    job_row,
    notifications,
    tallied,
    totals,
)
from shared.status.page import (
    CSS_PATH,
    FILLS,
    SECURITY_HEADERS,
    error_page,
    html_page,
    json_response,
    line_text,
    money_json,
    money_text,
    stylesheet_response,
    when_text,
)
from shared.status.ports import JobViews
from shared.status.queues import queue_rows, waiting_text
from shared.status.serving_chart import layout as serving_layout
from shared.status.serving_chart import serving_facts
from shared.status.timeline import attempt_times, layout

log = get_logger("status_page")
ALLOWED_METHODS = ("GET", "HEAD")
AGES = (("", "any time"), ("1h", "hour"), ("24h", "24 hours"), ("7d", "7 days"), ("30d", "30 days"))


@dataclass
class StatusSite:
    """The status page's ports: the records' read views, the price table and the clock."""

    views: JobViews
    prices: PriceTable
    clock: Callable[[], datetime]
    page_size: int = DEFAULT_PAGE_SIZE
    # The independent reads of one page run side by side: a page waits for its slowest read,
    # not for their sum.
    pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=8, thread_name_prefix="views")
    )
    # The totals are reused for this long: their windows are a day and a week, so a few
    # seconds' lag says nothing, and page views need not each read the week's ended jobs.
    # 0 reads them for every page.
    totals_seconds: float = 30.0
    _totals: tuple[datetime, Totals] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class NotFound(Exception):
    """No record has this id (or the path names no page)."""


def serve(request: Request, site: StatusSite) -> Response:
    """Answer one request; every answer carries :data:`SECURITY_HEADERS`."""
    started = time.perf_counter()
    response = _answer(request, site)
    response.headers.update(SECURITY_HEADERS)
    # The server time of this answer, for the benchmark and a browser's network panel.
    response.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.1f}"
    return response


def _answer(request: Request, site: StatusSite) -> Response:
    api = request.path.startswith("/api/")
    if request.method not in ALLOWED_METHODS:
        response = error_page(405, "Method not allowed", "This page only reads: GET or HEAD.", api)
        response.headers["Allow"] = ", ".join(ALLOWED_METHODS)
        return response
    params = {name: request.args.getlist(name) for name in request.args}
    try:
        return _route(request.path, params, site)
    except InvalidRequest as refused:
        return error_page(400, "Bad request", "The query string has problems:", api, refused.errors)
    except NotFound:
        return error_page(404, "Not found", f"Nothing is recorded at {request.path}.", api)
    except StoreUnavailable:
        log.error(f"status page: Firestore failed for {request.path}", exc_info=True)
        return error_page(503, "Unavailable", "Firestore could not be read; try again.", api)
    except Exception:
        log.exception(f"status page: failed for {request.path}")
        return error_page(500, "Internal error", "The page failed; it is logged.", api)


def _route(path: str, params: dict[str, list[str]], site: StatusSite) -> Response:
    pages: dict[str, Callable[[dict[str, list[str]], StatusSite], Response]] = {
        "/": _jobs_page,
        "/api/jobs": _jobs_json,
        "/deployments": _deployments_page,
        "/deployments/": _deployments_page,
        "/queues": _queues_page,
        "/api/queues": _queues_json,
        CSS_PATH: lambda _params, _site: stylesheet_response(),
    }
    if path in pages:
        return pages[path](params, site)
    records: dict[str, Callable[[str, StatusSite], Response]] = {
        "/jobs/": _job_page,
        "/api/jobs/": _job_json,
        "/deployments/": _deployment_page,
    }
    for prefix, page in records.items():
        request_id = path.removeprefix(prefix)
        if path.startswith(prefix) and request_id and not check_request_id(request_id):
            _no_parameters(params)
            return page(request_id, site)
    raise NotFound(path)


def _no_parameters(params: Mapping[str, list[str]]) -> None:
    if params:
        raise InvalidRequest([FieldError(n, "is not a parameter of this page") for n in params])


# --- the jobs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class JobsView:
    filters: Filters
    page: Page
    rows: list[JobRow]
    totals: Totals
    now: datetime


def _jobs(params: dict[str, list[str]], site: StatusSite) -> JobsView:
    now = site.clock()
    asked = read_filters(params, now=now, default_size=site.page_size)
    listing = asked.listing
    tally = _tally(site, now)
    first = not listing.states and listing.since is None and listing.after is None
    if tally is not None and first and listing.size < NEWEST:
        # The first page of the whole list: its members from the tally, each row read fresh
        # by key (no query, whatever the database holds).
        page = site.pool.submit(_newest_page, site, tally, listing)
    else:
        page = site.pool.submit(site.views.jobs, listing)
    figures = tallied(tally, now) if tally is not None else _totals(site, now)
    found = page.result()
    rows = [job_row(raw, now, site.prices) for raw in found.rows]
    return JobsView(asked, found, rows, figures, now)


#: The tick's tally serves the page while it is at most this old (a tick a minute): an older
#: one means the tick is not running, and the page reads the records instead.
TALLY_FRESH_SECONDS = 300.0


def _tally(site: StatusSite, now: datetime) -> Tally | None:
    """The tick's tally when it is fresh (:data:`TALLY_FRESH_SECONDS`), else None."""
    tally = site.views.tally()
    if tally is None or not 0 <= (now - tally.as_of).total_seconds() <= TALLY_FRESH_SECONDS:
        return None
    return tally


def _newest_page(site: StatusSite, tally: Tally, listing: Listing) -> Page:
    """The newest jobs the tick tallied, as their records are now; read from a query when
    one of them is gone (a tombstone or a skipped slot expires, a record deleted by hand),
    so a page is never short, nor its next page lost."""
    ids = first_ids(tally, listing.size + 1)
    rows = site.views.rows(ids)
    if len(rows) < len(ids):
        return site.views.jobs(listing)
    return Page(rows[: listing.size], next_cursor(rows, listing.size))


def _totals(site: StatusSite, now: datetime) -> Totals:
    """Without a fresh tally (no tick yet, or the tick stopped): the active counts by state
    and the jobs ended in the longest window, read at once (capped), or the ones read less
    than ``site.totals_seconds`` ago."""
    with site._lock:
        kept = site._totals
    if kept is not None and 0 <= (now - kept[1].as_of).total_seconds() < site.totals_seconds:
        return kept[1]
    counts = {state: site.pool.submit(site.views.count, state) for state in ACTIVE_STATES}
    longest = max(span for _, span in WINDOWS)
    # One more than the bound: whether the bound was reached.
    ended = site.views.ended_since(now - longest, MAX_TOTALED + 1)
    active = {state: count.result() for state, count in counts.items()}
    figures = totals(active, ended[:MAX_TOTALED], now, capped=len(ended) > MAX_TOTALED)
    with site._lock:
        site._totals = (now, figures)
    return figures


def _jobs_page(params: dict[str, list[str]], site: StatusSite) -> Response:
    view = _jobs(params, site)
    return html_page(
        "jobs.html",
        dict(
            now=view.now,
            rows=view.rows,
            totals=view.totals,
            filters=view.filters,
            all_states=JOB_STATES,
            ages=AGES,
            max_totaled=MAX_TOTALED,
            **_page_links("/", params, view.page, view.filters.listing.after is not None),
        ),
    )


def _jobs_json(params: dict[str, list[str]], site: StatusSite) -> Response:
    view = _jobs(params, site)
    return json_response(
        {
            "jobs": [_row_json(row) for row in view.rows],
            "next": view.page.next.token() if view.page.next else None,
            "totals": _totals_json(view.totals),
            "asOf": jsonable(view.now),
        }
    )


def _page_links(
    base: str, params: Mapping[str, list[str]], page: Page, paged: bool
) -> dict[str, str | None]:
    """The next page's link (when there is one) and the first page's (when this is not it),
    each with the same filters."""
    kept = [(k, v) for k, values in params.items() if k != "cursor" for v in values]

    def link(extra: list[tuple[str, str]]) -> str:
        query = urlencode(kept + extra)
        return f"{base}?{query}" if query else base

    return {
        "next_page": link([("cursor", page.next.token())]) if page.next else None,
        "first_page": link([]) if paged else None,
    }


def _job_page(request_id: str, site: StatusSite) -> Response:
    now = site.clock()
    raw, docs = _job_and_attempts(request_id, site)
    record = JobRecord.decode(raw)
    row = job_row(raw, now, site.prices)
    times = attempt_times(docs, record.latest_checkpoint, now, record.vertex_create_time)
    timeline = layout(times, now)
    return html_page(
        "job.html",
        dict(
            now=now,
            row=row,
            facts=_job_facts(raw, record, row, _admission_fact(record, site)),
            timeline=timeline,
            fills=FILLS,
            attempts=attempt_rows(docs),
            attempts_capped=len(docs) >= MAX_ATTEMPTS,
            max_attempts=MAX_ATTEMPTS,
            notes=notifications(record),
        ),
    )


def _job_json(request_id: str, site: StatusSite) -> Response:
    now = site.clock()
    raw, docs = _job_and_attempts(request_id, site)
    record = JobRecord.decode(raw)
    ordered = sorted(docs, key=lambda a: a.get("attempt") or 0)
    return json_response(
        {
            "job": jsonable(raw),
            "figures": _row_json(job_row(raw, now, site.prices)),
            "attempts": jsonable(ordered),
            "notifications": [dataclasses.asdict(n) for n in notifications(record)],
            "asOf": jsonable(now),
        }
    )


def _job_and_attempts(
    request_id: str, site: StatusSite
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    # The record, then its attempts by key: how many it has is the record's.
    raw = site.views.job(request_id)
    if raw is None:
        raise NotFound(request_id)
    return raw, site.views.attempts(request_id, attempt_numbers(raw))


def _job_facts(
    raw: Mapping[str, Any], record: JobRecord, row: JobRow, admission: str | None = None
) -> list[tuple[str, str]]:
    """The record's fields worth a line, in words (empty ones left out)."""
    latest = record.latest_checkpoint
    progress = raw.get("progress")
    checkpoint = None
    if latest is not None:
        step = f"step {latest.step}" if latest.step is not None else "saved"
        share = f" ({progress:.0%})" if isinstance(progress, int | float) else ""
        checkpoint = f"{step}{share} at {when(latest.at)}: {latest.uri}"
    retries = ", ".join(f"{group} {used}" for group, used in sorted(record.retries.items()))
    origin = " ".join(
        str(part)
        for part in (raw.get("source"), raw.get("object"), line_text(raw.get("line")))
        if part
    )
    series = raw.get("series")
    facts: list[tuple[str, Any]] = [
        ("kind", record.kind),
        ("reason", record.reason),
        ("admission", admission),
        ("attempt", str(record.attempt)),
        ("strategy", record.strategy),
        ("location", record.location),
        ("accelerator", f"{record.accelerator_type or '-'} \N{MULTIPLICATION SIGN} {record.gpus}"),
        ("Vertex job", record.vertex_job),
        ("Vertex state", raw.get("vertexState")),
        ("created", when_text(record.created_at)),
        ("updated", when_text(raw.get("updatedAt"))),
        ("ended", when_text(record.ended_at)),
        ("next attempt", when_text(record.next_attempt_at)),
        ("queued", duration(row.queued_seconds) + (" so far" if row.live else "")),
        ("running", duration(row.running_seconds) + (" so far" if row.live else "")),
        ("GPU-hours", gpu_hours(row.gpu_seconds)),
        ("work lost", duration(record.work_lost_seconds) if record.work_lost_seconds else None),
        ("cost", money_text(row.money, row.live)),
        ("latest checkpoint", checkpoint),
        ("retries used", retries or None),
        ("last failure class", raw.get("lastFailureClass")),
        ("cancel requested", "yes" if record.cancel_requested else None),
        ("from", origin or None),
        ("series", f"{series} (slot {when_text(raw.get('slot'))})" if series else None),
    ]
    return [(label, str(value)) for label, value in facts if value not in (None, "", "-")]


# --- admission queues -----------------------------------------------------------------------


def _queues_page(params: dict[str, list[str]], site: StatusSite) -> Response:
    _no_parameters(params)
    summary = site.views.admission_summary()
    return html_page(
        "queues.html", dict(now=site.clock(), summary=queue_rows(summary) if summary else None)
    )


def _queues_json(params: dict[str, list[str]], site: StatusSite) -> Response:
    _no_parameters(params)
    summary = site.views.admission_summary()
    return json_response({"summary": jsonable(summary), "asOf": jsonable(site.clock())})


def _admission_fact(record: JobRecord, site: StatusSite) -> str | None:
    """Where a request waiting for admission stands, as of the last tick."""
    if not record.awaiting_admission:
        return None
    summary = site.views.admission_summary()
    place = place_of(summary, record.request_id) if summary else None
    return waiting_text(record.admission, place, summary)


# --- deployments ----------------------------------------------------------------------------


def _deployments_page(params: dict[str, list[str]], site: StatusSite) -> Response:
    now = site.clock()
    asked = read_filters(params, now=now, filters=False, default_size=site.page_size)
    page = site.views.deployments(asked.listing)
    return html_page(
        "deployments.html",
        dict(
            now=now,
            rows=[deployment_row(raw) for raw in page.rows],
            **_page_links("/deployments", params, page, asked.listing.after is not None),
        ),
    )


def _deployment_page(request_id: str, site: StatusSite) -> Response:
    raw = site.views.deployment(request_id)
    if raw is None:
        raise NotFound(request_id)
    now = site.clock()
    row = deployment_row(raw)
    record = DeploymentRecord.decode(raw)
    facts: list[tuple[str, Any]] = [
        ("display name", row.display_name),
        ("endpoint", row.endpoint),
        ("model", row.model),
        ("Spot", row.spot),
        ("operation", raw.get("operation")),
        ("deployed model id", raw.get("deployedModelId")),
        ("serving", serving_text(raw)),
        *serving_facts(record.serving, now),
        ("reason", row.reason),
        ("error code", raw.get("errorCode")),
        ("created", when_text(row.created_at)),
        ("updated", when_text(raw.get("updatedAt"))),
        ("deployed", when_text(row.deployed_at)),
        ("ended", when_text(row.ended_at)),
        ("next deployment", when_text(raw.get("nextAttemptAt"))),
    ]
    return html_page(
        "deployment.html",
        dict(
            now=now,
            request_id=row.request_id,
            state=row.state,
            facts=[(label, str(value)) for label, value in facts if value not in (None, "", "-")],
            chart=serving_layout(record.serving, now),
            fills=FILLS,
            history=serving_history(record.serving),
            history_limit=HISTORY_LIMIT,
            notes=notifications(record),
        ),
    )


def _row_json(row: JobRow) -> dict[str, Any]:
    return {
        "requestId": row.request_id,
        "displayName": row.display_name,
        "kind": row.kind,
        "state": row.state,
        "attempt": row.attempt,
        "acceleratorType": row.accelerator,
        "gpus": row.gpus,
        "strategy": row.strategy,
        "createdAt": jsonable(row.created_at),
        "queuedSeconds": row.queued_seconds,
        "runningSeconds": row.running_seconds,
        "gpuSeconds": row.gpu_seconds,
        "cost": money_json(row.money),
        # True: the figures include the attempt still queued or running, so far.
        "live": row.live,
    }


def _totals_json(figures: Totals) -> dict[str, Any]:
    return {
        "asOf": jsonable(figures.as_of),
        "active": dict(figures.active),
        "windows": [
            {
                "window": w.label,
                "since": jsonable(w.since),
                "jobs": w.jobs,
                "gpuSeconds": w.gpu_seconds,
                "cost": money_json(w.money),
                "truncated": w.truncated,
            }
            for w in figures.windows
        ],
    }
