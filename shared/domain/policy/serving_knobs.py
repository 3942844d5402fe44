"""The bounds and names of a ``deployModel`` request's serving fields, in one place for the
intake check (``shared.domain.request.serving_options``) and objective mode
(``shared.domain.serving.objective``), which sit beside each other and may not import each
other."""

from __future__ import annotations

from typing import Final

#: The most replicas a row or a request may name: far above a real deployment, and a bound on
#: what a table holds.
MAX_REPLICAS: Final = 1000
#: Over-provisioning beyond N: at most as many extra Spot replicas as this.
MAX_EXTRA_SPOT: Final = 1000

#: The knobs (``ServingPolicy``) and the objective (``AvailabilityObjective``), as requested.
KNOB_FIELDS: Final = ("minOnDemandReplicas", "extraSpotReplicas", "hedge")
OBJECTIVE_FIELD: Final = "availabilityObjective"
OBJECTIVE_KEYS: Final = ("atLeastOneReplica", "allRequired")
SERVING_FIELDS: Final = (*KNOB_FIELDS, OBJECTIVE_FIELD)
