"""The Spot serving state machine: one pure function from a deployment's state and one fresh
read of its endpoint to its next state and at most one call (:func:`decide`), and the small
functions that write what happened to a call (:func:`answered`, :func:`refused`,
:func:`lost`, :func:`released`) or what the owner asked (:func:`told`).

**One state, intents that last.** Everything a deployment knows is one value
(:class:`~shared.domain.serving.model.ServingState`): its phase, its owner's intent, the one
call in flight and its own models. An intent (serve, resume, undeploy) is replaced only by a
later intent, never by a phase: a failed or given-up call moves the state, never the intent,
so a cancel is never lost to a call that went wrong.

**A call's outcome is an input.** A long-running call (DeployModel, MutateDeployedModel,
UndeployModel) is claimed in the state written before it is sent, so two deliveries never
send it twice. Its outcome comes in any of five ways, each moving the state on: done (its
operation says so, or a read shows its effect: the model on the endpoint, or gone), failed
(refused, or its operation ended with an error), unknown (the call timed out: it may have
happened; its effect is looked for on every read), given up (no effect after
:data:`DEPLOY_LIMIT_SECONDS` for a DeployModel, :data:`CALL_LIMIT_SECONDS` for the others),
or never sent (released).

**Our own doing is never a hand edit.** A model this deployment is undeploying, or gave up
undeploying, that leaves; a model it deploys that lands, even late; another flexjobs
deployment's models coming and going, or its traffic given to the others when it leaves:
none of these pauses a deployment. Anything else that changes the endpoint does (a model
added or removed by hand, another model's share or this deployment's edited).

**Never make serving worse.** Traffic goes only to models that serve (an available
replica) and are not leaving; a split keeps the other models' shares and sums to 100 (largest
remainder); a model of ours leaves only once it has no traffic, and the last one of an
endpoint takes the split with it ("If last DeployedModel is being undeployed from the
Endpoint, the Endpoint.traffic_split will always end up empty").

Every transition is in :data:`TRANSITIONS`, the table docs/serving.md shows and the
deterministic simulator checks each state change against.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Final

from shared.domain.model.values import clip
from shared.domain.serving.model import (
    MAX_CAUSE,
    MAX_MODELS,
    ActionKind,
    CallKind,
    Capacity,
    CapacityStep,
    Deploy,
    InFlight,
    Intent,
    ObservedEndpoint,
    ObservedModel,
    Ours,
    Phase,
    ServingAction,
    ServingSettings,
    ServingState,
    fallback_display_name,
    floor_display_name,
)
from shared.domain.serving.objective import AvailabilityObjective, ServingPolicy
from shared.domain.serving.split import hedged_split, largest_remainder

#: A DeployModel with no outcome yet (its answer lost, or its operation never done) is
#: given up after this long: a GPU DeployModel takes minutes to tens of minutes, so a model it
#: does land is on the endpoint by then (and is adopted by its display name even later).
#: Deploying again sooner could make a second model.
DEPLOY_LIMIT_SECONDS: Final = 2 * 3600.0
#: A DeployModel whose answer was lost (no operation known) is looked for this long after its
#: claim among the endpoint's running DeployModels: one that reached Vertex runs from then
#: (a GPU DeployModel takes minutes) or has landed (and is adopted by its name), so when none
#: started since the claim runs and no model of its name is on the endpoint, it made nothing
#: and is given up, and sent again. Waiting for DEPLOY_LIMIT_SECONDS instead held a
#: deployment whose DeployModel met an outage (answered UNAVAILABLE, never sent) ACCEPTED for
#: two hours (the chaos soak, seed 928769).
LOST_DEPLOY_SECONDS: Final = 60.0
#: How much earlier than its claim a running DeployModel may say it started and still be
#: taken for ours: the claim is stamped by our clock before the call, the operation by
#: Vertex's when it arrives.
CLOCK_SKEW_SECONDS: Final = 60.0
#: A MutateDeployedModel or an UndeployModel whose effect does not show after this long is
#: given up and decided again: sending either twice does no harm (a second undeploy of a
#: model already gone is refused, a second resize to the same size changes nothing).
CALL_LIMIT_SECONDS: Final = 600.0
#: A read of the endpoint taken this long after the newest one a deployment decided on cannot
#: be from before it (a GetEndpoint answers within its deadline, well under a minute).
READ_SETTLE_SECONDS: Final = 60.0
#: A refused call is not sent again before this long (the next reads decide it again).
REFUSED_BACKOFF_SECONDS: Final = 120.0

#: The notifications a deployment owes (docs/contract.md, *Notifications*).
DEPLOYED: Final = "DEPLOYED"
FAILED: Final = "FAILED"
HEDGED: Final = "HEDGED"
RESTORED: Final = "RESTORED"
UNDEPLOYED: Final = "UNDEPLOYED"

#: How the history's causes of a hedge, a failed hedge and a restore begin (the status page's
#: chart marks them by these words: one place for both).
HEDGE_CAUSE: Final = "hedge:"
HEDGE_FAILED_CAUSE: Final = "hedge failed:"
RESTORED_CAUSE: Final = "restored:"

_FOLLOWING: Final = frozenset(
    {Phase.SERVING, Phase.DEFICIT, Phase.HEDGED, Phase.RECOVERING, Phase.PAUSED_BY_HAND}
)
_ALIVE: Final = frozenset({Phase.DEPLOYING, *_FOLLOWING, Phase.UNDEPLOYING})


@dataclass(frozen=True)
class Transition:
    """One row of the state table: the phases it leaves from and may arrive at, the call it
    may send, and the notification it may owe."""

    name: str
    sources: frozenset[Phase]
    targets: frozenset[Phase]
    call: str = ""
    notice: str = ""
    when: str = ""


def _t(
    name: str, sources: object, targets: object, *, call: str = "", notice: str = "", when: str
) -> Transition:
    def phases(raw: object) -> frozenset[Phase]:
        if isinstance(raw, Phase):
            return frozenset({raw})
        assert isinstance(raw, frozenset | set | tuple)
        return frozenset(raw)

    return Transition(name, phases(sources), phases(targets), call, notice, when)


_UNHEDGED = frozenset({Phase.SERVING, Phase.DEFICIT})
_HEDGING = frozenset({Phase.HEDGED, Phase.RECOVERING})
_ACTING = _FOLLOWING - {Phase.PAUSED_BY_HAND}
_D, _F, _U = Phase.DEPLOYING, Phase.FAILED, Phase.UNDEPLOYING

# fmt: off
#: Every transition the machine takes, one row each (docs/serving.md prints this table, and
#: the deterministic simulator holds every state change it sees to it).
TRANSITIONS: Final[tuple[Transition, ...]] = (
    _t("deploy", _D, _D, call="DeployModel(spot)",
       when="intent serve, nothing deployed, nothing in flight, not parked (every replica on"
       " demand: DeployModel(floor), no Spot model)"),
    _t("parked", _D, _D, when="its DeployModel was refused for quota: sent again after backoff"),
    _t("deployed", _D, _UNHEDGED, notice=DEPLOYED,
       when="a read shows the Spot model (with no Spot model: the floor)"),
    _t("deploy-failed", _D, _F, notice=FAILED,
       when="its DeployModel was refused for good, or its operation ended with an error"),
    _t("capacity", _FOLLOWING, _FOLLOWING,
       when="the replicas serving changed; the phase follows them"),
    _t("floor", _ACTING, _FOLLOWING, call="DeployModel(floor)",
       when="a warm on-demand floor is asked for and not deployed"),
    _t("hedge", _UNHEDGED, Phase.HEDGED, call="DeployModel(fallback)",
       when="fewer replicas than required for the grace period (from SERVING: a grace of 0)"),
    _t("hedge-failed", _HEDGING, _UNHEDGED,
       when="the fallback's DeployModel failed, or was given up: a new grace period runs"),
    _t("hedged", _FOLLOWING, _HEDGING, notice=HEDGED,
       when="the fallback's DeployModel reached Vertex, or its model shows on the endpoint"),
    _t("grow", _HEDGING, _HEDGING, call="MutateDeployedModel",
       when="the deficit grew past the fallback's replicas"),
    _t("shift", _ACTING, _FOLLOWING, call="UpdateEndpoint",
       when="traffic follows the replicas that serve (never to one that does not, or leaves)"),
    _t("restore", _HEDGING, Phase.RECOVERING, call="UpdateEndpoint, UndeployModel",
       when="Spot served every replica for the hold (from HEDGED: a hold of 0): traffic"
       " back, then the fallback goes"),
    _t("restored", _FOLLOWING, _FOLLOWING, notice=RESTORED,
       when="the fallback this deployment undeployed is gone"),
    _t("cleanup", _FOLLOWING, _FOLLOWING, call="UndeployModel",
       when="a second model under one of its names (a DeployModel given up that landed)"),
    _t("pause", _FOLLOWING, Phase.PAUSED_BY_HAND,
       when="the endpoint changed in a way no flexjobs deployment explains"),
    _t("resume", _FOLLOWING, _FOLLOWING,
       when="intent resume, not taken yet: the endpoint as it is becomes the baseline"),
    _t("rebaseline", _FOLLOWING, _FOLLOWING,
       when="another flexjobs deployment came, went, or gave its traffic away"),
    _t("told", _ALIVE, _ALIVE, when="the owner's intent is written"),
    _t("undeploy", _ALIVE, _U, call="UpdateEndpoint, UndeployModel",
       when="intent undeploy: traffic to the others that serve, then each model, last the Spot"),
    _t("undeployed", _ALIVE, Phase.UNDEPLOYED, notice=UNDEPLOYED,
       when="intent undeploy, no model of it on the endpoint, nothing it may still make"),
    _t("call", _ALIVE, _ALIVE | {_F},
       when="a call's outcome (answered, refused, lost, released, done, given up) is written"),
)
# fmt: on
TRANSITION_NAMES: Final = frozenset(t.name for t in TRANSITIONS)


def state_table() -> str:
    """:data:`TRANSITIONS` as the Markdown table docs/serving.md prints (a unit test holds
    the page to it)."""
    order = list(Phase)

    def phases(of: frozenset[Phase]) -> str:
        return ", ".join(p.value for p in order if p in of)

    rows = [
        "| transition | from | to | call | notifies | when |",
        "|---|---|---|---|---|---|",
    ]
    for t in TRANSITIONS:
        rows.append(
            f"| `{t.name}` | {phases(t.sources)} | {phases(t.targets)} | {t.call} | {t.notice} "
            f"| {t.when} |"
        )
    return "\n".join(rows)


def allowed(name: str, before: Phase, after: Phase) -> bool:
    """Is ``before`` -> ``after`` a move transition ``name`` may make (staying put always is)?"""
    if before is after:
        return True
    row = next((t for t in TRANSITIONS if t.name == name), None)
    return row is not None and before in row.sources and after in row.targets


# -- names -----------------------------------------------------------------------------------


def owns(state: ServingState, display_name: str) -> bool:
    """Does a deployed model of this display name belong to this deployment?"""
    return display_name in (
        state.spot.name,
        fallback_display_name(state.spot.name),
        floor_display_name(state.spot.name),
    )


# -- the owner's intent and a call's outcome ------------------------------------------------


def new_state(
    spot_name: str,
    required: int,
    policy: ServingPolicy,
    now: datetime,
    *,
    objective: AvailabilityObjective | None = None,
    why: str = "",
    share: int = 0,
) -> ServingState:
    """A deployment accepted: nothing deployed yet, intent serve (``spot_name``: the Spot
    model's display name, which carries the deployment's tag: its idempotency key;
    ``required`` replicas kept serving by ``policy``'s knobs, for ``objective``, ``why``)."""
    return ServingState(
        share=min(max(share, 0), 100),
        objective=objective,
        why=clip(why, MAX_CAUSE) or "",
        phase=Phase.DEPLOYING,
        intent=Intent.SERVE,
        intent_at=now,
        required=required,
        policy=policy,
        spot=Ours(spot_name, None, policy.spot_replicas(required)),
        accounted_at=now,
        last=Capacity(0, 0, required),
    )


def told(state: ServingState, intent: Intent, now: datetime) -> ServingState | None:
    """The state once the owner asked ``intent``; None when it changes nothing. An undeploy
    is the last word: nothing after it brings the deployment back. A resume of a deployment
    that is not paused is kept (it is taken as the new baseline on the next read, which a
    deployment not paused does no harm by)."""
    if state.phase.ended or state.intent is Intent.UNDEPLOY:
        return None
    if intent is Intent.SERVE:
        return None
    if intent is Intent.RESUME and state.phase is Phase.DEPLOYING:
        return None  # nothing to resume yet
    phase = Phase.UNDEPLOYING if intent is Intent.UNDEPLOY else state.phase
    told_state = replace(state, intent=intent, intent_at=now, phase=phase)
    if phase is not state.phase:
        told_state = replace(told_state, since=now)
    told_state = replace(told_state, transition="told")
    return _history(told_state, now, state.last, f"{intent.value.lower()} asked")


def answered(
    state: ServingState, claim: InFlight, operation: str
) -> tuple[ServingState, tuple[str, ...]] | None:
    """Vertex answered the call ``claim`` (as it was claimed) with ``operation``; None when
    the claim is no longer that call's. A fallback's DeployModel answered is a hedge that
    reached Vertex: HEDGED is owed now (and never before it)."""
    landing = _landing_claimed(state, claim)
    if landing is not None:
        # A cancel set the call aside while it was being sent: its operation is what the
        # deployment waits for before it ends (never given up while Vertex runs it).
        answer = replace(landing, operation=clip(operation, 256), unknown=False)
        return replace(state, landing=answer, transition="call"), ()
    call = state.call
    if not same_claim(call, claim):
        return None
    assert call is not None
    answer = replace(call, operation=clip(operation, 256), unknown=False)
    after = replace(state, call=answer, transition="call")
    if call.kind is CallKind.DEPLOY_FALLBACK:
        return replace(after, transition="hedged"), (HEDGED,)
    return after, ()


def asks_running_deploys(state: ServingState, now: datetime) -> bool:
    """Whether the next step needs the endpoint's running DeployModel operations listed
    (:attr:`ObservedEndpoint.deploying`): a DeployModel of this deployment, in flight or set
    aside by a cancel, whose answer was lost (no operation known), at its limit."""
    return any(
        call is not None
        and call.kind.deploys
        and not call.operation
        and (now - call.at).total_seconds() >= LOST_DEPLOY_SECONDS
        for call in (state.call, state.landing)
    )


def may_still_land(call: InFlight, observed: ObservedEndpoint) -> bool:
    """A DeployModel whose answer was lost may still land: its operation's name is not
    known, and the endpoint still runs a DeployModel started since its claim (or which ones
    run is not known). Vertex's operations do not say which model they deploy, so any such
    one may be it; however late it runs, its model would land billing with nobody to follow
    it if the call were given up first.

    Examples:
        >>> from datetime import UTC
        >>> t0 = datetime(2026, 12, 1, tzinfo=UTC)
        >>> call = InFlight(CallKind.DEPLOY_SPOT, "served [flexjobs s-1]", t0, replicas=1)
        >>> may_still_land(call, ObservedEndpoint("e", ()))  # not listed
        True
        >>> may_still_land(call, ObservedEndpoint("e", (), deploying=()))
        False
        >>> later = t0 + timedelta(seconds=5)
        >>> may_still_land(call, ObservedEndpoint("e", (), deploying=(later,)))
        True
    """
    if observed.deploying is None:
        return True
    since = call.at - timedelta(seconds=CLOCK_SKEW_SECONDS)
    return any(started >= since for started in observed.deploying)


def same_claim(held: InFlight | None, claim: InFlight) -> bool:
    """``held`` (the state's call, or its landing) is the call ``claim`` as it was claimed:
    the same kind, about the same model, claimed at the same instant. The instant alone is
    not enough: a cancel's UndeployModel may be claimed at the very instant a hedge's
    DeployModel was, and its answer must never be written on the other.

    Examples:
        >>> from datetime import UTC
        >>> t0 = datetime(2026, 12, 1, tzinfo=UTC)
        >>> deploy = InFlight(CallKind.DEPLOY_FALLBACK, "m (on-demand fallback)", t0, 2)
        >>> same_claim(replace(deploy, operation="op/1"), deploy)
        True
        >>> same_claim(deploy, InFlight(CallKind.UNDEPLOY, "9002", t0))
        False
    """
    return (
        held is not None
        and held.at == claim.at
        and held.kind is claim.kind
        and held.target == claim.target
    )


def _landing_claimed(state: ServingState, claim: InFlight) -> InFlight | None:
    """The DeployModel a cancel set aside (``landing``), when it is the call ``claim`` whose
    outcome is being written."""
    landing = state.landing
    return landing if same_claim(landing, claim) else None


def lost(state: ServingState, claim: InFlight) -> ServingState | None:
    """The call ``claim`` timed out: it may have happened. Its claim stays, and every read
    looks for its effect, until it shows or the call is given up."""
    landing = _landing_claimed(state, claim)
    if landing is not None:
        if landing.unknown:
            return None
        return replace(state, landing=replace(landing, unknown=True), transition="call")
    call = state.call
    if call is None or not same_claim(call, claim) or call.unknown:
        return None
    return replace(state, call=replace(call, unknown=True), transition="call")


def released(state: ServingState, claim: InFlight) -> ServingState | None:
    """The call ``claim`` surely never reached Vertex: its claim goes, and the next read
    decides again (a fallback's hedge counted for it is taken back)."""
    if _landing_claimed(state, claim) is not None:
        # It made nothing: nothing to wait for.
        return replace(state, landing=None, transition="call")
    call = state.call
    if call is None or not same_claim(call, claim):
        return None
    after = replace(state, call=None, transition="call")
    if call.kind is CallKind.DEPLOY_FALLBACK and state.intent is not Intent.UNDEPLOY:
        # Back to the deficit the hedge was for, as old as it was: the next read hedges.
        after = replace(
            after,
            hedges=max(0, state.hedges - 1),
            fallback=None,
            phase=Phase.DEFICIT,
            since=call.since or state.since,
        )
    return after


def refused(
    state: ServingState,
    claim: InFlight,
    error: str,
    now: datetime,
    *,
    retry_at: datetime | None,
) -> tuple[ServingState, tuple[str, ...]] | None:
    """Vertex refused the call ``claim`` (nothing was made): for good (``retry_at``
    None) or for quota (sent again at ``retry_at``). The Spot model refused for good fails
    the deployment; refused for quota, it is parked. A refused hedge starts a new grace
    period; a refused floor, resize or undeploy is decided again after a backoff."""
    if _landing_claimed(state, claim) is not None:
        cause = clip(f"a DeployModel set aside was refused: {error}", MAX_CAUSE) or ""
        set_aside = replace(state, landing=None, transition="call")
        return _history(set_aside, now, state.last, cause), ()
    call = state.call
    if call is None or not same_claim(call, claim):
        return None
    done = replace(state, call=None, transition="call")
    cause = clip(f"{call.kind.value} refused: {error}", MAX_CAUSE) or ""
    if call.kind is CallKind.DEPLOY_SPOT:
        if state.intent is Intent.UNDEPLOY:
            return _history(done, now, state.last, cause), ()  # nothing made: it may end
        if retry_at is None:
            return _failed(done, now, cause), (FAILED,)
        return _history(replace(done, retry_at=retry_at), now, state.last, cause), ()
    later = retry_at or now + timedelta(seconds=REFUSED_BACKOFF_SECONDS)
    if call.kind is CallKind.DEPLOY_FALLBACK:
        return _hedge_failed(done, now, cause), ()
    if call.kind is CallKind.MUTATE and done.fallback is not None:
        done = replace(done, fallback=replace(done.fallback, replicas=0))
    return _history(replace(done, retry_at=later), now, state.last, cause), ()


def _failed(state: ServingState, now: datetime, cause: str) -> ServingState:
    failed = replace(state, phase=Phase.FAILED, since=now)
    return _history(failed, now, state.last, cause, was=state.phase)


def _hedge_failed(state: ServingState, now: datetime, cause: str) -> ServingState:
    """No fallback is on its way any more: a new grace period runs before the next hedge, so
    a refused hedge is not resent every minute. A fallback already on the endpoint stays."""
    if state.fallback is not None and state.fallback.id is not None:
        return state
    short = state.last.short
    failed = replace(
        state,
        phase=Phase.UNDEPLOYING
        if state.intent is Intent.UNDEPLOY
        else (Phase.DEFICIT if short else Phase.SERVING),
        since=now if short else None,
        fallback=None,
    )
    return _history(failed, now, state.last, f"{HEDGE_FAILED_CAUSE} {cause}")


# -- the decision ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Read:
    """One fresh read and what the rule derives from it."""

    observed: ObservedEndpoint
    now: datetime
    settings: ServingSettings
    #: Models of other flexjobs deployments being taken away (their undeploy in flight, or
    #: their owner's intent undeploy): never a target for traffic.
    leaving: frozenset[str]
    #: When the read was taken.
    taken: datetime
    #: The operation read of the call in flight, or of a DeployModel set aside (landing).
    operation: OperationOutcome | None = None


@dataclass(frozen=True)
class _Step:
    kind: ActionKind
    state: ServingState
    reason: str
    transition: str
    call: InFlight | None = None
    deploy: Deploy | None = None
    split: Mapping[str, int] | None = None
    notices: tuple[str, ...] = ()


def decide(
    state: ServingState,
    observed: ObservedEndpoint,
    now: datetime,
    settings: ServingSettings | None = None,
    *,
    operation: OperationOutcome | None = None,
    leaving: frozenset[str] = frozenset(),
    read_at: datetime | None = None,
) -> ServingAction:
    """What to do for one deployment after one fresh read of its endpoint (and, when its
    call in flight has an operation, one read of that operation: ``operation``).

    ``leaving``: the models of the endpoint that other flexjobs deployments are taking away.
    ``read_at``: when the read was taken (``now`` when None); a read older than the newest
    one the state was decided on decides nothing.

    Examples:
        >>> from datetime import UTC
        >>> from shared.domain.serving.model import MachineSpec
        >>> t0 = datetime(2026, 12, 1, tzinfo=UTC)
        >>> name = "served [flexjobs s-1]"
        >>> state = new_state(name, 2, ServingPolicy(), t0)
        >>> empty = ObservedEndpoint("e", (), {})
        >>> first = decide(state, empty, t0)
        >>> first.kind, first.call.kind.value, first.deploy.replicas
        (<ActionKind.CALL: 'CALL'>, 'DeployModel(spot)', 2)
        >>> def read(n):
        ...     spot = ObservedModel("7", "m", name, MachineSpec("g2-standard-4"), True, 2, n)
        ...     return ObservedEndpoint("e", (spot,), {"7": 100})
        >>> up = decide(first.state, read(2), t0 + timedelta(minutes=12))
        >>> up.state.phase.value, up.notices
        ('SERVING', ('DEPLOYED',))
        >>> lost = decide(up.state, read(0), t0 + timedelta(minutes=13))
        >>> lost.state.phase.value
        'DEFICIT'
        >>> hedge = decide(lost.state, read(0), t0 + timedelta(minutes=19))
        >>> hedge.call.kind.value, hedge.deploy.replicas, hedge.state.phase.value
        ('DeployModel(fallback)', 2, 'HEDGED')
    """
    settings = settings or ServingSettings()
    if state.phase.ended:
        return ServingAction(ActionKind.NOTHING, state, "ended", "none")
    taken = read_at or now
    if state.read_at is not None and taken < state.read_at:
        return ServingAction(ActionKind.NOTHING, state, "a read older than the last one", "none")
    if _older_version(state, observed, taken):
        why = "a read of an older version of the endpoint"
        return ServingAction(ActionKind.NOTHING, state, why, "none")
    read = _Read(observed, now, settings, leaving, taken, operation)
    resolved, notices, cause = _resolve(state, read, operation)
    resolved, seen, adopted = _recognise(resolved, read)
    notices += seen
    if resolved.phase.ended:
        step = _Step(ActionKind.RECORD, resolved, cause, "deploy-failed")
    elif resolved.intent is Intent.UNDEPLOY and observed.truncated:
        # Not every model of the endpoint was read: one of ours past the bound would be left
        # behind, and a split written from a part of them would not sum to 100.
        why = f"undeploy waits: the endpoint has more than {MAX_MODELS} deployed models"
        step = _Step(ActionKind.NOTHING, resolved, why, "none")
    elif resolved.intent is Intent.UNDEPLOY:
        step = _undeploying(resolved, read)
    elif resolved.phase is Phase.DEPLOYING:
        step = _deploying(resolved, read)
    elif observed.truncated:
        step = _truncated(resolved, read)
    else:
        step = _following(resolved, read)
    if cause and step.transition in ("none", "capacity"):
        step = replace(step, transition=_outcome_transition(state, resolved, notices))
    if adopted and step.transition in ("none", "capacity"):
        step = replace(step, transition="hedged")
    return _accounted(state, step, read, notices, cause)


def _outcome_transition(before: ServingState, after: ServingState, notices: tuple[str, ...]) -> str:
    """The row a call's outcome moved the state by: the fallback gone (RESTORED owed), a
    hedge that failed, or any other outcome."""
    if RESTORED in notices:
        return "restored"
    call = before.call
    if call is not None and call.kind is CallKind.DEPLOY_FALLBACK and after.phase in _UNHEDGED:
        return "hedge-failed"
    return "call"


@dataclass(frozen=True)
class OperationOutcome:
    """What one read of the call in flight's operation said: done or not, its error, and a
    DeployModel's deployed model id."""

    name: str
    done: bool
    deployed_model_id: str | None = None
    error: str | None = None


def _resolve(
    state: ServingState, read: _Read, operation: OperationOutcome | None
) -> tuple[ServingState, tuple[str, ...], str]:
    """The call in flight's outcome, as this read and its operation show it: done, failed,
    given up, or still running. Returns the state after it, the notifications it owes, and
    the cause for the history ('' when nothing happened)."""
    call = state.call
    if call is None:
        return state, (), ""
    observed, now = read.observed, read.now
    op = operation if operation is not None and operation.name == call.operation else None
    elapsed = (now - call.at).total_seconds()
    if call.kind.deploys:
        return _resolve_deploy(state, call, read, op)
    present = observed.model(call.target)
    if call.kind is CallKind.UNDEPLOY:
        if present is None or (op is not None and op.done and not op.error):
            return _gone(replace(state, call=None), call.target, now)
    elif (present is not None and present.required == call.replicas) or (
        op is not None and op.done and not op.error
    ):
        fallback = state.fallback
        if fallback is not None and fallback.id == call.target:
            fallback = replace(fallback, replicas=call.replicas)
        return replace(state, call=None, fallback=fallback), (), f"{call.kind.value} done"
    if op is not None and op.done and op.error:
        after = refused(state, call, op.error, now, retry_at=None)
        assert after is not None
        return after[0], after[1], f"{call.kind.value} failed: {op.error}"
    if elapsed >= CALL_LIMIT_SECONDS:
        why = f"{call.kind.value}: no effect after {CALL_LIMIT_SECONDS / 60:.0f} min"
        return replace(state, call=None, given_up=call), (), why
    return state, (), ""


def _resolve_deploy(
    state: ServingState, call: InFlight, read: _Read, op: OperationOutcome | None
) -> tuple[ServingState, tuple[str, ...], str]:
    """A DeployModel's outcome: its model on the endpoint (by name), its operation done or
    failed, or no answer past :data:`DEPLOY_LIMIT_SECONDS`."""
    observed, now = read.observed, read.now
    elapsed = (now - call.at).total_seconds()
    seen = next((m for m in observed.models if m.display_name == call.target), None)
    if seen is not None:
        return _landed(state, call, seen.id, seen.required, now)
    if op is not None and op.done and not op.error and op.deployed_model_id:
        listed_later = call.kind is not CallKind.DEPLOY_SPOT and elapsed < DEPLOY_LIMIT_SECONDS
        if listed_later:
            # Done, not listed yet: recorded once a read shows it (or at the limit), so its
            # absence from this read is never taken for a hand edit.
            return state, (), ""
        return _landed(state, call, op.deployed_model_id, call.replicas, now)
    if op is not None and op.done:
        return _deploy_failed(state, call, op.error or "the operation failed", now)
    if call.operation:
        # Vertex answered with its operation: the model lands when the operation ends
        # (done or failed), however long it runs; it is never sent twice meanwhile.
        return state, (), ""
    if elapsed >= LOST_DEPLOY_SECONDS and not may_still_land(call, observed):
        given = replace(state, call=None, given_up=call)
        why = f"{call.kind.value}: no answer, and none of it runs"
        if call.kind is CallKind.DEPLOY_FALLBACK:
            return _hedge_failed(given, now, why), (), why
        return given, (), why
    return state, (), ""


def _landed(
    state: ServingState, call: InFlight, model_id: str, replicas: int, now: datetime
) -> tuple[ServingState, tuple[str, ...], str]:
    """A DeployModel of ours is done: its model is recorded in its slot."""
    done = replace(state, call=None)
    if call.kind is CallKind.DEPLOY_SPOT:
        return replace(done, spot=replace(done.spot, id=model_id)), (), "the Spot model is deployed"
    if call.kind is CallKind.DEPLOY_FLOOR:
        floor = Ours(call.target, model_id, replicas or call.replicas)
        return replace(done, floor=floor), (), "the on-demand floor is deployed"
    fallback = Ours(call.target, model_id, replicas or call.replicas)
    # HEDGED was owed when Vertex answered the call; a call whose answer was lost owes it now.
    owed = (HEDGED,) if call.operation is None else ()
    return replace(done, fallback=fallback), owed, "the fallback is deployed"


def _deploy_failed(
    state: ServingState, call: InFlight, error: str, now: datetime
) -> tuple[ServingState, tuple[str, ...], str]:
    cause = clip(f"{call.kind.value} failed: {error}", MAX_CAUSE) or ""
    done = replace(state, call=None)
    if call.kind is CallKind.DEPLOY_SPOT:
        if state.intent is Intent.UNDEPLOY:
            return done, (), cause
        return _failed(done, now, cause), (FAILED,), cause
    if call.kind is CallKind.DEPLOY_FALLBACK:
        return _hedge_failed(done, now, cause), (), cause
    later = now + timedelta(seconds=REFUSED_BACKOFF_SECONDS)
    return replace(done, retry_at=later), (), cause


def _gone(
    state: ServingState, model_id: str, now: datetime
) -> tuple[ServingState, tuple[str, ...], str]:
    """One of our models that we undeployed is gone from the endpoint."""
    if state.fallback is not None and state.fallback.id == model_id:
        restored = state.intent is not Intent.UNDEPLOY
        after = replace(state, fallback=None)
        if restored and state.phase in _HEDGING:
            short = state.last.short
            after = replace(
                after,
                phase=Phase.DEFICIT if short else Phase.SERVING,
                since=now if short else None,
            )
            return after, (RESTORED,), f"{RESTORED_CAUSE} the fallback is undeployed"
        return after, (), "the fallback is undeployed"
    if state.floor is not None and state.floor.id == model_id:
        return replace(state, floor=None), (), "the floor is undeployed"
    if state.spot.id == model_id:
        return replace(state, spot=replace(state.spot, id=None)), (), "the Spot model is undeployed"
    return state, (), f"model {model_id} is undeployed"


def _recognise(state: ServingState, read: _Read) -> tuple[ServingState, tuple[str, ...], bool]:
    """Our models as this read shows them, by their display names: an id not recorded yet (a
    DeployModel whose answer was lost, or was given up, that landed), a fallback that landed
    after its hedge was given up (the deployment is hedged by it from now). Returns the state,
    the notifications owed, and whether a fallback was adopted."""
    observed = read.observed
    spot_name = state.spot.name
    by_name: dict[str, ObservedModel] = {}
    for model in observed.models:
        by_name.setdefault(model.display_name, model)
    after = state
    found = by_name.get(spot_name)
    spot_in_flight = after.call is not None and after.call.kind is CallKind.DEPLOY_SPOT
    if after.spot.id is None and found is not None and found.spot and not spot_in_flight:
        after = replace(after, spot=replace(after.spot, id=found.id))
    floor_name = floor_display_name(spot_name)
    found = by_name.get(floor_name)
    if found is not None and not found.spot and _unrecorded(after, after.floor, floor_name):
        after = replace(after, floor=Ours(floor_name, found.id, found.required))
    fallback_name = fallback_display_name(spot_name)
    adopted = False
    notices: tuple[str, ...] = ()
    found = by_name.get(fallback_name)
    if found is not None and not found.spot and _unrecorded(after, after.fallback, fallback_name):
        after = replace(after, fallback=Ours(fallback_name, found.id, found.required))
        if after.phase in _UNHEDGED:
            after = replace(after, phase=Phase.HEDGED, since=read.now)
            adopted = True
            notices = (HEDGED,)
    return after, notices, adopted


def _unrecorded(state: ServingState, ours: Ours | None, name: str) -> bool:
    """A model named ``name`` on the endpoint is one of ours whose id is not recorded, and no
    call in flight is about to record it."""
    in_flight = state.call is not None and state.call.target == name
    return (ours is None or ours.id is None) and not in_flight


def _deploying(state: ServingState, read: _Read) -> _Step:
    """The deployment's own model is not followed yet: deploy it once, then start following
    it. That is its Spot model; a policy that keeps every replica on demand (a floor of all
    N, no extra Spot) has none, and its floor is what is deployed first, and followed."""
    observed, now = read.observed, read.now
    spotless = state.spot_replicas == 0
    main_id = state.main_id
    seen = observed.model(main_id) if main_id else None
    if seen is not None:
        spot = replace(state.spot, replicas=seen.required)
        based = state if spotless else replace(state, spot=spot)
        followed = _baseline(based, observed)
        cap = _capacity(followed, observed)
        phase, since = (Phase.DEFICIT, now) if cap.short else (Phase.SERVING, None)
        followed = replace(followed, phase=phase, since=since, retry_at=None)
        return _Step(ActionKind.RECORD, followed, "following", "deployed", notices=(DEPLOYED,))
    if state.call is not None:
        return _Step(ActionKind.NOTHING, state, f"waiting for {state.call.kind.value}", "none")
    if main_id is not None:
        # Its operation said it is deployed; the endpoint does not list it yet.
        return _Step(ActionKind.NOTHING, state, "deployed, not listed yet", "none")
    if state.retry_at is not None and state.retry_at > now:
        return _Step(ActionKind.NOTHING, state, "parked for quota", "parked")
    if spotless:
        kind, name, replicas = (
            CallKind.DEPLOY_FLOOR,
            floor_display_name(state.spot.name),
            state.policy.min_on_demand,
        )
        why = f"deploy the on-demand floor of {replicas} (every replica on demand: no Spot model)"
    else:
        kind, name, replicas = CallKind.DEPLOY_SPOT, state.spot.name, state.spot_replicas
        why = "deploy the Spot model"
    call = InFlight(kind, name, now, replicas)
    claimed = replace(state, call=call, retry_at=None)
    deploy = Deploy(name, replicas, spot=not spotless)
    return _Step(ActionKind.CALL, claimed, why, "deploy", call, deploy)


def _baseline(state: ServingState, observed: ObservedEndpoint) -> ServingState:
    """The endpoint as it is now, accepted as the baseline: the other models' shares, ours,
    and the other flexjobs deployments'."""
    ours = _our_present(state, observed)
    mine = {m.id for m in ours}
    theirs = [m for m in observed.models if m.flexjobs and m.id not in mine]
    others = {
        m.id: observed.share(m.id) for m in observed.models if not m.flexjobs and m.id not in mine
    }
    return replace(
        state,
        pool=sum(observed.share(i) for i in mine),
        others=others,
        theirs=sum(observed.share(m.id) for m in theirs),
        neighbours=tuple(m.id for m in theirs),
    )


def _our_present(state: ServingState, observed: ObservedEndpoint) -> list[ObservedModel]:
    """Every model of the endpoint that is this deployment's: by id, or by one of its names
    (a second model under a name of ours, from a DeployModel given up that landed, too)."""
    ids = set(state.our_ids)
    return [m for m in observed.models if m.id in ids or owns(state, m.display_name)]


def _capacity(state: ServingState, observed: ObservedEndpoint) -> Capacity:
    spot = observed.model(state.spot.id) if state.spot.id else None
    on_demand = 0
    for ours in (state.floor, state.fallback):
        model = observed.model(ours.id) if ours is not None and ours.id else None
        on_demand += model.available if model is not None else 0
    return Capacity(spot.available if spot else 0, on_demand, state.required)


def _truncated(state: ServingState, read: _Read) -> _Step:
    why = f"the endpoint has more than {MAX_MODELS} deployed models"
    if state.phase is Phase.PAUSED_BY_HAND:
        return _Step(ActionKind.NOTHING, state, f"{why}: waiting", "none")
    paused = replace(state, phase=Phase.PAUSED_BY_HAND, since=read.now)
    return _Step(ActionKind.RECORD, paused, f"{why}: not hedged", "pause")


def _ours_leaving(state: ServingState) -> set[str]:
    """Our models an undeploy of ours is taking away (in flight, or given up: it may still
    happen)."""
    out = set()
    for call in (state.call, state.given_up):
        if call is not None and call.kind is CallKind.UNDEPLOY:
            out.add(call.target)
    return out


def _edit(state: ServingState, read: _Read) -> tuple[str | None, bool]:
    """What was changed by hand since the baseline (None: nothing), and whether the
    baseline should move (another flexjobs deployment's doing, which explains the change)."""
    observed = read.observed
    mine = {m.id for m in _our_present(state, observed)}
    leaving = _ours_leaving(state)
    spot = observed.model(state.spot.id) if state.spot.id else None
    if state.spot.id is not None and spot is None and state.spot.id not in leaving:
        return f"Spot model {state.spot.id} was undeployed by hand", False
    if spot is not None and state.spot.replicas and spot.required != state.spot.replicas:
        return (
            "the Spot model's required replicas were changed by hand "
            f"({state.spot.replicas} -> {spot.required})"
        ), False
    for ours, what in ((state.fallback, "fallback"), (state.floor, "floor")):
        if ours is not None and ours.id and ours.id not in mine and ours.id not in leaving:
            return f"{what} {ours.id} was undeployed by hand", False
    others = {
        m.id: observed.share(m.id) for m in observed.models if not m.flexjobs and m.id not in mine
    }
    theirs = [m for m in observed.models if m.flexjobs and m.id not in mine]
    theirs_share = sum(observed.share(m.id) for m in theirs)
    pool = sum(observed.share(i) for i in mine)
    if not observed.traffic_split and any(m.id in read.leaving for m in theirs):
        # Another flexjobs deployment, leaving with nothing else serving, took the endpoint's
        # split with it (ours included): its doing, taken as the new baseline.
        return None, True
    if others.keys() != state.others.keys():
        added = sorted(others.keys() - state.others.keys())
        gone = sorted(state.others.keys() - others.keys())
        return f"deployed models changed by hand (added {added}, removed {gone})", False
    if pool == 100 and not (state.pool or state.theirs or any(state.others.values())):
        # The endpoint took no traffic and ours now hold all of it: our own take of it
        # (:func:`_take_an_empty_endpoint`), whose answer or write was lost; never a hand
        # edit. Whether they still serve does not tell: Spot may have gone since the take
        # (found by the simulator at its full budget, serving-alone seed 101).
        return None, True
    if others == dict(state.others) and pool == state.pool and theirs_share == state.theirs:
        moved = {m.id for m in theirs} != set(state.neighbours)
        return None, moved
    # Another flexjobs deployment's models came or went (a DeployModel with its request's
    # split, an undeploy), or it gave its traffic to the others as it left: its doing.
    if {m.id for m in theirs} != set(state.neighbours):
        return None, True
    gave = (
        theirs_share < state.theirs
        and all(others[k] >= v for k, v in state.others.items())
        and pool >= state.pool
    )
    if gave:
        return None, True
    if pool < state.pool:
        return f"the traffic of this deployment was changed by hand ({state.pool}% before)", False
    return "the traffic split of other deployed models was changed by hand", False


def _following(state: ServingState, read: _Read) -> _Step:
    """A deployed Spot model: resume, pause, deploy the floor, clean up, and serve."""
    observed, now = read.observed, read.now
    if state.intent is Intent.RESUME and state.resumed_at != state.intent_at:
        resumed = _resumed(state, observed, now)
        return _Step(ActionKind.RECORD, resumed, "resumed: the endpoint as it is now", "resume")
    if state.phase is Phase.PAUSED_BY_HAND:
        return _Step(ActionKind.NOTHING, state, "paused after a hand edit: recording only", "none")
    edit, moved = _edit(state, read)
    if edit is not None:
        paused = replace(state, phase=Phase.PAUSED_BY_HAND, since=now)
        return _Step(ActionKind.RECORD, paused, edit, "pause")
    if moved:
        state = _baseline(state, observed)
    step = _serving_calls(state, read)
    if step is None:
        step = _serve(state, read)
    if moved and step.kind is ActionKind.NOTHING:
        step = replace(
            step,
            kind=ActionKind.RECORD,
            transition="rebaseline",
            reason="another flexjobs deployment moved",
        )
    return step


def _resumed(state: ServingState, observed: ObservedEndpoint, now: datetime) -> ServingState:
    """Follow again from the endpoint as it is now: a fallback or a floor found there is kept
    as ours."""
    spot = observed.model(state.spot.id) if state.spot.id else None
    based = _baseline(replace(state, resumed_at=state.intent_at), observed)
    if state.spot_replicas == 0 and state.floor is not None and state.floor.id:
        spot = observed.model(state.floor.id)  # no Spot model: the floor is what is followed
    if state.phase is not Phase.PAUSED_BY_HAND and spot is not None:
        # Not paused: the endpoint as it is becomes the baseline; the phase and its grace or
        # hold period go on as they were.
        return based
    if spot is None:
        return replace(based, phase=Phase.PAUSED_BY_HAND, since=now)
    if state.spot_replicas:
        based = replace(based, spot=replace(based.spot, replicas=spot.required))
    cap = _capacity(based, observed)
    fallback_here = (
        based.fallback is not None and based.fallback.id and observed.model(based.fallback.id)
    )
    if fallback_here:
        return replace(based, phase=Phase.HEDGED, since=now)
    phase, since = (Phase.DEFICIT, now) if cap.short else (Phase.SERVING, None)
    return replace(based, phase=phase, since=since, fallback=None)


def _serving_calls(state: ServingState, read: _Read) -> _Step | None:
    """The housekeeping calls, one at a time: a second model under a name of ours goes (a
    DeployModel given up that landed), and a warm floor asked for is deployed."""
    if state.call is not None or (state.retry_at is not None and state.retry_at > read.now):
        return None
    observed, now = read.observed, read.now
    known = set(state.our_ids)
    for model in observed.models:
        if (
            owns(state, model.display_name)
            and model.id not in known
            and observed.share(model.id) == 0
        ):
            call = InFlight(CallKind.UNDEPLOY, model.id, now)
            why = f"a second model {model.id} under the name {model.display_name!r}"
            return _Step(ActionKind.CALL, replace(state, call=call), why, "cleanup", call)
    floor = state.policy.min_on_demand
    if floor and (state.floor is None or state.floor.id is None):
        name = floor_display_name(state.spot.name)
        call = InFlight(CallKind.DEPLOY_FLOOR, name, now, floor)
        deploy = Deploy(name, floor, spot=False)
        why = f"a warm floor of {floor} on-demand replica(s)"
        return _Step(ActionKind.CALL, replace(state, call=call), why, "floor", call, deploy)
    return None


def _weights(state: ServingState, observed: ObservedEndpoint) -> tuple[list[str], list[int]]:
    """Our models that may take traffic, and the replicas each serves (0: none, leaving, or a
    second model under one of our names, whose traffic goes to the one we follow)."""
    leaving = _ours_leaving(state)
    known = set(state.our_ids)
    ids: list[str] = []
    weights: list[int] = []
    for model in _our_present(state, observed):
        ids.append(model.id)
        serves = model.id in known and model.id not in leaving
        weights.append(model.available if serves else 0)
    return ids, weights


def _serve(state: ServingState, read: _Read) -> _Step:
    """Serving: the phase follows the replicas; traffic follows the replicas that serve; a
    deficit past the grace period is hedged; Spot healthy for the hold period is restored."""
    observed, now, settings = read.observed, read.now, read.settings
    spot = observed.model(state.spot.id) if state.spot.id else None
    spot_available = spot.available if spot else 0
    floor_model = observed.model(state.floor.id) if state.floor and state.floor.id else None
    floor_available = floor_model.available if floor_model else 0
    healthy = spot_available + floor_available >= state.required
    fallback_model = (
        observed.model(state.fallback.id) if state.fallback and state.fallback.id else None
    )
    hedging = state.fallback is not None
    if hedging:
        if healthy:
            since = state.since if state.phase is Phase.RECOVERING and state.since else now
            moved = replace(state, phase=Phase.RECOVERING, since=since)
            label = "Spot serves all its replicas again: hold period"
        else:
            since = state.since if state.phase is Phase.HEDGED and state.since else now
            moved = replace(state, phase=Phase.HEDGED, since=since)
            label = "hedged"
    elif healthy:
        moved = replace(state, phase=Phase.SERVING, since=None)
        label = "serving"
    else:
        since = state.since if state.phase is Phase.DEFICIT and state.since else now
        moved = replace(state, phase=Phase.DEFICIT, since=since)
        label = "fewer replicas than required: grace period"
    ids, weights = _weights(moved, observed)
    restoring = (
        hedging
        and healthy
        and fallback_model is not None
        and moved.since is not None
        and (now - moved.since).total_seconds() >= settings.hold_seconds
    )
    if restoring:
        assert fallback_model is not None
        back = [0 if i == fallback_model.id else w for i, w in zip(ids, weights, strict=True)]
        split = hedged_split(observed, ids, back)
        if (
            split is not None
            and split != observed.traffic_split
            and observed.share(fallback_model.id)
        ):
            return _Step(
                ActionKind.TRAFFIC, moved, "restore: traffic back to Spot", "restore", split=split
            )
        if moved.call is None and not observed.share(fallback_model.id):
            call = InFlight(CallKind.UNDEPLOY, fallback_model.id, now)
            return _Step(
                ActionKind.CALL,
                replace(moved, call=call),
                "restore: undeploy the fallback",
                "restore",
                call,
            )
    taken = _take_an_empty_endpoint(moved, observed, ids, weights, label)
    if taken is not None:
        return taken
    split = hedged_split(observed, ids, weights)
    if split is not None and split != observed.traffic_split:
        return _Step(
            ActionKind.TRAFFIC,
            moved,
            f"{label}: traffic follows the replicas",
            "shift",
            split=split,
        )
    if moved.call is not None or (moved.retry_at is not None and moved.retry_at > now):
        return _Step(ActionKind.NOTHING, moved, label, "capacity")
    deficit = min(state.required - spot_available - floor_available, settings.max_replicas)
    graced = (
        moved.since is not None and (now - moved.since).total_seconds() >= settings.grace_seconds
    )
    if not hedging and not healthy and moved.policy.hedge and graced:
        name = fallback_display_name(state.spot.name)
        call = InFlight(CallKind.DEPLOY_FALLBACK, name, now, deficit, since=moved.since)
        hedged = replace(
            moved,
            phase=Phase.HEDGED,
            since=now,
            fallback=Ours(name, None, deficit),
            call=call,
            hedges=moved.hedges + 1,
        )
        waited = (now - moved.since).total_seconds() if moved.since else 0.0
        reason = (
            f"{HEDGE_CAUSE} {deficit} on-demand replica(s) after {waited:.0f} s with "
            f"{spot_available} of {state.required} serving"
        )
        return _Step(
            ActionKind.CALL, hedged, reason, "hedge", call, Deploy(name, deficit, spot=False)
        )
    if hedging and not healthy and fallback_model is not None:
        return _grow(moved, fallback_model, deficit, label, now)
    return _Step(ActionKind.NOTHING, moved, label, "capacity")


def _grow(
    state: ServingState, fallback: ObservedModel, deficit: int, label: str, now: datetime
) -> _Step:
    """The deficit grew past the fallback's replicas: MutateDeployedModel to cover it."""
    if state.fallback is None or deficit <= state.fallback.replicas:
        return _Step(ActionKind.NOTHING, state, label, "capacity")
    call = InFlight(CallKind.MUTATE, fallback.id, now, deficit)
    grown = replace(state, fallback=replace(state.fallback, replicas=deficit), call=call)
    return _Step(ActionKind.CALL, grown, f"{label}: grow the fallback to {deficit}", "grow", call)


def _take_an_empty_endpoint(
    state: ServingState,
    observed: ObservedEndpoint,
    ids: list[str],
    weights: list[int],
    label: str,
) -> _Step | None:
    """The endpoint takes no traffic (another deployment took its split with it as it left,
    while ours did not serve; or none was ever set): once ours serve, they take the
    endpoint's traffic, by their replicas, whether or not the request asked for a share. An
    endpoint whose models serve is never left dark (split-valid); a split emptied by hand
    is a hand edit, and pauses the deployment before this is reached."""
    if observed.traffic_split or observed.truncated or sum(weights) <= 0:
        return None  # (a truncated read does not say the endpoint takes no traffic)
    parts = largest_remainder(100, weights)
    taken = {i: p for i, p in zip(ids, parts, strict=True) if p > 0}
    why = f"{label}: the endpoint took no traffic; ours serve, they take it"
    return _Step(ActionKind.TRAFFIC, replace(state, pool=100), why, "shift", split=taken)


def _undeploying(state: ServingState, read: _Read) -> _Step:
    """Taking a deployment down, one step per read: our traffic goes to the endpoint's other
    models that serve and are not leaving, in proportion to their replicas; our models leave
    one at a time, the Spot model last. A DeployModel in flight is set aside, not waited for:
    the models already there leave at once (they bill), and the deployment ends only once it
    is known that nothing it makes is left behind. Done when none of them is on the
    endpoint."""
    observed, now = read.observed, read.now
    going = (
        state
        if state.phase is Phase.UNDEPLOYING
        else replace(state, phase=Phase.UNDEPLOYING, since=now)
    )
    if going.call is not None and going.call.kind.deploys:
        # A DeployModel in flight does not hold the models already deployed back: it is set
        # aside (what it makes is ours by its name, and leaves when it lands), and the
        # others leave now, their traffic first.
        going = replace(going, call=None, landing=going.call)
    present = _our_present(going, observed)
    landing = going.landing
    if landing is not None and any(m.display_name == landing.target for m in present):
        going = replace(going, landing=None)  # it landed: it leaves with the others
    elif landing is not None and _failed_operation(landing, read.operation):
        going = replace(going, landing=None)  # it made nothing
    elif (
        landing is not None
        and not landing.operation
        and (now - landing.at).total_seconds() >= LOST_DEPLOY_SECONDS
        and not may_still_land(landing, observed)
    ):
        # Its answer was lost: after the limit, once no DeployModel that may be it still runs
        # on the endpoint, it made nothing and is given up. One Vertex answered is waited for
        # until its operation ends.
        going = replace(going, landing=None, given_up=landing)
    if not present:
        if going.call is not None or going.landing is not None:
            call = going.call or going.landing
            assert call is not None
            why = f"waiting for {call.kind.value} before it ends"
            return _Step(ActionKind.NOTHING, going, why, "undeploy")
        gone = replace(going, phase=Phase.UNDEPLOYED, since=now, fallback=None, floor=None)
        return _Step(ActionKind.RECORD, gone, "undeployed", "undeployed", notices=(UNDEPLOYED,))
    if going.call is not None:
        return _Step(ActionKind.NOTHING, going, f"waiting for {going.call.kind.value}", "undeploy")
    mine = {m.id for m in present}
    pool = sum(observed.share(i) for i in mine)
    split = {k: v for k, v in observed.traffic_split.items() if k not in mine}
    if pool:
        targets = [
            m
            for m in observed.models
            if m.id not in mine and m.id not in read.leaving and m.available > 0
        ]
        if targets:
            parts = largest_remainder(pool, [m.available for m in targets])
            for model, part in zip(targets, parts, strict=True):
                split[model.id] = split.get(model.id, 0) + part
            moved = {k: v for k, v in sorted(split.items()) if v > 0}
            why = "undeploy: traffic to the others that serve"
            return _Step(ActionKind.TRAFFIC, going, why, "undeploy", split=moved)
        # Never onto a model of ours an undeploy is taking (in flight, or given up: it may
        # still happen).
        leaving = _ours_leaving(going)
        serving_ours = [m for m in present if m.available > 0 and m.id not in leaving]
        last = _last_to_go(going, serving_ours)
        if len(present) > 1 and last is not None and observed.share(last.id) < pool:
            moved = {k: v for k, v in sorted({**split, last.id: pool}.items()) if v > 0}
            why = "undeploy: our traffic to the model that goes last"
            return _Step(ActionKind.TRAFFIC, going, why, "undeploy", split=moved)
    idle = sorted(
        (m for m in present if not observed.share(m.id)),
        key=lambda m: (m.id == going.spot.id, m.id),
    )
    if idle:
        call = InFlight(CallKind.UNDEPLOY, idle[0].id, now)
        why = f"undeploy {idle[0].id}"
        return _Step(ActionKind.CALL, replace(going, call=call), why, "undeploy", call)
    return _last_traffic(going, read, present, mine, split)


def _last_traffic(
    going: ServingState,
    read: _Read,
    present: list[ObservedModel],
    mine: set[str],
    split: dict[str, int],
) -> _Step:
    """Every model of ours left holds traffic (one, or none serves to gather it on): the last
    model of an endpoint goes with its split; else the traffic is taken away once nothing
    else can take it."""
    observed, now = read.observed, read.now
    holder = present[0]
    others = [m for m in observed.models if m.id not in mine]
    if not others and len(present) == 1:
        call = InFlight(CallKind.UNDEPLOY, holder.id, now)
        why = f"undeploy {holder.id}, the endpoint's last model (its split goes with it)"
        return _Step(ActionKind.CALL, replace(going, call=call), why, "undeploy", call)
    waited = (now - (going.since or now)).total_seconds()
    staying = [m for m in others if m.id not in read.leaving]
    if waited >= read.settings.hold_seconds or not staying:
        # Nothing else has served for the hold period, or every other model is leaving too
        # (their owners cancelled them): the endpoint takes no traffic ("map must be empty
        # if the Endpoint is to not accept any traffic") rather than keep a deployment its
        # owner cancelled.
        keep = {k: v for k, v in split.items() if v > 0}
        why = "undeploy: nothing else serves: our traffic taken away"
        return _Step(
            ActionKind.TRAFFIC,
            going,
            why,
            "undeploy",
            split=keep if sum(keep.values()) == 100 else {},
        )
    why = "undeploy: waiting for another model to serve before our traffic goes"
    return _Step(ActionKind.NOTHING, going, why, "undeploy")


def _older_version(state: ServingState, observed: ObservedEndpoint, taken: datetime) -> bool:
    """Whether ``observed`` (taken at ``taken``) shows an older version of the endpoint than
    the state was decided on, or than a traffic move of ours made: by the server's
    ``updateTime``, which orders versions whatever the readers' clocks (two steps of one
    deployment at once, the chaos soak's seed 359349; two reads of one instant of the
    simulator's clock). Only within :data:`READ_SETTLE_SECONDS` of the newest read: a read
    taken later cannot be from before it, and an older time is then the endpoint's own (a
    server whose times went back), which never holds a deployment, or its cancel, for good."""
    if state.endpoint_at is None or observed.updated_at is None:
        return False
    if state.read_at is not None and (taken - state.read_at).total_seconds() > READ_SETTLE_SECONDS:
        return False
    return observed.updated_at < state.endpoint_at


def traffic_moved(state: ServingState, made_at: datetime | None, at: datetime) -> ServingState:
    """``state``, decided with a traffic move, once Vertex took the move: the endpoint's
    version it made (its ``updateTime``, ``made_at``) and the time of its answer (``at``, for
    an endpoint that gives no ``updateTime``). A read of an older version, or taken before the
    answer, was taken before the move landed and decides nothing. The move may land after
    another delivery's read that is newer than the read it was decided on; that read, decided
    on this state, would take our own move for a hand edit (the chaos soak, seed 359349)."""
    newest = max(at, state.read_at) if state.read_at is not None else at
    version = state.endpoint_at
    if made_at is not None and (version is None or made_at > version):
        version = made_at
    return replace(state, read_at=newest, endpoint_at=version)


def _failed_operation(call: InFlight, operation: OperationOutcome | None) -> bool:
    """``call``'s operation ended with an error (it deployed nothing)."""
    return (
        operation is not None
        and bool(call.operation)
        and operation.name == call.operation
        and operation.done
        and operation.error is not None
    )


def _last_to_go(state: ServingState, models: list[ObservedModel]) -> ObservedModel | None:
    """Of ``models``, the one our traffic gathers on while the others leave: the Spot model
    if it serves, else the one serving the most replicas."""
    if not models:
        return None
    return max(models, key=lambda m: (m.available > 0, m.id == state.spot.id, m.available))


def _history(
    state: ServingState,
    now: datetime,
    cap: Capacity,
    cause: str,
    was: Phase | None = None,
) -> ServingState:
    """``state`` accounted up to ``now`` (the previous capacity held since ``accounted_at``,
    as the reads saw it), then ``cap`` as the capacity from now, and one history entry."""
    elapsed = max((now - state.accounted_at).total_seconds(), 0.0)
    last = state.last
    # Availability is measured while the deployment is followed (deployed, not going): the
    # time since ``accounted_at`` was spent in the phase it had then (``was``).
    followed = elapsed if (was or state.phase) in _FOLLOWING else 0.0
    return replace(
        state,
        accounted_at=max(now, state.accounted_at),
        last=cap,
        followed_seconds=state.followed_seconds + followed,
        short_seconds=state.short_seconds + (followed if last.short else 0.0),
        dark_seconds=state.dark_seconds + (followed if last.spot + last.on_demand == 0 else 0.0),
        spot_node_seconds=state.spot_node_seconds + elapsed * last.spot,
        on_demand_node_seconds=state.on_demand_node_seconds + elapsed * last.on_demand,
        history=(*state.history, CapacityStep(now, cap, clip(cause, MAX_CAUSE) or "")),
    )


def _accounted(
    before: ServingState,
    step: _Step,
    read: _Read,
    notices: tuple[str, ...],
    cause: str,
) -> ServingAction:
    """The step as an action: the capacity and the causes in the history when anything
    changed, NOTHING when nothing did."""
    after = step.state
    cap = (
        _capacity(after, read.observed)
        if after.spot.id or after.phase is not Phase.DEPLOYING
        else after.last
    )
    notices = (*notices, *step.notices)
    changed = after != before or cap != before.last or notices
    if not changed and step.kind is ActionKind.NOTHING:
        return ServingAction(ActionKind.NOTHING, before, step.reason, "none")
    causes = [cause] if cause else []
    if cap != before.last:
        last = before.last
        causes.append(
            f"serving {last.spot}+{last.on_demand} -> {cap.spot}+{cap.on_demand} of "
            f"{cap.required} (Spot+on-demand)"
        )
    if step.kind is not ActionKind.NOTHING or after.phase is not before.phase:
        causes.append(step.reason)
    after = replace(after, read_at=max(read.taken, after.read_at or read.taken))
    seen = read.observed.updated_at
    if seen is not None and (after.endpoint_at is None or seen > after.endpoint_at):
        after = replace(after, endpoint_at=seen)
    if (
        after.history
        and after.history[-1].at == read.now
        and after.history[-1] not in before.history
    ):
        # The step wrote its own entry at this time (a call's failure): one entry says both,
        # its cause first (the chart marks a failed hedge by it).
        causes.insert(0, after.history[-1].cause)
        after = replace(after, history=after.history[:-1], last=before.last)
    said = "; ".join(dict.fromkeys(c for c in causes if c)) or step.reason
    transition = step.transition if step.transition != "none" else "capacity"
    written = _history(after, read.now, cap, said, was=before.phase)
    written = replace(written, transition=transition)
    kind = ActionKind.RECORD if step.kind is ActionKind.NOTHING else step.kind
    return ServingAction(
        kind,
        written,
        step.reason,
        transition,
        step.call,
        step.deploy,
        step.split,
        tuple(dict.fromkeys(notices)),
    )
