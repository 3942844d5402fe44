"""The chaos soak's deployments and admission: Spot ``deployModel`` requests on shared
endpoints while Spot capacity flaps, cancels of some of them, and training requests in an
admission queue with a quota; and the checks of the deterministic simulator's invariants that
speak of them, over what is seen from outside (Firestore's records and the admission ledger,
the simulator's endpoints, operations and call log).

Each check carries the name and the description of its invariant in the simulator's registry
(:data:`tests.simulation.invariants.INVARIANTS`): the names are looked up there, so a renamed
or removed invariant fails the soak rather than leaving a check under a stale name. The
registry's checks read the in-process world (every fact the simulated Vertex recorded); these
read the real processes' state, sampled during chaos where that is cheap (the endpoints, the
deployment records and the ledger, once per chaos action) and once at the end.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shared.domain.admission.config import read_queues
from shared.domain.admission.ledger import Ledger
from shared.domain.decisions.deploy_model import deployment_tag
from tests.simulation.invariants import FALLBACK_SUFFIX, INVARIANTS

#: The soak's admission queue file: ``soak-q`` holds at most 2 preemptible A100s (SPOT and
#: FLEX_START requests in it wait their turn), ``default`` everything else within the
#: simulator's capacity (the soak's CAPACITY).
QUEUE = "soak-q"
QUEUE_GPUS = 2
QUEUES = f"""
projectQuota:
  - {{region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE, limit: 16}}
  - {{region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: ON_DEMAND, limit: 16}}
queues:
  - name: default
    quotas:
      - {{region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE, nominal: 14}}
      - {{region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: ON_DEMAND, nominal: 16}}
  - name: {QUEUE}
    quotas:
      - {{region: us-central1, acceleratorType: NVIDIA_TESLA_A100, pool: PREEMPTIBLE,
          nominal: {QUEUE_GPUS}}}
