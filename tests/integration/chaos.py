"""The chaos soak of issue 20: requests under crashes, preemptions, lost and late hints and a
faulty Vertex; then quiet, and the invariants checked from outside.

One seeded run (``random.Random(seed)`` draws the requests, their timing and every chaos
action; the interleaving with the stack's own threads is the machine's):

1. an embedded stack of its own (its ports, a short claim TTL and call timeout, a small
   backoff, AUTO's time constants scaled by 60, a tick every ``tick_seconds``), the simulator
   on the wall clock (time factor 1, so AUTO's deadlines, Vertex's timestamps and flexjobs'
   decisions share one clock);
2. *chaos*: a publisher thread sends the planned requests (SPOT, FLEX_START, STANDARD and
   AUTO customJobs of 12 to 24 s of training, most checkpointing into the stack's bucket, a
   few invalid), some twice at once, some again seconds later, some cancelled (one before it
   arrives); meanwhile this thread SIGKILLs function servers (also right after the
   simulator's call log shows a CreateCustomJob whose answer it holds, before the record is
   written), preempts running SPOT jobs, drops, repeats and delays hints, and makes Vertex
   unavailable, slow, lose a create's answer, or make a create late;
3. *quiet*: faults cleared, nobody killed, hints on and faithful, capacity back, until every
   record is terminal and no Vertex job is live (bounded by ``quiet_seconds``);
4. the facts: the simulator's job table and call log, Firestore's ``jobs/``,
   ``jobs/*/attempts/`` and ``rejections/``, and the notifications tap; then the invariants
   (:func:`check`), each with its figure.

Run it as the CI test (``tests/integration/test_chaos.py``) or longer with
``./dev soak [--seed N] [--requests N] [--minutes M]``.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import shutil
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from flexjobs_local.simulator.client import SimulatorControlError
from flexjobs_local.stack import NOTIFICATIONS_TAP, LocalStack, StackConfig
from shared.domain.model.ids import label_value
from tests.integration import chaos_serving as serving
from tests.integration.chaos_serving import PlannedDeployment, ServingFacts
from tests.integration.helpers import running_stack
from tests.integration.test_lifecycle import spot_request

FUNCTIONS = ("handle_job_request", "handle_job_event", "handle_scheduler_tick", "handle_upload")
ACCELERATOR = "NVIDIA_TESLA_A100"  # the seed request's: a DWS GPU, as AUTO needs
CAPACITY = 16
CLAIM_TTL_SECONDS = 6
# As production's push subscriptions dead-letter a message (infra/: max_delivery_attempts, 5
# at the least), with the local push bridge's backoff (1 s doubling to 10 s): a message that
# fails for about 15 s is given up.
MAX_DELIVERY_ATTEMPTS = 5
CALL_TIMEOUT_SECONDS = 4
FUNCTION_ENV = {
    "FLEXJOBS_CLAIM_TTL_SECONDS": str(CLAIM_TTL_SECONDS),
    "FLEXJOBS_CALL_TIMEOUT_SECONDS": str(CALL_TIMEOUT_SECONDS),
    "FLEXJOBS_HINT_COALESCE_SECONDS": "2",
    # A small backoff, not 0: some retries run from the hint, others wait for the tick.
    "FLEXJOBS_BACKOFF_BASE_SECONDS": "1",
    "FLEXJOBS_BACKOFF_CAP_SECONDS": "4",
    "FLEXJOBS_AUTO_TIME_SCALE": "60",
    # Deployments (grace and hold in seconds) and admission queues (chaos_serving).
    **serving.SERVING_ENV,
}
KINDS = ("SPOT", "FLEX_START", "STANDARD", "AUTO")
BAD = "BAD"
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "SKIPPED"})
JOB_ENDED = frozenset({"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"})
# An attempt that ended this way is followed by another: its budget group (recovery.settle).
RETRIED = {
    "preempted": "preemption",
    "stockout": "capacity",
    "max-wait-expired": "capacity",
    "infrastructure": "infrastructure",
}
ENDED_BY_CHOICE = frozenset({"gave-up", "switch"})
CONFIRMED = "mid-delivery kills confirmed (job made, not recorded)"
SAVED = "preemptions of a job that checkpointed (harness)"


@dataclass(frozen=True)
class SoakConfig:
    """The sizes of one run; the CI test's are the defaults."""

    seed: int
    requests: int = 24
    chaos_seconds: float = 60.0
    # The bound on the quiet phase's wait for every record to end.
    quiet_seconds: float = 60.0
    tick_seconds: float = 2.0
    run_seconds: tuple[int, int] = (12, 24)
    checkpoint_every: int = 4
    auto_deadline_seconds: float = 150.0
    # Spot deployModel requests, spread over this many shared endpoints.
    deployments: int = 5
    endpoints: int = 2
    # Keep every process's log (and the harness's timeline) here; None: a temporary folder.
    logs: Path | None = None

    @property
    def publish_spread(self) -> float:
        """Requests are first published within this many seconds of the start."""
        return self.chaos_seconds * 0.6


@dataclass
class Planned:
    """One request of the plan and what is done to it (times from the start of chaos)."""

    rid: str
    kind: str
    at: float
    run_seconds: int
    checkpoints: bool
    twice_at_once: bool = False
    again_after: float | None = None
    cancel_at: float | None = None
    # The admission queue it waits in (None: the default queue).
    queue: str | None = None

    @property
    def good(self) -> bool:
        return self.kind != BAD

    def body(self, cfg: SoakConfig, now: datetime) -> dict[str, Any]:
        """The request message, built at publish time (an AUTO deadline counts from then)."""
        every = cfg.checkpoint_every
        body = spot_request(self.rid, run_seconds=self.run_seconds, every=every)
        spec = body["customJob"]["jobSpec"]
        if not self.checkpoints:
            del spec["baseOutputDirectory"]
        if self.queue is not None:
            body["queue"] = self.queue
        if self.kind == "AUTO":
            spec["scheduling"] = {"strategy": "AUTO"}
            deadline = now + timedelta(seconds=cfg.auto_deadline_seconds)
            body.update(
                deadline=deadline.isoformat().replace("+00:00", "Z"),
                estimatedRunSeconds=self.run_seconds,
                checkpointIntervalSeconds=every,
                restartOverheadSeconds=6,
                totalSteps=self.run_seconds,  # the simulator's step is a second of work
            )
        elif self.kind == "FLEX_START":
            spec["scheduling"] = {"strategy": "FLEX_START", "maxWaitDuration": "1800s"}
        elif self.kind == "STANDARD":
            spec["scheduling"] = {"strategy": "STANDARD"}
        elif self.kind == BAD:
            spec["bogusField"] = True  # refused: an unknown field of the v1 proto
        return body


