"""Spot serving's values: one read of an endpoint, a deployment's serving state, the settings,
and the action the rule answers with (the rule is :func:`shared.domain.serving.rule.decide`).

The Vertex AI v1 facts these records rest on (``google.cloud.aiplatform.v1``, as the installed
``aiplatform_v1`` protos define them):

- ``Endpoint.deployed_models[]`` lists the models an endpoint serves, and
  ``Endpoint.traffic_split`` maps a ``DeployedModel.id`` to the percent of the endpoint's traffic
  it gets: "values must add up to 100, or map must be empty if the Endpoint is to not accept any
  traffic"; an id that is not listed gets no traffic. ``Endpoint.etag`` is there "to perform
  consistent read-modify-write updates", so a split written from a stale read can be refused.
- ``DeployedModel.dedicated_resources.spot`` says a deployed model runs on Spot VMs;
  ``dedicated_resources.required_replica_count`` is the number of available replicas a deploy
  needs ("If not set, the default required_replica_count will be min_replica_count"), so the
  replicas a deployment must serve are ``requiredReplicaCount``, else ``minReplicaCount``.
- ``DeployedModel.status.available_replica_count`` is "the number of available replicas of the
  deployed model", what actually serves right now.

Everything here that a record stores is bounded: the history keeps the last
:data:`HISTORY_LIMIT` changes, every string is clipped, and :data:`MAX_STATE_BYTES` bounds the
whole state's JSON (a Firestore document holds at most 1 MiB, shared with the rest of the
deployment's record).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final

from shared.domain.model.values import clip, parse_rfc3339
from shared.domain.serving.objective import AvailabilityObjective, ServingPolicy

#: The history keeps this many serving-capacity changes, the newest last. A flapping zone
#: changes capacity a few times an hour; 40 changes cover the hedge and the way back of the
#: last incidents, which is what a person reading the record needs.
HISTORY_LIMIT: Final = 40
#: A change's cause is clipped to this many characters.
MAX_CAUSE: Final = 160
#: Ids, names and resource names read from Vertex are clipped to this many characters
#: (a display name is at most 128; a model resource name is well under 256).
MAX_NAME: Final = 256
#: A deployed model's id is kept to this many characters ("1-10 characters ... /[0-9]/", the
#: DeployedModel reference says): ids fill the state's maps, so they have their own bound.
MAX_ID: Final = 64
#: At most this many deployed models of one endpoint are read; the rest are ignored. An
#: endpoint with more is not one flexjobs hedges (see :func:`ObservedEndpoint.from_json`).
MAX_MODELS: Final = 64
#: The whole serving state, as JSON, stays under this many bytes (checked by the unit tests
#: on the largest state the bounds allow): a sliver of Firestore's 1 MiB document.
MAX_STATE_BYTES: Final = 64 * 1024


def _frozen(split: Mapping[str, int]) -> Mapping[str, int]:
    """A split without its zero shares (an id with 0 and an absent id both get no traffic),
    read-only."""
    return MappingProxyType({k: int(v) for k, v in sorted(split.items()) if int(v) > 0})


_INT32_MAX: Final = 2**31 - 1


def _count(raw: object) -> int:
    """A non-negative int32 (replica counts and shares are int32 in the v1 protos), else 0;
    bool is an int subclass and never a count."""
    if isinstance(raw, bool):
        return 0
    if isinstance(raw, int):
        return min(max(raw, 0), _INT32_MAX)
    if isinstance(raw, str) and raw.isascii() and raw.isdigit() and len(raw) <= 10:
        return min(int(raw), _INT32_MAX)
    return 0


def _mapping(raw: object) -> Mapping[str, Any]:
    return raw if isinstance(raw, Mapping) else {}


def _name(raw: object) -> str:
    return (clip(raw, MAX_NAME) or "") if isinstance(raw, str) else ""


def _text(raw: object, limit: int) -> str:
    return (clip(raw, limit) or "") if isinstance(raw, str) else ""


def _id(raw: object) -> str:
    """A deployed model's id (Vertex's are at most 10 digits), bounded at :data:`MAX_ID`."""
    return (clip(raw, MAX_ID) or "") if isinstance(raw, str) else ""


class Phase(StrEnum):
    """Where a Spot deployment stands (the state machine's phases, docs/serving.md).

    - ``DEPLOYING``: its Spot model is not on the endpoint yet (its DeployModel is claimed,
      running, or parked for quota).
    - ``SERVING``: the Spot model (and the warm on-demand floor, if any) serves the required
      replicas, and no fallback is deployed.
    - ``DEFICIT``: fewer than required since ``since``; no fallback yet (the grace period runs).
    - ``HEDGED``: an on-demand fallback is deployed (or being deployed) since ``since``.
    - ``RECOVERING``: Spot serves its required replicas again since ``since``, the fallback is
      still deployed, and the hold period runs before traffic goes back.
    - ``PAUSED_BY_HAND``: someone changed the endpoint by hand since ``since``; flexjobs keeps
      recording capacity and changes nothing until told to resume.
    - ``UNDEPLOYING``: the owner asked it to go; its models leave, one call at a time.
    - ``UNDEPLOYED``: none of its models is on the endpoint any more; nothing follows.
    - ``FAILED``: Vertex refused its Spot model for good; nothing follows.
    """

    DEPLOYING = "DEPLOYING"
    SERVING = "SERVING"
    DEFICIT = "DEFICIT"
    HEDGED = "HEDGED"
    RECOVERING = "RECOVERING"
    PAUSED_BY_HAND = "PAUSED_BY_HAND"
    UNDEPLOYING = "UNDEPLOYING"
    UNDEPLOYED = "UNDEPLOYED"
    FAILED = "FAILED"

    @property
    def ended(self) -> bool:
        return self in (Phase.UNDEPLOYED, Phase.FAILED)


class Intent(StrEnum):
    """What the deployment's owner asked, durable: replaced only by a later intent, never
    cleared by a phase. ``SERVE``: deploy and keep serving; ``RESUME``: serve again from the
    endpoint as it is, after a hand edit paused it; ``UNDEPLOY``: take it all down."""

    SERVE = "SERVE"
    RESUME = "RESUME"
    UNDEPLOY = "UNDEPLOY"


#: A deployed model another flexjobs deployment owns: its display name ends with a deployment's
#: tag (``[flexjobs <label>]``, :func:`shared.domain.decisions.deploy_model.deployment_tag`; a
#: unit test holds the two to the same form), or with that tag and the fallback's or the floor's
#: suffix.
FLEXJOBS_NAME: Final = re.compile(
    r".*\[flexjobs [a-z0-9_-]{1,63}\]( \(on-demand (fallback|floor)\))?"
)


@dataclass(frozen=True)
class MachineSpec:
    """``DedicatedResources.machine_spec``: what one replica runs on (the fallback copies it)."""

    machine_type: str
    accelerator_type: str = ""
    accelerator_count: int = 0


@dataclass(frozen=True)
class ObservedModel:
    """One ``Endpoint.deployed_models[]`` entry, as one ``GetEndpoint`` read shows it.

    ``required`` is ``dedicatedResources.requiredReplicaCount``, else ``minReplicaCount``;
    ``available`` is ``status.availableReplicaCount``.
    """

    id: str
    model: str
    display_name: str
    machine: MachineSpec
    spot: bool
    required: int
    available: int

    @property
    def flexjobs(self) -> bool:
        """The model carries a flexjobs deployment's tag (this deployment's or another's)."""
        return FLEXJOBS_NAME.fullmatch(self.display_name) is not None


@dataclass(frozen=True)
class ObservedEndpoint:
    """What one ``GetEndpoint`` read shows: the deployed models and the traffic split.

    Examples:
        >>> endpoint = ObservedEndpoint.from_json({
        ...     "name": "projects/p/locations/us-central1/endpoints/1",
        ...     "deployedModels": [{"id": "7", "model": "projects/p/locations/us-central1/models/m",
        ...         "dedicatedResources": {"machineSpec": {"machineType": "g2-standard-4"},
        ...                                "minReplicaCount": 2, "spot": True},
        ...         "status": {"availableReplicaCount": 1}}],
        ...     "trafficSplit": {"7": 100}})
        >>> spot = endpoint.model("7")
        >>> (spot.spot, spot.required, spot.available, endpoint.share("7"))
        (True, 2, 1, 100)
    """

    name: str
    models: tuple[ObservedModel, ...]
    traffic_split: Mapping[str, int] = field(default_factory=dict)
    etag: str = ""
    # The endpoint lists more than MAX_MODELS models: the read is not the whole endpoint, so
    # no split written from it could keep every other model's share.
    truncated: bool = False
    # When the DeployModel operations of the endpoint not yet done were listed just before
    # this read (``ListOperations``): when each started. None when they were not asked for,
    # or not known in full (more than a page): a DeployModel may still be running.
    deploying: tuple[datetime, ...] | None = None
    #: The endpoint's ``updateTime``: the server's time of its last change. It orders two
    #: reads of the endpoint whatever the clocks of the processes that took them (None: not
    #: given).
    updated_at: datetime | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "traffic_split", _frozen(self.traffic_split))

    def model(self, deployed_model_id: str | None) -> ObservedModel | None:
        """The deployed model with this id, or None when the endpoint has none."""
        return next((m for m in self.models if m.id == deployed_model_id), None)

    def share(self, deployed_model_id: str | None) -> int:
        """The percent of traffic the deployed model gets (0 when the split does not list it)."""
        return self.traffic_split.get(deployed_model_id or "", 0)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ObservedEndpoint:
        """Read the JSON form of a ``google.cloud.aiplatform.v1.Endpoint`` (camelCase, as
        ``MessageToDict`` or the REST API write it), bounded: at most :data:`MAX_MODELS`
        models, every string clipped, counts that are not int32 read as 0."""
        models: list[ObservedModel] = []
        listed = raw.get("deployedModels")
        listed = listed if isinstance(listed, list) else []
        for item in listed[:MAX_MODELS]:
            if not isinstance(item, Mapping):
                continue
            resources = item.get("dedicatedResources")
            resources = resources if isinstance(resources, Mapping) else {}
            spec = resources.get("machineSpec")
            spec = spec if isinstance(spec, Mapping) else {}
            status = item.get("status")
            status = status if isinstance(status, Mapping) else {}
            required = _count(resources.get("requiredReplicaCount")) or _count(
                resources.get("minReplicaCount")
            )
            models.append(
                ObservedModel(
                    id=_id(item.get("id")),
                    model=_name(item.get("model")),
                    display_name=_name(item.get("displayName")),
                    machine=MachineSpec(
                        _name(spec.get("machineType")),
                        _name(spec.get("acceleratorType")),
                        _count(spec.get("acceleratorCount")),
                    ),
                    spot=resources.get("spot") is True,
                    required=required,
                    available=_count(status.get("availableReplicaCount")),
                )
            )
        split = raw.get("trafficSplit")
        split = split if isinstance(split, Mapping) else {}
        known = {m.id for m in models}
        # Only ids of the models read count: the split of a model past MAX_MODELS is unknown.
        shares = {str(k): _count(v) for k, v in split.items() if str(k) in known}
        truncated = len(listed) > MAX_MODELS
        return cls(
            _name(raw.get("name")),
            tuple(models),
            shares,
            _name(raw.get("etag")),
            truncated,
            updated_at=parse_rfc3339(raw.get("updateTime")),
        )


