"""The Spot serving rule: after one fresh ``GetEndpoint`` read, what the tick does for one Spot
deployment (:func:`decide`), where following starts (:func:`start`) and how it resumes after a
hand edit (:func:`resume`).

**Never make serving worse.** Every action is decided from the read in hand, and at most one
call follows it, so each step starts again from what Vertex says now:

- a split the rule writes keeps the endpoint's other deployed models at their shares, and its
  shares are integers that sum to 100 (:func:`~shared.domain.serving.split.hedged_split`);
- it never gives traffic to a model of ours with no available replica: a fallback is deployed
  without traffic (an empty ``DeployModelRequest.traffic_split`` leaves the endpoint's split as
  it is) and gets its share by a later ``SHIFT``, once it reports available replicas;
- the fallback is undeployed only after a read shows it without traffic and the Spot model
  serving all its required replicas, so the last model that serves is never the one removed;
- a hand edit (a model added or removed, another model's share or our pool of traffic changed)
  pauses the deployment: flexjobs records it and stops changing that endpoint until told.

**Traffic goes through ``UpdateEndpoint``.** ``MutateDeployedModel`` of the v1 API changes only a
deployed model's replica counts, autoscaling metrics and container logging; the traffic split
is a field of the ``Endpoint`` (``UpdateEndpoint`` with update mask ``traffic_split``, sent with
the read's ``etag``), and ``DeployModel``/``UndeployModel`` may also overwrite it. The rule uses
``UpdateEndpoint`` for every move of traffic and ``MutateDeployedModel`` only to grow a fallback.

**Timing.** The grace period leaves Compute Engine's own restarts of a reclaimed Spot node
(up to six) time to work before an on-demand fallback is paid for; the hold period is
hysteresis against a flapping zone (see :class:`~shared.domain.serving.model.ServingSettings`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final

from shared.domain.model.values import clip
from shared.domain.serving.model import (
    DEPLOY_CALL,
    MAX_CAUSE,
    MAX_MODELS,
    MAX_NAME,
    MUTATE_CALL,
    UNDEPLOY_CALL,
    ActionKind,
    Capacity,
    Change,
    Fallback,
    ObservedEndpoint,
    ObservedModel,
    Phase,
    ServingAction,
    ServingSettings,
    ServingState,
)
from shared.domain.serving.split import hedged_split, largest_remainder

#: What the fallback's display name ends with, after the deployment's own display name.
FALLBACK_SUFFIX = " (on-demand fallback)"

#: A long-running call (DeployModel, MutateDeployedModel, UndeployModel) whose operation is
#: unknown (the call timed out, so Vertex may or may not have started it) or still not done
#: after this long is given up, so the deployment is never stuck behind it. A DeployModel of a
#: GPU model takes minutes to tens of minutes; two hours is far past it, so a fallback that
#: does land is already on the endpoint by then, and is adopted by its display name instead
#: of being deployed a second time.
OPERATION_LIMIT_SECONDS: Final = 2 * 3600.0

#: The notifications a deployment's serving owes (docs/contract.md, *Notifications*).
HEDGED: Final = "HEDGED"
RESTORED: Final = "RESTORED"
UNDEPLOYED: Final = "UNDEPLOYED"

#: How the history's causes of a hedge, a failed hedge and a restore begin (the status page's
#: chart marks them by these words: one place for both).
HEDGE_CAUSE: Final = "hedge:"
HEDGE_FAILED_CAUSE: Final = "hedge failed:"
RESTORED_CAUSE: Final = "restored:"


def fallback_display_name(spot: ObservedModel) -> str:
    """The fallback's display name: the Spot model's (which carries the deployment's tag),
    then :data:`FALLBACK_SUFFIX`, within Vertex's 128 characters.

    Examples:
        >>> from shared.domain.serving.model import MachineSpec
        >>> spot = ObservedModel("7", "m", "served [flexjobs s-1]", MachineSpec("g2"), True, 1, 0)
        >>> fallback_display_name(spot)
        'served [flexjobs s-1] (on-demand fallback)'
    """
    room = 128 - len(FALLBACK_SUFFIX)
    # The tag ends the Spot model's name: a long name loses its start, never its tag, so two
    # deployments' fallbacks never share a name.
    return spot.display_name[-room:] + FALLBACK_SUFFIX


def _others(observed: ObservedEndpoint, ours: tuple[str, ...]) -> dict[str, int]:
    """The baseline of the endpoint's other models: those no flexjobs deployment owns.
    Another flexjobs deployment's models come and go, and move traffic between themselves,
    by its own rule: they are not a hand edit of this one."""
    return {
        m.id: observed.share(m.id) for m in observed.models if m.id not in ours and not m.flexjobs
    }


def _pool(observed: ObservedEndpoint, ours: tuple[str, ...]) -> int:
    return sum(observed.share(i) for i in ours)


def _capacity(spot: ObservedModel | None, fallback: ObservedModel | None) -> Capacity:
    return Capacity(
        spot.available if spot else 0,
        fallback.available if fallback else 0,
        # Vertex requires min_replica_count >= 1; a read without one still needs a replica.
        max(spot.required, 1) if spot else 1,
    )


def _with_change(state: ServingState, now: datetime, cap: Capacity, cause: str) -> ServingState:
    """``state`` accounted up to ``now`` (the previous capacity held since ``accounted_at``,
    as the ticks saw it), then ``cap`` as the capacity from now, and one history entry."""
    elapsed = max((now - state.accounted_at).total_seconds(), 0.0)
    last = state.last
    return replace(
        state,
        accounted_at=max(now, state.accounted_at),
        last=cap,
        short_seconds=state.short_seconds + (elapsed if last.short else 0.0),
        spot_node_seconds=state.spot_node_seconds + elapsed * last.spot,
        on_demand_node_seconds=state.on_demand_node_seconds + elapsed * last.on_demand,
        history=(*state.history, Change(now, cap, clip(cause, MAX_CAUSE) or "")),
    )


def start(spot_id: str, observed: ObservedEndpoint, now: datetime) -> ServingState:
    """The state with which the tick starts following a Spot deployment once it is DEPLOYED:
    the endpoint as it is now is the baseline (its other models, their shares, our pool)."""
    spot = observed.model(spot_id)
    ours = (spot_id,)
    cap = _capacity(spot, None)
    base = ServingState(
        spot_id=clip(spot_id, MAX_NAME) or "",
        phase=Phase.SERVING,
        accounted_at=now,
        last=cap,
        pool=_pool(observed, ours),
        others=_others(observed, ours),
    )
    if spot is None:
        state = replace(base, phase=Phase.PAUSED_BY_HAND, since=now)
        return _with_change(state, now, cap, f"Spot model {spot_id} is not on the endpoint")
    phase, since = (Phase.DEFICIT, now) if cap.short else (Phase.SERVING, None)
    return _with_change(replace(base, phase=phase, since=since), now, cap, "following")


def resume(state: ServingState, observed: ObservedEndpoint, now: datetime) -> ServingState:
    """Follow a paused deployment again ("until told"): the endpoint as it is now becomes the
    baseline. A fallback still on the endpoint is kept as ours, hedged from now."""
    spot = observed.model(state.spot_id)
    fallback = observed.model(state.fallback_id)
    fallback_id = fallback.id if fallback else None
    ours = (state.spot_id,) + ((fallback_id,) if fallback_id else ())
    cap = _capacity(spot, fallback)
    since: datetime | None = now
    if spot is None:
        phase = Phase.PAUSED_BY_HAND
    elif fallback is not None:
        phase = Phase.HEDGED
    else:
        phase, since = (Phase.DEFICIT, now) if cap.short else (Phase.SERVING, None)
    followed = replace(
        state,
        phase=phase,
        since=since,
        fallback_id=fallback_id,
        fallback_name=fallback.display_name if fallback else None,
        fallback_replicas=fallback.required if fallback else 0,
        pool=_pool(observed, ours),
        others=_others(observed, ours),
    )
    return _with_change(followed, now, cap, "resumed after a hand edit")


def hedge_failed(state: ServingState, now: datetime, cause: str) -> ServingState:
    """The state after the fallback's ``DeployModel`` operation ended with an error (the
    wiring reads it, as it reads a deployment's): no fallback is on its way any more, and a
    new grace period starts before the next hedge, so a refused hedge is not resent every
    tick. A fallback already on the endpoint is kept."""
    if state.fallback_id is not None or state.fallback_name is None:
        return state
    failed = replace(
        _no_call(state),
        phase=Phase.DEFICIT if state.last.short else Phase.SERVING,
        since=now if state.last.short else None,
        fallback_name=None,
        fallback_replicas=0,
    )
    return _with_change(failed, now, state.last, f"{HEDGE_FAILED_CAUSE} {cause}")


def _no_call(state: ServingState) -> ServingState:
    return replace(state, operation_call=None, operation=None, operation_at=None)


def _claimed(state: ServingState, call: str, now: datetime) -> ServingState:
    """``state`` with ``call`` in flight from ``now``: written before the call is sent."""
    return replace(state, operation_call=call, operation=None, operation_at=now)


def call_started(state: ServingState, at: datetime, operation: str) -> ServingState:
    """The state once Vertex answered the call claimed at ``at`` with its operation's name;
    unchanged when the claim is no longer that one (given up, or another tick's)."""
    if state.operation_call is None or state.operation_at != at or state.operation:
        return state
    return replace(state, operation=clip(operation, MAX_NAME))


def call_finished(
    state: ServingState, now: datetime, error: str | None, deployed_model_id: str | None = None
) -> ServingState:
    """The state once the call in flight ended: with ``error``, or done (a DeployModel's
    ``deployed_model_id`` is the fallback's id).

    - DeployModel failed: :func:`hedge_failed` (a new grace period before the next hedge).
    - MutateDeployedModel failed: the fallback's size is forgotten, so the next read grows it
      again (a control-plane error is retried on the next tick).
    - UndeployModel failed: the fallback stays; the next read decides the way back again.
    """
    call = state.operation_call
    if call is None:
        return state
    done = _no_call(state)
    if call == DEPLOY_CALL:
        if error:
            return hedge_failed(done, now, error)
        if done.fallback_id is None and deployed_model_id:
            done = replace(done, fallback_id=clip(deployed_model_id, MAX_NAME))
        return _with_change(done, now, state.last, "the fallback is deployed")
    if not error:
        return _with_change(done, now, state.last, f"{call} done")
    if call == MUTATE_CALL:
        done = replace(done, fallback_replicas=0)
    return _with_change(done, now, state.last, f"{call} failed: {error}")


def call_overdue(state: ServingState, now: datetime) -> bool:
    """The call in flight has had no answer (or no end) for :data:`OPERATION_LIMIT_SECONDS`."""
    at = state.operation_at
    return state.operation_call is not None and (
        at is None or _elapsed(at, now) >= OPERATION_LIMIT_SECONDS
    )


def _hand_edit(
    observed: ObservedEndpoint, state: ServingState, settings: ServingSettings, now: datetime
) -> str | None:
    """What was changed by hand since the baseline, or None.

    A move of traffic between the Spot model and its fallback alone is not a hand edit: it
    is what the rule itself writes, and a ``SHIFT`` whose call timed out may still have
    happened, so the next read may show it before the state does.
    """
    ours = state.ours
    spot = observed.model(state.spot_id)
    if spot is None:
        return f"Spot model {state.spot_id} was undeployed by hand"
    if max(spot.required, 1) != state.last.required:
        return (
            f"the Spot model's required replicas were changed by hand"
            f" ({state.last.required} -> {spot.required})"
        )
    if state.fallback_id and observed.model(state.fallback_id) is None:
        # Our own RESTORE undeploys it once the hold passed and its traffic went back; an
        # UndeployModel that timed out may have happened, so that case is ours, not a hand's.
        restored = (
            state.phase is Phase.RECOVERING
            and state.since is not None
            and (now - state.since).total_seconds() >= settings.hold_seconds
            and observed.share(state.spot_id) == state.pool
        )
        if not restored:
            return f"fallback {state.fallback_id} was undeployed by hand"
        ours = (state.spot_id,)
    others = _others(observed, ours)
    if others.keys() != state.others.keys():
        added = sorted(others.keys() - state.others.keys())
        gone = sorted(state.others.keys() - others.keys())
        return f"deployed models changed by hand (added {added}, removed {gone})"
    if others != dict(state.others):
        return "the traffic split of other deployed models was changed by hand"
    if _pool(observed, ours) < state.pool:
        # A larger pool, with every other model's share as it was, came from another flexjobs
        # deployment leaving the endpoint (its cancel gives its traffic to the models that
        # serve): taken as the new pool by the caller. A smaller one was taken by hand.
        return f"the traffic of this deployment was changed by hand ({state.pool}% before)"
    return None


@dataclass(frozen=True)
class _Read:
    """One fresh read, with what the rule derives from it."""

    observed: ObservedEndpoint
    now: datetime
    settings: ServingSettings
    fallback: ObservedModel | None
    cap: Capacity


@dataclass(frozen=True)
class _Step:
    """A decision before its accounting: the call, the state's new fields, and why."""

    kind: ActionKind
    state: ServingState
    reason: str
    split: Mapping[str, int] | None = None
    deploy: Fallback | None = None
    undeploy: str | None = None
    resize: int | None = None
    notice: str | None = None


def decide(
    observed: ObservedEndpoint,
    state: ServingState,
    now: datetime,
    settings: ServingSettings | None = None,
) -> ServingAction:
    """What to do for one Spot deployment after one fresh read of its endpoint.

    The tick calls it every minute for every followed deployment, applies the one call the
    action names, and writes ``action.state`` only once that call succeeded; a failed call
    leaves the record as it was, and the next tick decides again from a new read. A tick that
    sees nothing new gets ``NOTHING`` and writes nothing.

    Examples:
        >>> from datetime import UTC, timedelta
        >>> from shared.domain.serving.model import MachineSpec
        >>> t0 = datetime(2026, 12, 1, tzinfo=UTC)
        >>> def read(n):
        ...     spot = ObservedModel("7", "m", "s", MachineSpec("g2-standard-4"), True, 2, n)
        ...     return ObservedEndpoint("e", (spot,), {"7": 100})
        >>> state = start("7", read(2), t0)
        >>> decide(read(2), state, t0 + timedelta(minutes=1)).kind
        <ActionKind.NOTHING: 'NOTHING'>
        >>> lost = decide(read(0), state, t0 + timedelta(minutes=2))
        >>> lost.kind, lost.state.phase
        (<ActionKind.RECORD: 'RECORD'>, <Phase.DEFICIT: 'DEFICIT'>)
        >>> hedge = decide(read(0), lost.state, t0 + timedelta(minutes=7))
        >>> hedge.kind, hedge.deploy.replicas, hedge.deploy.machine.machine_type
        (<ActionKind.HEDGE: 'HEDGE'>, 2, 'g2-standard-4')
    """
    settings = settings or ServingSettings()
    given = state
    state = _adopt(observed, state, now)
    if call_overdue(state, now):
        limit = f"{OPERATION_LIMIT_SECONDS / 3600:.0f} h"
        state = call_finished(state, now, f"{state.operation_call}: no answer after {limit}")
    spot = observed.model(state.spot_id)
    fallback = observed.model(state.fallback_id)
    cap = _capacity(spot, fallback)
    step = _held(_step(_Read(observed, now, settings, fallback, cap), state, spot), state, now)
    changed = step.state != given or cap != state.last
    if not changed and step.kind is ActionKind.NOTHING:
        return ServingAction(ActionKind.NOTHING, given, step.reason)
    causes = []
    if cap != state.last:
        last = state.last
        causes.append(
            f"serving {last.spot}+{last.on_demand} -> {cap.spot}+{cap.on_demand}"
            f" of {cap.required} (Spot+on-demand)"
        )
    if step.kind is not ActionKind.NOTHING or step.state.phase is not state.phase:
        causes.append(step.reason)
    # An UndeployModel is a long-running call: the fallback serves until a read shows it gone.
    written = _with_change(step.state, now, cap, "; ".join(causes) or step.reason)
    kind = ActionKind.RECORD if step.kind is ActionKind.NOTHING else step.kind
    return ServingAction(
        kind,
        written,
        step.reason,
        step.split,
        step.deploy,
        step.undeploy,
        step.resize,
        step.notice,
    )


def _held(step: _Step, state: ServingState, now: datetime) -> _Step:
    """One long-running call at a time: while one is in flight, a step that would send
    another waits (recorded as it stands, without its call); a traffic move, which is
    synchronous, still goes. A step that sends one claims it in the state it writes first."""
    calls = {ActionKind.HEDGE: DEPLOY_CALL, ActionKind.GROW: MUTATE_CALL}
    call = UNDEPLOY_CALL if step.undeploy else calls.get(step.kind)
    if call is None:
        return step
    if state.operation_call is None:
        return replace(step, state=_claimed(step.state, call, now))
    waiting = replace(step.state, fallback_replicas=state.fallback_replicas, hedges=state.hedges)
    return _Step(ActionKind.NOTHING, waiting, f"waiting for {state.operation_call}")


def _adopt(observed: ObservedEndpoint, state: ServingState, now: datetime) -> ServingState:
    """A fallback whose DeployModel was sent is ours once the endpoint shows it under its
    display name, whether or not its id was recorded (the call may have timed out, or been
    given up): its DeployModel is then done. Found while unhedged (a DeployModel given up
    that landed late), the deployment is hedged by it from now rather than deploying another."""
    if state.fallback_id is not None:
        return state
    spot = observed.model(state.spot_id)
    name = state.fallback_name or (fallback_display_name(spot) if spot else None)
    if not name:
        return state
    found = next(
        (
            m
            for m in observed.models
            if m.display_name == name and not m.spot and m.id != state.spot_id
        ),
        None,
    )
    if found is None:
        return state
    adopted = replace(state, fallback_id=found.id, fallback_name=name)
    if adopted.operation_call == DEPLOY_CALL:
        adopted = _no_call(adopted)
    if adopted.phase in (Phase.SERVING, Phase.DEFICIT):
        adopted = replace(adopted, phase=Phase.HEDGED, since=now, fallback_replicas=found.required)
    return adopted


def begin_undeploy(state: ServingState, now: datetime) -> ServingState:
    """The state once a deployment is asked to go (a cancel): UNDEPLOYING from ``now``,
    whatever it was doing (a paused one too: taking it down is what its owner asked). A call
    in flight is kept and waited for, so nothing it makes is left behind."""
    if state.phase in (Phase.UNDEPLOYING, Phase.UNDEPLOYED):
        return state
    going = replace(state, phase=Phase.UNDEPLOYING, since=now)
    return _with_change(going, now, state.last, "undeploy requested")


def _undeploying(read: _Read, state: ServingState, spot: ObservedModel | None) -> _Step:
    """Taking a deployment down, one step per read: its traffic first goes to the endpoint's
    other models (in proportion to the replicas they serve, else to their shares), or, when it
    has none, from the fallback to the Spot model; then the fallback is undeployed, then the
    Spot model (the last model of an endpoint takes the split with it: "If last DeployedModel
    is being undeployed from the Endpoint, the Endpoint.traffic_split will always end up
    empty"). Done when neither is on the endpoint."""
    observed, fallback = read.observed, read.fallback
    present = tuple(m for m in (fallback, spot) if m is not None)
    if not present:
        gone = replace(
            _no_call(state),
            phase=Phase.UNDEPLOYED,
            since=read.now,
            fallback_id=None,
            fallback_name=None,
            fallback_replicas=0,
        )
        return _Step(ActionKind.NOTHING, gone, "undeployed", notice=UNDEPLOYED)
    ours = tuple(m.id for m in present)
    serving = [m for m in observed.models if m.id not in ours and m.available > 0]
    pool = sum(observed.share(i) for i in ours)
    split = {k: v for k, v in observed.traffic_split.items() if k not in ours}
    if pool and serving:
        # Never to a model with no replica: the traffic goes where replicas serve it.
        weights = [m.available for m in serving]
        for model, part in zip(serving, largest_remainder(pool, weights), strict=True):
            split[model.id] = split.get(model.id, 0) + part
        moved = {k: v for k, v in sorted(split.items()) if v > 0}
        return _Step(ActionKind.SHIFT, state, "undeploy: traffic to the other models", moved)
    if fallback is not None and spot is not None and observed.share(fallback.id):
        split[spot.id] = pool
        return _Step(ActionKind.SHIFT, state, "undeploy: the fallback's traffic to Spot", split)
    others = [m for m in observed.models if m.id not in ours]
    if pool and others and len(present) == 1:
        # No other model serves, and ours is not the endpoint's last (an UndeployModel of a
        # model with traffic is refused then): the endpoint takes no traffic ("map must be
        # empty if the Endpoint is to not accept any traffic"), rather than send it to a
        # model with no replica.
        return _Step(ActionKind.SHIFT, state, "undeploy: nothing else serves: no traffic", {})
    target = present[0]
    return _Step(ActionKind.UNDEPLOY, state, f"undeploy {target.id}", undeploy=target.id)


def _step(read: _Read, state: ServingState, spot: ObservedModel | None) -> _Step:
    if state.phase is Phase.UNDEPLOYED:
        return _Step(ActionKind.NOTHING, state, "undeployed")
    if read.observed.truncated:
        # Past MAX_MODELS the read is not the whole endpoint: a split written from it would
        # drop the shares it did not read, and a model of ours may be among them.
        why = f"the endpoint has more than {MAX_MODELS} deployed models"
        if state.phase in (Phase.UNDEPLOYING, Phase.PAUSED_BY_HAND):
            return _Step(ActionKind.NOTHING, state, f"{why}: waiting")
        paused = replace(state, phase=Phase.PAUSED_BY_HAND, since=read.now)
        return _Step(ActionKind.PAUSE, paused, f"{why}: not hedged")
    if state.phase is Phase.UNDEPLOYING:
        return _undeploying(read, state, spot)
    ours = (state.spot_id,) + ((read.fallback.id,) if read.fallback else ())
    grown = _pool(read.observed, ours)
    if (
        state.phase is not Phase.PAUSED_BY_HAND
        and grown > state.pool
        and _others(read.observed, ours) == dict(state.others)
    ):
        # Another flexjobs deployment left and gave its traffic to ours (see _hand_edit).
        state = replace(state, pool=grown)
    if state.phase is Phase.PAUSED_BY_HAND:
        return _Step(ActionKind.NOTHING, state, "paused after a hand edit: recording only")
    edit = _hand_edit(read.observed, state, read.settings, read.now)
    if edit is not None or spot is None:
        paused = replace(state, phase=Phase.PAUSED_BY_HAND, since=read.now)
        return _Step(ActionKind.PAUSE, paused, edit or "Spot model missing")
    if state.fallback_id and read.fallback is None:
        # Our RESTORE's UndeployModel happened (see _hand_edit): Spot alone serves again.
        served = replace(
            _no_call(state),
            phase=Phase.SERVING,
            since=None,
            fallback_id=None,
            fallback_name=None,
            fallback_replicas=0,
        )
        return _Step(
            ActionKind.NOTHING,
            served,
            f"{RESTORED_CAUSE} the fallback is undeployed",
            notice=RESTORED,
        )
    if state.phase in (Phase.SERVING, Phase.DEFICIT):
        return _unhedged(read, state, spot)
    return _hedged(read, state, spot)


def _elapsed(since: datetime | None, now: datetime) -> float:
    return (now - since).total_seconds() if since else 0.0


def _unhedged(read: _Read, state: ServingState, spot: ObservedModel) -> _Step:
    """No fallback yet: SERVING, or DEFICIT while the grace period runs, then HEDGE."""
    now, cap = read.now, read.cap
    if spot.available >= cap.required:
        return _Step(ActionKind.NOTHING, replace(state, phase=Phase.SERVING, since=None), "serving")
    since = state.since if state.phase is Phase.DEFICIT and state.since else now
    if _elapsed(since, now) < read.settings.grace_seconds:
        short = replace(state, phase=Phase.DEFICIT, since=since)
        return _Step(ActionKind.NOTHING, short, "fewer Spot replicas than required: grace period")
    deficit = min(cap.required - spot.available, read.settings.max_replicas)
    name = fallback_display_name(spot)
    hedged = replace(
        state,
        phase=Phase.HEDGED,
        since=now,
        fallback_id=None,
        fallback_name=name,
        fallback_replicas=deficit,
        hedges=state.hedges + 1,
    )
    reason = (
        f"{HEDGE_CAUSE} {deficit} on-demand replica(s) after {_elapsed(since, now):.0f} s"
        f" with {spot.available} of {cap.required} Spot replicas"
    )
    fallback = Fallback(spot.model, name, spot.machine, deficit)
    return _Step(ActionKind.HEDGE, hedged, reason, deploy=fallback, notice=HEDGED)


def _hedged(read: _Read, state: ServingState, spot: ObservedModel) -> _Step:
    """A fallback is deployed or on its way: HEDGED, or RECOVERING while the hold runs, then
    RESTORE; traffic follows the replicas each can serve, one call per read."""
    observed, now, fallback, cap = read.observed, read.now, read.fallback, read.cap
    healthy = spot.available >= cap.required
    if healthy:
        # The hold starts when Spot first serves all its replicas again; a flap resets it.
        since = state.since if state.phase is Phase.RECOVERING else now
        phase, label = Phase.RECOVERING, "Spot serves all its replicas again: hold period"
    else:
        since = state.since if state.phase is Phase.HEDGED else now
        phase, label = Phase.HEDGED, "hedged"
    moved = replace(state, phase=phase, since=since)
    if fallback is None:
        return _Step(ActionKind.NOTHING, moved, f"{label}; the fallback is being deployed")
    ours = (spot.id, fallback.id)
    if healthy and _elapsed(since, now) >= read.settings.hold_seconds:
        if observed.share(fallback.id) > 0 or not observed.traffic_split:
            back = hedged_split(observed, ours, (spot.available, 0))
            if back is not None and back != observed.traffic_split:
                return _Step(ActionKind.RESTORE, moved, "restore: traffic back to Spot", back)
        # A fresh read shows the fallback without traffic, and Spot serving every replica it
        # requires: undeploying the fallback removes no model that serves traffic.
        return _Step(
            ActionKind.RESTORE, moved, "restore: undeploy the fallback", undeploy=fallback.id
        )
    split = hedged_split(observed, ours, (spot.available, fallback.available))
    if split is not None and split != observed.traffic_split:
        return _Step(ActionKind.SHIFT, moved, f"{label}: traffic follows the replicas", split)
    deficit = min(cap.required - spot.available, read.settings.max_replicas)
    if deficit > state.fallback_replicas:
        grown = replace(moved, fallback_replicas=deficit)
        reason = f"{label}: grow the fallback to {deficit} replica(s)"
        return _Step(ActionKind.GROW, grown, reason, resize=deficit)
    return _Step(ActionKind.NOTHING, moved, label)
