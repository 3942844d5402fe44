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

An :class:`~.common.EventSource`: restart tries and placements are timed transitions the
engine replays in simulated-time order. Every change in a model's running nodes is reported
(``report``) so the endpoint shows it in ``DeployedModel.status``.
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


@dataclass
class _Location:
    spot_available: bool = True
    placement_seconds: float = DEFAULT_PLACEMENT_SECONDS


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
        """Spot capacity of ``location`` goes (its Spot nodes are reclaimed) or returns (the
        nodes that wait for it are placed ``placement_seconds`` later)."""
        if placement_seconds is not None and placement_seconds < 0:
            raise SimError("INVALID_ARGUMENT", "placementSeconds must not be negative.")
        loc = self._locations.setdefault(location, _Location())
        if placement_seconds is not None:
            loc.placement_seconds = float(placement_seconds)
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
        """The earliest restart try or placement at or before ``until``."""
        best: tuple[float, _Model, _Node] | None = None
        for model in self._models.values():
            for node in model.nodes:
                at = node.next_at
                if at is not None and at <= until and (best is None or at < best[0]):
                    best = (at, model, node)
        if best is None:
            return None
        at, model, node = best
        return Due(at, lambda when: self._fire(model, node, when))

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
                    "spotAvailable": self._location(name).spot_available,
                    "placementSeconds": self._location(name).placement_seconds,
                }
                for name in names
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