"""
#: The machine's grace and hold periods in the soak (seconds of the wall clock, which the
#: simulator follows at time factor 1): short, so a flap is hedged and restored in a minute.
GRACE_SECONDS = 3
HOLD_SECONDS = 6
SERVING_ENV = {
    "FLEXJOBS_QUEUES": QUEUES,
    "FLEXJOBS_SERVING_GRACE_SECONDS": str(GRACE_SECONDS),
    "FLEXJOBS_SERVING_HOLD_SECONDS": str(HOLD_SECONDS),
}
#: The simulator's long-running operations take this long (its default ``lro_seconds``): two
#: DeployModels of one name sent closer than this were in flight at once.
LRO_SECONDS = 5.0
DEPLOYED_ENDS = frozenset({"UNDEPLOYED", "FAILED"})


def registered(name: str) -> tuple[str, str]:
    """The invariant ``name`` of the simulator's registry: its name and description.

    Raises:
        LookupError: the registry has no such invariant (renamed, removed).
    """
    for inv in INVARIANTS:
        if inv.name == name:
            return inv.name, inv.doc
    raise LookupError(f"no invariant {name!r} in tests.simulation.invariants")


@dataclass
class PlannedDeployment:
    """One ``deployModel`` request of the plan (times from the start of chaos)."""

    rid: str
    endpoint: str
    at: float
    replicas: int
    twice_at_once: bool = False
    cancel_at: float | None = None
    # The request names a trafficSplit giving its model all the endpoint's traffic (a
    # DeployModel without one leaves the endpoint's split as it is: empty on a new endpoint).
    all_traffic: bool = False

    def body(self) -> dict[str, Any]:
        region = self.endpoint.split("/")[3]
        project = self.endpoint.split("/")[1]
        split = {"trafficSplit": {"0": 100}} if self.all_traffic else {}
        return {
            "requestId": self.rid,
            "deployModel": {
                **split,
                "endpoint": self.endpoint,
                "deployedModel": {
                    "model": f"projects/{project}/locations/{region}/models/{self.rid}",
                    "displayName": "served",
                    "dedicatedResources": {
                        "machineSpec": {
                            "machineType": "g2-standard-8",
                            "acceleratorType": "NVIDIA_L4",
                            "acceleratorCount": 1,
                        },
                        "spot": True,
                        "minReplicaCount": self.replicas,
                        "maxReplicaCount": self.replicas,
                    },
                },
            },
        }


def plan_deployments(
    seed: int, count: int, endpoints: list[str], spread: float, last: float, rng: random.Random
) -> list[PlannedDeployment]:
    """``count`` deployments over ``endpoints`` (two or more to one endpoint when ``count``
    exceeds them), some published twice at once, about a third cancelled (at least one, and
    one of them soon after its request, while its DeployModel may be in flight)."""
    plan = [
        PlannedDeployment(
            rid=f"soak{seed}-dep{i}",
            endpoint=endpoints[i % len(endpoints)],
            at=rng.uniform(0, spread),
            replicas=rng.choice((1, 2)),
            twice_at_once=rng.random() < 0.3,
        )
        for i in range(count)
    ]
    for endpoint in endpoints:
        first = next((p for p in plan if p.endpoint == endpoint), None)
        if first is not None:
            first.all_traffic = True  # the others take traffic when it leaves, or it fails
    for p in plan:
        if rng.random() < 0.3:
            p.cancel_at = min(p.at + rng.uniform(5, 30), last)
    if plan and not any(p.cancel_at is not None for p in plan):
        plan[-1].cancel_at = min(plan[-1].at + rng.uniform(5, 30), last)
    early = next((p for p in plan if p.cancel_at is not None), None)
    if early is not None:
        early.cancel_at = min(early.at + rng.uniform(0.5, 3), last)
    # And one late, of a deployment deployed by then (and maybe hedged): it is undeployed.
    late = next((p for p in reversed(plan) if p is not early), None)
    if late is not None:
        late.cancel_at = max(late.cancel_at or 0.0, last - 8)
    return plan


def tagged(display_name: str, rid: str) -> bool:
    tag = deployment_tag(rid)
    return display_name.endswith(tag) or display_name.endswith(tag + FALLBACK_SUFFIX)


def is_fallback(display_name: str, rid: str) -> bool:
    return display_name.endswith(deployment_tag(rid) + FALLBACK_SUFFIX)


@dataclass
class Sample:
    """One look, during chaos or at the end: the endpoints, the deployment records, the
    admission ledger (its raw document), and when (the simulator's time)."""

    at: datetime
    endpoints: list[dict[str, Any]]
    deployments: dict[str, dict[str, Any]]
    ledger: dict[str, Any] | None


@dataclass
class ServingFacts:
    """What the serving and admission checks read."""

    plan: list[PlannedDeployment]
    samples: list[Sample]
    calls: list[dict[str, Any]]
    operations: list[dict[str, Any]]
    notifications: list[dict[str, Any]]
    queues_text: str = QUEUES
    quota: dict[str, Any] = field(default_factory=dict)

    @property
    def last(self) -> Sample:
        return self.samples[-1]

    @property
    def cancelled(self) -> set[str]:
        return {p.rid for p in self.plan if p.cancel_at is not None}


@dataclass
class Check:
    """One check's outcome, under its registry name."""

    name: str
    doc: str
    figure: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)


def _check(name: str) -> Check:
    return Check(*registered(name))


def _short(endpoint: str) -> str:
    return endpoint.rsplit("/", 1)[-1]


def _models(sample: Sample) -> Iterable[tuple[str, dict[str, Any]]]:
    for endpoint in sample.endpoints:
        for model in endpoint.get("deployedModels") or []:
            yield str(endpoint["name"]), model


def _available(model: dict[str, Any]) -> int:
    return int((model.get("status") or {}).get("availableReplicaCount") or 0)


def _sim_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# --- the checks ----------------------------------------------------------------------------


#: How long an endpoint may be seen dark (its split empty while a model serves) before it is
#: a problem: a model that landed on, or came back to, an endpoint that takes no traffic is
#: given it by its deployment's next step that can, and that may wait out a Vertex outage
#: (the soak's longest is under 25 s) and a backlog of ticks. The quiet phase's bound.
DARK_LIMIT_SECONDS = 60.0


