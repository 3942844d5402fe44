"""Rich rendering of records for the CLI, and their JSON form (times in RFC 3339)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

# The figures read the same here and on the status page.
from shared.status.display import duration, gpu_hours, usd, when

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


def status_view(record: Mapping[str, Any], attempts: Sequence[Mapping[str, Any]]) -> Group:
    """The record, its attempts, its latest checkpoint, cost and savings."""
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
        ("attempt", record.get("attempt")),
        ("strategy", record.get("strategy")),
        ("location", record.get("location")),
        ("display name", record.get("displayName")),
        ("vertex job", record.get("vertexJob")),
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


def list_view(records: Sequence[Mapping[str, Any]]) -> Table:
    table = Table()
    for column in ("request", "state", "attempt", "strategy", "location", "created", "cost"):
        table.add_column(column)
    for r in records:
        cost = mapping(r.get("cost"))
        table.add_row(
            str(r.get("requestId") or "?"),
            state_text(r.get("state")),
            str(r.get("attempt") if r.get("attempt") is not None else "-"),
            str(r.get("strategy") or "-"),
            str(r.get("location") or "-"),
            when(r.get("createdAt")),
            usd(cost.get("costUsd")),
        )
    return table
