"""Serving capacity: the nodes a deployed model's replicas run on, and Spot capacity per location.

Modelled on Compute Engine Spot VMs, which Vertex AI Spot serving runs on. One node per replica
(``min_replica_count``). While Spot capacity is available in a location its Spot nodes run;
when it goes, every Spot node there is reclaimed at once (``available_replica_count`` drops).
Compute Engine then tries to restart each reclaimed node :data:`RESTART_TRIES` times, one try
every :data:`RESTART_INTERVAL_SECONDS` of simulated time; a try succeeds only while Spot
capacity is available. A node whose tries all failed stays down until capacity returns, and
is placed anew the location's placement delay after that (:data:`DEFAULT_PLACEMENT_SECONDS`,
settable per location); capacity going again meanwhile cancels that placement. A Spot node
deployed (or added by MutateDeployedModel) while capacity is gone waits the same way.
On-demand nodes are never reclaimed.

A location's Spot capacity is set by hand (:meth:`Serving.set_spot`) or replayed from a Spot
trace (:meth:`Serving.replay`, the "Can't Be Late" traces in ``../shared/traces`` that the
benchmarks replay): capacity is there while the trace's value is at least a threshold, step by
step from the moment the replay starts, cyclically as the benchmarks replay them; setting the
capacity by hand ends the replay.

An :class:`~.common.EventSource`: restart tries, placements and a replay's capacity changes
are timed transitions the engine replays in simulated-time order. Every change in a model's
running nodes is reported (``report``) so the endpoint shows it in ``DeployedModel.status``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flexjobs_local.simulator.clock import rfc3339
from flexjobs_local.simulator.common import Due, SimError

#: Compute Engine tries to restart a reclaimed Spot VM this many times ...
RESTART_TRIES = 6
#: ... one try this many simulated seconds after the previous one (or the reclaim).
RESTART_INTERVAL_SECONDS = 60.0
#: Once Spot capacity returns, a node whose restart tries all failed runs again this long after.
DEFAULT_PLACEMENT_SECONDS = 120.0

UP = "UP"
RESTARTING = "RESTARTING"  # reclaimed; the next restart try is at ``next_at``
WAITING = "WAITING"  # down until Spot capacity returns (its tries failed, or it never ran)
PLACING = "PLACING"  # capacity is back; it runs again at ``next_at``

#: A replayed trace has at most this many steps (the longest public one has about 20,000).
MAX_TRACE_STEPS = 100_000
#: ... each at most this long.
MAX_TRACE_GAP_SECONDS = 86_400.0

#: ``report(endpoint, deployed_model_id, available_nodes, at)``: a model's running nodes changed.
Report = Callable[[str, str, int, float], None]


@dataclass(eq=False)
class _Node:
    phase: str = UP
    tries: int = 0  # failed restart tries since it was last reclaimed
    next_at: float | None = None  # RESTARTING: the next try; PLACING: when it runs again


@dataclass(eq=False)
class _Model:
    endpoint: str
    model_id: str
    location: str
    spot: bool
    required: int
    nodes: list[_Node] = field(default_factory=list)

    def available(self) -> int:
        return sum(node.phase == UP for node in self.nodes)


@dataclass(frozen=True)
class SpotTrace:
    """One Spot trace file: a value (nodes held or obtainable) every ``gap`` seconds."""

    gap: float
    values: tuple[int, ...]

    @classmethod
    def from_json(cls, document: object) -> SpotTrace:
        """The trace of a ``{"metadata": {"gap_seconds": G}, "data": [n, ...]}`` document.

        Raises:
            SimError: INVALID_ARGUMENT for any other shape, a gap not in (0, one day], no
                data, more than :data:`MAX_TRACE_STEPS` values, or a value not a
                non-negative integer.
        """
        metadata = document.get("metadata") if isinstance(document, dict) else None
        data = document.get("data") if isinstance(document, dict) else None
        gap = metadata.get("gap_seconds") if isinstance(metadata, dict) else None
        if isinstance(gap, bool) or not isinstance(gap, int | float):
            raise SimError("INVALID_ARGUMENT", "trace.metadata.gap_seconds must be a number.")
        if not 0 < gap <= MAX_TRACE_GAP_SECONDS:
            raise SimError(
                "INVALID_ARGUMENT",
                f"trace.metadata.gap_seconds must be above 0 and at most {MAX_TRACE_GAP_SECONDS}.",
            )
        if not isinstance(data, list) or not 0 < len(data) <= MAX_TRACE_STEPS:
            raise SimError(
                "INVALID_ARGUMENT", f"trace.data must be a list of 1 to {MAX_TRACE_STEPS} values."
            )
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in data):
            raise SimError("INVALID_ARGUMENT", "trace.data values must be non-negative integers.")
        return cls(float(gap), tuple(data))


@dataclass(eq=False)
class _Replay:
    """A trace replayed as a location's Spot capacity from ``start``, cyclically."""

    start: float
    gap: float
    up: tuple[bool, ...]  # per step: whether Spot capacity is there
    threshold: int
    next_step: int | None = None  # the step at which capacity next changes

    def next_at(self) -> float | None:
        return None if self.next_step is None else self.start + self.next_step * self.gap

    def seek(self, step: int) -> None:
        """Find the first step after ``step`` whose capacity differs (None: it never does)."""
        count = len(self.up)
        now = self.up[step % count]
        self.next_step = next(
            (step + k for k in range(1, count + 1) if self.up[(step + k) % count] != now), None
        )

    def to_json(self) -> dict[str, Any]:
        at = self.next_at()
        return {
            "startedAt": rfc3339(self.start),
            "gapSeconds": self.gap,
            "steps": len(self.up),
            "threshold": self.threshold,
            "nextChangeAt": None if at is None else rfc3339(at),
        }


