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

#: The history keeps this many serving-capacity changes, the newest last. A flapping zone
#: changes capacity a few times an hour; 40 changes cover the hedge and the way back of the
#: last incidents, which is what a person reading the record needs.
HISTORY_LIMIT: Final = 40
#: A change's cause is clipped to this many characters.
MAX_CAUSE: Final = 160
#: Ids, names and resource names read from Vertex are clipped to this many characters
#: (a display name is at most 128; a model resource name is well under 256).
MAX_NAME: Final = 256
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


class Phase(StrEnum):
    """Where a Spot deployment's serving stands.

    - ``SERVING``: the Spot model serves its required replicas, and no fallback is deployed.
    - ``DEFICIT``: fewer than required since ``since``; no fallback yet (the grace period runs).
    - ``HEDGED``: an on-demand fallback is deployed (or being deployed) since ``since``.
    - ``RECOVERING``: Spot serves its required replicas again since ``since``, the fallback is
      still deployed, and the hold period runs before traffic goes back.
    - ``PAUSED_BY_HAND``: someone changed the endpoint by hand since ``since``; flexjobs keeps
      recording capacity and changes nothing until told again (:func:`rule.resume`).
    - ``UNDEPLOYING``: the deployment is being taken down (a cancel), fallback first.
    - ``UNDEPLOYED``: none of its models is on the endpoint any more; nothing follows.
    """

    SERVING = "SERVING"
    DEFICIT = "DEFICIT"
    HEDGED = "HEDGED"
    RECOVERING = "RECOVERING"
    PAUSED_BY_HAND = "PAUSED_BY_HAND"
    UNDEPLOYING = "UNDEPLOYING"
    UNDEPLOYED = "UNDEPLOYED"


#: A deployed model another flexjobs deployment owns: its display name ends with a deployment's
#: tag (``[flexjobs <label>]``, :func:`shared.domain.decisions.deploy_model.deployment_tag`; a
#: unit test holds the two to the same form), or with that tag and the fallback's suffix.
FLEXJOBS_NAME: Final = re.compile(r".*\[flexjobs [a-z0-9_-]{1,63}\]( \(on-demand fallback\))?")


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
                    id=_name(item.get("id")),
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
        return cls(_name(raw.get("name")), tuple(models), shares, _name(raw.get("etag")), truncated)


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
class Change:
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
    def decode(cls, raw: object) -> Change | None:
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
    """The rule's two time constants (seconds).

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


#: The long-running calls a deployment may have in flight, one at a time.
DEPLOY_CALL: Final = "DeployModel"
MUTATE_CALL: Final = "MutateDeployedModel"
UNDEPLOY_CALL: Final = "UndeployModel"
CALLS: Final = (DEPLOY_CALL, MUTATE_CALL, UNDEPLOY_CALL)


@dataclass(frozen=True)
class ServingState:
    """What a Spot deployment's record keeps about its serving (one map in the record).

    ``others`` are the shares (0 included) of every other deployed model of the endpoint when
    flexjobs last accepted the endpoint as it is (the baseline), and ``pool`` the percent that
    the Spot model and its fallback share between them. An endpoint whose other models or
    whose pool differ from these was changed by hand. ``fallback_name`` is the display name
    the fallback is deployed under, so that the rule recognises it on the endpoint before its
    id is recorded (a DeployModel that timed out may still have happened).

    ``last`` is the capacity at ``accounted_at``; ``short_seconds`` (time with fewer replicas
    than required) and the node-seconds of available replicas by capacity type accrue from it
    whenever capacity changes, so a tick that sees no change writes nothing.
    """

    spot_id: str
    phase: Phase
    accounted_at: datetime
    last: Capacity
    pool: int
    others: Mapping[str, int] = field(default_factory=dict)
    since: datetime | None = None
    fallback_id: str | None = None
    fallback_name: str | None = None
    fallback_replicas: int = 0
    short_seconds: float = 0.0
    spot_node_seconds: float = 0.0
    on_demand_node_seconds: float = 0.0
    hedges: int = 0
    history: tuple[Change, ...] = ()
    # The one long-running call in flight (DeployModel of the fallback, MutateDeployedModel,
    # UndeployModel): written before the call as its claim, so two ticks never send it twice;
    # ``operation`` is its name once Vertex answered (None while unknown: the call timed out).
    operation_call: str | None = None
    operation: str | None = None
    operation_at: datetime | None = None

    def __post_init__(self) -> None:
        # Every other deployed model is kept, with a share of 0 too: one added later is new.
        others = {k: max(int(v), 0) for k, v in sorted(self.others.items())}
        object.__setattr__(self, "others", MappingProxyType(others))
        if len(self.history) > HISTORY_LIMIT:
            object.__setattr__(self, "history", self.history[-HISTORY_LIMIT:])

    @property
    def ours(self) -> tuple[str, ...]:
        """The deployed model ids that are this deployment's (Spot first, then the fallback)."""
        return (self.spot_id,) + ((self.fallback_id,) if self.fallback_id else ())

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able form stored in the deployment's record (camelCase, as the record)."""
        return {
            "spotDeployedModelId": self.spot_id,
            "phase": self.phase.value,
            "since": self.since.isoformat() if self.since else None,
            "accountedAt": self.accounted_at.isoformat(),
            "last": {
                "spot": self.last.spot,
                "onDemand": self.last.on_demand,
                "required": self.last.required,
            },
            "pool": self.pool,
            "others": dict(self.others),
            "fallbackDeployedModelId": self.fallback_id,
            "fallbackDisplayName": self.fallback_name,
            "fallbackReplicas": self.fallback_replicas,
            "shortSeconds": round(self.short_seconds, 3),
            "nodeSeconds": {
                "SPOT": round(self.spot_node_seconds, 3),
                "ON_DEMAND": round(self.on_demand_node_seconds, 3),
            },
            "hedges": self.hedges,
            "history": [change.to_dict() for change in self.history],
            "pending": (
                {
                    "call": self.operation_call,
                    "operation": self.operation,
                    "at": self.operation_at.isoformat() if self.operation_at else None,
                }
                if self.operation_call
                else None
            ),
        }

    @classmethod
    def decode(cls, raw: Mapping[str, Any]) -> ServingState | None:
        """Read the stored form back, bounded; None when it names no Spot model or no time."""
        spot_id = _name(raw.get("spotDeployedModelId"))
        accounted_at = parse_rfc3339(raw.get("accountedAt"))
        if not spot_id or accounted_at is None:
            return None
        phase = str(raw.get("phase"))
        last = _mapping(raw.get("last"))
        others = _mapping(raw.get("others"))
        nodes = _mapping(raw.get("nodeSeconds"))
        history = raw.get("history")
        history = history if isinstance(history, list) else []
        changes = (Change.decode(item) for item in history[-HISTORY_LIMIT:])

        def seconds(value: object) -> float:
            ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
            return float(value) if ok else 0.0  # type: ignore[arg-type]

        fallback_id = _name(raw.get("fallbackDeployedModelId")) or None
        pending = _mapping(raw.get("pending"))
        call = _name(pending.get("call"))
        return cls(
            spot_id=spot_id,
            # An unknown phase reads as paused: flexjobs then changes nothing on its own.
            phase=Phase(phase) if phase in Phase.__members__ else Phase.PAUSED_BY_HAND,
            accounted_at=accounted_at,
            last=Capacity(
                _count(last.get("spot")), _count(last.get("onDemand")), _count(last.get("required"))
            ),
            pool=min(_count(raw.get("pool")), 100),
            others={_name(k): _count(v) for k, v in list(others.items())[:MAX_MODELS]},
            since=parse_rfc3339(raw.get("since")),
            fallback_id=fallback_id,
            fallback_name=_name(raw.get("fallbackDisplayName")) or None,
            fallback_replicas=_count(raw.get("fallbackReplicas")),
            short_seconds=seconds(raw.get("shortSeconds")),
            spot_node_seconds=seconds(nodes.get("SPOT")),
            on_demand_node_seconds=seconds(nodes.get("ON_DEMAND")),
            hedges=_count(raw.get("hedges")),
            history=tuple(change for change in changes if change is not None),
            operation_call=call if call in CALLS else None,
            operation=(_name(pending.get("operation")) or None) if call in CALLS else None,
            operation_at=parse_rfc3339(pending.get("at")) if call in CALLS else None,
        )

    def size_bytes(self) -> int:
        """The stored form's size as compact UTF-8 JSON."""
        text = json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False)
        return len(text.encode("utf-8"))


