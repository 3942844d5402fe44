"""Rich rendering of records for the CLI, and what ``status`` and ``list`` print as data."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flexjobs import Client, Status

from rich.console import Group
from rich.table import Table
from rich.text import Text

# The figures read the same here and on the status page.
from shared.status.display import duration, gpu_hours, serving_history, serving_text, usd, when
from shared.status.serving_chart import layout, serving_facts

#: ``status`` of a deployment lists this many of its newest serving-capacity changes (the
#: record keeps 40; the status page shows them all).
RECENT_CHANGES = 5

STATE_STYLES = {
    "SUCCEEDED": "green",
    "FAILED": "red",
    "CANCELLED": "yellow",
    "SKIPPED": "yellow",
    "RUNNING": "cyan",
    "RETRYING": "magenta",
    "QUEUED": "blue",
    "ACCEPTED": "blue",
    "DEPLOYED": "green",
    "DEPLOYING": "cyan",
    "UNDEPLOYED": "yellow",
}


def mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def state_text(state: Any) -> Text:
    name = str(state or "?")
    return Text(name, style=STATE_STYLES.get(name, ""))


def checkpoint_text(record: Mapping[str, Any]) -> str:
    latest = record.get("latestCheckpoint")
    if not isinstance(latest, Mapping):
        return "-"
    step = latest.get("step")
    progress = record.get("progress")
    text = f"step {step}" if step is not None else "saved"
    if isinstance(progress, int | float) and not isinstance(progress, bool):
        text += f" ({progress:.0%})"
    return text


def status_view(
    record: Mapping[str, Any],
    attempts: Sequence[Mapping[str, Any]],
    admission: str | None = None,
) -> Group:
    """The record, its attempts, its latest checkpoint, cost and savings; ``admission``: a
    waiting request's place in its queue, in words."""
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    cost = mapping(record.get("cost"))
    latest = record.get("latestCheckpoint")
    rows: list[tuple[str, Any]] = [
        ("request", record.get("requestId")),
        ("kind", record.get("kind")),
        ("state", state_text(record.get("state"))),
        ("reason", record.get("reason")),
        ("admission", admission),
        ("attempt", record.get("attempt")),
        ("strategy", record.get("strategy")),
        ("location", record.get("location")),
        ("display name", record.get("displayName")),
        ("vertex job", record.get("vertexJob")),
        ("serving", serving_text(record)),
        ("created", when(record.get("createdAt"))),
        ("updated", when(record.get("updatedAt"))),
        ("ended", when(record.get("endedAt"))),
        ("queued", duration(record.get("queuedSeconds"))),
        ("running", duration(record.get("runningSeconds"))),
        ("GPU-hours", gpu_hours(record.get("gpuSeconds"))),
        ("checkpoint", checkpoint_text(record)),
        ("checkpoint uri", latest.get("uri") if isinstance(latest, Mapping) else None),
        ("cost", usd(cost.get("costUsd"))),
        ("on demand", usd(cost.get("onDemandUsd"))),
        ("savings", usd(cost.get("savingsUsd"))),
    ]
    for label, value in rows:
        if value is not None and value != "-":
            head.add_row(label, value if isinstance(value, Text) else str(value))
    table = Table(title="attempts", title_justify="left")
    for column in (
        "#",
        "state",
        "strategy",
        "location",
        "queued",
        "running",
        "GPU-h",
        "resumed from",
        "error class",
    ):
        table.add_column(column)
    for a in attempts:
        table.add_row(
            str(a.get("attempt", "?")),
            state_text(a.get("state")),
            str(a.get("strategy") or "-"),
            str(a.get("location") or "-"),
            duration(a.get("queuedSeconds")),
            duration(a.get("runningSeconds")),
            gpu_hours(a.get("gpuSeconds")),
            str(a.get("resumedFrom") or "-"),
            str(a.get("errorClass") or "-"),
        )
    return Group(head, table) if attempts else Group(head)


def deployment_view(record: Mapping[str, Any], now: datetime) -> Group:
    """A deployment's record; its serving as the tick recorded it (phase and since when,
    hedges, the fallback, the call in flight: the status page's words), the chart's summary
    and its newest changes."""
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    serving = mapping(record.get("serving"))
    rows: list[tuple[str, Any]] = [
        ("request", record.get("requestId")),
        ("kind", record.get("kind")),
        ("state", state_text(record.get("state"))),
        ("reason", record.get("reason")),
        ("display name", record.get("displayName")),
        ("endpoint", record.get("endpoint")),
        ("model", record.get("model")),
        ("deployed model", record.get("deployedModelId")),
        ("serving", serving_text(record)),
        *serving_facts(serving, now),
        ("created", when(record.get("createdAt"))),
        ("deployed", when(record.get("deployedAt"))),
        ("ended", when(record.get("endedAt"))),
    ]
    for label, value in rows:
        if value is not None and value != "-":
            head.add_row(label, value if isinstance(value, Text) else Text(str(value)))
    changes = serving_history(serving)
    if not changes:
        return Group(head)
    table = Table(
        title=f"serving capacity, newest first (last {min(len(changes), RECENT_CHANGES)})",
        title_justify="left",
    )
    for column in ("when", "Spot", "on-demand", "required", "cause"):
        table.add_column(column)
    for change in changes[:RECENT_CHANGES]:
        # Text, not markup: a cause may hold square brackets (a display name's tag).
        table.add_row(*(Text(cell) for cell in change))
    return Group(head, Text(layout(serving, now).summary), table)


