"""The invariants the simulator checks, each named once, here; docs/simulation.md lists the
same names and what each stands for (tests/simulation/test_simulator.py holds the two lists
equal).

``always`` invariants hold after every step of a run, whatever is in flight. ``settled`` ones
hold once the faults stop and the quiet ticks have run (liveness: everything that was asked
is done, nothing is left that no tick moves on). ``at`` ones are checked when what they are
about happens (a traffic move, a preemption, a tick that ran alone).

Each check reads the world as it is (the stores, Vertex, what was notified, the facts the
world recorded) and never calls flexjobs' code to decide: a check that asked the rule under
test whether the rule was right could not fail.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from shared.domain.admission.config import Resource
from shared.domain.admission.ledger import Ledger
from shared.domain.admission.line import order_of, queue_of, within_bound
from shared.domain.decisions.deploy_model import deployment_tag
from shared.domain.model.ids import LABEL_ATTEMPT, LABEL_REQUEST, label_value
from shared.domain.model.states import JobState, from_vertex
from shared.domain.model.values import parse_rfc3339
from shared.domain.model.watch import decode as decode_line
from shared.domain.serving.followed import FOLLOWED_FIELDS, followed
from shared.domain.serving.model import FALLBACK_SUFFIX, FLOOR_SUFFIX, Phase
from shared.domain.serving.rule import allowed
from tests.simulation.vertex import PLACEMENT, region_of
from tests.simulation.world import Violation, World

#: How long before its deadline on-demand from the start must have finished for a missed
#: deadline to count: the control plane's own minutes (a tick, a hint, a redelivery).
DEADLINE_MARGIN = timedelta(minutes=30)


@dataclass(frozen=True)
class Invariant:
    name: str
    when: str
    check: Callable[[World], list[Violation]]

    @property
    def doc(self) -> str:
        return (self.check.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")


INVARIANTS: list[Invariant] = []


def invariant(name: str, when: str) -> Callable[[Callable[[World], Iterator[str]]], Any]:
    """Register a check: it yields what it found wrong, each in a sentence."""

    def register(check: Callable[[World], Iterator[str]]) -> Callable[[World], list[Violation]]:
        def run(world: World) -> list[Violation]:
            return [Violation(name, detail) for detail in check(world)]

        run.__doc__ = check.__doc__
        run.__name__ = check.__name__
        INVARIANTS.append(Invariant(name, when, run))
        return run

    return register


def checks(when: str) -> list[Callable[[World], list[Violation]]]:
    return [i.check for i in INVARIANTS if i.when == when]


# -- helpers: the world as the checks read it ------------------------------------------------


def _live(world: World) -> list[Any]:
    out = []
    for job in world.vertex.jobs.jobs.values():
        state = from_vertex(job.state)
        if state is None or not state.terminal:
            out.append(job)
    return out


def _records(world: World) -> dict[str, dict[str, Any]]:
    return world.database.jobs


def _label_of(request_id: str) -> str:
    return label_value(request_id)


def _queues(world: World) -> Any:
    return world.intake.queues


def _options(record: Mapping[str, Any]) -> dict[str, Any]:
    raw = record.get("options")
    try:
        found = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _tagged(display_name: str, request_id: str) -> bool:
    tag = deployment_tag(request_id)
    return display_name.endswith((tag, tag + FALLBACK_SUFFIX, tag + FLOOR_SUFFIX))


def _deployment_models(world: World, request_id: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for endpoint, models in world.vertex.endpoints.endpoints.items():
        for model in models:
            if _tagged(str(model.get("displayName") or ""), request_id):
                out.append((endpoint, model))
    return out


def _pending_deploys(world: World, request_id: str) -> list[str]:
    """Pending DeployModel operations that will put a model of ``request_id`` on an endpoint."""
    out = []
    for name, (_, deployed) in world.vertex.endpoints._pending.items():
        if _tagged(str(deployed.get("displayName") or ""), request_id):
            out.append(name)
    return out


# -- jobs ---------------------------------------------------------------------------------------


@invariant("one-job-per-attempt", "always")
def one_job_per_attempt(world: World) -> Iterator[str]:
    """Never two live Vertex jobs for one attempt of one request."""
    seen = Counter(
        (job.labels.get(LABEL_REQUEST), job.labels.get(LABEL_ATTEMPT))
        for job in _live(world)
        if job.labels.get(LABEL_REQUEST)
    )
    for (label, attempt), count in sorted(seen.items()):
        if count > 1:
            yield f"{count} live Vertex jobs for request {label} attempt {attempt}"


@invariant("every-job-followed", "settled")
def every_job_followed(world: World) -> Iterator[str]:
    """Every live Vertex job flexjobs made is the current job of a record that follows it."""
    following = {
        r.get("vertexJob")
        for r in _records(world).values()
        if not JobState(r["state"]).terminal and r.get("vertexJob")
    }
    for job in _live(world):
        if job.labels.get(LABEL_REQUEST) and job.name not in following:
            yield f"{job.name} ({job.state}) runs with no record following it"


@invariant("cancel-ends-everything", "settled")
def cancel_ends_everything(world: World) -> Iterator[str]:
    """A cancel ends with nothing of its request running (no live job, no deployed model,
    no operation that will deploy one) and its record ended, within the quiet ticks,
    whatever was in flight when it came."""
    records = _records(world)
    for request_id in sorted(world.cancelled):
        label = _label_of(request_id)
        for job in _live(world):
            if job.labels.get(LABEL_REQUEST) == label:
                yield f"cancelled {request_id}: {job.name} still {job.state}"
        record = records.get(request_id)
        if record is not None and not JobState(record["state"]).terminal:
            yield f"cancelled {request_id}: its record is still {record['state']}"
        deployment = world.deployment_store.records.get(request_id)
        if deployment is not None:
            if deployment.get("state") not in ("UNDEPLOYED", "FAILED"):
                yield f"cancelled deployment {request_id} is {deployment.get('state')}"
            for endpoint, model in _deployment_models(world, request_id):
                yield (
                    f"cancelled deployment {request_id}: model {model['id']} "
                    f"({model.get('displayName')}) still on {endpoint.rsplit('/', 1)[-1]}"
                )
            for operation in _pending_deploys(world, request_id):
                yield f"cancelled deployment {request_id}: DeployModel {operation} still pending"


@invariant("no-stuck-record", "settled")
def no_stuck_record(world: World) -> Iterator[str]:
    """No record is left in a state no tick moves on: a record that is not ended follows a
    job Vertex has not ended, or waits for something the tick does (a due submission, an
    admission)."""
    now = world.at
    for request_id, record in sorted(_records(world).items()):
        state = JobState(record["state"])
        if state.terminal:
            continue
        name = record.get("vertexJob")
        job = world.vertex.jobs.jobs.get(name) if isinstance(name, str) else None
        if job is not None:
            ended = from_vertex(job.state)
            if ended is not None and ended.terminal and state is not JobState.RETRYING:
                yield f"{request_id} is {state.value} but its job {name} is {job.state}"
            continue
        due = record.get("nextAttemptAt")
        waiting = (record.get("admission") or {}).get("stage") == "WAITING"
        if not waiting and not (isinstance(due, datetime) and due <= now + timedelta(hours=1)):
            yield f"{request_id} is {state.value} with no job, nothing due and no admission"
    for request_id, deployment in sorted(world.deployment_store.records.items()):
        state = deployment.get("state")
        operation = deployment.get("operation")
        if state == "DEPLOYING" and isinstance(operation, str):
            status = world.vertex.operation_status(operation)
            if status is not None and status.done:
                yield f"deployment {request_id} is DEPLOYING but {operation} ended"


@invariant("region-allowed", "always")
def region_allowed(world: World) -> Iterator[str]:
    """Every region a job runs in, or a model is deployed in, is one the project allows
    (``FLEXJOBS_ALLOWED_REGIONS``) and the request allows (its location and ``regions``)."""
    allowed = set(world.settings.allowed_regions)
    for fact in world.new("region-allowed", world.vertex.facts):
        if fact.what == "job created":
            where = fact.detail["location"]
            request = world.published.get(fact.about, {})
            asked = set(request.get("regions") or ()) | {
                request.get("location") or world.settings.location
            }
            if allowed and where not in allowed:
                yield f"{fact.about}: a job in {where}, outside {sorted(allowed)}"
            elif request and where not in asked:
                yield f"{fact.about}: a job in {where}, which the request does not allow"
        elif fact.what == "deploy sent":
            where = region_of(fact.about)
            if allowed and where not in allowed:
                yield f"a model deployed on {fact.about}, outside {sorted(allowed)}"


@invariant("region-bound-kept", "always")
def region_bound_kept(world: World) -> Iterator[str]:
    """Every create flexjobs asks of Vertex runs in the region of every regional resource its
    body names (a key, a reservation, a persistent resource): one that does not is refused
    by Vertex, and the request, accepted, fails for good."""
    for fact in world.new("region-bound-kept", world.vertex.facts):
        if fact.what == "create asked" and fact.detail["bound"]:
            where = fact.detail["location"]
            yield f"{fact.about}: created in {where}, its body names {fact.detail['bound']}"


@invariant("auto-meets-deadline", "settled")
def auto_meets_deadline(world: World) -> Iterator[str]:
    """AUTO never misses a deadline that on-demand from the start would meet under the
    simulator's capacity (with the control plane's margin: :data:`DEADLINE_MARGIN`).

    Not judged: a request whose home region stopped answering, or one whose record followed a
    job in a region that then stopped answering (a job flexjobs knows of, in a region that
    does not answer, is waited for, never taken for ended: a control-plane error never changes
    a job's state, so that outage's time is not AUTO's). A create whose outcome flexjobs never
    learned is judged: that is AUTO's to give up (defect 5)."""
    records = _records(world)
    for request_id, request in sorted(world.published.items()):
        if request.get("strategy") != "AUTO" or request_id in world.cancelled:
            continue
        if request_id in world.rejections.documents:
            continue  # refused at the door, with its reasons recorded: nothing was promised
        deadline = request["deadline"]
        work = world.vertex.work[request_id]
        home = request.get("location") or world.settings.location
        if home in world.vertex.ever_down or work.fails_after is not None:
            continue
        if _followed_into_an_outage(world, request_id):
            continue
        on_demand = (
            request["published"]
            + PLACEMENT
            + timedelta(seconds=work.restart_overhead + work.seconds)
        )
        if on_demand > deadline - DEADLINE_MARGIN or world.at < deadline:
            continue
        record = records.get(request_id)
        if record is None and _dead_letters(world, request_id):
            continue  # its message died unread (dead-lettered): nothing was asked of flexjobs
        if any(label.endswith(f"vertex.create({request_id}) !refused") for label in world.trace):
            continue  # the world's Vertex refused a create of it for good (a 400): it fails
        ended = record.get("endedAt") if record else None
        if record is None or record["state"] != "SUCCEEDED":
            state = record["state"] if record else "no record"
            yield (
                f"{request_id} is {state} at {world.at:%H:%M}; on-demand from the start "
                f"would have ended at {on_demand:%H:%M}, deadline {deadline:%H:%M}"
            )
        elif isinstance(ended, datetime) and ended > deadline:
            yield f"{request_id} ended at {ended:%H:%M}, after its deadline {deadline:%H:%M}"


def _dead_letters(world: World, request_id: str) -> bool:
    """Every message of the request went to the dead letters (a crash lost its delivery, or
    its deliveries ran out): the operator's to replay, not flexjobs' to have run."""
    name = f"request {request_id}"
    live = [m for m in world.messages if m.name == name and not m.dead]
    # Counted by name, as the topic retires a message once it is settled and may come no more:
    # a request whose message died on both of its deliveries is no longer in the topic.
    return world.dead_names.get(name, 0) > 0 and not live and name not in world.acked_names


def _followed_into_an_outage(world: World, request_id: str) -> bool:
    """A job the request's record followed was in a region that stopped answering after."""
    for (rid, job), since in world.followed.items():
        if rid != request_id:
            continue
        region = region_of(job)
        if any(where == region and at >= since for where, at in world.vertex.outages):
            return True
    return False


@invariant("notice-happened", "always")
def notice_happened(world: World) -> Iterator[str]:
    """Every notification corresponds to a change that happened: a job SUCCEEDED that Vertex
    ran to success, a CANCELLED that was asked for, a HEDGED whose fallback reached Vertex, a
    RESTORED whose fallback was undeployed, an UNDEPLOYED with nothing of it left."""
    facts = world.vertex.facts
    for at, message in world.new("notice-happened", world.notified):
        request_id, state = message.get("requestId"), message.get("state")
        if state == "SUCCEEDED":
            if not any(f.what == "job succeeded" and f.about == request_id for f in facts):
                yield f"SUCCEEDED notified for {request_id}, whose job never succeeded"
        elif state == "HEDGED":
            tag = deployment_tag(str(request_id)) + FALLBACK_SUFFIX
            sent = any(
                f.what in ("deploy_on_demand sent", "deploy_fallback sent")
                and str(f.detail.get("displayName", "")).endswith(tag)
                and f.at <= at
                for f in facts
            )
            if not sent:
                yield (
                    f"HEDGED notified for {request_id} at {at:%H:%M:%S}: no fallback reached Vertex"
                )
        elif state == "RESTORED":
            tag = deployment_tag(str(request_id)) + FALLBACK_SUFFIX
            left = [
                m
                for _, m in _deployment_models(world, str(request_id))
                if str(m.get("displayName") or "").endswith(tag)
            ]
            if left:
                yield f"RESTORED notified for {request_id} while its fallback is still deployed"
        elif state == "UNDEPLOYED":
            left = [m.get("id") for _, m in _deployment_models(world, str(request_id))]
            pending = _pending_deploys(world, str(request_id))
            if left or pending:
                yield (
                    f"UNDEPLOYED notified for {request_id} with {left} still deployed and"
                    f" {len(pending)} DeployModel still running"
                )
        elif state == "CANCELLED" and message.get("kind") != "deployModel":
            series = (_records(world).get(str(request_id)) or {}).get("series")
            if str(request_id) not in world.cancel_asked and not series:
                yield f"CANCELLED notified for {request_id}, which nobody cancelled"


# -- admission ----------------------------------------------------------------------------------


def _ledger(world: World) -> Ledger:
    return Ledger.decode(world.database.ledger)


@invariant("within-quota", "always")
def within_quota(world: World) -> Iterator[str]:  # noqa: C901 - one pass over every ceiling
    """Never more GPUs admitted than any quota: a queue's nominal plus its borrowing limit,
    its cohort's nominal quotas together, the queue file's project quota, and the project's
    real quota in Vertex."""
    queues = _queues(world)
    if queues is None:
        return
    usage: dict[str, Counter[Resource]] = defaultdict(Counter)
    for entry in _ledger(world).held.values():
        for resource, gpus in entry.demand.items():
            usage[entry.queue][resource] += gpus
    total: Counter[Resource] = Counter()
    for held in usage.values():
        total.update(held)
    for resource, gpus in sorted(total.items(), key=str):
        real = world.vertex.quota.get(resource)
        if real is not None and gpus > real:
            yield f"{gpus} GPUs of {resource} admitted, the project's quota is {real}"
        configured = queues.project_quota.get(resource)
        if configured is not None and gpus > configured:
            yield f"{gpus} GPUs of {resource} admitted, the queue file's projectQuota {configured}"
    cohorts: dict[str, Counter[Resource]] = defaultdict(Counter)
    for name, held in usage.items():
        queue = queues.queues.get(name)
        if queue is None or queue.unbounded:
            continue
        for resource, gpus in held.items():
            quota = queue.quota(resource)
            if quota.borrowing_limit is not None and gpus > quota.nominal + quota.borrowing_limit:
                yield f"queue {name} holds {gpus} of {resource}, past nominal plus borrowing"
            if queue.cohort is None and gpus > quota.nominal:
                yield f"queue {name} (no cohort) holds {gpus} of {resource}, past its nominal"
            if queue.cohort is not None:
                cohorts[queue.cohort][resource] += gpus
    for cohort, held in cohorts.items():
        members = [q for q in queues.queues.values() if q.cohort == cohort]
        for resource, gpus in held.items():
            nominal = sum(q.quota(resource).nominal for q in members)
            if gpus > nominal:
                yield f"cohort {cohort} holds {gpus} of {resource}, past its {nominal} nominal"


@invariant("nominal-never-reclaimed", "always")
def nominal_never_reclaimed(world: World) -> Iterator[str]:
    """A queue within its nominal quota is never preempted for another queue's borrowing:
    each victim taken for another queue was taken while its own queue held more than its
    nominal of what they share (whatever the order the victims were taken in: its queue's
    usage once every victim is gone, plus the largest of them, is above its nominal). Each
    victim is judged on the ledger of the step its preemption was written in (a job of its
    queue that ends later does not make the choice wrong)."""
    queues = _queues(world)
    if queues is None:
        return
    records = _records(world)
    victims = {
        rid: record
        for rid, record in records.items()
        if (record.get("yielding") or {}).get("why") == "preempted"
        and not JobState(record["state"]).terminal
    }
    fresh = [rid for rid in victims if _victim_key(rid, victims[rid]) not in world.victims_judged]
    if fresh:
        _judge_victims(world, queues, victims, fresh)
    for rid in sorted(victims):
        yield from world.victims_judged.get(_victim_key(rid, victims[rid]), [])


def _victim_key(request_id: str, record: dict[str, Any]) -> str:
    """One preemption of one request (a request may be preempted again, later)."""
    return f"{request_id}@{(record.get('yielding') or {}).get('at')}"


def _judge_victims(
    world: World, queues: Any, victims: dict[str, dict[str, Any]], fresh: list[str]
) -> None:
    ledger = _ledger(world)
    held = {rid: record for rid, record in victims.items() if rid in ledger.held}
    after: dict[str, Counter[Resource]] = defaultdict(Counter)
    for rid, entry in ledger.held.items():
        if rid not in held:
            for resource, gpus in entry.demand.items():
                after[entry.queue][resource] += gpus
    largest: dict[tuple[str, Resource], int] = defaultdict(int)
    taken_for: dict[str, str] = {}
    for rid, record in held.items():
        entry = ledger.held[rid]
        reason = str((record.get("yielding") or {}).get("reason") or "")
        by_queue = reason.rsplit(" in queue ", 1)[-1] if " in queue " in reason else None
        if by_queue is None or by_queue == entry.queue:
            continue  # within its own queue: a priority, not a reclaim
        taken_for[rid] = by_queue
        for resource, gpus in entry.demand.items():
            largest[(entry.queue, resource)] = max(largest[(entry.queue, resource)], gpus)
    for rid in fresh:
        found: list[str] = []
        by_queue = taken_for.get(rid)
        queue = queues.queues.get(ledger.held[rid].queue) if rid in ledger.held else None
        if by_queue is not None and queue is not None:
            entry = ledger.held[rid]
            for resource in entry.demand:
                nominal = queue.quota(resource).nominal
                before = after[entry.queue][resource] + largest[(entry.queue, resource)]
                if before <= nominal:
                    found.append(
                        f"{rid} of queue {entry.queue} preempted for queue {by_queue}, though "
                        f"{entry.queue} borrowed none of {resource}: it holds "
                        f"{after[entry.queue][resource]} of its {nominal} nominal once its "
                        f"victims are gone"
                    )
        world.victims_judged[_victim_key(rid, victims[rid])] = found


def idle_nominal(world: World) -> Iterator[str]:  # noqa: C901 - every condition a line has
    """The heads of queues that fit their idle nominal GPUs (:func:`no_idle_nominal`)."""
    queues = _queues(world)
    if queues is None:
        return
    ledger = _ledger(world)
    used: dict[str, Counter[Resource]] = defaultdict(Counter)
    total: Counter[Resource] = Counter()
    for entry in ledger.held.values():
        for resource, gpus in entry.demand.items():
            used[entry.queue][resource] += gpus
            total[resource] += gpus
    heads: dict[str, tuple[Any, str, dict[str, Any]]] = {}
    # A higher priority waiting anywhere may hold lower ones back by design (no priority
    # inversion: its demand is charged against them): only a line of one priority is judged.
    priorities = {
        (record.get("admission") or {}).get("priority")
        for record in _records(world).values()
        if (record.get("admission") or {}).get("stage") == "WAITING"
        and not JobState(record["state"]).terminal
    }
    if len(priorities) > 1:
        return
    for rid, record in _records(world).items():
        admission = record.get("admission") or {}
        if admission.get("stage") != "WAITING" or JobState(record["state"]).terminal:
            continue
        if record.get("cancelRequested"):
            continue
        queue = admission.get("queue")
        since = admission.get("waitingSince")
        if not isinstance(queue, str) or not isinstance(since, datetime):
            continue
        if queue not in heads or (since, rid) < heads[queue][:2]:
            heads[queue] = (since, rid, admission)
    from shared.domain.admission.ledger import demand_from_list

    for name, (_since, rid, admission) in sorted(heads.items()):
        queue = queues.queues.get(name)
        if queue is None or queue.unbounded:
            continue
        demand = demand_from_list(admission.get("demand"))
        if not demand:
            continue
        members = [q for q in queues.queues.values() if queue.cohort and q.cohort == queue.cohort]
        fits = True
        for resource, gpus in demand.items():
            # Idle: unused by its queue, and by every queue of its cohort (GPUs another
            # queue borrows are not idle: they come back by preemption, or by their ends).
            free = queue.quota(resource).nominal - used[name][resource]
            if members:
                pool = sum(q.quota(resource).nominal for q in members)
                free = min(free, pool - sum(used[q.name][resource] for q in members))
            real = world.vertex.quota.get(resource)
            configured = queues.project_quota.get(resource)
            ceilings = [c for c in (real, configured) if c is not None]
            if ceilings:
                free = min(free, min(ceilings) - total[resource])
            if gpus > free:
                fits = False
        if fits:
            held_by = admission.get("heldBy")
            yield (
                f"{rid}, head of queue {name}, fits its idle nominal GPUs but waits"
                f" (heldBy: {held_by!r})"
            )


@invariant("no-idle-nominal", "always")
def no_idle_nominal(world: World) -> Iterator[str]:
    """No queue waits behind another queue's backlog while its own nominal GPUs sit idle:
    after a tick that ran alone and unhurt, with every waiting request of one priority, no
    queue's oldest waiting request fits within its queue's unused nominal quota, its
    cohort's and the project's free quota."""
    if world.new("no-idle-nominal", world.lone_ticks):
        yield from idle_nominal(world)


# -- serving ------------------------------------------------------------------------------------


@invariant("split-valid", "always")
def split_valid(world: World) -> Iterator[str]:
    """A traffic split always sums to 100, and flexjobs never empties one while a model of the
    endpoint serves that is not leaving (a model of a deployment its owner cancelled, on its
    way out, does not count; each move judged on the endpoint as it was when it was made)."""
    backend = world.vertex.endpoints
    for endpoint, _models in sorted(backend.endpoints.items()):
        split = backend.splits.get(endpoint, {})
        total = sum(split.values())
        if split and total != 100:
            yield f"{endpoint.rsplit('/', 1)[-1]}: split {split} sums to {total}"
    going = sorted(world.cancel_asked)
    for fact in world.new("split-valid", world.vertex.facts):
        if fact.what != "traffic set" or fact.detail["split"]:
            continue
        names, leaving = fact.detail["names"], fact.detail["leaving"]
        serving = [
            model_id
            for model_id, available in sorted(fact.detail["available"].items())
            if available
            and model_id not in leaving
            and not any(_tagged(names.get(model_id, ""), rid) for rid in going)
        ]
        if serving:
            yield f"{fact.about.rsplit('/', 1)[-1]}: split emptied while {serving} serve"


#: Lone ticks (ran alone and unhurt) an endpoint may stay dark through: the first may undeploy
#: a restored fallback before the take, the next takes it; one more for a read from before a
#: move of ours.
DARK_TICKS = 3


@invariant("dark-taken", "always")
def dark_taken(world: World) -> Iterator[str]:
    """No endpoint is left dark: an endpoint whose split is empty while a model serves (a
    model of a deployment its owner cancelled does not count) is given traffic within three
    ticks that run alone and unhurt, once a model landed on it, or came back to it."""
    backend = world.vertex.endpoints
    going = sorted(world.cancel_asked)
    for endpoint, models in sorted(backend.endpoints.items()):
        serving = [
            m["id"]
            for m in models
            if (m.get("status") or {}).get("availableReplicaCount")
            and not any(_tagged(str(m.get("displayName") or ""), rid) for rid in going)
        ]
        if backend.splits.get(endpoint) or not serving:
            world.dark_since.pop(endpoint, None)
            continue
        since = world.dark_since.setdefault(endpoint, len(world.lone_ticks))
        ticks = len(world.lone_ticks) - since
        if ticks >= DARK_TICKS:
            where = endpoint.rsplit("/", 1)[-1]
            yield f"{where}: empty split while {serving} serve, through {ticks} lone ticks"


@invariant("traffic-to-serving-models", "always")
def traffic_to_serving(world: World) -> Iterator[str]:
    """flexjobs never gives traffic to a model with no available replica, or to one it is
    undeploying (each traffic move judged on the endpoint as it was when it was made)."""
    for fact in world.new("traffic-to-serving-models", world.vertex.facts):
        if fact.what != "traffic set":
            continue
        before, split = fact.detail["before"], fact.detail["split"]
        available, leaving = fact.detail["available"], fact.detail["leaving"]
        where = fact.about.rsplit("/", 1)[-1]
        for model_id, share in sorted(split.items()):
            if share <= before.get(model_id, 0):
                continue
            if not available.get(model_id):
                yield f"{where}: traffic given to {model_id}, which serves no replica"
            if model_id in leaving:
                yield f"{where}: traffic given to {model_id}, which is being undeployed"


@invariant("one-fallback", "always")
def one_fallback(world: World) -> Iterator[str]:
    """At most one fallback per deployment: on its endpoint, and on its way there."""
    for request_id in sorted(world.deployment_store.records):
        tag = deployment_tag(request_id) + FALLBACK_SUFFIX
        count = sum(
            1
            for _, model in _deployment_models(world, request_id)
            if str(model.get("displayName") or "").endswith(tag)
        )
        count += sum(
            1
            for _, deployed in world.vertex.endpoints._pending.values()
            if str(deployed.get("displayName") or "").endswith(tag)
        )
        if count > 1:
            yield f"deployment {request_id} has {count} fallbacks"


@invariant("pause-only-for-hand-edits", "always")
def pause_only_for_hand_edits(world: World) -> Iterator[str]:
    """Our own actions are never taken for a hand edit, and another flexjobs deployment's
    never pause ours: a deployment is paused only after someone edited its endpoint."""
    for request_id, record in sorted(world.deployment_store.records.items()):
        serving = record.get("serving") or {}
        if serving.get("phase") != "PAUSED_BY_HAND":
            continue
        endpoint = str(record.get("endpoint") or "")
        since = parse_rfc3339(serving.get("since"))
        # Its baseline: when it was published, or last resumed (the endpoint as it was then
        # became what it follows): only an edit after it explains this pause.
        published = (world.published.get(request_id) or {}).get("published")
        resumed = parse_rfc3339(serving.get("resumedAt"))
        baseline = (
            max(t for t in (published, resumed) if t is not None)
            if (published or resumed)
            else None
        )
        edits = [
            e
            for e in world.hand_edits.get(endpoint, [])
            if (baseline is None or e >= baseline) and (since is None or e <= since)
        ]
        if not edits:
            short = endpoint.rsplit("/", 1)[-1]
            yield (
                f"deployment {request_id} paused as if by hand; nobody edited {short} since"
                " it took the endpoint as it was"
            )


@invariant("serving-moves-in-table", "always")
def serving_moves_in_table(world: World) -> Iterator[str]:
    """Every phase change of a deployment is one the row of the serving state table its write
    names allows (``rule.TRANSITIONS``, the table docs/serving.md prints; each write is seen
    on its own, one step at a time, so no move hides between two), and a record's state never
    moves back (ACCEPTED, DEPLOYING, DEPLOYED, then UNDEPLOYED or FAILED)."""
    for request_id, record in sorted(world.deployment_store.records.items()):
        top = str(record.get("state"))
        before_top = world.seen_states.get(request_id)
        world.seen_states[request_id] = top
        back = before_top is not None and (
            _STATE_ORDER.get(top, 9) < _STATE_ORDER.get(before_top, 9)
            or (before_top == "DEPLOYED" and top == "FAILED")  # FAILED never overwrites it
        )
        if back:
            yield f"deployment {request_id}'s record moved back from {before_top} to {top}"
        serving = record.get("serving")
        phase = serving.get("phase") if isinstance(serving, dict) else None
        if not isinstance(phase, str) or phase not in Phase.__members__:
            continue
        before = world.seen_phases.get(request_id)
        world.seen_phases[request_id] = phase
        if before is None or before == phase:
            continue
        name = str(serving.get("transition") or "")
        if not allowed(name, Phase(before), Phase(phase)):
            yield (
                f"deployment {request_id} moved {before} -> {phase} by {name or 'no row'}:"
                " the table has no such move"
            )


#: A deployment record's states in the order they may move in (the ends last).
_STATE_ORDER = {"ACCEPTED": 0, "DEPLOYING": 1, "DEPLOYED": 2, "UNDEPLOYED": 3, "FAILED": 3}


@invariant("cancel-stops-billing", "quiet+30")
def cancel_stops_billing(world: World) -> Iterator[str]:
    """Once the faults stop, no model of a cancelled deployment is left on its endpoint (and
    billing) past 30 quiet minutes: an undeploy is not held behind a call already done."""
    for request_id in sorted(world.cancelled):
        if request_id not in world.deployment_store.records:
            continue
        for endpoint, model in _deployment_models(world, request_id):
            yield (
                f"cancelled deployment {request_id}: model {model['id']} still on "
                f"{endpoint.rsplit('/', 1)[-1]} 30 quiet minutes after the faults stopped"
            )


@invariant("every-model-followed", "settled")
def every_model_followed(world: World) -> Iterator[str]:
    """Every model flexjobs deployed is followed by its deployment's record: a DEPLOYED
    record names it (its Spot model or its fallback)."""
    records = world.deployment_store.records
    for endpoint, models in sorted(world.vertex.endpoints.endpoints.items()):
        for model in models:
            name = str(model.get("displayName") or "")
            owner = next((rid for rid in records if _tagged(name, rid)), None)
            if owner is None:
                continue
            record = records[owner]
            serving = record.get("serving") or {}
            floor = serving.get("floor") or {}
            known = {
                record.get("deployedModelId"),
                serving.get("fallbackDeployedModelId"),
                floor.get("deployedModelId"),
            }
            if record.get("state") != "DEPLOYED" or model["id"] not in known:
                yield (
                    f"model {model['id']} ({name}) on {endpoint.rsplit('/', 1)[-1]} is "
                    f"followed by no record (its deployment is {record.get('state')})"
                )


# -- requests from clients ----------------------------------------------------------------------


@invariant("client-body-kept", "always")
def client_body_kept(world: World) -> Iterator[str]:
    """A request a client built from an SDK job runs with what the SDK itself would have sent
    (its service account, network, timeout...), and one the SDK would send is never refused."""
    for fact in world.new("client-body-kept", world.vertex.facts):
        if fact.what != "job created" or fact.about not in world.expected_bodies:
            continue
        expected = world.expected_bodies[fact.about]
        got = fact.detail["spec"]
        for path, value in expected.items():
            if _at(got, path) != value:
                yield (
                    f"{fact.about}: the job runs with {path}={_at(got, path)!r},"
                    f" the SDK sent {value!r}"
                )
    for request_id in sorted(world.new("client-refusals", sorted(world.expected_bodies))):
        if request_id in world.client_refused:
            errors = world.client_refused[request_id]
            yield (
                f"{request_id}, valid as the SDK would send it, was refused by the client: {errors}"
            )
    for request_id in sorted(world.expected_bodies):
        if world.rejections.documents.get(request_id):
            errors = world.rejections.documents[request_id].get("errors")
            yield f"{request_id}, valid as the SDK would send it, was refused: {errors}"


def _at(body: Any, path: str) -> Any:
    node = body
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


@invariant("series-one-active", "always")
def series_one_active(world: World) -> Iterator[str]:
    """A scheduled series that forbids overlap never has two of its slots running at once."""
    running: dict[str, list[str]] = defaultdict(list)
    live = {job.name for job in _live(world)}
    for request_id, record in _records(world).items():
        series = record.get("series")
        if not series or world.series_concurrency.get(series, "allow") != "forbid":
            continue
        if record.get("vertexJob") in live:
            running[series].append(request_id)
    for series, slots in sorted(running.items()):
        if len(slots) > 1:
            yield f"series {series} runs {sorted(slots)} at once"


@invariant("line-complete", "always")
def line_complete(world: World) -> Iterator[str]:
    """The admission line as a pass reads it (the saved line, then every record stamped for
    it since its mark) holds every request waiting in its queue up to the queue's bound (all
    of them when the line holds the queue whole), as its record says (its queue, priority,
    demand and arrival, so a pass orders it as the record would), and no other that has not
    ended. A record whose last write left no stamp (an older revision's, a hand edit's) is
    the tick's to heal, and is left out until then."""
    db = world.database
    if db.line_head is None:
        return  # none saved: a pass reads the waiting records whole
    saved = decode_line(db.line_shards)
    if saved is None:
        return  # unreadable: a pass reads the waiting records whole
    line = {str(s.raw.get("requestId")): s.raw.get("admission") for s in saved.active.values()}
    for request_id, stamps in db.line_stamps.items():
        if not any(v > saved.mark for v in stamps):
            continue
        record = db.jobs.get(request_id)
        admission = (record or {}).get("admission") or {}
        if admission.get("stage") == "WAITING":
            line[request_id] = admission
        else:
            line.pop(request_id, None)
    unstamped = {
        rid
        for rid in db.jobs
        if db.versions.get(rid) not in {v for v, _ in db.history.get(rid, [])}
    }
    live = {
        rid: r
        for rid, r in _records(world).items()
        if rid not in unstamped and not JobState(r["state"]).terminal
    }
    waiting = {
        rid: r["admission"]
        for rid, r in live.items()
        if (r.get("admission") or {}).get("stage") == "WAITING"
        # Past its queue's bound, a request is one the saved line keeps no entry of.
        and within_bound(saved, queue_of(r), order_of(r))
    }
    held = {
        rid: a
        for rid, a in line.items()
        if rid in live
        # An entry past its queue's bound (synced since) is one no pass weighs.
        and within_bound(saved, queue_of(live[rid]), order_of(live[rid]))
    }
    for request_id in sorted(set(waiting) - set(held)):
        yield f"{request_id} waits in its queue, but the line does not hold it"
    for request_id in sorted(set(held) - set(waiting)):
        yield f"the line holds {request_id}, which does not wait"
    for request_id in sorted(set(held) & set(waiting)):
        if held[request_id] != waiting[request_id]:
            yield f"the line holds {request_id} as {held[request_id]}, its record says otherwise"


@invariant("followed-complete", "always")
def followed_complete(world: World) -> Iterator[str]:
    """The followed list as the tick reads it (the saved list, then every deployment stamped
    since its mark) holds every deployment that has not ended, each as its record says (its
    machine's state and what that state is read with, so the tick decides on it as a step
    would), and none that has ended."""
    store = world.deployment_store
    if store.followed_head is None or store.followed_head.get("overflowedAt") is not None:
        return  # none saved, or too large to save: the tick reads every record whole
    saved = decode_line(store.followed_shards)
    if saved is None:
        return  # unreadable: the tick builds it again from the records
    listed = {str(s.raw.get("requestId")): dict(s.raw) for s in saved.active.values()}
    for request_id, version in store.touched.items():
        if version < saved.mark or request_id not in store.records:
            continue
        record = store.records[request_id]
        if followed(record):
            listed[request_id] = {k: record[k] for k in FOLLOWED_FIELDS if k in record}
        else:
            listed.pop(request_id, None)
    alive = {
        rid: {k: r[k] for k in FOLLOWED_FIELDS if k in r}
        for rid, r in store.records.items()
        if followed(r)
    }
    for request_id in sorted(set(alive) - set(listed)):
        yield f"deployment {request_id} has not ended, but the followed list does not hold it"
    for request_id in sorted(set(listed) - set(alive)):
        if request_id in store.records:
            yield f"the followed list holds {request_id}, which has ended"
    for request_id in sorted(set(alive) & set(listed)):
        if alive[request_id] != listed[request_id]:
            yield f"the followed list holds {request_id} as it was, its record says otherwise"
