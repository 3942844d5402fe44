"""The records the tick watches, from its watch list (:mod:`shared.domain.model.watch`): every
active record and every record ended within the stray watch, each as the tick's fields only.

One routine, :func:`watched`, reads them the cheapest way the stored list allows, every read
as of the time of its first (the watch list's own):

- **a list that reads**: synced with the records written since its mark, then checked
  against a count of the active records; a quiet job costs no read of its record, and a list
  that drifted is re-read whole (and the tick says so);
- **no list yet, or one that cannot be read**: built from whole reads (every active record,
  the week's ended ones for the tally, the newest jobs), once;
- **a list that did not fit its bound** (:class:`~shared.kernel.errors.WatchTooLarge`): every
  active record is read each tick, as before there was a list, and a new build is tried once
  an hour.

The tick saves what it returns after using the records (:func:`save`): the list and the tally
in one batch, only if no other tick saved meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from shared.app.ports import JobStore, WatchStore
from shared.domain.model.records import JobRecord, Stored
from shared.domain.model.tally import KEEP, NEWEST, Tally, active_counts, added
from shared.domain.model.tally import built as tally_built
from shared.domain.model.watch import Saved, Synced, Watch, built, key_of, reread, synced
from shared.kernel.errors import WatchTooLarge
from shared.kernel.logs import get_logger

log = get_logger("watch")


@dataclass(frozen=True)
class Watched:
    """The records the tick watches, and what :func:`save` writes after the tick used them.

    ``how``: ``synced``, ``built`` or ``whole`` (the list did not fit: read every record).
    ``reads``: the records this read (an entry the list held is none), for the tick's log line.
    """

    active: list[JobRecord]
    ended: list[JobRecord]
    how: str
    reads: int
    watch: Watch | None
    tally: Tally | None
    version: Any
    # False when the sync found nothing to change in the list: only the tally is saved (its
    # counts and time), not the list's shards.
    dirty: bool = True


def _keyed(found: Sequence[Stored]) -> list[tuple[str, Stored]]:
    return [(key, stored) for stored in found if (key := key_of(stored)) is not None]


def _records(watch: Watch) -> tuple[list[JobRecord], list[JobRecord]]:
    active = [JobRecord.decode(s.raw, s) for s in watch.active.values()]
    ended = [JobRecord.decode(s.raw) for s in watch.ended.values()]
    return active, ended


#: How long after a list failed to fit the tick reads every record before it tries again.
RETRY_BUILD = timedelta(hours=1)
#: A list not synced for longer than this is built again rather than synced: ticks come a
#: minute apart, so the gap is an outage, or an older revision (which neither stamps its
#: writes nor saves the list) ran meanwhile.
MAX_GAP = timedelta(minutes=15)
#: The most records a sync reads as changed; past it (a backlog) the list is built again,
#: which streams the ended records instead of holding them.
MAX_CHANGED = 20_000


def watched(
    watch_store: WatchStore, job_store: JobStore, now: datetime, stray_watch: timedelta
) -> Watched:
    """Every active record and every one ended at or after ``now - stray_watch``, partial:
    the list from ``watch_store``, the records read from ``job_store`` as of its read.

    Raises:
        StoreUnavailable: Firestore could not be read.
    """
    saved = watch_store.read_watch()
    since = now - stray_watch
    if saved.watch is None or saved.tally is None:
        overflowed = saved.overflowed_at
        if overflowed is not None and now - overflowed < RETRY_BUILD:
            return _whole(job_store, since)
        return _build(job_store, saved, now, since)
    # The tally is saved by every tick (the list only when it changed): its time is the last
    # tick's.
    if now - saved.tally.as_of > MAX_GAP:
        # No tick saved the list for a while (ticks stopped, or an older revision ran without
        # stamping its writes): what changed since may be more than a sync should hold, and
        # some of it unstamped. Built again, as after an upgrade.
        log.warning(
            "watch list not synced for a while: built again",
            extra={"fields": {"lastTick": saved.tally.as_of.isoformat()}},
        )
        return _build(job_store, saved, now, since)
    changed = job_store.changed_since(saved.watch.mark, saved.at, MAX_CHANGED)
    if len(changed) > MAX_CHANGED:
        log.warning(
            "more records changed since the watch list's mark than a sync holds: built again",
            extra={"fields": {"changed": len(changed)}},
        )
        return _build(job_store, saved, now, since)
    result: Synced = synced(
        saved.watch, changed=_keyed(changed), mark=saved.at, now=now, watch_since=since
    )
    watch = result.watch
    reads = len(changed)
    dirty = bool(changed) or len(watch.ended) != len(saved.watch.ended)
    counted = job_store.count_active(saved.at)
    if counted != len(watch.active):
        dirty = True
        # Drifted (a record deleted or edited by hand, a write without its stamp): the active
        # entries are read again, as of the same time, so the list is the records again.
        log.warning(
            "watch list drifted from the records: its active records are read again",
            extra={"fields": {"listed": len(watch.active), "counted": counted}},
        )
        found = job_store.active(saved.at)
        watch = reread(watch, _keyed(found))
        reads += len(found)
    tally = added(
        saved.tally,
        active_counts(str(s.raw.get("state")) for s in watch.active.values()),
        [s.raw for s in result.newly_ended],
        [s.raw for s in result.seen],
        now,
    )
    active, ended = _records(watch)
    return Watched(active, ended, "synced", reads, watch, tally, saved.version, dirty)


def _whole(job_store: JobStore, since: datetime) -> Watched:
    """Every active record and the ended ones, read whole (the list did not fit)."""
    found = job_store.active()
    ended = list(job_store.ended_since(since))
    active = [JobRecord.decode(s.raw, s) for s in found]
    records = [JobRecord.decode(s.raw) for s in ended]
    return Watched(active, records, "whole", len(found) + len(ended), None, None, None)


def _build(job_store: JobStore, saved: Saved, now: datetime, since: datetime) -> Watched:
    """The list and the tally from whole reads as of the list's read (its next mark): the
    active records, the week's ended ones (streamed: the tally keeps only its buckets, the
    list those within the stray watch) and the newest jobs."""
    at = saved.at
    found = job_store.active(at)
    kept: list[Stored] = []
    read = [0]

    def ended() -> Iterator[dict[str, Any]]:
        for stored in job_store.ended_since(now - KEEP, at):
            read[0] += 1
            ended_at = stored.raw.get("endedAt")
            if isinstance(ended_at, datetime) and ended_at >= since:
                kept.append(stored)
            yield dict(stored.raw)

    counts = active_counts(str(s.raw.get("state")) for s in found)
    newest = job_store.newest(NEWEST, at)
    tally = tally_built(counts, ended(), newest, now)
    watch = built(_keyed(found), _keyed(kept), at, now, since)
    active, records = _records(watch)
    reads = len(found) + read[0] + len(newest)
    log.info(
        "watch list built from whole reads",
        extra={"fields": {"active": len(active), "ended": read[0], "reads": reads}},
    )
    return Watched(active, records, "built", reads, watch, tally, saved.version)


def save(watch_store: WatchStore, seen: Watched) -> bool:
    """Save the list and the tally ``seen`` brought, in one batch, only if no other tick saved
    since ``seen`` read them; a list past its bound is saved as overflowed (no list, no
    tally: the next ticks read every record, and try a build again after
    :data:`RETRY_BUILD`). True when saved.

    Raises:
        StoreUnavailable: Firestore could not be written.
    """
    if seen.watch is None:
        # Read whole because the list did not fit: nothing new to save; the overflow's time
        # stays, so a build is tried again once RETRY_BUILD has gone by.
        return False
    try:
        done = watch_store.save_watch(
            seen.watch if seen.dirty else None, seen.tally, seen.version, list_too=seen.dirty
        )
    except WatchTooLarge as exc:
        log.warning(f"{exc}: the tick reads every record until the list fits again")
        return watch_store.save_watch(None, None, seen.version)
    if not done:
        log.info("another tick saved the watch list meanwhile: this one's is dropped")
    return done
