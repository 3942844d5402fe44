"""The followed list: every deployment the tick follows, kept compact between ticks, so a quiet
deployment costs the tick no read of its record (issue 41).

Every tick steps every deployment that has not ended: one ``GetEndpoint`` per endpoint, then,
read from the records, one billed read per deployment for the query that finds them and two
more for its step (the record, then its transaction). At 1,000 deployments that is 3,000 reads
a minute, nearly all of them deciding nothing. The followed list keeps them instead, as the
watch list keeps the active jobs (:mod:`shared.domain.model.watch`, whose stored form it
shares), each as :data:`FOLLOWED_FIELDS`: everything :func:`state_of
<shared.domain.decisions.deploy_model.state_of>` reads to know its machine's state.

- **Stamped.** Every write of a deployment record stamps it with its commit time (the store's
  ``touchedAt``). The tick reads the list (one batch get), then only the records stamped since
  its mark, as of the list's read (:func:`synced_followed`).
- **Checked against a count.** As of the same read, the store counts the records that have
  not ended (an aggregation); a list whose count differs (a record deleted or written by hand)
  is read again whole.
- **Built again hourly** (:data:`REBUILD_AFTER`): a hand edit that leaves the count as it
  was, or an older revision's write without its stamp, is in the list within the hour.
- **Decided on, never acted on.** The tick decides each deployment on its listed state and a
  fresh read of its endpoint (:func:`~shared.domain.serving.rule.decide`, a pure function). A
  deployment whose decision is to do nothing is not read. Any other is stepped as before: its
  record read and its decision taken again in one transaction, so a stale entry can delay a
  step by one tick, never make one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from shared.domain.model.records import DeploymentRecord, Stored
from shared.domain.model.states import DeploymentState
from shared.domain.model.watch import Watch, project, resynced

#: What the list keeps of a deployment: its machine's state and everything that state is read
#: with (a record written before the machine reads as a state from its request and flags).
FOLLOWED_FIELDS: tuple[str, ...] = (
    "requestId",
    "kind",
    "state",
    "endpoint",
    "request",
    "options",
    "serving",
    "operation",
    "deployedModelId",
    "undeployRequested",
    "resumeRequested",
)

#: The most records one sync reads as stamped since the list's mark; past it (a backlog) the
#: tick reads every record that has not ended, as when there is no list.
MAX_FOLLOWED_CHANGED = 2_000
#: A list built longer ago than this is built again from whole reads (what a stamp cannot
#: tell: a hand edit, an older revision's write).
REBUILD_AFTER = timedelta(hours=1)
#: How far ahead of this instance's clock another's may have stamped ``builtAt``; a list
#: built further in the future was not built by a tick (forged, or a clock gone wrong).
CLOCK_SKEW = timedelta(minutes=5)

#: The states of a deployment the tick follows (the others have ended).
FOLLOWED_STATES = frozenset(
    {
        DeploymentState.ACCEPTED.value,
        DeploymentState.DEPLOYING.value,
        DeploymentState.DEPLOYED.value,
    }
)


def followed(raw: Any) -> bool:
    """Whether a record (or its entry) is one the tick follows: a state that has not ended.

    Examples:
        >>> followed({"state": "DEPLOYED"}), followed({"state": "UNDEPLOYED"}), followed({})
        (True, False, False)
    """
    return raw.get("state") in FOLLOWED_STATES


def built_followed(records: Iterable[tuple[str, Stored]], mark: Any, now: datetime) -> Watch:
    """The list of ``records`` (each by its document id) as of ``mark``: those followed, as
    :data:`FOLLOWED_FIELDS`; built at ``now`` (its ``built_at``)."""
    entries = {key: project(s, FOLLOWED_FIELDS) for key, s in records if followed(s.raw)}
    return Watch(entries, {}, mark, now, built_at=now)


def synced_followed(
    listed: Watch, changed: Sequence[tuple[str, Stored]], mark: Any, now: datetime
) -> Watch:
    """The list brought up to date with ``changed`` (every record stamped since its mark, as
    of ``mark``, the next mark): each replaces its entry, or takes it out once ended.

    Examples:
        >>> from datetime import UTC
        >>> t = datetime(2026, 12, 7, tzinfo=UTC)
        >>> up = Stored({"requestId": "a", "state": "DEPLOYED", "serving": {}}, 1)
        >>> listed = synced_followed(built_followed([], 0, t), [("a", up)], 1, t)
        >>> sorted(listed.active), listed.built_at == t
        (['a'], True)
        >>> down = Stored({"requestId": "a", "state": "UNDEPLOYED"}, 2)
        >>> sorted(synced_followed(listed, [("a", down)], 2, t).active)
        []
    """
    return resynced(listed, changed, mark, now, kept=followed, fields=FOLLOWED_FIELDS)


def rebuild_due(listed: Watch, at: Any, now: datetime) -> bool:
    """Whether the list is to be built again from whole reads rather than synced: built over
    :data:`REBUILD_AFTER` ago (or by a revision that did not say when, or in the future:
    a list that says it is younger than it can be would never be built again), or marked as
    of a time that is not a time of the store's before its read ``at`` (a sync from it would
    miss what was written since, or not run at all). A quiet list is not saved (its mark
    stays, and every sync reads what was written since), so its age, not when it was last
    synced, is what bounds what a stamp cannot tell.

    Examples:
        >>> from datetime import UTC
        >>> t = datetime(2026, 12, 7, tzinfo=UTC)
        >>> def listed(mark, built):
        ...     return Watch({}, {}, mark, t, built_at=built)
        >>> rebuild_due(listed(t, t), t, t), rebuild_due(listed(t, t + timedelta(days=1)), t, t)
        (False, True)
        >>> rebuild_due(listed("x", t), t, t), rebuild_due(listed(t + timedelta(1), t), t, t)
        (True, True)
    """
    built, mark = listed.built_at, listed.mark
    if built is None or not isinstance(mark, type(at)) or mark > at:
        return True
    return now - built >= REBUILD_AFTER or built > now + CLOCK_SKEW


def records_of(listed: Watch) -> list[DeploymentRecord]:
    """The deployments the list holds, as records (partial: what the machine's state needs),
    in document order."""
    return [DeploymentRecord.decode(listed.active[key].raw) for key in sorted(listed.active)]