def split_valid(facts: ServingFacts) -> Check:
    """Every split seen sums to 100. (Whether flexjobs emptied one while another model
    served is judged on each move by the simulator, which knows the endpoint at the move.)"""
    check = _check("split-valid")
    looked = 0
    for sample in facts.samples:
        for endpoint in sample.endpoints:
            looked += 1
            split = {k: int(v) for k, v in (endpoint.get("trafficSplit") or {}).items()}
            if split and sum(split.values()) != 100:
                where = f"{_short(endpoint['name'])} at {sample.at:%H:%M:%S}"
                check.problem(f"{where}: split {split} sums to {sum(split.values())}")
    check.figure = f"{len(facts.samples)} looks at {looked} endpoint states"
    return check


def dark_taken(facts: ServingFacts) -> Check:
    """No endpoint is left dark: seen with an empty split while a model serves for no longer
    than :data:`DARK_LIMIT_SECONDS`, and never at the end."""
    check = _check("dark-taken")
    # An endpoint whose split nobody ever set (its models deployed without one) takes no
    # traffic by its owners' choice: what flexjobs must not do is leave dark one that was set.
    was_set: set[str] = set()
    dark_since: dict[str, datetime] = {}
    episodes = 0
    for sample in facts.samples:
        for endpoint in sample.endpoints:
            name = endpoint["name"]
            split = {k: int(v) for k, v in (endpoint.get("trafficSplit") or {}).items()}
            if split:
                was_set.add(name)
            where = f"{_short(name)} at {sample.at:%H:%M:%S}"
            serving = [
                m["id"]
                for m in endpoint.get("deployedModels") or []
                if _available(m)
                and not any(tagged(str(m.get("displayName") or ""), r) for r in facts.cancelled)
            ]
            if not (not split and serving and name in was_set):
                dark_since.pop(name, None)
                continue
            episodes += name not in dark_since
            since = dark_since.setdefault(name, sample.at)
            dark = (sample.at - since).total_seconds()
            if dark > DARK_LIMIT_SECONDS:
                check.problem(f"{where}: empty split while {serving} serve, for {dark:.0f} s")
                dark_since[name] = sample.at  # one problem per limit's worth of darkness
    for name, since in sorted(dark_since.items()):
        check.problem(f"{_short(name)}: left dark at the end (since {since:%H:%M:%S})")
    check.figure = f"dark episodes seen: {episodes}, none past {DARK_LIMIT_SECONDS:.0f} s allowed"
    return check


def took_effect(call: dict[str, Any]) -> bool:
    """Whether a logged call reached Vertex: an ``OK``, or a lost reply (its effect taken, its
    answer a fault), which the call log marks."""
    return bool(call.get("tookEffect", call["code"] == "OK"))


def traffic_to_serving(facts: ServingFacts) -> Check:
    """Each UpdateEndpoint Vertex took, against the models as the looks show them: a model
    given more traffic than before with no available replica then (its status unchanged since
    before the call and 0), or after an UndeployModel of it was taken."""
    check = _check("traffic-to-serving-models")
    before: dict[str, dict[str, int]] = defaultdict(dict)
    undeployed: dict[str, datetime] = {}
    moves = 0
    ordered = sorted(facts.calls, key=lambda c: str(c.get("simTime") or c["time"]))
    for call in ordered:
        at = _sim_time(call.get("simTime") or call["time"])
        if not took_effect(call) or at is None:
            continue
        request = call["request"]
        if call["method"] == "UndeployModel":
            undeployed.setdefault(str(request.get("deployedModelId")), at)
            continue
        if call["method"] != "UpdateEndpoint":
            continue
        body = request.get("endpoint") or {}
        name = str(body.get("name"))
        split = {k: int(v) for k, v in (body.get("trafficSplit") or {}).items()}
        moves += 1
        for model_id, share in sorted(split.items()):
            if share <= before[name].get(model_id, 0):
                continue
            if model_id in undeployed and undeployed[model_id] < at:
                check.problem(
                    f"{_short(name)} at {at:%H:%M:%S}: traffic given to {model_id}, whose "
                    "UndeployModel was taken before"
                )
            seen = _first_look_after(facts, name, model_id, at)
            if seen is None:
                continue
            changed = _sim_time((seen.get("status") or {}).get("lastUpdateTime"))
            if _available(seen) == 0 and changed is not None and changed <= at:
                check.problem(
                    f"{_short(name)} at {at:%H:%M:%S}: traffic given to {model_id}, which "
                    f"served no replica (none since {changed:%H:%M:%S})"
                )
        before[name] = split
    check.figure = f"{moves} traffic moves taken by Vertex"
    return check