@dataclass
class _Location:
    spot_available: bool = True
    placement_seconds: float = DEFAULT_PLACEMENT_SECONDS
    replay: _Replay | None = None


class Serving:
    """The nodes of every deployed model and Spot capacity per location.

    Not thread-safe: the engine holds its lock.
    """

    def __init__(self, report: Report) -> None:
        self._report = report
        self._models: dict[tuple[str, str], _Model] = {}
        self._locations: dict[str, _Location] = {}

    # --- deployed models -----------------------------------------------------------------------

    def place(
        self,
        endpoint: str,
        model_id: str,
        location: str,
        *,
        spot: bool,
        replicas: int,
        required: int,
        at: float,
    ) -> None:
        """A model was deployed with ``replicas`` nodes; reports how many run."""
        model = _Model(endpoint, model_id, location, spot, required)
        self._models[(endpoint, model_id)] = model
        self._add_nodes(model, replicas)
        self._report(endpoint, model_id, model.available(), at)

    def resize(self, endpoint: str, model_id: str, replicas: int, required: int, at: float) -> None:
        """A mutation gave the model ``replicas`` nodes (down ones go first when it shrinks)."""
        model = self._models[(endpoint, model_id)]
        model.required = required
        if replicas > len(model.nodes):
            self._add_nodes(model, replicas - len(model.nodes))
        else:
            # Stable sort: running nodes last, so the ones dropped are down ones if any.
            model.nodes.sort(key=lambda node: node.phase == UP)
            del model.nodes[: len(model.nodes) - replicas]
        self._report(endpoint, model_id, model.available(), at)

    def remove(self, endpoint: str, model_id: str) -> None:
        """The model was undeployed: its nodes are gone."""
        self._models.pop((endpoint, model_id), None)

    def _add_nodes(self, model: _Model, count: int) -> None:
        runs = not model.spot or self._location(model.location).spot_available
        model.nodes.extend(_Node(UP if runs else WAITING) for _ in range(count))

    # --- Spot capacity and reclaims ------------------------------------------------------------

    def set_spot(
        self, location: str, available: bool, placement_seconds: float | None, at: float
    ) -> None:
        """Spot capacity of ``location`` goes or returns now, by hand (a replay there ends).

        Raises:
            SimError: INVALID_ARGUMENT (a negative placement delay).
        """
        loc = self._configure(location, placement_seconds)
        loc.replay = None
        self._apply(location, available, at)

    def replay(
        self,
        location: str,
        trace: SpotTrace,
        threshold: int,
        placement_seconds: float | None,
        at: float,
    ) -> None:
        """Replay ``trace`` as the Spot capacity of ``location`` from now: capacity is there
        while the trace's value is at least ``threshold``.

        Raises:
            SimError: INVALID_ARGUMENT (``threshold`` < 1, a negative placement delay).
        """
        if threshold < 1:
            raise SimError("INVALID_ARGUMENT", "threshold must be at least 1.")
        loc = self._configure(location, placement_seconds)
        replay = _Replay(at, trace.gap, tuple(v >= threshold for v in trace.values), threshold)
        loc.replay = replay
        self._apply(location, replay.up[0], at)
        replay.seek(0)

    def _configure(self, location: str, placement_seconds: float | None) -> _Location:
        if placement_seconds is not None and placement_seconds < 0:
            raise SimError("INVALID_ARGUMENT", "placementSeconds must not be negative.")
        loc = self._locations.setdefault(location, _Location())
        if placement_seconds is not None:
            loc.placement_seconds = float(placement_seconds)
        return loc

    def _apply(self, location: str, available: bool, at: float) -> None:
        """Spot capacity of ``location`` goes (its Spot nodes are reclaimed, placements
        cancelled) or returns (the nodes waiting for it are placed after the delay)."""
        loc = self._locations.setdefault(location, _Location())
        was = loc.spot_available
        loc.spot_available = available
        if was == available:
            return
        for model in self._spot_models(location):
            before = model.available()
            for node in model.nodes:
                if not available and node.phase == UP:
                    _reclaim(node, at)
                elif not available and node.phase == PLACING:
                    node.phase, node.next_at = WAITING, None
                elif available and node.phase == WAITING:
                    node.phase, node.next_at = PLACING, at + loc.placement_seconds
            if model.available() != before:
                self._report(model.endpoint, model.model_id, model.available(), at)

    def reclaim(self, endpoint: str, model_id: str, nodes: int, at: float) -> None:
        """Reclaim ``nodes`` running nodes of one Spot model now; their restarts are tried.

        Raises:
            SimError: NOT_FOUND (no such deployed model); INVALID_ARGUMENT (``nodes`` < 1);
                FAILED_PRECONDITION (an on-demand model, or fewer running nodes).
        """
        model = self._models.get((endpoint, model_id))
        if model is None:
            raise SimError("NOT_FOUND", f"Deployed model {model_id} not found on {endpoint}.")
        if nodes < 1:
            raise SimError("INVALID_ARGUMENT", "nodes must be at least 1.")
        if not model.spot:
            raise SimError(
                "FAILED_PRECONDITION", f"Deployed model {model_id} is on-demand: never reclaimed."
            )
        running = [node for node in model.nodes if node.phase == UP]
        if len(running) < nodes:
            raise SimError(
                "FAILED_PRECONDITION",
                f"Deployed model {model_id} has {len(running)} running nodes, not {nodes}.",
            )
        for node in running[:nodes]:
            _reclaim(node, at)
        self._report(endpoint, model_id, model.available(), at)

    # --- the event source ----------------------------------------------------------------------

    def due(self, until: float) -> Due | None:
        """The earliest capacity change of a replay, restart try or placement at or before
        ``until``; at the same instant a capacity change goes first (a try then sees it)."""
        # (when, order on a tie, what fires)
        candidates: list[tuple[float, int, Callable[[float], None]]] = []
        for name, loc in self._locations.items():
            replay = loc.replay
            at = None if replay is None else replay.next_at()
            if replay is not None and at is not None and at <= until:
                candidates.append((at, 0, self._replay_step(name, replay)))
        for model in self._models.values():
            for node in model.nodes:
                at = node.next_at
                if at is not None and at <= until:
                    candidates.append((at, 1, self._node_step(model, node)))
        if not candidates:
            return None
        at, _, fire = min(candidates, key=lambda c: (c[0], c[1]))
        return Due(at, fire)

    def _replay_step(self, location: str, replay: _Replay) -> Callable[[float], None]:
        def fire(at: float) -> None:
            step = replay.next_step
            assert step is not None  # only a replay with a next change is due
            self._apply(location, replay.up[step % len(replay.up)], at)
            replay.seek(step)

        return fire

    def _node_step(self, model: _Model, node: _Node) -> Callable[[float], None]:
        return lambda at: self._fire(model, node, at)

    def _fire(self, model: _Model, node: _Node, at: float) -> None:
        if node.phase == RESTARTING and not self._location(model.location).spot_available:
            node.tries += 1
            if node.tries < RESTART_TRIES:
                node.next_at = at + RESTART_INTERVAL_SECONDS
            else:
                node.phase, node.next_at = WAITING, None
            return
        # A restart try while capacity is there, or a placement: the node runs again.
        node.phase, node.tries, node.next_at = UP, 0, None
        self._report(model.endpoint, model.model_id, model.available(), at)

    # --- reading -------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """``{"locations": [...], "deployedModels": [...]}`` (Spot models only): see
        :mod:`.control`'s ``GET /serving``."""
        spot = [m for m in self._models.values() if m.spot]
        names = sorted(set(self._locations) | {m.location for m in spot})
        return {
            "locations": [
                {
                    "location": name,
                    "spotAvailable": loc.spot_available,
                    "placementSeconds": loc.placement_seconds,
                    "trace": None if loc.replay is None else loc.replay.to_json(),
                }
                for name in names
                for loc in (self._location(name),)
            ],
            "deployedModels": [
                {
                    "endpoint": m.endpoint,
                    "deployedModelId": m.model_id,
                    "location": m.location,
                    "replicas": len(m.nodes),
                    "required": m.required,
                    "available": m.available(),
                    "nodesDown": [
                        {
                            "node": index,
                            "phase": node.phase,
                            "restartTries": node.tries,
                            "nextAt": None if node.next_at is None else rfc3339(node.next_at),
                        }
                        for index, node in enumerate(m.nodes)
                        if node.phase != UP
                    ],
                }
                for m in spot
            ],
        }

    def _location(self, name: str) -> _Location:
        # A location never set has Spot capacity, with the default placement delay.
        return self._locations.get(name) or _Location()

    def _spot_models(self, location: str) -> list[_Model]:
        return [m for m in self._models.values() if m.spot and m.location == location]


def _reclaim(node: _Node, at: float) -> None:
    node.phase, node.tries, node.next_at = RESTARTING, 0, at + RESTART_INTERVAL_SECONDS