def status_json(found: Status) -> dict[str, Any]:
    """``status --format json|yaml``: the record with its ``attempts`` (a list) added."""
    return {**found.record, "attempts": [dict(a.document) for a in found.attempts]}


def queues_view(summary: Mapping[str, Any]) -> Group:
    """``flexjobs queues``: a row per queue and resource, then the project's quota."""
    from shared.status.queues import queue_rows

    rows = queue_rows(summary)
    table = Table(title=f"admission queues as of {when(rows.at)}", title_justify="left")
    for column in ("queue", "resource", "nominal", "used", "borrowed", "waiting", "oldest wait"):
        table.add_column(column)
    for q in rows.queues:
        oldest = when(q.oldest_waiting_since) if q.oldest_waiting_since else "-"
        waiting = str(q.waiting) if q.waiting is not None else "-"
        for index, r in enumerate(q.resources or (None,)):
            table.add_row(
                q.name if index == 0 else "",
                r.resource if r else "-",
                _count(r.nominal if r else None),
                _count(r.used if r else None),
                _count(r.borrowed if r else None),
                waiting if index == 0 else "",
                oldest if index == 0 else "",
            )
    limits = Table(title="project quota", title_justify="left")
    for column in ("resource", "limit", "source"):
        limits.add_column(column)
    for p in rows.limits:
        limits.add_row(p.resource, _count(p.limit), p.source)
    parts: list[Any] = [table, limits]
    if rows.unreadable:
        parts.append(
            Text(f"the Cloud Quotas API could not be read: {rows.unreadable}", style="yellow")
        )
    return Group(*parts)


def _count(value: int | None) -> str:
    return str(value) if value is not None else "-"


def rejection_lines(found: Status) -> list[str]:
    return [f"request {found.request_id} was rejected:"] + [
        f"  {e.path}: {e.message}" for e in found.errors
    ]


def _created(row: Mapping[str, Any]) -> datetime:
    at = row.get("createdAt")
    if isinstance(at, datetime):
        return at if at.tzinfo else at.replace(tzinfo=UTC)
    return datetime.min.replace(tzinfo=UTC)


def newest(
    client: Client, states: tuple[str, ...], since: timedelta | None, limit: int
) -> list[dict[str, Any]]:
    """``list``: job records and deployment records, newest first by ``createdAt``, at most
    ``limit`` in all. Jobs are read through the status page's query (``state`` and
    ``createdAt`` in Firestore); the deployments' page is filtered here, since the status
    page's deployment query takes no filter (a rare state may show fewer than ``limit``)."""
    from shared.domain.model.kinds import DEPLOY_MODEL
    from shared.domain.model.states import DeploymentState, JobState

    job_states = tuple(s for s in states if s in JobState.__members__)
    deployment_states = {s for s in states if s in DeploymentState.__members__}
    rows: list[dict[str, Any]] = []
    if not states or job_states:
        rows += client.jobs(job_states, since, limit)
    if not states or deployment_states:
        cutoff = None if since is None else client.clock() - since
        for row in client.deployments(limit):
            if deployment_states and row.get("state") not in deployment_states:
                continue
            if cutoff is not None and _created(row) < cutoff:
                continue
            rows.append({"kind": DEPLOY_MODEL.name, **row})
    rows.sort(key=_created, reverse=True)
    return rows[:limit]


def list_view(records: Sequence[Mapping[str, Any]]) -> Table:
    table = Table()
    for column in (
        "request",
        "kind",
        "state",
        "attempt",
        "strategy",
        "location",
        "created",
        "cost",
        "serving",
    ):
        table.add_column(column)
    for r in records:
        cost = mapping(r.get("cost"))
        strategy = r.get("strategy") or ("SPOT" if r.get("spot") else None)
        table.add_row(
            str(r.get("requestId") or "?"),
            str(r.get("kind") or "-"),
            state_text(r.get("state")),
            str(r.get("attempt") if r.get("attempt") is not None else "-"),
            str(strategy or "-"),
            str(r.get("location") or "-"),
            when(r.get("createdAt")),
            usd(cost.get("costUsd")),
            serving_text(r),
        )
    return table