def _first_look_after(
    facts: ServingFacts, endpoint: str, model_id: str, at: datetime
) -> dict[str, Any] | None:
    for sample in facts.samples:
        if sample.at < at:
            continue
        for name, model in _models(sample):
            if name == endpoint and model.get("id") == model_id:
                return model
    return None


def one_fallback(facts: ServingFacts) -> Check:
    """At most one fallback model per deployment in every look, and no two of its fallback
    DeployModels taken within one operation's time of each other (both on their way)."""
    check = _check("one-fallback")
    for sample in facts.samples:
        count: Counter[str] = Counter()
        for _, model in _models(sample):
            for p in facts.plan:
                if is_fallback(str(model.get("displayName") or ""), p.rid):
                    count[p.rid] += 1
        for rid, n in sorted(count.items()):
            if n > 1:
                check.problem(f"{rid} has {n} fallbacks on its endpoint at {sample.at:%H:%M:%S}")
    sent: dict[str, list[datetime]] = defaultdict(list)
    for call in facts.calls:
        if call["method"] != "DeployModel" or not took_effect(call):
            continue
        name = str((call["request"].get("deployedModel") or {}).get("displayName") or "")
        at = _sim_time(call.get("simTime") or call["time"])
        for p in facts.plan:
            if is_fallback(name, p.rid) and at is not None:
                sent[p.rid].append(at)
    for rid, times in sorted(sent.items()):
        times.sort()
        for a, b in itertools.pairwise(times):
            if (b - a).total_seconds() < LRO_SECONDS:
                check.problem(f"{rid}: two fallback DeployModels in flight at {a:%H:%M:%S}")
    check.figure = f"{sum(len(t) for t in sent.values())} fallback DeployModels taken"
    return check


def pause_only_for_hand_edits(facts: ServingFacts) -> Check:
    """Nobody edits an endpoint by hand in the soak: no deployment may ever be paused."""
    check = _check("pause-only-for-hand-edits")
    for sample in facts.samples:
        for rid, record in sorted(sample.deployments.items()):
            if (record.get("serving") or {}).get("phase") == "PAUSED_BY_HAND":
                check.problem(f"{rid} paused as if by hand at {sample.at:%H:%M:%S}")
    check.figure = "no hand edit made"
    return check


def cancel_ends_everything(facts: ServingFacts) -> Check:
    """At the end: each cancelled deployment ended, nothing of it on an endpoint, and no
    DeployModel left running on its endpoint."""
    check = _check("cancel-ends-everything")
    last = facts.last
    pending = {
        str(op["name"]).split("/operations/")[0]
        for op in facts.operations
        if not op.get("done") and "DeployModel" in str((op.get("metadata") or {}).get("@type"))
    }
    ends: Counter[str] = Counter()
    for rid in sorted(facts.cancelled):
        record = last.deployments.get(rid)
        state = record.get("state") if record else "no record"
        ends[str(state)] += 1
        if record is not None and state not in DEPLOYED_ENDS:
            check.problem(f"cancelled deployment {rid} is {state}")
        for endpoint, model in _models(last):
            if tagged(str(model.get("displayName") or ""), rid):
                check.problem(
                    f"cancelled deployment {rid}: model {model['id']} "
                    f"({model.get('displayName')}) still on {_short(endpoint)}"
                )
        planned = next(p for p in facts.plan if p.rid == rid)
        if planned.endpoint in pending:
            check.problem(f"cancelled deployment {rid}: a DeployModel still runs on its endpoint")
    check.figure = (
        f"{len(facts.cancelled)} cancelled deployments ended {dict(sorted(ends.items()))}"
    )
    return check