@dataclass(frozen=True)
class Capacity:
    """Replicas serving at one moment: the Spot model's, the fallback's, and the required."""

    spot: int
    on_demand: int
    required: int

    @property
    def serving(self) -> int:
        return self.spot + self.on_demand

    @property
    def short(self) -> bool:
        """Fewer replicas serve than the deployment requires."""
        return self.serving < self.required


@dataclass(frozen=True)
class CapacityStep:
    """One serving-capacity change in the history: when, what served, and why if known."""

    at: datetime
    capacity: Capacity
    cause: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(),
            "spot": self.capacity.spot,
            "onDemand": self.capacity.on_demand,
            "required": self.capacity.required,
            "cause": self.cause,
        }

    @classmethod
    def decode(cls, raw: object) -> CapacityStep | None:
        if not isinstance(raw, Mapping):
            return None
        at = parse_rfc3339(raw.get("at"))
        if at is None:
            return None
        capacity = Capacity(
            _count(raw.get("spot")), _count(raw.get("onDemand")), _count(raw.get("required"))
        )
        cause = raw.get("cause")
        text = (clip(cause, MAX_CAUSE) or "") if isinstance(cause, str) else ""
        return cls(at, capacity, text)


@dataclass(frozen=True)
class ServingSettings:
    """The machine's time constants (seconds).

    ``grace_seconds`` (default 300): how long Spot may serve fewer replicas than required
    before flexjobs hedges. When Compute Engine reclaims a Spot node, the workload fails with
    STOCKOUT and Compute Engine tries to restart it up to six times; a grace period of five
    minutes leaves those restarts time to bring the node back, so a short blip costs no
    on-demand deployment (which itself takes ten minutes or more to serve).

    ``hold_seconds`` (default 1800): how long Spot must serve all its required replicas again
    before traffic goes back and the fallback is undeployed. This is hysteresis: a zone that
    flaps (capacity back for a few minutes, then gone again) would otherwise undeploy and
    redeploy the fallback at every flap, each redeploy leaving a gap the length of a
    DeployModel. A flap during the hold resets it.
    """

    grace_seconds: float = 300.0
    hold_seconds: float = 1800.0
    #: A fallback never has more replicas than this (FLEXJOBS_MAX_REPLICAS, the cap intake
    #: puts on a deployment's own replicas), whatever a read of the endpoint says is required.
    max_replicas: int = 64

    def __post_init__(self) -> None:
        if self.grace_seconds < 0 or self.hold_seconds < 0:
            raise ValueError("serving settings: grace and hold periods must be >= 0 seconds")
        if self.max_replicas < 1:
            raise ValueError("serving settings: max_replicas must be >= 1")


