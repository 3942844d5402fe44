"""The contexts the entry points run in: the ports and policy each is wired with.

:class:`Intake` serves the requests topic and request files, :class:`Tracker` the tick and
the job-events topic. The steps they share (:mod:`shared.app.steps`) ask only for the
protocols at the end of this module, which both contexts satisfy, so no step imports a
service and no service imports another's context."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from shared.domain.policy.retry import RetryPolicy

# Only the field types: importing a context must not import the ports, the repositories or
# the admission config's models (issue 41: an entry point loads what its first call needs).
if TYPE_CHECKING:
    from shared.app.ports import (
        CheckpointStore,
        DeploymentBackend,
        JobBackend,
        Notifier,
        QuotaLimits,
        RejectionLog,
        StoredObjects,
    )
    from shared.app.repository.deployments import DeploymentRecords
    from shared.app.repository.jobs import JobRecords
    from shared.domain.admission.config import Queues
    from shared.domain.policy.pricing import PriceTable
    from shared.domain.request.validation import Validator
    from shared.domain.serving.objective import PolicyTable
    from shared.kernel.config import Settings


@dataclass
class Deployments:
    """Ports and policy of the deployment handlers, wired once per instance by the bootstrap."""

    settings: Settings
    records: DeploymentRecords
    backend: DeploymentBackend
    clock: Callable[[], datetime]
    # Publishes a deployment's notifications (DEPLOYED, FAILED, HEDGED, RESTORED).
    notifier: Notifier
    # The retry policy: its backoff spaces the deployments parked for quota.
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # The measured serving policies objective mode chooses from (read on first use; None:
    # none, so an objective gets always on-demand).
    policy_table: Callable[[], PolicyTable] | None = None


@dataclass
class Intake:
    """Ports and policy for :func:`submit_job`, wired once per instance by the bootstrap."""

    settings: Settings
    jobs: JobRecords
    backend: JobBackend
    rejections: RejectionLog
    notifier: Notifier
    validators: Sequence[Validator]
    clock: Callable[[], datetime]
    # Spot deployments (``deployModel``); None where an instance takes no deployments.
    deployments: Deployments | None = None
    # The retry policy: its backoff spaces the creates parked for quota.
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # Prices, for the capacity policy of AUTO requests; None leaves it no price to weigh.
    prices: PriceTable | None = None
    # The admission queues (FLEXJOBS_QUEUES); None: admission is off.
    queues: Queues | None = None
    # The project's quota limits (Cloud Quotas): a resource a request is the first to ask
    # for is read before it is admitted; None: never read.
    quota_limits: QuotaLimits | None = None

    def backoff(self, retry_number: int) -> float:
        """Seconds before a parked submission is tried again (full jitter, capped)."""
        return self.retry.backoff.seconds(retry_number)


@dataclass
class Tracker:
    """Ports for the lifecycle handlers, wired once per instance by the bootstrap."""

    settings: Settings
    jobs: JobRecords
    backend: JobBackend
    checkpoints: CheckpointStore
    notifier: Notifier
    retry: RetryPolicy
    clock: Callable[[], datetime]
    # Spot deployments followed by the tick; None where an instance follows none.
    deployments: Deployments | None = None
    sleep: Callable[[float], None] = time.sleep

    # Prices the attempts' cost; None leaves costs unpriced.
    prices: PriceTable | None = None
    # The admission queues (FLEXJOBS_QUEUES); None: admission is off.
    queues: Queues | None = None
    # The project's quota limits (Cloud Quotas), read by the tick when admission is on;
    # None: never read, and the queue file's projectQuota is the ceiling.
    quota_limits: QuotaLimits | None = None

    def backoff(self, retry_number: int) -> float:
        """Seconds before a submission parked for quota is tried again."""
        return self.retry.backoff.seconds(retry_number)


#: Requests of one file submitted side by side: a long ``.jsonl`` fits the function's timeout.
UPLOAD_WORKERS = 4


@dataclass
class Uploads:
    """Ports for the object events (:mod:`shared.app.services.uploads`), wired once per
    instance by the bootstrap."""

    intake: Intake
    objects: StoredObjects
    # Confirms a checkpoint an event names by its own listing, before it counts.
    checkpoints: CheckpointStore
    workers: int = UPLOAD_WORKERS


class AttemptPorts(Protocol):
    """What creating an attempt needs: both :class:`Intake` and the lifecycle's Tracker."""

    @property
    def jobs(self) -> JobRecords: ...

    @property
    def backend(self) -> JobBackend: ...

    @property
    def notifier(self) -> Notifier: ...

    @property
    def clock(self) -> Callable[[], datetime]: ...

    def backoff(self, retry_number: int) -> float: ...


class CapacityPorts(AttemptPorts, Protocol):
    """What asking the capacity policy needs besides: settings, retry budgets and prices."""

    @property
    def settings(self) -> Settings: ...

    @property
    def retry(self) -> RetryPolicy: ...

    @property
    def prices(self) -> PriceTable | None: ...

    @property
    def queues(self) -> Queues | None: ...

    @property
    def quota_limits(self) -> QuotaLimits | None: ...