def every_model_followed(facts: ServingFacts) -> Check:
    check = _check("every-model-followed")
    last = facts.last
    models = 0
    for endpoint, model in _models(last):
        name = str(model.get("displayName") or "")
        owner = next((p.rid for p in facts.plan if tagged(name, p.rid)), None)
        if owner is None:
            continue
        models += 1
        record = last.deployments.get(owner) or {}
        serving = record.get("serving") or {}
        known = {
            record.get("deployedModelId"),
            serving.get("spotDeployedModelId"),
            serving.get("fallbackDeployedModelId"),
            (serving.get("floor") or {}).get("deployedModelId"),
        }
        if record.get("state") != "DEPLOYED" or model["id"] not in known:
            check.problem(
                f"model {model['id']} ({name}) on {_short(endpoint)} is followed by no record "
                f"(its deployment is {record.get('state')})"
            )
    check.figure = f"{models} flexjobs models on the endpoints at the end"
    return check


def no_stuck_record(facts: ServingFacts) -> Check:
    """The deployments' part: no record DEPLOYING on an operation that ended, none left
    ACCEPTED or DEPLOYING at all once quiet, and every deployment not cancelled DEPLOYED."""
    check = _check("no-stuck-record")
    done = {str(op["name"]) for op in facts.operations if op.get("done")}
    states: Counter[str] = Counter()
    for p in facts.plan:
        record = facts.last.deployments.get(p.rid)
        state = str(record.get("state")) if record else "no record"
        states[state] += 1
        if record is None:
            # A cancel that came first leaves the jobs' tombstone, and the request deploys
            # nothing (cancel-ends-everything checks that nothing of it is left).
            if p.cancel_at is None:
                check.problem(f"deployment {p.rid} published, but no record")
            continue
        if state == "DEPLOYING" and record.get("operation") in done:
            check.problem(f"deployment {p.rid} is DEPLOYING but {record['operation']} ended")
        elif p.cancel_at is None and state != "DEPLOYED":
            why = (record.get("reason") or "")[:120]
            check.problem(f"deployment {p.rid} (not cancelled) ends {state} {why}".rstrip())
        pending = (record.get("serving") or {}).get("pending")
        # A call in flight whose operation Vertex still runs is waited for (the tick reads it
        # each minute); one whose operation ended and that the record still waits on is stuck.
        if state == "DEPLOYED" and pending and pending.get("operation") in done:
            check.problem(
                f"deployment {p.rid} still waits on {pending.get('call')} once quiet, though"
                f" {pending.get('operation')} ended"
            )
    check.figure = f"{len(facts.plan)} deployments: {dict(sorted(states.items()))}"
    return check


def notice_happened(facts: ServingFacts) -> Check:
    """The deployments' notices: a HEDGED only after its fallback's DeployModel reached Vertex,
    a RESTORED only after an UndeployModel was taken, an UNDEPLOYED only for a cancelled one
    with nothing of it left."""
    check = _check("notice-happened")
    fallbacks: dict[str, list[datetime]] = defaultdict(list)
    undeploys: list[datetime] = []
    for call in facts.calls:
        # The notices carry the functions' (wall) clock: the call log's wall time.
        at = _sim_time(call["time"])
        if not took_effect(call) or at is None:
            continue
        if call["method"] == "DeployModel":
            name = str((call["request"].get("deployedModel") or {}).get("displayName") or "")
            for p in facts.plan:
                if is_fallback(name, p.rid):
                    fallbacks[p.rid].append(at)
        elif call["method"] == "UndeployModel":
            undeploys.append(at)
    rids = {p.rid for p in facts.plan}
    counted: Counter[str] = Counter()
    owed = {
        (str(m.get("requestId")), str(m.get("state")), str(m.get("at")))
        for m in facts.notifications
        if str(m.get("requestId")) in rids
    }
    for message in facts.notifications:
        rid, state = str(message.get("requestId")), str(message.get("state"))
        if rid not in rids:
            continue
        counted[state] += 1
        at = _sim_time(message.get("at"))
        if state == "HEDGED" and not any(at is None or t <= at for t in fallbacks[rid]):
            check.problem(f"HEDGED notified for {rid}: no fallback reached Vertex before")
        elif state == "RESTORED" and not any(at is None or t <= at for t in undeploys):
            check.problem(f"RESTORED notified for {rid}: no UndeployModel was taken before")
        elif state == "UNDEPLOYED" and rid not in facts.cancelled:
            check.problem(f"UNDEPLOYED notified for {rid}, which nobody cancelled")
    check.figure = (
        f"deployment notices {dict(sorted(counted.items()))}, {len(owed)} distinct"
        " (a notice flushed by two deliveries at once is published twice)"
    )
    return check