def policy_to_dict(required: int, policy: ServingPolicy) -> dict[str, Any]:
    """A deployment's policy as stored: its required replicas and its knobs."""
    return {
        "required": required,
        "minOnDemandReplicas": policy.min_on_demand,
        "extraSpotReplicas": policy.extra_spot,
        "hedge": policy.hedge,
    }


def objective_to_dict(objective: AvailabilityObjective | None) -> dict[str, float] | None:
    """An availability objective as requested (``availabilityObjective``), or None."""
    if objective is None:
        return None
    out = {"atLeastOneReplica": objective.at_least_one}
    if objective.all_required is not None:
        out["allRequired"] = objective.all_required
    return out


def objective_from_dict(raw: object) -> AvailabilityObjective | None:
    """A stored (or requested, validated) objective read back; one that does not read is
    none."""
    got = _mapping(raw)
    try:
        return AvailabilityObjective(got.get("atLeastOneReplica"), got.get("allRequired"))  # type: ignore[arg-type]
    except ValueError:
        return None


def policy_from_dict(raw: object) -> tuple[int, ServingPolicy]:
    """A stored policy read back; one that does not read is one Spot replica, hedged."""
    got = _mapping(raw)
    required = _count(got.get("required")) or 1
    floor = min(_count(got.get("minOnDemandReplicas")), required)
    extra = _count(got.get("extraSpotReplicas"))
    return required, ServingPolicy(floor, extra, got.get("hedge") is not False)