class ActionKind(StrEnum):
    """What the tick does for a deployment after one read of its endpoint.

    - ``NOTHING``: no call, no write.
    - ``RECORD``: write the new state (capacity changed, a fallback was recognised); no call.
    - ``HEDGE``: ``DeployModel`` an on-demand fallback (``deploy``), then write the state.
    - ``SHIFT``: ``UpdateEndpoint`` with ``split`` (update mask ``traffic_split``, the etag of
      the read), then write the state.
    - ``GROW``: ``MutateDeployedModel`` of the fallback to ``resize`` replicas (its
      ``min_replica_count``/``required_replica_count`` are mutable), when the deficit grew past
      what the fallback was sized for.
    - ``RESTORE``: the way back, one step per tick: first ``UpdateEndpoint`` with ``split``
      (the fallback's share back to Spot), then, once a fresh read shows the fallback without
      traffic, ``UndeployModel`` of ``undeploy``.
    - ``PAUSE``: someone changed the endpoint by hand; write the paused state, call nothing.
    - ``UNDEPLOY``: taking the deployment down: ``UndeployModel`` of ``undeploy`` (the
      fallback first, then the Spot model), each once a read shows it without traffic.
    """

    NOTHING = "NOTHING"
    RECORD = "RECORD"
    HEDGE = "HEDGE"
    SHIFT = "SHIFT"
    GROW = "GROW"
    RESTORE = "RESTORE"
    PAUSE = "PAUSE"
    UNDEPLOY = "UNDEPLOY"


@dataclass(frozen=True)
class Fallback:
    """The on-demand ``DeployedModel`` a hedge deploys: the Spot model's model and machine,
    ``dedicatedResources.spot = false``, ``replicas`` as its min (and required) replica count,
    and no traffic until it reports available replicas."""

    model: str
    display_name: str
    machine: MachineSpec
    replicas: int


@dataclass(frozen=True)
class ServingAction:
    """The rule's answer: one call at most, and the state to write once it succeeded.

    A call that fails changes nothing: the tick writes ``state`` only after the call, and the
    next tick decides again from a fresh read.
    """

    kind: ActionKind
    state: ServingState
    reason: str
    split: Mapping[str, int] | None = None
    deploy: Fallback | None = None
    undeploy: str | None = None
    resize: int | None = None
    # The notification the change owes (HEDGED, RESTORED), queued in the same write.
    notice: str | None = None