def make_plan(cfg: SoakConfig, rng: random.Random) -> list[Planned]:
    """The requests of the run, drawn from ``rng``."""
    bad = set(rng.sample(range(cfg.requests), max(1, cfg.requests // 12)))
    plan = []
    for i in range(cfg.requests):
        kind = BAD if i in bad else rng.choices(KINDS, weights=(40, 25, 15, 20))[0]
        p = Planned(
            rid=f"soak{cfg.seed}-{i:03d}",
            kind=kind,
            at=rng.uniform(0, cfg.publish_spread),
            run_seconds=rng.randint(*cfg.run_seconds),
            checkpoints=kind == "AUTO" or rng.random() < (0.8 if kind == "SPOT" else 0.6),
        )
        p.twice_at_once = rng.random() < 0.3
        if rng.random() < 0.25:
            p.again_after = rng.uniform(2, 10)
        if rng.random() < 0.15:
            p.cancel_at = min(p.at + rng.uniform(0, 20), cfg.chaos_seconds - 1)
        if kind in ("SPOT", "FLEX_START") and rng.random() < 0.4:
            p.queue = serving.QUEUE  # a preemptible quota of its own: they wait their turn
        plan.append(p)
    # At least one of each kind the invariants speak of (SPOT preempted, AUTO switching).
    for kind in ("SPOT", "AUTO"):
        spare = [p for p in plan if p.good and p.kind not in ("SPOT", "AUTO")]
        if spare and not any(p.kind == kind for p in plan):
            spare[0].kind = kind
            spare[0].checkpoints = True
            spare[0].queue = None  # AUTO may draw on-demand, which the queue has none of
    # At least one request waits in the queue with a quota.
    queueable = [p for p in plan if p.kind in ("SPOT", "FLEX_START")]
    if queueable and not any(p.queue for p in plan):
        queueable[-1].queue = serving.QUEUE
    # One cancel overtakes its request: a tombstone, then the request it cancelled.
    first = next(p for p in plan if p.good)
    first.at, first.cancel_at = max(first.at, 3.0), max(first.at, 3.0) - 3.0
    return plan


@dataclass
class Timeline:
    """What the harness did, when (seconds from the start of chaos), by request when known."""

    start: float = field(default_factory=time.monotonic)
    events: list[tuple[float, str | None, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, what: str, rid: str | None = None) -> None:
        with self.lock:
            self.events.append((time.monotonic() - self.start, rid, what))

    def now(self) -> float:
        return time.monotonic() - self.start

    def lines(self, rids: Iterable[str] | None = None) -> list[str]:
        wanted = None if rids is None else set(rids)
        with self.lock:
            return [
                f"  {t:7.2f}s {rid or '-':>14} {what}"
                for t, rid, what in self.events
                if wanted is None or rid in wanted or rid is None or "kill" in what
            ]


@dataclass
class Observed:
    """Everything the invariants are checked on, read from outside flexjobs."""

    plan: list[Planned]
    records: dict[str, dict[str, Any]]
    attempts: dict[str, dict[int, dict[str, Any]]]
    rejections: dict[str, dict[str, Any]]
    jobs: list[dict[str, Any]]
    creates: list[dict[str, Any]]
    cancels: list[dict[str, Any]]
    calls_complete: bool
    notifications: list[dict[str, Any]]
    preempted_by_harness: set[str]
    # Messages the push bridge gave up (dead letters), with their data decoded.
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    # The deployments and the admission ledger, as looked at during chaos and at the end.
    serving: ServingFacts | None = None


@dataclass
class Verdict:
    number: int
    name: str
    ok: bool
    figure: str
    problems: list[str] = field(default_factory=list)
    rids: set[str] = field(default_factory=set)

    def problem(self, rid: str | None, text: str) -> None:
        self.ok = False
        self.problems.append(f"{rid or '-'}: {text}")
        if rid:
            self.rids.add(rid)

    def lines(self, limit: int = 12) -> list[str]:
        head = f"{self.number}. {'PASS' if self.ok else 'FAIL'} {self.name}: {self.figure}"
        shown = [f"     {p}" for p in self.problems[:limit]]
        if len(self.problems) > limit:
            shown.append(f"     ... and {len(self.problems) - limit} more")
        return [head, *shown]


# --- reading the facts ---------------------------------------------------------------------


def when(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def job_request(job: dict[str, Any]) -> str:
    return str(job.get("labels", {}).get("flexjobs-request", ""))


def job_attempt(job: dict[str, Any]) -> int:
    try:
        return int(job.get("labels", {}).get("flexjobs-attempt", ""))
    except ValueError:
        return 0


def preempted(job: dict[str, Any]) -> bool:
    message = str((job.get("error") or {}).get("message", ""))
    return job.get("state") == "JOB_STATE_FAILED" and "preempt" in message.lower()


def read_notifications(stack: LocalStack, settle: float = 2.0) -> list[dict[str, Any]]:
    """Everything on the notifications tap (flexjobs publishes them; nothing else reads it)."""
    _, subscriber = stack.pubsub_clients()
    path = subscriber.subscription_path(stack.config.project, NOTIFICATIONS_TAP)
    seen: list[dict[str, Any]] = []
    quiet_until = time.monotonic() + settle
    while time.monotonic() < quiet_until:
        response = subscriber.pull(request={"subscription": path, "max_messages": 500}, timeout=10)
        received = response.received_messages
        if not received:
            time.sleep(0.2)
            continue
        seen.extend(json.loads(m.message.data) for m in received)
        subscriber.acknowledge(
            request={"subscription": path, "ack_ids": [m.ack_id for m in received]}
        )
        quiet_until = time.monotonic() + settle
    return seen


# --- the run -------------------------------------------------------------------------------


class Soak:
    """One run of the soak on a started stack; :meth:`run` returns what it observed."""

    def __init__(self, cfg: SoakConfig, stack: LocalStack, out: Callable[[str], None]) -> None:
        from google.cloud import firestore

        self.cfg = cfg
        self.stack = stack
        self.sim = stack.simulator
        self.db = firestore.Client(project=stack.config.project)
        self.out = out
        self.rng = random.Random(cfg.seed)
        self.plan = make_plan(cfg, self.rng)
        self.timeline = Timeline()
        self.counts: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.kills: Counter[str] = Counter()
        self.preempted: set[str] = set()
        self.down: set[str] = set()
        self._publisher_error: list[BaseException] = []
        self.endpoints = [
            f"projects/{stack.config.project}/locations/{stack.config.location}/endpoints/{900 + i}"
            for i in range(cfg.endpoints if cfg.deployments else 0)
        ]
        self.deployments: list[PlannedDeployment] = serving.plan_deployments(
            cfg.seed,
            cfg.deployments,
            self.endpoints,
            cfg.publish_spread,
            cfg.chaos_seconds - 1,
            random.Random(cfg.seed + 1),  # its own stream: the jobs' plan stays the seed's
        )
        self.samples: list[serving.Sample] = []

    # -- publishing ----------------------------------------------------------------------

    def _schedule(self) -> list[tuple[float, str, Planned | PlannedDeployment]]:
        events: list[tuple[float, str, Planned | PlannedDeployment]] = []
        for p in self.plan:
            events.append((p.at, "publish", p))
            if p.again_after is not None:
                events.append((min(p.at + p.again_after, self.cfg.chaos_seconds), "again", p))
            if p.cancel_at is not None:
                events.append((p.cancel_at, "cancel", p))
        for d in self.deployments:
            events.append((d.at, "publish", d))
            if d.cancel_at is not None:
                events.append((d.cancel_at, "cancel", d))
        return sorted(events, key=lambda e: e[0])

    def _publisher(self) -> None:
        try:
            publisher, _ = self.stack.pubsub_clients()
            topic = publisher.topic_path(
                self.stack.config.project, self.stack.config.requests_topic
            )
            for at, what, p in self._schedule():
                time.sleep(max(0.0, at - self.timeline.now()))
                if what == "cancel":
                    self.stack.publish_request({"cancel": p.rid})
                    self.counts["cancels"] += 1
                    self.timeline.add("cancel published", p.rid)
                    continue
                if isinstance(p, PlannedDeployment):
                    data = json.dumps(p.body()).encode()
                else:
                    data = json.dumps(p.body(self.cfg, datetime.now(UTC))).encode()
                copies = 2 if what == "publish" and p.twice_at_once else 1
                # Both copies in flight at once: two deliveries of one request race.
                futures = [publisher.publish(topic, data) for _ in range(copies)]
                for future in futures:
                    future.result(timeout=30)
                self.counts["publishes"] += copies
                self.counts["duplicates"] += copies - 1 + (what == "again")
                kind = p.kind if isinstance(p, Planned) else f"deployModel on {p.endpoint[-3:]}"
                self.timeline.add(f"{what} x{copies} ({kind})", p.rid)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the main thread
            self._publisher_error.append(exc)

    # -- chaos actions ---------------------------------------------------------------------

    def _restart(self, targets: Iterable[str]) -> None:
        for target in targets:
            self.stack.restart_function(target)
            self.down.discard(target)

    def kill(self) -> None:
        """SIGKILL one function server at a random moment; it is restarted a little later."""
        target = self.rng.choice(FUNCTIONS)
        self.down.add(target)
        self.stack.kill_function(target)
        self.kills[target] += 1
        self.timeline.add(f"kill {target}")
        time.sleep(self.rng.uniform(0, 1.5))
        self._restart([target])

    def kill_mid_delivery(self) -> None:
        """Hold the answer of the next CreateCustomJob; once the call log shows it took effect,
        SIGKILL every server that may have made it, before it can record the job."""
        # Calls logged from now on (by time: the call log keeps only the newest 10000).
        armed = datetime.now(UTC).isoformat()
        self.sim.inject_faults(
            "OK", count=1, methods=["CreateCustomJob"], when="after", delay_seconds=5
        )
        try:
            deadline = time.monotonic() + 8
            new: list[dict[str, Any]] = []
            while not new and time.monotonic() < deadline:
                time.sleep(0.05)
                new = [
                    c
                    for c in self.sim.calls("CreateCustomJob")
                    if c["code"] == "OK" and c["time"] >= armed
                ]
            if not new:
                self.counts["mid-delivery kills not armed (no create came)"] += 1
                self.timeline.add("mid-delivery kill: no create came")
                return
            labels = new[0]["request"]["customJob"]["labels"]
            rid, attempt = labels["flexjobs-request"], int(labels["flexjobs-attempt"])
            # Attempt 1 is created by intake (or the tick, for one parked for quota); a retry
            # by the hint that saw the attempt end, or by the tick.
            first = "handle_job_request" if attempt == 1 else "handle_job_event"
            targets = [first, "handle_scheduler_tick"]
            for target in targets:
                self.down.add(target)
                self.stack.kill_function(target)
                self.kills[target] += 1
            self.counts["mid-delivery kills"] += 1
            record = self._record(rid)
            made = [
                j
                for j in self.sim.jobs()
                if job_request(j) == labels["flexjobs-request"] and job_attempt(j) == attempt
            ]
            job = made[-1]["name"] if made else None
            ids = record.get("vertexJobIds") or []
            confirmed = job is not None and record.get("vertexJob") != job
            confirmed = confirmed and job.rsplit("/", 1)[-1] not in ids
            self.counts[CONFIRMED] += confirmed
            self.timeline.add(
                f"kill {'+'.join(targets)} mid-delivery: attempt {attempt} created {job}, "
                f"record {record.get('state')} {'without it' if confirmed else 'names it'}",
                rid,
            )
            time.sleep(self.rng.uniform(0, 1.5))
            self._restart(targets)
        finally:
            self.sim.clear_faults()

    def preempt(self, *, saved_only: bool = False) -> bool:
        """Preempt one running SPOT job, one that checkpointed since it started if any (its
        retry resumes from there); ``saved_only``: only such a job, of a request nobody
        cancels (so its retry runs). Returns whether one was preempted."""
        cancelled = {label_value(p.rid) for p in self.plan if p.cancel_at is not None}
        running = [
            j
            for j in self.sim.jobs()
            if j["state"] == "JOB_STATE_RUNNING" and j["_sim"]["strategy"] == "SPOT"
        ]
        saved = [
            j
            for j in running
            if any(s > (j["_sim"]["resumedStep"] or 0) for s in j["_sim"]["checkpointSteps"])
        ]
        if saved_only:
            saved = [j for j in saved if job_request(j) not in cancelled]
            running = []
        if not saved and not running:
            self.timeline.add("preempt: no SPOT job running" + (" with a checkpoint" * saved_only))
            return False
        job = self.rng.choice(sorted(saved or running, key=lambda j: str(j["name"])))
        try:
            self.sim.preempt(job["name"])
        except SimulatorControlError:
            return False  # it ended meanwhile
        self.preempted.add(job["name"])
        self.counts["preemptions (harness)"] += 1
        if job in saved:
            self.counts[SAVED] += 1
        self.timeline.add(f"preempt attempt {job_attempt(job)} {job['name']}", job_request(job))
        return True

    def preempt_saved(self, wait: float) -> None:
        """Preempt a running SPOT job that checkpointed, waiting (bounded) for one: what makes
        sure a run resumes from a checkpoint, whatever its draws."""
        deadline = time.monotonic() + wait
        while not self.preempt(saved_only=True) and time.monotonic() < deadline:
            time.sleep(0.5)

    def _armed(self, what: str, code: str, wait: float = 6.0, **kwargs: Any) -> None:
        """Arm a fault for a count of calls, wait until they took it (or ``wait`` passes)."""
        self.sim.inject_faults(code, **kwargs)
        deadline = time.monotonic() + wait
        while self.sim.faults() and time.monotonic() < deadline:
            time.sleep(0.1)
        used = not self.sim.faults()
        self.sim.clear_faults()
        self.faults[what if used else f"{what} (armed, never hit)"] += 1
        self.timeline.add(f"fault {what}{'' if used else ': not hit'}")

    def outage(self) -> None:
        seconds = self.rng.uniform(1.5, 4)
        self.sim.inject_faults("UNAVAILABLE", count=1_000_000)
        self.timeline.add(f"Vertex unavailable for {seconds:.1f}s")
        time.sleep(seconds)
        self.sim.clear_faults()
        self.faults["outage (every call UNAVAILABLE for a while)"] += 1

    def long_outage(self) -> None:
        """Vertex unavailable for longer than a message's deliveries last (so some are
        dead-lettered), creates taking effect with their answers lost."""
        seconds = self.rng.uniform(20, 25)
        # The first rule that matches wins: creates happen, then fail; every other call fails.
        self.sim.inject_faults(
            "UNAVAILABLE", count=1_000_000, methods=["CreateCustomJob"], when="after"
        )
        self.sim.inject_faults("UNAVAILABLE", count=1_000_000)
        self.timeline.add(f"Vertex unavailable for {seconds:.1f}s (creates take effect)")
        time.sleep(seconds)
        self.sim.clear_faults()
        self.timeline.add("Vertex back")
        self.faults["long outage (past a message's deliveries; creates take effect)"] += 1

    def lost_reply(self) -> None:
        code = self.rng.choice(("UNAVAILABLE", "DEADLINE_EXCEEDED"))
        self._armed(
            f"create answered {code} after it took effect",
            code,
            count=1,
            methods=["CreateCustomJob"],
            when="after",
        )

    def late_create(self) -> None:
        late = self.rng.uniform(1, 2 * CLAIM_TTL_SECONDS)
        self._armed(
            "create answered DEADLINE_EXCEEDED, taking effect later",
            "DEADLINE_EXCEEDED",
            count=1,
            methods=["CreateCustomJob"],
            when="late",
            late_seconds=late,
        )

    def slow(self) -> None:
        methods = self.rng.choice((None, ["GetCustomJob"], ["ListCustomJobs"], ["CancelCustomJob"]))
        self._armed(
            f"slow {'/'.join(methods) if methods else 'calls'}",
            "OK",
            count=self.rng.randint(1, 3),
            methods=methods,
            delay_seconds=self.rng.uniform(0.5, 2.5),
        )

    def slow_create(self) -> None:
        # Longer than the functions' call deadline: the caller sees DEADLINE_EXCEEDED and the
        # create lands afterwards.
        self._armed(
            "create slower than the call deadline",
            "OK",
            count=1,
            methods=["CreateCustomJob"],
            delay_seconds=CALL_TIMEOUT_SECONDS + self.rng.uniform(0.5, 3),
        )

    def quota(self) -> None:
        self._armed(
            "create refused for quota", "RESOURCE_EXHAUSTED", count=1, methods=["CreateCustomJob"]
        )

    def drought(self) -> None:
        seconds = self.rng.uniform(3, 8)
        location = self.stack.config.location
        self.sim.set_capacity(location, ACCELERATOR, 0)
        self.timeline.add(f"no {ACCELERATOR} capacity for {seconds:.1f}s")
        time.sleep(seconds)
        self.sim.set_capacity(location, ACCELERATOR, CAPACITY)
        self.faults["capacity drought"] += 1

    def spot_flap(self) -> None:
        """Spot serving capacity of the stack's location goes for a few seconds (every Spot
        node there reclaimed; Compute Engine's restart tries find none), then returns."""
        seconds = self.rng.uniform(GRACE_FLAP[0], GRACE_FLAP[1])
        location = self.stack.config.location
        self.sim.set_spot_serving(location, available=False)
        self.counts["spot flaps"] += 1
        self.timeline.add(f"Spot serving capacity gone for {seconds:.1f}s")
        time.sleep(seconds)
        self.sim.set_spot_serving(location, available=True, placement_seconds=1)
        self.look()

    def lost_deploy(self) -> None:
        """A DeployModel (the Spot model's or a fallback's) takes effect and its answer is
        lost: the machine keeps its claim and recognises the model by its name."""
        self._armed(
            "DeployModel answered DEADLINE_EXCEEDED after it took effect",
            "DEADLINE_EXCEEDED",
            wait=4.0,
            count=1,
            methods=["DeployModel"],
            when="after",
        )

    def chaos(self) -> None:
        actions: list[tuple[Callable[[], None], int]] = [
            (self.kill, 4),
            (self.kill_mid_delivery, 3),
            (self.preempt, 6),
            (self.outage, 1),
            (self.lost_reply, 2),
            (self.late_create, 2),
            (self.slow, 2),
            (self.slow_create, 1),
            (self.quota, 1),
            (self.drought, 1),
        ]
        if self.deployments:
            actions += [(self.spot_flap, 3), (self.lost_deploy, 1)]
        funcs, weights = zip(*actions, strict=True)
        halfway = long_outage = False
        time.sleep(2.0)  # the first requests are on their way
        self.kill_mid_delivery()
        while self.timeline.now() < self.cfg.chaos_seconds:
            if not long_outage and self.timeline.now() > self.cfg.publish_spread / 3:
                # Once, while requests arrive: longer than the deliveries a message gets.
                long_outage = True
                self.long_outage()
            if not halfway and self.timeline.now() > self.cfg.chaos_seconds / 2:
                # What a run must have exercised, made sure of while there is time for it.
                halfway = True
                if not self.counts[CONFIRMED]:
                    self.kill_mid_delivery()
                if not self.counts[SAVED]:
                    self.preempt_saved(wait=self.cfg.chaos_seconds / 3)
            if (
                self.deployments
                and not self.counts["spot flaps"]
                and self.timeline.now() > self.cfg.chaos_seconds * 0.7
            ):
                self.spot_flap()  # the deployments are up by now: make sure one is hedged
            self.rng.choices(funcs, weights=weights)[0]()
            self.look()
            time.sleep(self.rng.uniform(0.2, 1.2))

    # -- the phases ------------------------------------------------------------------------

    def make_endpoints(self) -> None:
        """The soak's endpoints, created through the real EndpointService client."""
        if not self.endpoints:
            return
        from shared.adapters.vertex.jobs import ENDPOINT_SERVICE, build_gapic_client
        from shared.kernel.config import Settings

        settings = Settings.from_env()
        client = build_gapic_client(settings, ENDPOINT_SERVICE, settings.location)
        for name in self.endpoints:
            parent, _, endpoint_id = name.rpartition("/endpoints/")
            client.create_endpoint(
                parent=parent,
                endpoint={"display_name": f"soak-{endpoint_id}"},
                endpoint_id=endpoint_id,
                timeout=30,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            made = {e["name"] for e in self.sim.endpoints()}
            if set(self.endpoints) <= made:
                return
            time.sleep(0.25)
        raise AssertionError(f"the soak's endpoints {self.endpoints} were never created")

    def look(self) -> None:
        """One look at the endpoints, the deployment records and the admission ledger (the
        serving and admission checks run on every look)."""
        if not self.deployments:
            return
        try:
            at = datetime.fromtimestamp(self.sim.clock()["simNowEpoch"], UTC)
            endpoints = [e for e in self.sim.endpoints() if e["name"] in self.endpoints]
            records = {
                str(d.get("requestId")): d
                for d in (s.to_dict() for s in self.db.collection("deployments").stream())
                if d
            }
            ledger = self.db.collection("admission").document("ledger").get()
        except Exception as exc:  # noqa: BLE001 - a look that fails is only a look fewer
            self.counts["looks failed"] += 1
            self.timeline.add(f"look failed: {exc!r}"[:200])
            return
        self.samples.append(
            serving.Sample(at, endpoints, records, ledger.to_dict() if ledger.exists else None)
        )

    def run(self) -> Observed:
        cfg = self.cfg
        self.make_endpoints()
        self.sim.set_hints(True, drop=0.15, repeat=0.15, delay=0.2, delay_seconds=6, seed=cfg.seed)
        self.sim.set_preemption_rate(20, seed=cfg.seed)
        self.timeline = Timeline()
        publisher = threading.Thread(target=self._publisher, name="soak-publisher", daemon=True)
        publisher.start()
        try:
            self.chaos()
        finally:
            self._restart(sorted(self.down))
            publisher.join(cfg.chaos_seconds + 60)
        if self._publisher_error:
            raise self._publisher_error[0]
        self.quiet()
        return self.observe()

    def quiet(self) -> None:
        """No faults, no kills, faithful hints, capacity back; wait (bounded) for the end."""
        self.sim.clear_faults()
        self.sim.set_preemption_rate(0)
        self.sim.set_capacity(self.stack.config.location, ACCELERATOR, CAPACITY)
        self.sim.set_hints(True, drop=0.0, repeat=0.0, delay=0.0)
        self.sim.set_spot_serving(self.stack.config.location, available=True)
        self.timeline.add("quiet")
        started = time.monotonic()
        good = [p.rid for p in self.plan if p.good]
        while time.monotonic() - started < self.cfg.quiet_seconds:
            states = {r.get("requestId"): r.get("state") for r in self._records()}
            live = [j for j in self.sim.jobs() if j["state"] not in JOB_ENDED]
            if not live and all(states.get(rid) in TERMINAL for rid in good) and self._settled():
                break
            time.sleep(1.0)
        self.counts["quiet seconds"] = round(time.monotonic() - started)
        # Two ticks more: a notification a failed publish left in an outbox goes out then.
        time.sleep(2 * self.cfg.tick_seconds)
        self.timeline.add("observed")

    # -- reading ---------------------------------------------------------------------------

    def _record(self, rid: str) -> dict[str, Any]:
        snap = self.db.collection("jobs").document(rid).get()
        return snap.to_dict() if snap.exists else {}

    def _records(self) -> list[dict[str, Any]]:
        return [d.to_dict() for d in self.db.collection("jobs").stream()]

    def _settled(self) -> bool:
        """Every deployment at rest: a cancelled one ended with nothing of it left, any other
        DEPLOYED with no call in flight."""
        if not self.deployments:
            return True
        self.look()
        if not self.samples:
            return False
        last = self.samples[-1]
        for d in self.deployments:
            record = last.deployments.get(d.rid) or {}
            if d.cancel_at is not None:
                left = any(
                    serving.tagged(str(m.get("displayName") or ""), d.rid)
                    for e in last.endpoints
                    for m in e.get("deployedModels") or []
                )
                if record and (record.get("state") not in serving.DEPLOYED_ENDS or left):
                    return False
            elif record.get("state") != "DEPLOYED" or (record.get("serving") or {}).get("pending"):
                return False
        return True

    def observe(self) -> Observed:
        records = {str(r["requestId"]): r for r in self._records()}
        attempts = {
            rid: {
                int(d.id): d.to_dict()
                for d in self.db.collection("jobs").document(rid).collection("attempts").stream()
            }
            for rid in records
        }
        rejections = {
            str(d.to_dict().get("requestId")): d.to_dict()
            for d in self.db.collection("rejections").stream()
        }
        calls = self.sim.calls()
        notifications = read_notifications(self.stack)
        facts = None
        if self.deployments:
            self.look()
            facts = ServingFacts(
                plan=self.deployments,
                samples=self.samples,
                calls=[c for c in calls if c["method"] in SERVING_METHODS],
                operations=self.sim.operations(),
                notifications=notifications,
            )
        return Observed(
            plan=self.plan,
            records=records,
            attempts=attempts,
            rejections=rejections,
            jobs=self.sim.jobs(),
            creates=[c for c in calls if c["method"] == "CreateCustomJob"],
            cancels=[c for c in calls if c["method"] == "CancelCustomJob"],
            # The call log keeps the newest 10000 calls: below that, it holds every call.
            calls_complete=len(calls) < 10000,
            notifications=notifications,
            preempted_by_harness=set(self.preempted),
            dead_letters=[{**d, "body": _decoded(d["data"])} for d in self.stack.dead_letters()],
            serving=facts,
        )

    def figures(self, obs: Observed) -> list[str]:
        """What the run did, in numbers (the harness's own account and the simulator's)."""
        hints = self.sim.side_effects()["hints"]["chaos"]
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(Counter(p.kind for p in self.plan).items()))
        kills = ", ".join(f"{k} {n}" for k, n in sorted(self.kills.items()))
        faults = ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items()))
        sim_preempted = sum(preempted(j) for j in obs.jobs)
        codes = dict(sorted(Counter(c["code"] for c in obs.creates).items()))
        resumed = sum(1 for j in obs.jobs if (j["_sim"].get("resumedStep") or 0) > 0)
        c = self.counts
        return [
            f"seed {self.cfg.seed}",
            f"requests {len(self.plan)} ({kinds}), publishes {c['publishes']},"
            f" duplicates {c['duplicates']}, cancels {c['cancels']}",
            f"kills {sum(self.kills.values())} ({kills}), mid-delivery {c['mid-delivery kills']}"
            f" (confirmed job made, not recorded: {c[CONFIRMED]};"
            f" no create came: {c['mid-delivery kills not armed (no create came)']})",
            f"preemptions {sim_preempted} in the job table"
            f" ({c['preemptions (harness)']} by the harness, the rest at random)",
            f"hints: {hints['dropped']} changes dropped, {hints['repeated']} repeated,"
            f" {hints['delayed']} delayed",
            f"faults: {faults}",
            f"creates by answer: {codes}; jobs {len(obs.jobs)}, resumed from a checkpoint"
            f" {resumed}; call log complete: {obs.calls_complete}",
            f"recovery (a preemption to its retry recorded): {recovery_gaps(obs)}",
            f"AUTO: {auto_deadlines(obs)}",
            f"cancelled requests ended: {cancel_outcomes(obs)}",
            f"dead letters (given up after {MAX_DELIVERY_ATTEMPTS} deliveries):"
            f" {dead_letter_counts(obs)}",
            f"deployments: {serving_figure(obs)}; Spot flaps {c['spot flaps']},"
            f" looks {len(self.samples)} ({c['looks failed']} failed)",
            f"admission: {admission_figure(obs)}",
            f"quiet phase {c['quiet seconds']}s (bound {self.cfg.quiet_seconds:.0f}s)",
        ]

    def vacuous(self, obs: Observed) -> list[str]:
        """What the run failed to exercise: each would let the invariants pass for nothing."""
        hints = self.sim.side_effects()["hints"]["chaos"]
        resumed_docs = sum(
            1
            for docs in obs.attempts.values()
            for n, d in docs.items()
            if n > 1 and d.get("resumedFrom")
        )
        resumed_jobs = sum(1 for j in obs.jobs if (j["_sim"].get("resumedStep") or 0) > 0)
        needs = {
            "a function server killed": sum(self.kills.values()),
            "a kill between a create and its record": self.counts[CONFIRMED],
            "a SPOT job preempted": sum(preempted(j) for j in obs.jobs),
            "a fault injected and hit": sum(
                n for k, n in self.faults.items() if "never hit" not in k
            ),
            "a state change's hints dropped": hints["dropped"],
            "a state change's hints repeated": hints["repeated"],
            "a state change's hints delayed": hints["delayed"],
            "a duplicate publish": self.counts["duplicates"],
            "a cancel": self.counts["cancels"],
            "an attempt resumed from a checkpoint (record and job)": min(
                resumed_docs, resumed_jobs
            ),
            "an AUTO request": sum(p.kind == "AUTO" for p in self.plan),
        }  # fmt: skip
        if self.deployments:
            states = Counter(
                str(m.get("state"))
                for m in obs.notifications
                if str(m.get("requestId")) in {d.rid for d in self.deployments}
            )
            needs["a deployment hedged (HEDGED notified)"] = states["HEDGED"]
            needs["a deployed model undeployed on a cancel (UNDEPLOYED)"] = states["UNDEPLOYED"]
            needs["a request admitted through the queue with a quota"] = sum(
                (r.get("admission") or {}).get("queue") == serving.QUEUE
                and bool((r.get("admission") or {}).get("admittedAt"))
                for r in obs.records.values()
            )
        return [what for what, n in needs.items() if not n]


#: The simulator's calls the serving checks read.
SERVING_METHODS = frozenset({"DeployModel", "UndeployModel", "UpdateEndpoint"})
#: How long a Spot flap lasts (seconds): around the grace period, so some are hedged.
GRACE_FLAP = (serving.GRACE_SECONDS - 1.0, serving.GRACE_SECONDS + 5.0)


def serving_figure(obs: Observed) -> str:
    facts = obs.serving
    if facts is None:
        return "none"
    ends = Counter(str((facts.last.deployments.get(p.rid) or {}).get("state")) for p in facts.plan)
    calls = Counter(f"{c['method']} {c['code']}" for c in facts.calls)
    return (
        f"{len(facts.plan)} on {len({p.endpoint for p in facts.plan})} endpoints,"
        f" {len(facts.cancelled)} cancelled; end {dict(sorted(ends.items()))};"
        f" calls {dict(sorted(calls.items()))}"
    )


def admission_figure(obs: Observed) -> str:
    queued = [
        r.get("admission") or {}
        for r in obs.records.values()
        if (r.get("admission") or {}).get("queue") == serving.QUEUE
    ]
    waited = [
        (a["admittedAt"] - a["waitingSince"]).total_seconds()
        for a in queued
        if isinstance(a.get("admittedAt"), datetime) and isinstance(a.get("waitingSince"), datetime)
    ]
    most = f", longest wait {max(waited):.1f}s" if waited else ""
    return (
        f"{len(queued)} requests in {serving.QUEUE} ({serving.QUEUE_GPUS} GPUs),"
        f" {sum(w > 1 for w in waited)} waited over a second{most}"
    )


def recovery_gaps(obs: Observed) -> str:
    """How long each preempted attempt took to be followed by its retry's job: a figure, not
    an invariant (dropped hints leave it to the tick), but a lost read shows here first."""
    gaps = sorted(
        (later["submittedAt"] - doc["endedAt"]).total_seconds()
        for docs in obs.attempts.values()
        for n, doc in docs.items()
        if doc.get("errorClass") == "preempted"
        and doc.get("endedAt")
        and (later := docs.get(n + 1, {})).get("submittedAt")
    )
    if not gaps:
        return "none"
    p95 = gaps[min(len(gaps) - 1, round(0.95 * (len(gaps) - 1)))]
    return f"{len(gaps)}: p50 {gaps[len(gaps) // 2]:.1f}s, p95 {p95:.1f}s, max {gaps[-1]:.1f}s"


def _decoded(data: str) -> Any:
    try:
        return json.loads(base64.b64decode(data))
    except ValueError:
        return None


def _dead_requests(obs: Observed) -> Counter[str]:
    """Request messages given up, by the requestId they carry (cancels as "cancel:<id>")."""
    given_up: Counter[str] = Counter()
    for dead in obs.dead_letters:
        body = dead["body"] if isinstance(dead["body"], dict) else {}
        if "requests" in dead["subscription"]:
            rid = body.get("requestId") or f"cancel:{body.get('cancel')}"
            given_up[str(rid)] += 1
    return given_up


def dead_letter_counts(obs: Observed) -> str:
    by_topic = Counter(d["subscription"].rsplit("/", 1)[-1] for d in obs.dead_letters)
    requests = _dead_requests(obs)
    named = ", ".join(sorted(requests))
    return f"{dict(sorted(by_topic.items()))}" + (f"; requests: {named}" if named else "")


def auto_deadlines(obs: Observed) -> str:
    """How the AUTO requests ended against their deadlines (a figure: chaos may cost one)."""
    ends: Counter[str] = Counter()
    for p in obs.plan:
        record = obs.records.get(p.rid, {})
        if p.kind != "AUTO" or not record:
            continue
        deadline = when(json.loads(record.get("options") or "{}").get("deadline"))
        ended = record.get("endedAt")
        met = record.get("state") == "SUCCEEDED" and deadline and ended and ended <= deadline
        ends[f"{record.get('state')}{' in time' if met else ''}"] += 1
    switches = sum(int(obs.records.get(p.rid, {}).get("switches") or 0) for p in obs.plan)
    return f"{dict(sorted(ends.items()))}, {switches} attempts ended by choice"


def cancel_outcomes(obs: Observed) -> str:
    ends = Counter(
        obs.records.get(p.rid, {}).get("state", "no record")
        for p in obs.plan
        if p.good and p.cancel_at is not None
    )
    return str(dict(sorted(ends.items())))


# --- the invariants (pure, over what was observed) ---------------------------------------


def _by_request(obs: Observed) -> dict[str, list[dict[str, Any]]]:
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for job in obs.jobs:
        by[job_request(job)].append(job)
    return by


def _named(obs: Observed, rid: str) -> set[str]:
    """The Vertex jobs the request's record follows or followed."""
    record = obs.records.get(rid, {})
    names = {d.get("vertexJob") for d in obs.attempts.get(rid, {}).values()}
    names.add(record.get("vertexJob"))
    return {n for n in names if n}


def allowed_strays(obs: Observed) -> dict[str, str]:
    """The extra jobs invariant 3 allows, by name: a job under a (request, attempt) pair that
    is not the one the record names for it, that ended CANCELLED (only flexjobs cancels: the
    harness never asks the simulator to), and that never started running, so it held no GPU.
    Such a job is what a create of unknown outcome may leave (Vertex has no idempotency key:
    docs/lifecycle.md, *Exactly one job per requestId*, step 4), and the docs promise it is
    cancelled; one that ran, or that nothing cancelled, is a violation."""
    allowed: dict[str, str] = {}
    for rid, jobs in _by_request(obs).items():
        named = _named(obs, rid)
        pairs: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for job in jobs:
            pairs[job_attempt(job)].append(job)
        for attempt, group in pairs.items():
            primary = _primary(group, named)
            for job in group:
                if job is primary or job["name"] in named:
                    continue
                if job["state"] == "JOB_STATE_CANCELLED" and not job.get("startTime"):
                    allowed[job["name"]] = f"{rid} attempt {attempt}"
    return allowed


def _primary(group: list[dict[str, Any]], named: set[str]) -> dict[str, Any]:
    """The job of an attempt: the one its record names, else the first created."""
    for job in group:
        if job["name"] in named:
            return job
    return min(group, key=lambda j: j["createTime"])


def no_request_lost(obs: Observed) -> Verdict:
    good = [p for p in obs.plan if p.good]
    bad = [p for p in obs.plan if not p.good]
    states = Counter(obs.records.get(p.rid, {}).get("state", "no record") for p in good)
    rejected = sum(p.rid in obs.rejections for p in bad)
    figure = (
        f"{len(good)} requests: {sum(p.rid in obs.records for p in good)} recorded,"
        f" {sum(n for s, n in states.items() if s in TERMINAL)} terminal"
        f" ({', '.join(f'{s} {n}' for s, n in sorted(states.items()))});"
        f" {len(bad)} invalid: {rejected} rejected"
    )
    verdict = Verdict(1, "no request lost", True, figure)
    given_up = _dead_requests(obs)
    for p in good:
        record = obs.records.get(p.rid)
        dead = f"; {given_up[p.rid]} of its messages dead-lettered" if given_up[p.rid] else ""
        if record is None:
            verdict.problem(p.rid, f"published, but no record{dead}")
        elif record.get("state") not in TERMINAL:
            claim = record.get("claim") or {}
            held = f", claim until {claim['expiresAt']}" if claim.get("expiresAt") else ""
            verdict.problem(
                p.rid,
                f"ends {record.get('state')} (attempt {record.get('attempt')},"
                f" vertexJob {record.get('vertexJob')}{held}){dead}",
            )
    for p in bad:
        if p.rid not in obs.rejections:
            verdict.problem(p.rid, "invalid, but no rejection")
        record = obs.records.get(p.rid)
        tombstone = record is not None and not record.get("attempt") and not record.get("kind")
        if record is not None and not (p.cancel_at is not None and tombstone):
            # A cancel of it leaves a tombstone (attempt 0, no kind): nothing else may.
            verdict.problem(p.rid, f"invalid, but it has a job record ({record.get('state')})")
    return verdict


def _live_interval(job: dict[str, Any]) -> tuple[datetime, datetime]:
    created = when(job["createTime"])
    assert created is not None
    ended = when(job.get("endTime")) if job["state"] in JOB_ENDED else None
    return created, ended or datetime.max.replace(tzinfo=UTC)


def never_two_live(obs: Observed) -> Verdict:
    strays = allowed_strays(obs)
    overlaps = excused = 0
    verdict = Verdict(2, "never two live Vertex jobs for one request at once", True, "")
    for rid, jobs in sorted(_by_request(obs).items()):
        spans = sorted(((*_live_interval(j), j) for j in jobs), key=lambda s: s[0])
        for i, (_start_a, end_a, a) in enumerate(spans):
            for start_b, _end_b, b in spans[i + 1 :]:
                if start_b >= end_a:
                    continue
                if a["name"] in strays or b["name"] in strays:
                    excused += 1
                    continue
                overlaps += 1
                verdict.problem(
                    rid,
                    f"attempt {job_attempt(a)} {a['name'].rsplit('/', 1)[-1]} ({a['state']},"
                    f" {a['createTime']}..{a.get('endTime')}) and attempt {job_attempt(b)}"
                    f" {b['name'].rsplit('/', 1)[-1]} ({b['state']}, from {start_b.isoformat()})",
                )
    verdict.figure = (
        f"{len(_by_request(obs))} requests with jobs, {len(obs.jobs)} jobs:"
        f" {overlaps} overlapping pairs; {excused} more overlaps with a stray cancelled before"
        " it ran (allowed, see 3)"
    )
    return verdict


def one_job_per_attempt(obs: Observed) -> Verdict:
    strays = allowed_strays(obs)
    cancelled = {c["request"].get("name") for c in obs.cancels if serving.took_effect(c)}
    pairs = 0
    refused: list[dict[str, Any]] = []
    verdict = Verdict(3, "exactly one Vertex job per (request, attempt)", True, "")
    by_request = _by_request(obs)
    planned = {p.rid for p in obs.plan}
    for rid, jobs in sorted(by_request.items()):
        if rid not in {label_value(r) for r in planned}:
            verdict.problem(rid, f"{len(jobs)} jobs under a request label nobody published")
            continue
        record = obs.records.get(rid, {})
        named = _named(obs, rid)
        groups: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for job in jobs:
            groups[job_attempt(job)].append(job)
        pairs += len(groups)
        for attempt, group in sorted(groups.items()):
            extra = [j for j in group if j is not _primary(group, named)]
            for job in extra:
                if job["name"] not in strays:
                    ran = "ran" if job.get("startTime") else "never ran"
                    verdict.problem(
                        rid,
                        f"attempt {attempt} has {len(group)} jobs; extra"
                        f" {job['name'].rsplit('/', 1)[-1]} {job['state']} ({ran})",
                    )
                elif obs.calls_complete and job["name"] not in cancelled:
                    verdict.problem(rid, f"stray {job['name']} CANCELLED with no CancelCustomJob")
            if attempt > int(record.get("attempt") or 0):
                # A retry's job that its record refused (a cancel won while it was being
                # created, or its create landed late): the docs promise it is cancelled,
                # started or not. Anything else past the record's attempt is a lost job.
                lost = [
                    j
                    for j in group
                    if j["state"] != "JOB_STATE_CANCELLED"
                    or (obs.calls_complete and j["name"] not in cancelled)
                ]
                refused.extend(j for j in group if j not in lost)
                if lost:
                    verdict.problem(
                        rid,
                        f"a job of attempt {attempt}, past the record's {record.get('attempt')},"
                        f" {lost[0]['state']} and not cancelled by flexjobs",
                    )
        for name in named - {j["name"] for j in jobs}:
            verdict.problem(rid, f"the record names {name}, which Vertex never had")
    ran = sum(1 for j in refused if j.get("startTime"))
    verdict.figure = (
        f"{pairs} (request, attempt) pairs, {len(obs.jobs)} jobs, {len(strays)} strays"
        " allowed (not the job the record names, ended CANCELLED by flexjobs, never ran);"
        f" {len(refused)} jobs of an attempt their record refused, cancelled by flexjobs"
        f" ({ran} after they started)"
    )
    return verdict


def attempts_accounted(obs: Observed) -> Verdict:
    """attempt = 1 + sum(retries) + switches, one less when the request was cancelled with its
    retry owed; and the attempt documents and the job table agree on why each attempt ended."""
    jobs = {j["name"]: j for j in obs.jobs}
    totals: Counter[str] = Counter()
    verdict = Verdict(4, "attempts = 1 + retried ends + switches", True, "")
    for rid, record in sorted(obs.records.items()):
        if record.get("state") not in TERMINAL or not record.get("attempt"):
            continue  # not ended (invariant 1 says so), or a tombstone that never ran
        made = int(record["attempt"])
        retries = {str(k): int(v) for k, v in (record.get("retries") or {}).items()}
        switches = int(record.get("switches") or 0)
        owed = 1 + sum(retries.values()) + switches
        docs = obs.attempts.get(rid, {})
        totals["attempts"] += made
        totals["preemption retries"] += retries.get("preemption", 0)
        totals["other retries"] += sum(v for k, v in retries.items() if k != "preemption")
        totals["switches"] += switches
        totals["quota parks"] += int(record.get("quotaRetries") or 0)
        last = docs.get(made, {})
        retry_owed = (
            record["state"] == "CANCELLED"
            and owed == made + 1
            and (last.get("errorClass") in RETRIED or last.get("endedBy") in ENDED_BY_CHOICE)
        )
        if owed != made and not retry_owed:
            verdict.problem(
                rid,
                f"{record['state']} at attempt {made}, but 1 + retries {retries} + switches"
                f" {switches} = {owed}",
            )
        # Every attempt that got a job has its document; the last one none if it never got
        # one (cancelled while its create was still to come).
        recorded = made if record.get("vertexJob") else made - 1
        if sorted(docs) != list(range(1, recorded + 1)):
            verdict.problem(rid, f"attempt documents {sorted(docs)} for attempt {made}")
        ended: Counter[str] = Counter()
        for n, doc in docs.items():
            if n > made:
                continue
            how = doc.get("endedBy") or RETRIED.get(str(doc.get("errorClass")))
            if n < made or retry_owed:
                if how is None:
                    verdict.problem(
                        rid, f"attempt {n} was followed, yet ended {doc.get('errorClass')}"
                    )
                    continue
                ended[how] += 1
            job = jobs.get(str(doc.get("vertexJob")))
            if doc.get("errorClass") == "preempted" and (job is None or not preempted(job)):
                verdict.problem(
                    rid, f"attempt {n} says preempted; Vertex says {job and job['state']}"
                )
            if doc.get("endedBy") and (job is None or job["state"] != "JOB_STATE_CANCELLED"):
                verdict.problem(rid, f"attempt {n} ended by choice; Vertex: {job and job['state']}")
            # A job preempted after its request's cancel was asked for ends it CANCELLED.
            cancelled = doc.get("errorClass") == "cancelled" and record.get("cancelRequested")
            if job is not None and preempted(job) and doc.get("errorClass") != "preempted":
                if cancelled:
                    continue
                verdict.problem(
                    rid, f"attempt {n}'s job was preempted; its document: {doc.get('errorClass')}"
                )
        if ended["preemption"] != retries.get("preemption", 0):
            verdict.problem(
                rid,
                f"{ended['preemption']} followed attempts ended preempted,"
                f" retries.preemption = {retries.get('preemption', 0)}",
            )
        chosen = sum(ended[k] for k in ENDED_BY_CHOICE)
        if chosen != switches:
            verdict.problem(rid, f"{chosen} attempts ended by choice, switches = {switches}")
    verdict.figure = (
        f"{totals['attempts']} attempts over the ended records = their number +"
        f" {totals['preemption retries']} preemption retries + {totals['other retries']} other"
        f" retries + {totals['switches']} switches ({totals['quota parks']} quota parks add"
        " none)"
    )
    return verdict


def no_orphan(obs: Observed) -> Verdict:
    live = [j for j in obs.jobs if j["state"] not in JOB_ENDED]
    verdict = Verdict(5, "no orphan left running", True, f"{len(live)} live jobs at the end")
    for job in live:
        rid = job_request(job)
        state = obs.records.get(rid, {}).get("state")
        verdict.problem(
            rid,
            f"attempt {job_attempt(job)} {job['name']} is {job['state']}; the record is {state}",
        )
    return verdict


def every_end_notified(obs: Observed) -> Verdict:
    by_rid: dict[str, set[str]] = defaultdict(set)
    for message in obs.notifications:
        by_rid[str(message.get("requestId"))].add(str(message.get("state")))
    ended = {rid: r for rid, r in obs.records.items() if r.get("state") in TERMINAL}
    notified = sum(r["state"] in by_rid[rid] for rid, r in ended.items())
    bad = {p.rid for p in obs.plan if not p.good}
    rejected = sum("REJECTED" in by_rid[rid] for rid in bad if rid in obs.rejections)
    verdict = Verdict(
        6,
        "every terminal state notified",
        True,
        f"{notified} of {len(ended)} ended records notified their end,"
        f" {rejected} of {len(bad)} rejections notified; {len(obs.notifications)} notifications",
    )
    for rid, record in sorted(ended.items()):
        if record["state"] not in by_rid[rid]:
            verdict.problem(
                rid, f"{record['state']} never notified (notified: {sorted(by_rid[rid])})"
            )
        for other in (by_rid[rid] & TERMINAL) - {record["state"]}:
            verdict.problem(rid, f"notified {other}, but the record ended {record['state']}")
    for rid in sorted(bad & set(obs.rejections)):
        if "REJECTED" not in by_rid[rid]:
            verdict.problem(rid, "rejected, but REJECTED never notified")
    return verdict


def check(obs: Observed) -> list[Verdict]:
    verdicts = [
        no_request_lost(obs),
        never_two_live(obs),
        one_job_per_attempt(obs),
        attempts_accounted(obs),
        no_orphan(obs),
        every_end_notified(obs),
    ]
    if obs.serving is not None:
        # The deployments' and admission's, each under its name in the simulator's registry.
        for n, found in enumerate(serving.check_serving(obs.serving), start=len(verdicts) + 1):
            verdict = Verdict(n, f"{found.name} ({found.doc})", True, found.figure)
            for text in found.problems:
                rid = next((p.rid for p in obs.serving.plan if p.rid in text), None)
                verdict.problem(rid, text)
            verdicts.append(verdict)
    return verdicts


# --- one run, as the test and ./dev soak run it ------------------------------------------


@dataclass
class Report:
    seed: int
    figures: list[str]
    verdicts: list[Verdict]
    vacuous: list[str]
    timeline: list[str]

    @property
    def ok(self) -> bool:
        return not self.vacuous and all(v.ok for v in self.verdicts)

    def text(self) -> str:
        lines = ["", f"=== chaos soak, seed {self.seed} ===", *self.figures]
        for verdict in self.verdicts:
            lines += verdict.lines()
        harness = (
            "PASS"
            if not self.vacuous
            else "FAIL (did not exercise: " + "; ".join(self.vacuous) + ")"
        )
        lines.append(f"0. {harness} the run exercised what it claims")
        if not self.ok:
            lines += ["timeline of the requests that failed, every kill and chaos:", *self.timeline]
        lines.append(f"replay: ./dev soak --seed {self.seed}")
        return "\n".join(lines)


def run_soak(cfg: SoakConfig, out: Callable[[str], None] = print) -> Report:
    """Start a stack of the soak's own, run the soak on it, stop it; the report."""
    out(f"chaos soak: seed {cfg.seed} (replay with ./dev soak --seed {cfg.seed})")
    config = StackConfig(
        time_factor=1.0,
        tick_seconds=cfg.tick_seconds,
        functions=FUNCTIONS,
        function_env=FUNCTION_ENV,
        default_capacity=CAPACITY,
        seed=cfg.seed,
        max_delivery_attempts=MAX_DELIVERY_ATTEMPTS,
    )
    workdir = cfg.logs / f"soak-{cfg.seed}" if cfg.logs else None
    if workdir is not None:
        # A replay of the seed replaces its logs: the stack appends to some of them.
        shutil.rmtree(workdir, ignore_errors=True)
    with running_stack(config, workdir=workdir) as stack:
        soak = Soak(cfg, stack, out)
        obs = soak.run()
        verdicts = check(obs)
        failing = set().union(*(v.rids for v in verdicts))
        report = Report(
            seed=cfg.seed,
            figures=soak.figures(obs),
            verdicts=verdicts,
            vacuous=soak.vacuous(obs),
            timeline=soak.timeline.lines(failing),
        )
        if workdir is not None:
            (workdir / "chaos-timeline.txt").write_text("\n".join(soak.timeline.lines()) + "\n")
            out(f"logs kept in {workdir}")
    out(report.text())
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None, help="replay a run's plan and chaos")
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--minutes", type=float, default=5.0, help="of chaos, before the quiet")
    parser.add_argument(
        "--logs", type=Path, default=Path(".flexjobs-local/soak"), help="kept per seed there"
    )
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    cfg = SoakConfig(
        seed=seed,
        requests=args.requests,
        chaos_seconds=args.minutes * 60,
        quiet_seconds=180.0,
        auto_deadline_seconds=max(150.0, args.minutes * 60 * 0.6 + 120),
        logs=args.logs.resolve(),
    )
    return 0 if run_soak(cfg).ok else 1


if __name__ == "__main__":
    sys.exit(main())