#: What a fallback's and a floor's display names end with, after the Spot model's.
FALLBACK_SUFFIX: Final = " (on-demand fallback)"
FLOOR_SUFFIX: Final = " (on-demand floor)"


def fallback_display_name(spot_name: str) -> str:
    """The fallback's display name: the Spot model's (which carries the deployment's tag),
    then :data:`FALLBACK_SUFFIX`, within Vertex's 128 characters.

    Examples:
        >>> fallback_display_name("served [flexjobs s-1]")
        'served [flexjobs s-1] (on-demand fallback)'
    """
    # The tag ends the Spot model's name: a long name loses its start, never its tag, so two
    # deployments' fallbacks never share a name.
    return spot_name[-(128 - len(FALLBACK_SUFFIX)) :] + FALLBACK_SUFFIX


def floor_display_name(spot_name: str) -> str:
    """The warm on-demand floor's display name.

    Examples:
        >>> floor_display_name("served [flexjobs s-1]")
        'served [flexjobs s-1] (on-demand floor)'
    """
    return spot_name[-(128 - len(FLOOR_SUFFIX)) :] + FLOOR_SUFFIX


class CallKind(StrEnum):
    """The long-running calls a deployment makes, one at a time: DeployModel of its Spot
    model, of its warm on-demand floor, of an on-demand fallback; MutateDeployedModel of the
    fallback's replicas; UndeployModel of one of its models."""

    DEPLOY_SPOT = "DeployModel(spot)"
    DEPLOY_FLOOR = "DeployModel(floor)"
    DEPLOY_FALLBACK = "DeployModel(fallback)"
    MUTATE = "MutateDeployedModel"
    UNDEPLOY = "UndeployModel"

    @property
    def deploys(self) -> bool:
        return self in (CallKind.DEPLOY_SPOT, CallKind.DEPLOY_FLOOR, CallKind.DEPLOY_FALLBACK)


