"""Deployment services: deploy a model on Spot VMs exactly once, and follow the operation.

:func:`submit_deployment` is what intake runs for a ``deployModel`` request (the request is
already validated). It mirrors the jobs' exactly-once steps:

1. **Claim** ``deployments/{id}`` by ``create()`` (a duplicate delivery is acknowledged; a live
   claim held by another delivery raises so Pub/Sub redelivers later).
2. **Look up before deploying**: a deployed model on the endpoint whose display name carries the
   request's tag was deployed by a delivery that died before recording it; it is adopted.
3. **Deploy** (never retried in-process) and record the operation: DEPLOYING.

:func:`refresh_deployments` is for the scheduler tick: it reads the operation of every
DEPLOYING record and moves the record to DEPLOYED or FAILED.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from shared.config import Settings
from shared.domain.request import JobRequest
from shared.errors import BackendRejected, FlexjobsError
from shared.logs import get_logger, request_context
from shared.ports import DeploymentBackend, DeploymentStore

log = get_logger("deployments")


class DeploymentOutcome(StrEnum):
    """What became of one delivery of a ``deployModel`` request (values match intake's)."""

    SUBMITTED = "submitted"
    ADOPTED = "adopted"  # the model was on the endpoint already (deployed before a crash)
    DUPLICATE = "duplicate"
    FAILED = "failed"


@dataclass
class Deployments:
    """Ports and policy of the deployment handlers, wired once per instance by the bootstrap."""

    settings: Settings
    store: DeploymentStore
    backend: DeploymentBackend
    clock: Callable[[], datetime]


def submit_deployment(request: JobRequest, ports: Deployments) -> DeploymentOutcome:
    """Start the deployment of a validated ``deployModel`` request exactly once.

    Raises:
        TransientError: a fault that may pass, or a live claim held elsewhere: redeliver.
    """
    with request_context(request.request_id):
        claim = ports.store.claim(request, ports.clock(), ports.settings.claim_ttl_seconds)
        if claim.token is None:
            record = claim.record or {}
            fields = {"state": record.get("state"), "operation": record.get("operation")}
            log.info("duplicate delivery: already deploying", extra={"fields": fields})
            return DeploymentOutcome.DUPLICATE
        try:
            return _deploy_claimed(request, claim.token, ports)
        except Exception:
            # Let the redelivery run at once instead of waiting out the claim (as intake does).
            ports.store.release(request.request_id, claim.token, ports.clock())
            raise


def _deploy_claimed(request: JobRequest, token: str, ports: Deployments) -> DeploymentOutcome:
    endpoint = str(request.spec["endpoint"])
    try:
        existing = ports.backend.find(endpoint, request.request_id)
        if existing is not None:
            ports.store.record_adopted(token, request.request_id, existing, ports.clock())
            log.info("deployment adopted", extra={"fields": {"deployedModelId": existing}})
            return DeploymentOutcome.ADOPTED
        operation = ports.backend.deploy(request)
    except BackendRejected as exc:
        # The endpoint does not exist, or Vertex refused the model: never going to work.
        ports.store.record_failure(request.request_id, str(exc), ports.clock())
        log.error("Vertex AI refused the deployment", extra={"fields": {"reason": str(exc)}})
        return DeploymentOutcome.FAILED
    ports.store.record_operation(token, request.request_id, operation, ports.clock())
    log.info("deployment started", extra={"fields": {"operation": operation, "spot": True}})
    return DeploymentOutcome.SUBMITTED


def refresh_deployments(ports: Deployments) -> int:
    """Read the operation of every DEPLOYING record and record its outcome; returns changes.

    A failed read of one operation is logged and left for the next tick (a control-plane
    error never changes a record), so one bad operation cannot stall the others; a store
    fault raises, because nothing can be recorded then.

    Examples:
        >>> refresh_deployments(bootstrap.build_deployments())   # doctest: +SKIP
        1
    """
    changed = 0
    for record in ports.store.deploying():
        request_id = str(record["requestId"])
        operation = record.get("operation")
        if not operation:
            continue  # DEPLOYING always has its operation; a hand-edited record waits
        with request_context(request_id):
            try:
                status = ports.backend.operation(str(operation))
            except FlexjobsError as exc:
                log.warning(
                    f"operation not read, kept for the next tick: {exc}",
                    extra={"fields": {"operation": operation, "error": type(exc).__name__}},
                )
                continue
            state = ports.store.apply_operation(request_id, status, ports.clock())
            if state is not None:
                changed += 1
                fields = {"operation": operation, "deployedModelId": status.deployed_model_id}
                log.info(f"deployment is {state}", extra={"fields": fields})
    return changed
