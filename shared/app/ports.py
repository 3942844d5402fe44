"""Ports: what the services need from the outside world, as bare nouns.

Adapters are named after their backend (``FirestoreJobStore``, ``VertexJobBackend``); the fakes
used by unit and functional tests are ``InMemory…``. The stores are one per Firestore collection
(jobs, their attempts, admission, the watch list, the series, the deployments); a write that
must be atomic across two collections belongs to the store that owns its transaction (see
:class:`JobStore` and :class:`AdmissionStore`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from shared.domain.decisions.submissions import Claimed, Submission
from shared.domain.model.changes import Decided, DeploymentChange, Written
from shared.domain.model.records import Stored

# What only the signatures name: importing the ports must not import the admission config's
# models or the deployment decisions (issue 41). The names above are exported or used at run
# time (``DecideDeployment``).
if TYPE_CHECKING:
    from shared.domain.admission.config import Resource
    from shared.domain.decisions.deploy_model import OperationStatus
    from shared.domain.model.changes import Change
    from shared.domain.model.checkpoint import Checkpoint
    from shared.domain.model.tally import Tally
    from shared.domain.model.vertex_jobs import VertexJob
    from shared.domain.model.watch import Saved, Watch
    from shared.domain.request.message import JobRequest
    from shared.domain.serving.model import ObservedEndpoint

# Claimed and Submission are part of the JobStore contract, so they are exported from here too.
__all__ = [
    "AdmissionStore",
    "AttemptStore",
    "CheckpointStore",
    "Claimed",
    "JobBackend",
    "JobStore",
    "Notifier",
    "QuotaLimits",
    "RejectionLog",
    "SeriesStore",
    "Stored",
    "StoredObjects",
    "Submission",
    "WatchStore",
    "Written",
]

#: What a decision hands back beside its write.
R = TypeVar("R")
#: A decision on a deployment record: its write (None: nothing), or that and a result.
DecideDeployment = Callable[
    [dict[str, Any]], DeploymentChange | Decided[DeploymentChange, Any] | None
]


class JobStore(Protocol):
    """The job records (Firestore ``jobs``) and the queries over them: storage only.

    What a write means is decided by the domain's pure functions, applied through
    :meth:`transact` by :class:`shared.app.repository.jobs.JobRecords`. A record's attempt
    documents are :class:`AttemptStore`'s, but :meth:`transact` writes the attempt fields of
    its change with the record, in one batch: a state and the attempt that reached it are
    stored together or not at all.
    """

    def get(self, request_id: str) -> dict[str, Any] | None:
        """The record as stored, or None."""
        ...

    def read(self, request_id: str) -> Stored | None:
        """The record as stored, with its version, or None."""
        ...

    def create(self, request_id: str, record: Mapping[str, Any]) -> Stored | None:
        """Create the record only if none exists (a conditional put): the record as created,
        with its version; None when one exists.

        Raises:
            StoreUnavailable: Firestore could not be reached.
        """
        ...

    def transact(
        self,
        request_id: str,
        decide: Callable[[dict[str, Any]], Change | Decided[Change, Any] | None],
        known: Stored | None = None,
    ) -> Written[Change, Stored] | None:
        """Atomically: read the record, let ``decide`` compute a change, write it (only if
        the record is still as read; ``decide`` runs again on a fresh read when it is not).
        A decision that gives a result too (``Decided``) has the last run's handed back in
        the returned ``Written.result``.

        With ``known`` (the record as this caller last read or wrote it) the first decision
        is made on it without a read: its write carries ``known``'s version as precondition,
        so a record changed since is decided again on a fresh read. A decision to write
        nothing on ``known`` stands, as it would on a read made when ``known`` was seen.

        The change's ``record`` fields are set and its ``deletes`` removed; its ``attempt``
        fields are merged into attempt ``attempt_no`` (the record's current attempt when
        None). A missing record is never passed to ``decide``: the result is None. Whatever
        ``decide`` raises propagates, and nothing is written.
        """
        ...

    def find_by_job_id(self, job_id: str) -> Stored | None:
        """The record one of whose attempts is Vertex job ``job_id`` (one query: the record
        itself, with its version), or None."""
        ...

    def active(self, at: Any = None) -> list[Stored]:
        """Every record not yet in a terminal state, with its version: only the fields of
        :data:`~shared.domain.model.records.TICK_FIELDS` (``partial``), read in pages, as of
        ``at`` (a :meth:`WatchStore.read_watch` time; now when None)."""
        ...

    def count_active(self, at: Any) -> int:
        """How many records are not yet in a terminal state, as of ``at`` (an aggregation: no
        record is read)."""
        ...

    def changed_since(self, mark: Any, at: Any, most: int) -> list[Stored]:
        """Every record, in any state, written after ``mark`` (an earlier
        :meth:`WatchStore.read_watch` time), as it was at ``at`` (this one's), of
        :data:`~shared.domain.model.watch.WATCH_FIELDS` (``partial``), read in pages; at
        most ``most`` + 1 of them (one more says there were more). Every write of a record
        (create, transact, :meth:`AdmissionStore.transact_ledger`) stamps it. It may also
        return records written shortly before ``mark``: never fewer than those after it."""
        ...

    def ended_since(self, since: datetime, at: Any = None) -> Iterator[Stored]:
        """Every record that reached a terminal state at or after ``since`` (``endedAt``),
        of ``WATCH_FIELDS`` (``partial``), as of ``at``, streamed page by page (a week of
        them may not fit in memory at once)."""
        ...

    def newest(self, limit: int, at: Any = None) -> list[dict[str, Any]]:
        """The ``requestId`` and ``createdAt`` of the ``limit`` newest records, in the status
        page's order (``createdAt``, then document id, both descending), as of ``at``."""
        ...

    def due_submissions(self, now: datetime) -> list[str]:
        """requestIds whose next submission (a retry, or a parked attempt) is due."""
        ...

    def with_outbox(self) -> list[str]:
        """requestIds with notifications not yet published."""
        ...

    def with_pending_cancels(self) -> list[str]:
        """requestIds with Vertex jobs whose cancel Vertex has not confirmed yet."""
        ...

    def with_checkpoint_prefix(self, prefix: str) -> list[dict[str, Any]]:
        """Active records whose ``checkpointPrefix`` is ``prefix`` (an indexed equality, at
        most :data:`MAX_WATCHERS` of them)."""
        ...


class AttemptStore(Protocol):
    """The attempt documents of the job records (Firestore ``jobs/{id}/attempts/{n}``): the
    history of each attempt, which no decision reads back before writing (the attempt fields
    a record's change carries are written by :meth:`JobStore.transact`, with the record)."""

    def get_attempt(self, request_id: str, attempt: int) -> dict[str, Any] | None:
        """One attempt document, or None."""
        ...

    def update_attempt(self, request_id: str, attempt: int, fields: Mapping[str, Any]) -> None:
        """Merge ``fields`` into one attempt document (one write, no read: attempt documents
        are history that no decision reads back before writing)."""
        ...


class AdmissionStore(Protocol):
    """Admission's storage: the ledger and the summary (Firestore ``admission/ledger``,
    ``admission/summary``) and the waiting line (the job records whose ``admission.stage`` is
    WAITING: a query of ``jobs``, which only admission reads).

    :meth:`transact_ledger` writes the ledger and one job record in one batch (an admission
    and its record's are written together or not at all), so the ledger's writes live here,
    over the records they admit, and not in :class:`JobStore`.
    """

    def read_ledger(self) -> Stored | None:
        """The admission ledger (``admission/ledger``) with its version; None when none
        was ever written."""
        ...

    def transact_ledger(
        self,
        request_id: str | None,
        decide: Callable[
            [dict[str, Any] | None, dict[str, Any] | None],
            tuple[dict[str, Any] | None, Change | None] | None,
        ],
    ) -> bool:
        """Read the ledger (None when missing) and, with ``request_id``, that record (None
        when missing); ``decide`` returns the ledger to write whole (None: leave it) and the
        record's change (None: none), or None to write nothing. Both are written in one
        batch, each only if still as read (decided again on a fresh read when not): an
        admission and its record's are written together or not at all. True when it wrote.
        """
        ...

    def write_admission_summary(self, document: dict[str, Any]) -> None:
        """Write what operators see of admission (``admission/summary``) whole: the tick's
        alone, last writer wins (:mod:`shared.domain.admission.summary`)."""
        ...

    def waiting_admission(self, queue: str | None = None, most: int = 1) -> list[Stored]:
        """The records waiting for admission (``admission.stage`` WAITING) in ``queue``
        (None: in any queue), oldest first (``admission.waitingSince``), of
        :data:`~shared.domain.model.records.TICK_FIELDS` only, in pages; at most ``most``."""
        ...

    def count_waiting(self, queue: str) -> int:
        """How many records wait for admission in ``queue`` (an aggregation: no record is
        read)."""
        ...

    def read_line(self) -> Saved:
        """The admission line as last saved (``line/head``, ``line/shard-N``,
        :mod:`shared.domain.admission.line`), read at one time (``at``: the records stamped
        since its mark are read as of it), with the version :meth:`save_line` must still
        find. Its ``watch`` is None when none was saved or it does not read.

        Raises:
            StoreUnavailable: Firestore could not be read.
        """
        ...

    def save_line(self, line: Watch, version: Any) -> bool:
        """Save the line, only if what is saved is still at ``version`` (None: nothing was);
        False when another pass saved meanwhile (nothing written).

        Raises:
            WatchTooLarge: the line is past its stored bound (nothing written).
            StoreUnavailable: Firestore could not be written.
        """
        ...

    def line_changed_since(self, mark: Any, at: Any, most: int) -> list[Stored]:
        """The records whose writes stamped them for the line
        (:func:`~shared.domain.admission.line.touches_line`) after ``mark``, as they were
        at ``at``, as :data:`~shared.domain.admission.line.LINE_FIELDS`; at most
        ``most + 1`` (one more tells the caller there were more)."""
        ...


class WatchStore(Protocol):
    """The tick's watch list and tally (Firestore ``watch/head``, ``watch/shard-N``,
    ``watch/tally``), saved together; the reads of the records it syncs with are
    :class:`JobStore`'s, as of :meth:`read_watch`'s time."""

    def read_watch(self) -> Saved:
        """The tick's watch list and tally as last saved, read at one time (``at``), with
        the version :meth:`save_watch` must still find."""
        ...

    def save_watch(
        self, watch: Watch | None, tally: Tally | None, version: Any, *, list_too: bool = True
    ) -> bool:
        """Save the list and the tally together (``watch`` None: the list did not fit, and
        that is saved instead, with no tally), only if what is saved is still at ``version``
        (None: nothing was). ``list_too`` False: the list is unchanged, only the tally is
        written (the stored list and its mark stay). False when another writer saved
        meanwhile: nothing written.

        Raises:
            WatchTooLarge: the list is past its stored bound (nothing written).
            StoreUnavailable: Firestore could not be written.
        """
        ...


class SeriesStore(Protocol):
    """The scheduled series (Firestore ``series/{id}``): which request holds each. A decision
    reads the holding request's job record too, as of the decision; only the series document
    is written, on its read's precondition, so the record needs no part in the write."""

    def transact_series(
        self,
        series: str,
        decide: Callable[[dict[str, Any] | None, dict[str, Any] | None], Decided[Any, R]],
    ) -> R:
        """Read the document of ``series`` (``series/{id}``) and the record its ``current``
        field names, each None when missing; let ``decide`` return the series document to
        write (its ``change``; None: write nothing) and its result, and write it whole, only
        if the series document is still as read (decided again on a fresh read when it is
        not). Returns the result of the decision that stood."""
        ...


#: Requests one queue holds waiting for admission at most (as Kueue bounds a queue's pending
#: workloads): a request past it is refused at intake, saying so. An admission pass reads each
#: queue's whole line, so no request waits unseen behind another queue's backlog.
MAX_WAITING_PER_QUEUE = 1000
#: Records read per tick, oldest first across every queue, to find those waiting in a queue the
#: queue file no longer names (each ends, saying why; the next tick reads the next ones).
MAX_WAITING_ELSEWHERE = 100

#: The alive deployments read on one endpoint at most (each step reads its neighbours'): an
#: endpoint holds at most 64 deployed models flexjobs reads (serving.model.MAX_MODELS).
ON_ENDPOINT_LIMIT = 64

#: More active jobs than this writing checkpoints under one prefix is a misconfiguration; a
#: checkpoint upload updates the first ones found.
MAX_WATCHERS = 20


class QuotaLimits(Protocol):
    """The project's Vertex AI GPU quota limits, as the quota system enforces them (Cloud
    Quotas)."""

    def limits(self, resources: Collection[Resource]) -> Mapping[Resource, int]:
        """The limit in GPUs of each of ``resources`` (a region, an accelerator type, a pool)
        the quota system reports; a resource it reports no limit for (no such metric, no
        value for the region, unlimited) is left out.

        Raises:
            QuotaUnreadable: the limits could not be read (not reachable, not enabled,
                permission denied, or more than a read may hold).
        """
        ...


class StoredObjects(Protocol):
    """Cloud Storage, for reading uploaded request files."""

    def read(self, bucket: str, name: str, generation: str, limit: int) -> bytes:
        """Read one generation of an object, at most ``limit`` + 1 bytes (so a caller sees
        that a larger object is too large without reading it all).

        Raises:
            ObjectGone: that generation no longer exists (replaced or deleted).
            StoreUnavailable: Cloud Storage could not be reached.
        """
        ...


class CheckpointStore(Protocol):
    """Where training writes checkpoints (GCS)."""

    def latest(self, prefix_uri: str, *, not_before: datetime | None = None) -> Checkpoint | None:
        """The latest complete checkpoint under ``prefix_uri``, or None; checkpoints older
        than ``not_before`` (another run's, in a reused directory) are ignored."""
        ...

    def confirm(self, checkpoint: Checkpoint) -> Checkpoint | None:
        """``checkpoint`` as its own listing shows it (its time is the listing's), or None
        when the listing shows no complete checkpoint there
        (:func:`shared.domain.policy.checkpoints.confirm`)."""
        ...


class JobBackend(Protocol):
    """Vertex AI: where jobs run."""

    def find(
        self, request_label: str, attempt: int, location: str, kind: str | None = None
    ) -> list[VertexJob]:
        """Every job of this request and attempt already created in ``location``, looked up
        by its labels (usually none or one; more only after a create raced).

        ``kind`` (the request kind) narrows the lookup; None searches every training kind.
        """
        ...

    def create(
        self,
        request: JobRequest,
        labels: Mapping[str, str],
        location: str,
        *,
        before_send: Callable[[], None] | None = None,
    ) -> VertexJob:
        """Create the job of one attempt. ``before_send`` is called last before the create is
        sent (once the request is built): what it raises is raised, and nothing is sent."""
        ...

    def get(self, name: str) -> VertexJob:
        """Read one job's authoritative state."""
        ...

    def list_labelled(
        self, location: str, created_since: datetime | None = None
    ) -> Iterable[VertexJob]:
        """Every flexjobs-labelled job in ``location``, paging through the list call."""
        ...

    def cancel(self, name: str) -> None:
        """Ask Vertex to cancel a job."""
        ...


class Notifier(Protocol):
    """The notifications topic."""

    def notify(self, message: Mapping[str, Any]) -> None:
        """Publish one notification and wait until Pub/Sub has it."""
        ...


class RejectionLog(Protocol):
    """Where refused requests are kept (Firestore ``rejections``)."""

    def get(self, rejection_id: str) -> dict[str, Any] | None:
        """The rejection document as stored, or None."""
        ...

    def record(self, rejection_id: str, document: Mapping[str, Any]) -> None:
        """Write (or overwrite) the rejection document."""
        ...


class DeploymentStore(Protocol):
    """The deployment records (Firestore ``deployments``): storage only, like
    :class:`JobStore` (the writes are
    :class:`shared.app.repository.deployments.DeploymentRecords`')."""

    def get(self, request_id: str) -> dict[str, Any] | None:
        """The record as stored, or None."""
        ...

    def create(self, request_id: str, record: Mapping[str, Any]) -> bool:
        """Create the record only if none exists; False when one does."""
        ...

    def transact(
        self,
        request_id: str,
        decide: Callable[
            [dict[str, Any]], DeploymentChange | Decided[DeploymentChange, Any] | None
        ],
    ) -> Written[DeploymentChange, Stored] | None:
        """Atomically, like :meth:`JobStore.transact`: read the record, let ``decide`` compute
        a write (fields to set and to delete; None: nothing), apply it; returns what was
        written, the record after it and the decision's result (``Decided``). A missing record
        is never decided on (None)."""
        ...

    def alive(self, at: Any = None) -> list[Stored]:
        """Every record not UNDEPLOYED nor FAILED (the ones the tick follows), as of ``at`` (a
        time of the store's: a :class:`Saved`'s; None: now), as the followed list keeps them:
        partial (:data:`~shared.domain.serving.followed.FOLLOWED_FIELDS`), keyed by document
        id."""
        ...

    def count_alive(self, at: Any) -> int:
        """How many records are not UNDEPLOYED nor FAILED, as of ``at`` (an aggregation)."""
        ...

    def changed_since(self, mark: Any, at: Any, most: int) -> list[Stored]:
        """The records written at or after ``mark`` (stamped by every write of this store), as
        of ``at``, partial as :meth:`alive`'s; at most ``most + 1`` of them (one more than
        ``most`` says there were more)."""
        ...

    def read_followed(self) -> Saved:
        """The followed list as last saved (:mod:`shared.domain.serving.followed`), in one
        batch get, with the time as of which everything else a sync reads is read."""
        ...

    def save_followed(self, listed: Watch | None, version: Any) -> bool:
        """Save the list only if no other tick saved it since ``version`` was read (None: a
        list too large to store: saved as overflowed). False when another did.

        Raises:
            WatchTooLarge: the list does not fit its stored form.
        """
        ...

    def on_endpoint(self, endpoint: str) -> list[dict[str, Any]]:
        """The records of the deployments on ``endpoint`` that have not ended (ACCEPTED,
        DEPLOYING or DEPLOYED), at most :data:`ON_ENDPOINT_LIMIT` of them: an endpoint
        holds at most 64 deployed models flexjobs follows, and ended ones hold none."""
        ...

    def with_outbox(self) -> list[dict[str, Any]]:
        """Every record with notifications not yet published (``outboxPending``)."""
        ...


class DeploymentBackend(Protocol):
    """Vertex AI EndpointService: where models are deployed for prediction."""

    def deploy(self, request: JobRequest, display_name: str, replicas: int) -> str:
        """Start DeployModel of the request's Spot model under ``display_name`` (its tag:
        the idempotency key) with ``replicas`` as its min (and required) replica count, and
        the request's ``trafficSplit``; returns the operation's name. Never retried
        in-process (a call that timed out may have started it)."""
        ...

    def deploy_on_demand(
        self,
        endpoint: str,
        display_name: str,
        replicas: int,
        template: Mapping[str, Any],
    ) -> str:
        """Start DeployModel of an on-demand model (a warm floor, or a fallback) of
        ``template`` (the deployment's requested ``deployedModel``: its model, machine,
        service account and logging are copied) under ``display_name``, with ``replicas``
        and no traffic; the operation's name. Never retried in-process."""
        ...

    def operation(self, name: str) -> OperationStatus:
        """Read one operation of an endpoint (DeployModel, MutateDeployedModel,
        UndeployModel); a DeployModel's names the deployed model's id once done."""
        ...

    def running_deploys(self, endpoint: str) -> tuple[datetime, ...] | None:
        """When each DeployModel operation of ``endpoint`` not yet done started
        (``ListOperations``, one bounded page); None when there are more than a page holds
        (which run is then not known)."""
        ...

    def read(self, endpoint: str) -> ObservedEndpoint:
        """One ``GetEndpoint`` read: the deployed models, their replicas, the traffic split.

        Raises:
            EndpointGone: the endpoint does not exist (NOT_FOUND).
        """
        ...

    def set_traffic(self, endpoint: str, split: Mapping[str, int], etag: str) -> datetime | None:
        """``UpdateEndpoint`` of the traffic split alone, refused if the endpoint changed
        since the read that gave ``etag``; the ``updateTime`` of the version it made (None
        when the answer gives none)."""
        ...

    def resize(self, endpoint: str, deployed_model_id: str, replicas: int) -> str:
        """Start MutateDeployedModel of a deployed model's min (and required) replica count;
        the operation's name."""
        ...

    def undeploy(self, endpoint: str, deployed_model_id: str) -> str:
        """Start UndeployModel of a deployed model without traffic (the split is left as it
        is); the operation's name."""
        ...