@dataclass(frozen=True)
class InFlight:
    """The one long-running call in flight: what it is and what it is about (``target``: a
    DeployModel's display name, the deployed model id of a mutate or an undeploy), when it was
    claimed (written before the call is sent, so two deliveries never send it twice), its
    operation once Vertex answered, and whether its answer was lost (``unknown``: the call
    timed out, so it may have happened)."""

    kind: CallKind
    target: str
    at: datetime
    replicas: int = 0
    operation: str | None = None
    unknown: bool = False
    #: A hedge's: since when the deficit it covers ran (a hedge that never reached Vertex
    #: goes back to it, with no new grace period).
    since: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "call": self.kind.value,
            "target": self.target,
            "at": self.at.isoformat(),
            "replicas": self.replicas,
            "operation": self.operation,
            "unknown": self.unknown,
            "since": self.since.isoformat() if self.since else None,
        }

    @classmethod
    def decode(cls, raw: object) -> InFlight | None:
        got = _mapping(raw)
        call, at = got.get("call"), parse_rfc3339(got.get("at"))
        target = _name(got.get("target"))
        # No target: a call recorded before the machine (read by ``_legacy_call``).
        if call not in CallKind._value2member_map_ or at is None or not target:
            return None
        return cls(
            CallKind(str(call)),
            target,
            at,
            _count(got.get("replicas")),
            _name(got.get("operation")) or None,
            got.get("unknown") is True,
            parse_rfc3339(got.get("since")),
        )


def _legacy_call(raw: object, fallback: Ours | None, spot: Ours, at: datetime) -> InFlight | None:
    """A call in flight as the serving code before the machine recorded it (``{call,
    operation, at}``, no target): each was about the fallback (an undeploy of a deployment
    with none, its Spot model). Its outcome is looked for on the next read as any other's."""
    got = _mapping(raw)
    call = got.get("call")
    when = parse_rfc3339(got.get("at")) or at
    operation = _name(got.get("operation")) or None
    if call == "DeployModel":
        name = fallback.name if fallback else fallback_display_name(spot.name)
        return InFlight(CallKind.DEPLOY_FALLBACK, name, when, 0, operation, operation is None)
    if call == "MutateDeployedModel" and fallback is not None and fallback.id:
        return InFlight(CallKind.MUTATE, fallback.id, when, fallback.replicas, operation)
    target = fallback.id if fallback is not None and fallback.id else spot.id
    if call == "UndeployModel" and target:
        return InFlight(CallKind.UNDEPLOY, target, when, 0, operation)
    return None


@dataclass(frozen=True)
class Ours:
    """One of the deployment's own models: its display name (its key, known before its id),
    its deployed model id once seen, and its replicas."""

    name: str
    id: str | None = None
    replicas: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"displayName": self.name, "deployedModelId": self.id, "replicas": self.replicas}

    @classmethod
    def decode(cls, raw: object) -> Ours | None:
        got = _mapping(raw)
        name = _name(got.get("displayName"))
        if not name:
            return None
        return cls(name, _id(got.get("deployedModelId")) or None, _count(got.get("replicas")))


