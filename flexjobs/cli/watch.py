"""``flexjobs watch``: follow requests live from Firestore real-time listeners.

Each request gets a listener (``on_snapshot``) on its ``jobs/{id}`` record, its
``deployments/{id}`` record (a ``deployModel`` request) and its ``rejections/{id}`` document
(a refused request never gets a record). Firestore pushes every change, so nothing is polled;
the display is redrawn locally twice a second only to advance the clocks.
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from flexjobs import Client
from flexjobs.cli.views import checkpoint_text, mapping, state_text
from shared.adapters.firestore.deployment_store import DEPLOYMENTS
from shared.adapters.firestore.job_store import JOBS
from shared.adapters.firestore.rejection_log import REJECTIONS
from shared.domain.model.ids import doc_id
from shared.status.display import duration, gpu_hours, usd

SUCCESS = frozenset({"SUCCEEDED", "DEPLOYED"})
TERMINAL = {
    JOBS: frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "SKIPPED"}),
    DEPLOYMENTS: frozenset({"DEPLOYED", "FAILED"}),
}
#: Exit code when ``--timeout`` passes before every request ended (as timeout(1)).
TIMED_OUT = 124
INTERRUPTED = 130


@dataclass
class Row:
    """What is known of one watched request."""

    request_id: str
    docs: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    state: str | None = None
    reason: str | None = None
    since: datetime | None = None

    @property
    def record(self) -> dict[str, Any] | None:
        return self.docs.get(JOBS) or self.docs.get(DEPLOYMENTS)

    @property
    def terminal(self) -> bool:
        if self.docs.get(JOBS):
            return self.state in TERMINAL[JOBS]
        if self.docs.get(DEPLOYMENTS):
            return self.state in TERMINAL[DEPLOYMENTS]
        return self.state == "REJECTED"


def apply(row: Row, collection: str, doc: dict[str, Any] | None, now: datetime) -> list[str]:
    """Fold one snapshot into ``row``; returns the lines to print (state changes, retries)."""
    row.docs[collection] = doc
    record = row.record
    rejection = row.docs.get(REJECTIONS)
    if record is not None:
        state, reason = str(record.get("state") or "?"), record.get("reason")
    elif rejection is not None:
        state, reason = "REJECTED", None
    else:
        return []
    lines: list[str] = []
    stamp = now.strftime("%H:%M:%S")
    if state != row.state:
        before = row.state or "new"
        attempt = record.get("attempt") if record else None
        text = f"{stamp} {row.request_id}: {before} -> {state}"
        if attempt:
            text += f" (attempt {attempt})"
        if reason:
            text += f": {reason}"
        lines.append(text)
        if state == "REJECTED" and rejection is not None:
            for error in rejection.get("errors") or []:
                lines.append(f"  {error.get('path')}: {error.get('message')}")
        updated = record.get("updatedAt") if record else None
        row.since = updated if isinstance(updated, datetime) and row.state is None else now
    elif reason and reason != row.reason:
        lines.append(f"{stamp} {row.request_id}: {state}: {reason}")
    row.state, row.reason = state, reason if isinstance(reason, str) else None
    return lines


def render(rows: list[Row], now: datetime) -> Table:
    table = Table()
    for column in ("request", "state", "attempt", "checkpoint", "for", "GPU-h", "cost"):
        table.add_column(column)
    for row in rows:
        record = row.record or {}
        cost = mapping(record.get("cost"))
        since = (now - row.since).total_seconds() if row.since else None
        table.add_row(
            row.request_id,
            state_text(row.state or "waiting for record"),
            str(record.get("attempt") or "-"),
            checkpoint_text(record),
            duration(since),
            gpu_hours(record.get("gpuSeconds")),
            usd(cost.get("costUsd")),
        )
    return table


def watch(
    client: Client,
    request_ids: list[str],
    console: Console,
    timeout: float | None = None,
    published_at: datetime | None = None,
) -> int:
    """Follow ``request_ids`` until each is terminal: 0 when all SUCCEEDED (or DEPLOYED), else
    1; :data:`TIMED_OUT` when ``timeout`` passes first, 130 on Ctrl-C.

    ``published_at`` (``submit --wait``): a rejection recorded before it is an older
    message's, not this one's, and is not taken for its outcome."""
    ids = list(dict.fromkeys(request_ids))
    rows = {rid: Row(rid) for rid in ids}
    events: queue.Queue[tuple[str, str, dict[str, Any] | None]] = queue.Queue()

    def listener(rid: str, collection: str) -> Any:
        def on_snapshot(snapshots: list[Any], _changes: Any, _read_time: Any) -> None:
            for snapshot in snapshots:
                doc = snapshot.to_dict() if snapshot.exists else None
                received = (doc or {}).get("receivedAt")
                stale = isinstance(received, datetime) and published_at and received < published_at
                events.put((rid, collection, None if collection == REJECTIONS and stale else doc))

        return on_snapshot

    db = client.firestore()
    subscriptions: list[Any] = []
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        for rid in ids:
            for collection in (JOBS, DEPLOYMENTS, REJECTIONS):
                ref = db.collection(collection).document(doc_id(rid))
                subscriptions.append(ref.on_snapshot(listener(rid, collection)))
        with Live(render(list(rows.values()), _now()), console=console, auto_refresh=False) as live:
            while not all(row.terminal for row in rows.values()):
                if deadline is not None and time.monotonic() > deadline:
                    live.console.print(f"timed out after {timeout:g}s; still not ended")
                    return TIMED_OUT
                try:
                    rid, collection, doc = events.get(timeout=0.5)
                except queue.Empty:
                    live.update(render(list(rows.values()), _now()), refresh=True)
                    continue
                for line in apply(rows[rid], collection, doc, _now()):
                    live.console.print(line, highlight=False, markup=False)
                live.update(render(list(rows.values()), _now()), refresh=True)
        if not console.is_terminal:
            console.line()  # the final table, drawn once, ends its line
    except KeyboardInterrupt:
        console.print("stopped watching (the requests go on; 'flexjobs cancel ID' stops one)")
        return INTERRUPTED
    finally:
        for subscription in subscriptions:
            subscription.unsubscribe()
    return 0 if all(row.state in SUCCESS for row in rows.values()) else 1


def _now() -> datetime:
    return datetime.now(UTC)