def every_end_notified(facts: ServingFacts) -> Check:
    """Not an invariant of the registry (the soak's 6, for deployments): a deployment ended
    or deployed notified so, and never the other."""
    check = Check("every deployment end notified", "DEPLOYED, FAILED, UNDEPLOYED published")
    by_rid: dict[str, set[str]] = defaultdict(set)
    for message in facts.notifications:
        by_rid[str(message.get("requestId"))].add(str(message.get("state")))
    for p in facts.plan:
        record = facts.last.deployments.get(p.rid) or {}
        state = record.get("state")
        if state in ("DEPLOYED", "UNDEPLOYED", "FAILED") and state not in by_rid[p.rid]:
            check.problem(f"{p.rid} is {state}, never notified (notified {sorted(by_rid[p.rid])})")
        for other in (by_rid[p.rid] & {"FAILED", "UNDEPLOYED"}) - {state}:
            check.problem(f"{p.rid} notified {other}, but its record is {state}")
    check.figure = f"{sum(bool(by_rid[p.rid]) for p in facts.plan)} deployments notified"
    return check


def within_quota(facts: ServingFacts) -> Check:
    """The ledger in every look: a queue holds at most its nominal quota (no cohort), and all
    of them at most the file's project quota and the simulator's own quota where set."""
    check = _check("within-quota")
    queues = read_queues(_yaml(facts.queues_text))
    most: Counter[str] = Counter()
    looked = 0
    for sample in facts.samples:
        if sample.ledger is None:
            continue
        looked += 1
        usage: dict[str, Counter[Any]] = defaultdict(Counter)
        total: Counter[Any] = Counter()
        for entry in Ledger.decode(sample.ledger).held.values():
            for resource, gpus in entry.demand.items():
                usage[entry.queue][resource] += gpus
                total[resource] += gpus
        for name, held in usage.items():
            queue = queues.queues.get(name)
            for resource, gpus in held.items():
                most[f"{name} {resource}"] = max(most[f"{name} {resource}"], gpus)
                if queue is not None and not queue.unbounded and queue.cohort is None:
                    nominal = queue.quota(resource).nominal
                    if gpus > nominal:
                        check.problem(
                            f"queue {name} holds {gpus} of {resource} at "
                            f"{sample.at:%H:%M:%S}, past its nominal {nominal}"
                        )
        for resource, gpus in total.items():
            limit = queues.project_quota.get(resource)
            if limit is not None and gpus > limit:
                check.problem(f"{gpus} GPUs of {resource} admitted, projectQuota {limit}")
    peaks = ", ".join(f"{k} {v}" for k, v in sorted(most.items()))
    check.figure = f"{looked} looks at the ledger; most held: {peaks or 'none'}"
    return check


def _yaml(text: str) -> dict[str, Any]:
    import yaml

    loaded = yaml.safe_load(text)
    assert isinstance(loaded, dict)
    return loaded


def check_serving(facts: ServingFacts) -> list[Check]:
    return [
        split_valid(facts),
        dark_taken(facts),
        traffic_to_serving(facts),
        one_fallback(facts),
        pause_only_for_hand_edits(facts),
        cancel_ends_everything(facts),
        every_model_followed(facts),
        no_stuck_record(facts),
        notice_happened(facts),
        every_end_notified(facts),
        within_quota(facts),
    ]
