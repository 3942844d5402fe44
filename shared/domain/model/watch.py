"""The tick's watch list: what it knows of every record it watches, kept from one tick to the
next, so that a quiet job costs the tick no read of its record (issue 26).

The tick needs, every minute, every active record (to match the listing's jobs, window the
listing, give up waits, flag overdue ones, heal admission) and every record ended within the
stray watch (strays of a late create). Read from the records each tick, that is one billed
read per record however quiet it is. The watch list keeps them instead, as the tick last saw
them (``TICK_FIELDS`` of an active record, ``ENDED_FIELDS`` of an ended one), and each tick
brings it up to date from the records written since, all read *as of one time*, the time of
the tick's first read (``at``):

- **Changed since the mark.** Every write of a record stamps it with its commit time
  (``touchedAt``, a server timestamp). The list keeps a *mark*: the time as of which it was
  last brought up to date. ``changed_since(mark, at)`` returns the records written after the
  mark, as they were at ``at``; they replace their entries, and ``at`` is the next mark. A
  write that commits after ``at`` is after the next mark: read next time, never missed.
- **Checked against a count** (level triggering): as of the same ``at``, the store counts the
  active records (an aggregation, one billed read per thousand). A list whose count differs
  drifted (a record deleted or edited by hand, a write without its stamp): its active entries
  are read again whole, as of ``at``, and the tick says so.

A job whose record changed is still read whole before anything is decided on it (its entry is
``partial``), and a job that the listing shows changed is settled as before: the list saves the
reads of the jobs that did not change, nothing else.

The list is stored compressed (JSON, zlib) in at most :data:`MAX_SHARDS` documents of at most
:data:`SHARD_BYTES` each, written in one batch with its tally
(:mod:`shared.domain.model.tally`). Past that bound (:class:`~shared.kernel.errors.WatchTooLarge`)
the tick reads every record, as without a list, and says so.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shared.domain.model.ids import doc_id
from shared.domain.model.records import TICK_FIELDS, Stored
from shared.domain.model.states import JobState
from shared.domain.model.tally import Tally
from shared.kernel.errors import WatchTooLarge

#: What the tick keeps of a record that ended within the stray watch: enough to match a stray
#: job to its request (``is_stray``) and to window the listing by the record's end.
ENDED_FIELDS: tuple[str, ...] = (
    "requestId",
    "state",
    "attempt",
    "kind",
    "vertexJob",
    "runId",
    "location",
    "baseLocation",
    "locationsUsed",
    "createdAt",
    "endedAt",
)
#: What a sync reads of each changed record: the tick's fields, and what the tally adds up of
#: a record that ended (its GPU-seconds and cost; ``endedAt`` and ``createdAt`` are tick fields).
WATCH_FIELDS: tuple[str, ...] = (*TICK_FIELDS, "gpuSeconds", "cost")

#: The stored list: at most this many documents of at most SHARD_BYTES each, all written in
#: one commit beside the head and the tally, which stays under gRPC's default 4 MiB message
#: (Firestore takes 10 MiB; the emulator and the fakes hold to the smaller).
MAX_SHARDS = 3
SHARD_BYTES = 1_000_000
#: The stored form's version: a list stored in another form is rebuilt, never misread.
FORMAT = 1
#: The most the list's JSON may hold before compression, written or read: a list that would
#: inflate past it is neither written nor decoded (it is rebuilt), so a forged one cannot
#: exhaust the tick's memory (the decoded objects take a few times the text).
MAX_TEXT_BYTES = 24 * 1024 * 1024
#: At most one JSON list or map per this many bytes of the list's text: a real entry is
#: hundreds of bytes and a handful of maps; a forged text of empty lists is refused undecoded.
BYTES_PER_CONTAINER = 24


@dataclass(frozen=True)
class Watch:
    """The watch list as of one sync.

    ``active`` and ``ended`` are keyed by document id; their entries are partial records.
    ``mark`` is the store's own (opaque here): the list holds every record as it was then.
    """

    active: Mapping[str, Stored]
    ended: Mapping[str, Stored]
    mark: Any
    synced_at: datetime
    #: When the list was last built from whole reads (None: not said; the watch list does not
    #: say, the followed list is built again hourly from it).
    built_at: datetime | None = None
    #: Where a list that keeps only a part of each group ends, by group: the last entry kept
    #: (the admission line keeps each queue's head: :func:`~shared.domain.admission.line.headed`).
    bounds: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Saved:
    """The list and the tally as the store last saved them (each None when missing or
    unreadable), when a list last failed to fit (``overflowed_at``), the version a save must
    still find, and the time of this read (``at``): the sync reads everything else as of it,
    and it is the next mark."""

    watch: Watch | None
    tally: Tally | None
    overflowed_at: datetime | None
    version: Any
    at: Any


@dataclass(frozen=True)
class Synced:
    """A sync's result: the list after it, and what the tally adds (records seen ending for
    the first time, records seen at all: the newest jobs come from them)."""

    watch: Watch
    newly_ended: list[Stored] = field(default_factory=list)
    seen: list[Stored] = field(default_factory=list)


def key_of(stored: Stored) -> str | None:
    """A record's document id: the one its query returned it under, else its ``requestId``'s
    (None when it has neither: such a record cannot be matched to a job)."""
    if stored.key is not None:
        return stored.key
    request_id = stored.raw.get("requestId")
    if not isinstance(request_id, str) or not request_id:
        return None
    try:
        return doc_id(request_id)
    except ValueError:
        return None


def project(stored: Stored, fields: Sequence[str]) -> Stored:
    """The entry the list keeps of a record: ``fields`` only, partial."""
    raw = {name: stored.raw[name] for name in fields if name in stored.raw}
    return Stored(raw, stored.version, partial=True, key=stored.key)


def _state(raw: Mapping[str, Any]) -> JobState | None:
    try:
        return JobState(str(raw.get("state")))
    except ValueError:
        return None


def _ended_at(raw: Mapping[str, Any]) -> datetime | None:
    value = raw.get("endedAt")
    return value if isinstance(value, datetime) else None


def built(
    active: Iterable[tuple[str, Stored]],
    ended: Iterable[tuple[str, Stored]],
    mark: Any,
    now: datetime,
    watch_since: datetime,
) -> Watch:
    """A list built from whole reads: every active record, and the records ended at or after
    ``watch_since`` (older ones are dropped, so ``ended`` may reach further back)."""
    kept_ended = {
        key: project(stored, ENDED_FIELDS)
        for key, stored in ended
        if (at := _ended_at(stored.raw)) is not None and at >= watch_since
    }
    kept_active = {key: project(stored, TICK_FIELDS) for key, stored in active}
    return Watch(kept_active, kept_ended, mark, now)


def synced(
    watch: Watch,
    *,
    changed: Sequence[tuple[str, Stored]],
    mark: Any,
    now: datetime,
    watch_since: datetime,
) -> Synced:
    """The list brought up to date with ``changed``: every record written after
    ``watch.mark``, as of ``mark`` (the next mark), in any state.

    A record seen ended for the first time (not in the ended list, and ended after what the
    last sync could already have seen ended: its time less the stray watch) is in
    ``newly_ended`` exactly once, for the tally, however often it is written afterwards.

    Examples:
        >>> from datetime import UTC, timedelta
        >>> t = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
        >>> since = t - timedelta(hours=2)
        >>> running = Stored({"requestId": "a", "state": "RUNNING"}, 1)
        >>> w = built([("a", running)], [], 0, t, since)
        >>> done = Stored({"requestId": "a", "state": "SUCCEEDED", "endedAt": t}, 2)
        >>> after = synced(w, changed=[("a", done)], mark=2, now=t, watch_since=since)
        >>> sorted(after.watch.active), sorted(after.watch.ended), len(after.newly_ended)
        ([], ['a'], 1)
        >>> again = synced(after.watch, changed=[("a", done)], mark=3, now=t, watch_since=since)
        >>> len(again.newly_ended)
        0
    """
    active = dict(watch.active)
    ended = {k: s for k, s in watch.ended.items() if (_ended_at(s.raw) or now) >= watch_since}
    # What the last sync could have seen ended already: a record that ended before it and
    # that it did not keep was counted then, or ended before the watch reaches back.
    counted_before = watch.synced_at - (now - watch_since)
    newly: list[Stored] = []
    seen: list[Stored] = []
    for key, stored in changed:
        seen.append(stored)
        state = _state(stored.raw)
        if state is None or not state.terminal:
            if state is not None:
                active[key] = project(stored, TICK_FIELDS)
            continue
        was_active = active.pop(key, None) is not None
        at = _ended_at(stored.raw)
        if at is None:
            continue
        # A record the list held active ended now, whatever time its end carries (Vertex's
        # own end time, which a late reading may put hours back); one it never held is new
        # only if the last sync could not have seen it end.
        if was_active or (key not in watch.ended and key not in ended and at >= counted_before):
            newly.append(stored)
        if at >= watch_since:
            ended[key] = project(stored, ENDED_FIELDS)
    return Synced(Watch(active, ended, mark, now), newly, seen)


def resynced(
    listed: Watch,
    changed: Sequence[tuple[str, Stored]],
    mark: Any,
    now: datetime,
    *,
    kept: Callable[[Mapping[str, Any]], bool],
    fields: Sequence[str],
) -> Watch:
    """A list of one kind of entry (the admission line, the followed list) brought up to date
    with ``changed`` (every record written since its mark, as of ``mark``, the next mark):
    each record ``kept`` replaces its entry (as ``fields``), any other takes it out."""
    entries = dict(listed.active)
    for key, stored in changed:
        if kept(stored.raw):
            entries[key] = project(stored, fields)
        else:
            entries.pop(key, None)
    return Watch(entries, {}, mark, now, built_at=listed.built_at, bounds=listed.bounds)


def reread(watch: Watch, active: Iterable[tuple[str, Stored]]) -> Watch:
    """The list with its active entries replaced by ``active``, read whole as of its mark
    (the count found it drifted); its ended entries are kept."""
    entries = {key: project(stored, TICK_FIELDS) for key, stored in active}
    return Watch(entries, watch.ended, watch.mark, watch.synced_at)


# -- the stored form ------------------------------------------------------------------------


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"$t": value.isoformat()}
    raise TypeError(f"a record field of type {type(value).__name__} cannot be kept")


def _hook(value: dict[str, Any]) -> Any:
    if len(value) == 1 and "$t" in value and isinstance(value["$t"], str):
        at = datetime.fromisoformat(value["$t"])
        if at.tzinfo is None:
            raise ValueError("a time without its zone was never written")
        return at
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} was never written")


def encode(watch: Watch) -> list[bytes]:
    """The list's stored form: its entries as JSON, compressed, cut into shards.

    Raises:
        WatchTooLarge: it needs more than :data:`MAX_SHARDS` shards.
    """
    document = {
        "format": FORMAT,
        "active": {k: [dict(s.raw), s.version] for k, s in watch.active.items()},
        "ended": {k: [dict(s.raw), s.version] for k, s in watch.ended.items()},
        "mark": watch.mark,
        "syncedAt": watch.synced_at,
        **({"builtAt": watch.built_at} if watch.built_at is not None else {}),
        **({"bounds": {k: dict(v) for k, v in watch.bounds.items()}} if watch.bounds else {}),
    }
    text = json.dumps(document, default=_default, separators=(",", ":"), ensure_ascii=False)
    data = text.encode("utf-8")
    packed = zlib.compress(data, 6)
    shards = [packed[i : i + SHARD_BYTES] for i in range(0, len(packed), SHARD_BYTES)]
    if len(shards) > MAX_SHARDS or len(data) > MAX_TEXT_BYTES:
        raise WatchTooLarge(
            f"the watch list of {len(watch.active)} active and {len(watch.ended)} ended records "
            f"is {len(data)} bytes ({len(packed)} compressed): more than {MAX_TEXT_BYTES} "
            f"({MAX_SHARDS} x {SHARD_BYTES} compressed)"
        )
    return shards


def decode(shards: Sequence[bytes]) -> Watch | None:
    """The list from its stored form, or None when it cannot be read as one (another format,
    damaged, or inflating past :data:`MAX_TEXT_BYTES`): the caller rebuilds it."""
    if not shards or len(shards) > MAX_SHARDS:
        return None
    inflate = zlib.decompressobj()
    try:
        text = inflate.decompress(b"".join(shards), MAX_TEXT_BYTES)
        if inflate.unconsumed_tail or not inflate.eof:
            return None
        # The bytes bound the text; the containers bound what decoding it builds (an empty
        # list is a few bytes of text and dozens of bytes of memory).
        if text.count(b"[") + text.count(b"{") > len(text) // BYTES_PER_CONTAINER + 16:
            return None
        document = json.loads(text.decode("utf-8"), object_hook=_hook, parse_constant=_no_constant)
    except Exception:  # noqa: BLE001 - whatever does not read as a list is rebuilt, not raised
        return None
    try:
        if document.get("format") != FORMAT:
            return None
        synced_at = document["syncedAt"]
        built_at = document.get("builtAt")
        if not isinstance(synced_at, datetime) or not isinstance(built_at, datetime | None):
            return None
        bounds = document.get("bounds") or {}
        if not isinstance(bounds, dict) or not all(
            isinstance(k, str) and isinstance(v, dict) for k, v in bounds.items()
        ):
            return None
        return Watch(
            _entries(document["active"]),
            _entries(document["ended"]),
            document.get("mark"),
            synced_at,
            built_at,
            bounds,
        )
    except Exception:  # noqa: BLE001 - as above: a list that does not read is rebuilt
        return None


def _entries(raw: Any) -> dict[str, Stored]:
    if not isinstance(raw, dict):
        raise TypeError("entries are a map")
    entries = {}
    for key, (fields, version) in raw.items():
        if not isinstance(key, str) or not isinstance(fields, dict):
            raise TypeError("an entry is a record's fields and its version")
        entries[key] = Stored(fields, version, partial=True, key=key)
    return entries