@dataclass(frozen=True)
class ServingState:
    """A Spot deployment's whole state, one value written in one transaction: its phase,
    its owner's intent, the one call in flight, its own models, the baseline it judges hand
    edits against, and its serving accounts (the rule is :mod:`shared.domain.serving.rule`).

    **The baseline.** ``others`` are the shares (0 included) of every deployed model of the
    endpoint that no flexjobs deployment owns, ``pool`` the percent this deployment's models
    share, ``theirs`` the percent other flexjobs deployments' models share and
    ``neighbours`` their ids, all as flexjobs last accepted the endpoint. A change none of
    them explains (a model added or removed by hand, another model's share edited, this
    deployment's traffic taken) is a hand edit. Another flexjobs deployment's own moves are
    explained: its models coming or going, or its traffic given to the others.

    ``last`` is the capacity at ``accounted_at``; ``short_seconds`` (time with fewer replicas
    than required) and the node-seconds of available replicas by capacity type accrue from it
    whenever capacity changes, so a read that sees no change writes nothing.
    """

    phase: Phase
    intent: Intent
    intent_at: datetime
    #: The replicas that must serve, and the knobs that keep them serving.
    required: int
    policy: ServingPolicy
    spot: Ours
    accounted_at: datetime
    last: Capacity
    since: datetime | None = None
    #: The RESUME intent already taken (its ``intent_at``): a resume is applied once.
    resumed_at: datetime | None = None
    floor: Ours | None = None
    fallback: Ours | None = None
    pool: int = 0
    others: Mapping[str, int] = field(default_factory=dict)
    theirs: int = 0
    neighbours: tuple[str, ...] = ()
    call: InFlight | None = None
    #: The last call given up (its effect may still show): a model it leaves, or takes away,
    #: is recognised as this deployment's own doing, never taken for a hand edit.
    given_up: InFlight | None = None
    #: A DeployModel set aside while the deployment goes (its model may still land): the
    #: deployment ends once it has landed (and gone) or can no longer land.
    landing: InFlight | None = None
    #: Nothing is sent before this time (a DeployModel parked for quota, a failed call).
    retry_at: datetime | None = None
    #: When the newest read decided on was taken, or our last traffic move was answered: an
    #: older read (another delivery's, taken before it) decides nothing, so the state never
    #: goes back on what it has seen.
    read_at: datetime | None = None
    #: The endpoint's ``updateTime`` in the newest read decided on, or as a traffic move of
    #: ours left it: a read of an older version of the endpoint (another delivery's, taken
    #: before that move landed, however its clock runs) decides nothing.
    endpoint_at: datetime | None = None
    #: Time followed (deployed, not going), and of it the time with fewer replicas than
    #: required (what ``allRequired`` is measured by) and ...
    followed_seconds: float = 0.0
    short_seconds: float = 0.0
    #: ... with no replica serving at all (what ``atLeastOneReplica`` is measured by).
    dark_seconds: float = 0.0
    spot_node_seconds: float = 0.0
    on_demand_node_seconds: float = 0.0
    hedges: int = 0
    history: tuple[CapacityStep, ...] = ()
    #: The availability the owner asked for (None: none), and why the knobs are what they
    #: are (named by the request, chosen for the objective, or the default).
    objective: AvailabilityObjective | None = None
    why: str = ""
    #: The row of the state table (``rule.TRANSITIONS``) the last write took.
    transition: str = ""
    #: The share of traffic the request asked for (its ``trafficSplit["0"]``).
    share: int = 0

    def __post_init__(self) -> None:
        # Every other deployed model is kept, with a share of 0 too: one added later is new.
        others = {k: max(int(v), 0) for k, v in sorted(self.others.items())}
        object.__setattr__(self, "others", MappingProxyType(others))
        object.__setattr__(self, "neighbours", tuple(sorted(set(self.neighbours))[:MAX_MODELS]))
        if len(self.history) > HISTORY_LIMIT:
            object.__setattr__(self, "history", self.history[-HISTORY_LIMIT:])

    @property
    def spot_replicas(self) -> int:
        """The Spot model's replicas: the required ones the floor does not cover, and the
        extra ones."""
        return self.policy.spot_replicas(self.required)

    @property
    def main_id(self) -> str | None:
        """The deployed model id the record names (``deployedModelId``): the Spot model's, or,
        with no Spot model (every replica on demand), the floor's."""
        if self.spot_replicas == 0 and self.floor is not None:
            return self.floor.id
        return self.spot.id

    @property
    def ours(self) -> tuple[Ours, ...]:
        """This deployment's models (the Spot model, the floor, the fallback), as known."""
        return tuple(o for o in (self.spot, self.floor, self.fallback) if o is not None)

    @property
    def our_ids(self) -> tuple[str, ...]:
        return tuple(o.id for o in self.ours if o.id)

    @property
    def our_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.ours)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able form stored in the deployment's record (camelCase, as the record)."""

        def when(at: datetime | None) -> str | None:
            return at.isoformat() if at else None

        return {
            "phase": self.phase.value,
            "intent": {"kind": self.intent.value, "at": when(self.intent_at)},
            "resumedAt": when(self.resumed_at),
            "policy": {
                **policy_to_dict(self.required, self.policy),
                "objective": objective_to_dict(self.objective),
                "why": self.why,
            },
            "since": when(self.since),
            "spotDeployedModelId": self.spot.id,
            "spotDisplayName": self.spot.name,
            "spotReplicas": self.spot.replicas,
            "floor": self.floor.to_dict() if self.floor else None,
            "fallbackDeployedModelId": self.fallback.id if self.fallback else None,
            "fallbackDisplayName": self.fallback.name if self.fallback else None,
            "fallbackReplicas": self.fallback.replicas if self.fallback else 0,
            "accountedAt": self.accounted_at.isoformat(),
            "last": {
                "spot": self.last.spot,
                "onDemand": self.last.on_demand,
                "required": self.last.required,
            },
            "pool": self.pool,
            "others": dict(self.others),
            "theirs": self.theirs,
            "neighbours": list(self.neighbours),
            "pending": self.call.to_dict() if self.call else None,
            "givenUp": self.given_up.to_dict() if self.given_up else None,
            "landing": self.landing.to_dict() if self.landing else None,
            "retryAt": when(self.retry_at),
            "readAt": when(self.read_at),
            "endpointAt": when(self.endpoint_at),
            "followedSeconds": round(self.followed_seconds, 3),
            "shortSeconds": round(self.short_seconds, 3),
            "darkSeconds": round(self.dark_seconds, 3),
            "nodeSeconds": {
                "SPOT": round(self.spot_node_seconds, 3),
                "ON_DEMAND": round(self.on_demand_node_seconds, 3),
            },
            "hedges": self.hedges,
            "transition": self.transition,
            "share": self.share,
            "history": [change.to_dict() for change in self.history],
        }

    @classmethod
    def decode(cls, raw: Mapping[str, Any], spot_name: str = "") -> ServingState | None:
        """Read the stored form back, bounded; None when it names no Spot model or no time.
        A state stored before the machine (no ``spotDisplayName``, no ``intent``) reads with
        ``spot_name`` (its record's tagged name) and the intent serve (undeploy, when it was
        undeploying)."""
        spot_name = _name(raw.get("spotDisplayName")) or spot_name
        accounted_at = parse_rfc3339(raw.get("accountedAt"))
        intent = _mapping(raw.get("intent"))
        intent_at = parse_rfc3339(intent.get("at")) or accounted_at
        if not (spot_name or raw.get("spotDeployedModelId")) or accounted_at is None:
            return None
        assert intent_at is not None
        phase = str(raw.get("phase"))
        kind = str(intent.get("kind") or ("UNDEPLOY" if phase == "UNDEPLOYING" else "SERVE"))
        last = _mapping(raw.get("last"))
        asked = _mapping(raw.get("policy"))
        required, policy = policy_from_dict(
            raw.get("policy") or {"required": _count(last.get("required")) or 1}
        )
        others = _mapping(raw.get("others"))
        nodes = _mapping(raw.get("nodeSeconds"))
        history = raw.get("history")
        history = history if isinstance(history, list) else []
        changes = (CapacityStep.decode(item) for item in history[-HISTORY_LIMIT:])
        neighbours = raw.get("neighbours")
        fallback_id = _id(raw.get("fallbackDeployedModelId"))
        fallback_name = _name(raw.get("fallbackDisplayName")) or (
            # Written before the machine: its fallback had this name, recorded by id only.
            fallback_display_name(spot_name) if fallback_id else ""
        )
        fallback = (
            Ours(
                fallback_name,
                fallback_id or None,
                _count(raw.get("fallbackReplicas")),
            )
            if fallback_name
            else None
        )

        spot = Ours(
            spot_name,
            _id(raw.get("spotDeployedModelId")) or None,
            _count(raw.get("spotReplicas")),
        )

        def seconds(value: object) -> float:
            ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
            return float(value) if ok else 0.0  # type: ignore[arg-type]

        return cls(
            # An unknown phase reads as paused: flexjobs then changes nothing on its own.
            phase=Phase(phase) if phase in Phase.__members__ else Phase.PAUSED_BY_HAND,
            intent=Intent(kind) if kind in Intent.__members__ else Intent.SERVE,
            intent_at=intent_at,
            resumed_at=parse_rfc3339(raw.get("resumedAt")),
            required=required,
            policy=policy,
            spot=spot,
            accounted_at=accounted_at,
            last=Capacity(
                _count(last.get("spot")), _count(last.get("onDemand")), _count(last.get("required"))
            ),
            since=parse_rfc3339(raw.get("since")),
            floor=Ours.decode(raw.get("floor")),
            fallback=fallback,
            pool=min(_count(raw.get("pool")), 100),
            others={_id(k): _count(v) for k, v in list(others.items())[:MAX_MODELS]},
            theirs=min(_count(raw.get("theirs")), 100),
            neighbours=tuple(
                _id(n) for n in (neighbours if isinstance(neighbours, list) else [])[:MAX_MODELS]
            ),
            call=InFlight.decode(raw.get("pending"))
            or _legacy_call(raw.get("pending"), fallback, spot, accounted_at),
            given_up=InFlight.decode(raw.get("givenUp")),
            landing=InFlight.decode(raw.get("landing")),
            retry_at=parse_rfc3339(raw.get("retryAt")),
            read_at=parse_rfc3339(raw.get("readAt")),
            endpoint_at=parse_rfc3339(raw.get("endpointAt")),
            followed_seconds=seconds(raw.get("followedSeconds")),
            short_seconds=seconds(raw.get("shortSeconds")),
            dark_seconds=seconds(raw.get("darkSeconds")),
            transition=_text(raw.get("transition"), 32),
            share=min(_count(raw.get("share")), 100),
            objective=objective_from_dict(asked.get("objective")),
            why=_text(asked.get("why"), MAX_CAUSE),
            spot_node_seconds=seconds(nodes.get("SPOT")),
            on_demand_node_seconds=seconds(nodes.get("ON_DEMAND")),
            hedges=_count(raw.get("hedges")),
            history=tuple(change for change in changes if change is not None),
        )

    def size_bytes(self) -> int:
        """The stored form's size as compact UTF-8 JSON."""
        text = json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False)
        return len(text.encode("utf-8"))


