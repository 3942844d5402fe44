"""A ``deployModel`` request's serving fields: how its Spot deployment keeps serving.

Beside ``deployModel``, a request may name the knobs of
:class:`~shared.domain.serving.objective.ServingPolicy` and an availability objective
(docs/serving.md, *Knobs and objective mode*)::

    {"requestId": "s-1", "deployModel": {...},
     "minOnDemandReplicas": 1, "extraSpotReplicas": 0, "hedge": true,
     "availabilityObjective": {"atLeastOneReplica": 0.999, "allRequired": 0.99}}

Each is bounded and checked at intake (a knob that cannot be met, such as a floor above the
replicas required, is a recorded rejection); ``shared.domain.decisions.deploy_model`` reads
them. With an objective and none of the knobs, flexjobs chooses the knobs
(``shared.app.services.deploy.accept_deployment``); with knobs, they are kept as named and the
objective is what the deployment's availability is shown against.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.domain.model.values import kind_of, show
from shared.domain.policy.serving_knobs import (
    MAX_EXTRA_SPOT,
    OBJECTIVE_FIELD,
    OBJECTIVE_KEYS,
    SERVING_FIELDS,
)
from shared.kernel.errors import FieldError

__all__ = ["SERVING_FIELDS", "check_serving_options", "required_replicas", "whole_count"]


def required_replicas(spec: Mapping[str, Any]) -> int:
    """The replicas a deployment keeps serving: ``requiredReplicaCount``, else
    ``minReplicaCount``, of its ``deployedModel.dedicatedResources`` (at least 1)."""
    deployed = spec.get("deployedModel")
    resources = deployed.get("dedicatedResources") if isinstance(deployed, Mapping) else None
    resources = resources if isinstance(resources, Mapping) else {}
    required = whole_count(resources.get("requiredReplicaCount"))
    return max(required or whole_count(resources.get("minReplicaCount")), 1)


def whole_count(raw: object) -> int:
    """A count from a body (int64 may come as a string), else 0."""
    if isinstance(raw, bool):
        return 0
    if isinstance(raw, int):
        return max(raw, 0)
    if isinstance(raw, str) and raw.isdigit() and len(raw) <= 9:
        return int(raw)
    return 0


def check_serving_options(spec: Mapping[str, Any], options: Mapping[str, Any]) -> list[FieldError]:
    """Every problem with a ``deployModel`` request's serving fields (empty: valid).

    Examples:
        >>> spec = {"deployedModel": {"dedicatedResources": {"minReplicaCount": 2}}}
        >>> [e.message for e in check_serving_options(spec, {"minOnDemandReplicas": 3})]
        ['is more than the 2 replicas required (requiredReplicaCount, else minReplicaCount): at most 2']
        >>> [e.path for e in check_serving_options(spec, {"availabilityObjective": {"x": 1}})]
        ['availabilityObjective.x', 'availabilityObjective.atLeastOneReplica']
    """  # noqa: E501 - a doctest's output is one line
    required = required_replicas(spec)
    errors: list[FieldError] = []
    floor = options.get("minOnDemandReplicas")
    if "minOnDemandReplicas" in options:
        if not _is_count(floor) or floor < 0:  # type: ignore[operator]
            errors.append(FieldError("minOnDemandReplicas", _not_count(floor)))
        elif floor > required:  # type: ignore[operator]
            errors.append(
                FieldError(
                    "minOnDemandReplicas",
                    f"is more than the {required} replicas required (requiredReplicaCount, "
                    f"else minReplicaCount): at most {required}",
                )
            )
    extra = options.get("extraSpotReplicas")
    if "extraSpotReplicas" in options and (
        not _is_count(extra) or not 0 <= extra <= MAX_EXTRA_SPOT  # type: ignore[operator]
    ):
        errors.append(
            FieldError("extraSpotReplicas", f"{_not_count(extra)}, at most {MAX_EXTRA_SPOT}")
        )
    if "hedge" in options and not isinstance(options.get("hedge"), bool):
        errors.append(
            FieldError("hedge", f"must be true or false, not {kind_of(options['hedge'])}")
        )
    if OBJECTIVE_FIELD in options:
        errors += _check_objective(options[OBJECTIVE_FIELD])
    return errors


def _check_objective(raw: object) -> list[FieldError]:
    base = OBJECTIVE_FIELD
    if not isinstance(raw, Mapping):
        return [
            FieldError(
                base,
                'must be an object such as {"atLeastOneReplica": 0.999, "allRequired": 0.99}, '
                f"not {kind_of(raw)}",
            )
        ]
    errors = [
        FieldError(f"{base}.{str(key)[:64]}", f"is not a field; use {' or '.join(OBJECTIVE_KEYS)}")
        for key in raw
        if key not in OBJECTIVE_KEYS
    ]
    for key in OBJECTIVE_KEYS:
        value = raw.get(key)
        if value is None and key == "allRequired":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
            shown = "missing" if value is None else show(value)
            errors.append(
                FieldError(
                    f"{base}.{key}",
                    f"must be a fraction of minutes in (0, 1] such as 0.999, not {shown}",
                )
            )
    return errors


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _not_count(value: object) -> str:
    return f"must be a whole number of replicas >= 0, not {show(value)}"