class ActionKind(StrEnum):
    """What follows one decision of the rule, on one fresh read of the endpoint.

    - ``NOTHING``: no call, no write.
    - ``RECORD``: write the new state (capacity changed, a call's outcome seen, an intent
      taken); no call.
    - ``CALL``: a long-running call (a DeployModel, a MutateDeployedModel, an UndeployModel),
      claimed in the state written first, then sent.
    - ``TRAFFIC``: ``UpdateEndpoint`` of the traffic split (with the read's etag), then the
      state written.
    """

    NOTHING = "NOTHING"
    RECORD = "RECORD"
    CALL = "CALL"
    TRAFFIC = "TRAFFIC"


@dataclass(frozen=True)
class Deploy:
    """A model to deploy: the Spot model from the request (``spot``), or an on-demand one (the
    floor, a fallback: the Spot model's model and machine, ``dedicatedResources.spot =
    false``), with its display name and replicas, and no traffic until it serves (the Spot
    model: the request's own ``trafficSplit``)."""

    display_name: str
    replicas: int
    spot: bool


@dataclass(frozen=True)
class ServingAction:
    """The rule's answer: the state to write, at most one call, why, the transition taken
    (a name of :data:`~shared.domain.serving.rule.TRANSITIONS`), and the notifications the
    write owes (DEPLOYED, FAILED, HEDGED, RESTORED, UNDEPLOYED)."""

    kind: ActionKind
    state: ServingState
    reason: str
    transition: str = "none"
    call: InFlight | None = None
    deploy: Deploy | None = None
    split: Mapping[str, int] | None = None
    notices: tuple[str, ...] = ()
