"""Scale benchmark (a script, not a test): prints its figures; run ``./dev bench scale``.

Issue 26's measurements, each printed beside its target with PASS or FAIL computed from the
figure. ``--ci`` runs small sizes (under a minute of ticks); the default is the full size.

1. **The tick at N active jobs** (N = 1,000 and 10,000; ``--ci`` 200). N RUNNING records,
   built by the domain (``new_record``, ``submission_change`` on the job the simulator created,
   then ``observe`` of it RUNNING), written to the Firestore emulator in batches; their jobs
   created in the simulator over gRPC by the product's own ``VertexJobBackend.create`` (with
   the labels intake puts on them), so the tick's paged ``ListCustomJobs`` shows them. The real
   tick (``shared.app.services.tick.reconcile`` on ``shared.bootstrap.build_tracker``, the
   production wiring, with its Firestore client's channel counted) then runs in a fresh
   subprocess per tick, so the memory figure is the function's: steady (nothing changed), and
   with 1% of the jobs preempted in the simulator. Each tick is run once plain (wall time,
   peak RSS) and once more on an equivalent state under ``tracemalloc`` (the tick's own peak
   of Python allocations; tracemalloc slows it, so its wall time is not the one printed).
   Firestore reads are the documents the server returned (``benchmarks.counting``); Vertex
   calls come from the simulator's call log.
2. **The status page and ``flexjobs list``** at 100,000 records (``--ci`` 2,000; a tenth
   RUNNING, the rest ended over the last week), seeded in batches for at most 3 minutes (the
   figure printed says how many fitted), each page served in this process by
   ``shared.status.site.serve`` with the totals read for every request (``totals_seconds=0``,
   the worst case): ``/``, a filtered list, the last page by its cursor, a job page, the
   totals alone, and ``Client.jobs`` (``flexjobs list``); min, median and p95 of the server
   time.
3. **Control-plane cost of one job's life**: one Spot job through the real handlers (fresh
   request; RUNNING; preemption and retry; RUNNING; SUCCEEDED; each state change as the
   simulator's 3 hint copies), every Firestore read and write counted, Vertex calls from the
   call log, Pub/Sub requests with their sizes, each handler call's wall time and CPU; plus
   the job's share of an hour of steady ticks at the largest N measured. Priced with
   ``benchmarks/control_plane_prices.yaml`` (:mod:`benchmarks.costs`) against 1 hour of one
   A100 at the cheapest price of ``prices.yaml``.

4. **Intake CPU against the client-library floor** (:mod:`benchmarks.floor`): a fresh
   request through ``handle_job_request`` and a preemption's hint through
   ``handle_job_event`` (functions/main.py, production wiring), each against a floor handler
   that makes exactly the same RPCs with the same payloads on the same client objects and
   nothing else: 2,000 requests a side (``--ci`` 200) from 8 threads, this process's CPU
   time, the sides alternating over several rounds; ``--profile DIR`` adds a py-spy profile
   of one more batch of each side, and ``--cpu-split ROUNDS`` (4 by default, none with
   ``--ci``) runs the fresh request's sides from one thread with the client-library methods
   both call timed on their own: each side's CPU inside them and outside them (its own work).
   ``--no-cpu`` skips it.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import io
import json
import math
import os
import resource
import subprocess
import sys
import threading
import time
import tracemalloc
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flexjobs_local.procs import exit_on_sigterm
from flexjobs_local.stack import LocalStack, StackConfig

MIB = 1024 * 1024
# Issue 26's targets for the tick (at N = 10,000; printed for every N).
TICK_MEMORY_MIB = 256.0
TICK_WALL_SECONDS = 60.0
CHANGED_SHARE = 0.01


def tick_request(request_id: str) -> dict[str, Any]:
    """The seed example, running for ever (the simulator reads ``sleep N``)."""
    from tests.events import load

    body: dict[str, Any] = copy.deepcopy(load("seed_request"))
    body["requestId"] = request_id
    body["customJob"]["displayName"] = request_id
    body["customJob"]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"] = ["100000000"]
    return body


def seed_tick(stack: LocalStack, count: int, prefix: str) -> list[str]:
    """``count`` RUNNING jobs: created in the simulator, recorded as the lifecycle records them.

    Returns the Vertex job names.
    """
    from google.cloud import firestore

    from shared.adapters.vertex.jobs import VertexJobBackend
    from shared.domain.decisions.jobs import observe
    from shared.domain.decisions.submissions import Submission, new_record, submission_change
    from shared.domain.model.ids import doc_id, labels_for
    from shared.domain.model.records import JobRecord
    from shared.domain.request.message import parse_request
    from shared.kernel.config import Settings

    settings = Settings.from_env()
    backend = VertexJobBackend(settings)
    location = settings.location

    def create(i: int) -> tuple[Any, Any, datetime]:
        request_id = f"{prefix}-{i:05d}"
        request = parse_request(tick_request(request_id), {}, f"m-{request_id}")
        created = datetime.now(UTC)
        job = backend.create(request, labels_for(request_id, 1), location)
        return request, job, created

    with ThreadPoolExecutor(max_workers=8) as pool:
        made = list(pool.map(create, range(count)))
    names = {job.name for _, job, _ in made}
    # One paged listing: every job as Vertex now reports it (RUNNING once placed).
    deadline = time.monotonic() + 300
    while True:
        listed = {j.name: j for j in backend.list_labelled(location) if j.name in names}
        running = [j for j in listed.values() if j.state == "JOB_STATE_RUNNING"]
        if len(running) == count:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(running)} of {count} jobs RUNNING after 300 s")
        time.sleep(1.0)

    db = firestore.Client(project=settings.project)
    batch, pending = db.batch(), 0
    for request, job, created in made:
        record = new_record(request, location, created)
        sub = Submission(request.request_id, 1, job, request.strategy, location)
        change = submission_change(JobRecord.decode(record), sub, created)
        record.update(change.record)
        for name in change.deletes:
            record.pop(name, None)
        seen = listed[job.name]
        ran = observe(JobRecord.decode(record), seen, datetime.now(UTC))
        attempt = dict(change.attempt)
        if ran is not None:
            record.update(ran.record)
            attempt.update(ran.attempt)
        # A job the create already reported RUNNING was recorded RUNNING by the submission.
        assert record["state"] == "RUNNING", f"{job.name}: the record is {record['state']}"
        ref = db.collection("jobs").document(doc_id(request.request_id))
        batch.set(ref, record)
        batch.set(ref.collection("attempts").document("1"), attempt)
        pending += 2
        if pending >= 400:
            batch.commit()
            batch, pending = db.batch(), 0
    batch.commit()
    return sorted(names)


# --- one tick, in a process of its own -------------------------------------------------------


def rss_high_water_mib() -> float:
    """This process's peak RSS (``VmHWM``), its own: Linux keeps ``ru_maxrss`` across execve,
    so a child's would include its parent's at the fork."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class LogSink(io.TextIOBase):
    """Where the function's log lines go in the benchmark: counted (bytes, lines), then
    dropped. Cloud Logging bills what the function writes (the control plane's cost)."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0
        self.lines = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.bytes += len(text.encode())
        self.lines += text.count("\n")
        return len(text)


def tick_child(traced: bool) -> dict[str, Any]:
    """Run one real tick in this (fresh) process; its figures as JSON-able values."""
    import logging

    from benchmarks.counting import DocumentCounter, counted_firestore
    from shared.adapters.firestore.database import Firestore
    from shared.app import handlers
    from shared.app.commands import Reconcile
    from shared.bootstrap import Ports, build_tracker
    from shared.kernel.config import Settings
    from shared.kernel.logs import configure

    configure()  # the function's logging, counted and dropped
    sink = LogSink()
    for handler in logging.getLogger("flexjobs").handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(sink)
    settings = Settings.from_env()
    counter = DocumentCounter()
    database = Firestore(settings, client=counted_firestore(settings.project, counter))
    tracker = build_tracker(settings, ports=Ports(firestore=database))
    rss_before = rss_high_water_mib()
    if traced:
        tracemalloc.start()
    cpu0, t0 = time.process_time(), time.perf_counter()
    changed = handlers.reconcile(Reconcile(), tracker)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    peak = tracemalloc.get_traced_memory()[1] / MIB if traced else None
    tracemalloc.stop()
    counts = counter.take()
    return {
        "changed": changed,
        "wall": wall,
        "cpu": cpu,
        "traced_peak_mib": peak,
        "rss_before_mib": rss_before,
        "rss_peak_mib": rss_high_water_mib(),
        "reads": counts.billed_reads,
        "documents": counts.documents,
        "writes": counts.writes,
        "rpcs": dict(counts.rpcs),
        "log_bytes": sink.bytes,
        "log_lines": sink.lines,
    }


def run_tick(stack: LocalStack, traced: bool) -> dict[str, Any]:
    stack.simulator.clear_calls()
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.scale", "--tick-child", *(["--traced"] * traced)],
        capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"tick child failed: {out.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    calls = Counter(str(c.get("method", "?")).rsplit("/", 1)[-1] for c in stack.simulator.calls())
    figures["vertex"] = dict(calls)
    return figures


def preempt(stack: LocalStack, names: list[str]) -> None:
    for name in names:
        stack.simulator.preempt(name)
    for name in names:
        stack.simulator.wait_for_job(name, "JOB_STATE_FAILED", timeout=120)


@dataclasses.dataclass
class TickResult:
    n: int
    label: str
    plain: dict[str, Any]
    traced: dict[str, Any]
    changed_jobs: int


def quiet_stack() -> StackConfig:
    """The emulators and the simulator only (no function servers, hints or checkpoints),
    with capacity for every job: what the scale scenarios run the product's code on."""
    return StackConfig(
        functions=(),
        hints=False,
        checkpoints=False,
        default_capacity=10_000_000,
        time_factor=60.0,
    )


def tick_at(n: int) -> list[TickResult]:
    with LocalStack(quiet_stack()) as stack:
        stack.apply_env()
        t0 = time.perf_counter()
        names = seed_tick(stack, n, f"tick{n}")
        print(f"  seeded {n} RUNNING jobs in {time.perf_counter() - t0:.0f} s", flush=True)
        # Builds the watch list (every active record read once), and settles whatever seeding
        # left (expected: nothing).
        first = run_tick(stack, traced=False)
        print(f"  first tick: {summary(first)}", flush=True)
        results = [TickResult(n, "first tick (builds its list)", first, {}, 0)]
        steady = run_tick(stack, traced=False)
        steady_traced = run_tick(stack, traced=True)
        results.append(TickResult(n, "steady", steady, steady_traced, 0))
        k = max(1, round(n * CHANGED_SHARE))
        # Two disjoint 1% sets: one for the plain tick, one for the traced one.
        preempt(stack, names[:k])
        changed = run_tick(stack, traced=False)
        preempt(stack, names[k : 2 * k])
        changed_traced = run_tick(stack, traced=True)
        results.append(TickResult(n, f"{k} preempted (1%)", changed, changed_traced, k))
    return results


def summary(f: dict[str, Any]) -> str:
    return (
        f"wall {f['wall']:.1f} s, reads {f['reads']}, writes {f['writes']}, "
        f"changed {f['changed']}, Vertex {fmt(f['vertex'])}"
    )


def fmt(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def print_tick(results: list[TickResult]) -> list[bool]:
    checks: list[bool] = []
    for r in results:
        p = r.plain
        print(
            f"N={r.n:<6} {r.label:<26} wall {p['wall']:6.1f} s  cpu {p['cpu']:6.1f} s  "
            f"RSS peak {p['rss_peak_mib']:6.1f} MiB (before tick {p['rss_before_mib']:.1f})"
            + (
                f"  tracemalloc peak {r.traced['traced_peak_mib']:6.1f} MiB"
                if r.traced.get("traced_peak_mib") is not None
                else ""
            )
        )
        print(
            f"{'':8} reads {p['reads']} (documents returned {p['documents']}), writes "
            f"{p['writes']}, records changed {p['changed']}; Firestore RPCs {fmt(p['rpcs'])}"
        )
        print(f"{'':8} Vertex calls: {fmt(p['vertex'])}")
        if not r.traced:
            continue
        bound = r.n // 20 + r.changed_jobs
        memory = max(p["rss_peak_mib"], r.traced["traced_peak_mib"])
        lists = {m: c for m, c in p["vertex"].items() if m.startswith("List")}
        others = {m: c for m, c in p["vertex"].items() if not m.startswith("List")}
        for what, ok, text in (
            (
                "reads",
                p["reads"] <= bound,
                f"{p['reads']} <= {bound} (N/20" + (" + changed)" if r.changed_jobs else ")"),
            ),
            (
                "peak memory",
                memory < TICK_MEMORY_MIB,
                f"{memory:.1f} MiB < {TICK_MEMORY_MIB:.0f}",
            ),
            ("wall", p["wall"] < TICK_WALL_SECONDS, f"{p['wall']:.1f} s < 60"),
            (
                "Vertex calls",
                not others if not r.changed_jobs else True,
                f"only the listing's pages ({fmt(lists)})"
                + (f"; besides: {fmt(others)}" if others else ""),
            ),
        ):
            if what == "Vertex calls" and r.changed_jobs:
                print(f"{'':8} target {what}: {text} (not a target with changes)")
                continue
            checks.append(ok)
            print(f"{'':8} target {what}: {text}: {verdict(ok)}")
    return checks


# --- 2. one job's life, counted, and its control-plane cost ----------------------------------

LIFE_RUN_SECONDS = 600  # simulated: 10 s of wall time at the stack's time factor 60
HINT_BYTES = 2048
HINT_COPIES = 3  # ml_job log entries per state change, as the simulator publishes them
INTAKE_ALLOCATION = ("handle_job_request", 1.0, 0.5)  # vCPU, GiB (infra/functions.tf)
EVENT_ALLOCATION = ("handle_job_event", 1.0, 1.0)
TICK_ALLOCATION = ("handle_scheduler_tick", 1.0, 0.5)
TICKS_PER_HOUR = 60
TARGET_RATIO = 0.001  # 0.1% of the job's GPU cost


class CountingNotifier:
    """The product's notifier, counting each publish and its size."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sizes: list[int] = []

    def notify(self, message: Any) -> None:
        self.sizes.append(len(json.dumps(message).encode()))
        self.inner.notify(message)


@dataclasses.dataclass
class Step:
    name: str
    ops: Any  # costs.Operations
    cpu: float
    vertex: dict[str, int]
    log_bytes: int = 0  # what its handler calls logged
    log_lines: int = 0


def job_life() -> list[Step]:
    """One Spot job's life through the real handlers (production wiring, counted channels):
    the fresh request; RUNNING; a preemption and its retry; RUNNING again; SUCCEEDED. Each
    state change is delivered as the simulator's 3 hint copies, each one handler call."""
    import logging

    from benchmarks.costs import Invocation, Operations
    from benchmarks.counting import DocumentCounter, counted_firestore
    from benchmarks.economy import hint_message, request_message
    from benchmarks.recovery import spot_request
    from shared.adapters.firestore.database import Firestore
    from shared.adapters.pubsub import PubsubNotifier
    from shared.app import handlers
    from shared.bootstrap import Ports, build_intake, build_tracker
    from shared.kernel.config import Settings
    from shared.kernel.logs import configure

    config = StackConfig(functions=(), hints=False, checkpoints=False, time_factor=60.0)
    # Kept for the rest of the run: the handlers keep it after this scenario, and a later one
    # replacing their stream flushes it first.
    sink = LogSink()
    with LocalStack(config) as stack:
        stack.apply_env()
        configure()
        for handler in logging.getLogger("flexjobs").handlers:
            if isinstance(handler, logging.StreamHandler):
                handler.setStream(sink)
        # Backoff 0 (the retry is created by the preemption's hint) and a 1 s hint window.
        settings = dataclasses.replace(
            Settings.from_env(), backoff_base_seconds=0.0, hint_coalesce_seconds=1.0
        )
        counter = DocumentCounter()
        database = Firestore(settings, client=counted_firestore(settings.project, counter))
        notifier = CountingNotifier(PubsubNotifier(settings))
        ports = Ports(firestore=database, notifier=notifier)
        intake = build_intake(settings, ports=ports)
        tracker = build_tracker(settings, ports=ports)
        sim = stack.simulator
        steps: list[Step] = []

        def measured(name: str, allocation: tuple[str, float, float], calls: list[Any]) -> None:
            counter.take()
            sim.clear_calls()
            notifier.sizes.clear()
            logged = (sink.bytes, sink.lines)
            ops, cpu = Operations(), 0.0
            for call in calls:
                cpu0, t0 = time.process_time(), time.perf_counter()
                size = call()
                ops.invocations.append(
                    Invocation(time.perf_counter() - t0, allocation[1], allocation[2])
                )
                cpu += time.process_time() - cpu0
                # The message that started the call: its publish and its push delivery.
                ops.pubsub_request_bytes += [size, size]
            counts = counter.take()
            ops.reads, ops.writes = counts.billed_reads, counts.writes
            # Each notification: its publish, and one push delivery to one subscriber.
            ops.pubsub_request_bytes += [b for b in notifier.sizes for _ in range(2)]
            vertex = Counter(str(c.get("method", "?")).rsplit("/", 1)[-1] for c in sim.calls())
            ops.vertex_calls = sum(vertex.values())
            log = (sink.bytes - logged[0], sink.lines - logged[1])
            steps.append(Step(name, ops, cpu, dict(vertex), *log))

        request_id = f"life-{os.getpid()}"
        body = spot_request(request_id)
        pool = body["customJob"]["jobSpec"]["workerPoolSpecs"][0]
        pool["containerSpec"]["env"] = [
            {"name": "FLEXJOBS_SIM_RUN_SECONDS", "value": str(LIFE_RUN_SECONDS)}
        ]
        submitted = request_message(request_id, body)
        size = len(submitted.message.data)

        def submit() -> int:
            handlers.submit_job(submitted, intake)
            return size

        measured("fresh request", INTAKE_ALLOCATION, [submit])

        def job() -> str:
            record = intake.jobs.job_store.get(request_id)
            assert record is not None and record.get("vertexJob"), record
            return str(record["vertexJob"])

        def hints(name: str) -> list[Any]:
            def one() -> int:
                message = hint_message(name)
                handlers.track_job(message, tracker)
                # Production's hint is the ml_job LogEntry the sink publishes: 2 KiB assumed.
                return max(len(message.message.data), HINT_BYTES)

            return [one] * HINT_COPIES

        def state() -> tuple[str, int]:
            record = intake.jobs.job_store.get(request_id) or {}
            return str(record.get("state")), int(record.get("attempt") or 0)

        first = job()
        sim.wait_for_job(first, "JOB_STATE_RUNNING", timeout=120)
        time.sleep(settings.hint_coalesce_seconds + 0.5)
        measured("state change: RUNNING", EVENT_ALLOCATION, hints(first))
        sim.preempt(first)
        sim.wait_for_job(first, "JOB_STATE_FAILED", timeout=120)
        time.sleep(settings.hint_coalesce_seconds + 0.5)
        measured("preemption -> attempt 2", EVENT_ALLOCATION, hints(first))
        assert state()[1] == 2, state()
        second = job()
        sim.wait_for_job(second, "JOB_STATE_RUNNING", timeout=120)
        time.sleep(settings.hint_coalesce_seconds + 0.5)
        measured("state change: RUNNING (2)", EVENT_ALLOCATION, hints(second))
        sim.wait_for_job(second, "JOB_STATE_SUCCEEDED", timeout=120)
        time.sleep(settings.hint_coalesce_seconds + 0.5)
        measured("SUCCEEDED", EVENT_ALLOCATION, hints(second))
        assert state() == ("SUCCEEDED", 2), state()
    # The benchmark's own reads (store.get between steps) are dropped by each step's first take.
    return steps


def job_life_total(steps: list[Step]) -> tuple[Any | None, tuple[int, int]]:
    """One job's life in all (its handler calls, without its share of ticks), and the bytes
    and lines its handlers logged; None when section 3 did not run."""
    from benchmarks.costs import Operations

    if not steps:
        return None, (0, 0)
    total = Operations()
    for step in steps:
        total = total + step.ops
    return total, (sum(s.log_bytes for s in steps), sum(s.log_lines for s in steps))


def tick_share(tick: TickResult, hours: float) -> tuple[Any, float]:
    """One job's share of the ticks over ``hours``: each steady tick's reads, writes, CPU and
    billed time divided by the N jobs it reconciles."""
    from benchmarks.costs import Invocation, Operations

    ticks = round(TICKS_PER_HOUR * hours)
    p, n = tick.plain, tick.n
    ops = Operations(
        reads=math.ceil(p["reads"] * ticks / n),
        writes=math.ceil(p["writes"] * ticks / n),
        pubsub_request_bytes=[],
        vertex_calls=0,
        invocations=[Invocation(p["wall"] * ticks / n, TICK_ALLOCATION[1], TICK_ALLOCATION[2])],
    )
    return ops, p["cpu"] * ticks / n


def print_cost(steps: list[Step], tick: TickResult | None) -> bool:
    from benchmarks.costs import Operations, dollars, gpu_dollars, load_prices

    prices = load_prices()
    hours = 1.0
    total, cpu = Operations(), 0.0
    print(f"{'step':<28} {'reads':>6} {'writes':>6} {'Pub/Sub req':>11} {'Vertex':>6} "
          f"{'calls':>5} {'CPU ms':>8} {'USD':>11}")  # fmt: skip
    rows = [(s.name, s.ops, s.cpu) for s in steps]
    if tick is not None:
        share, share_cpu = tick_share(tick, hours)
        rows.append((f"ticks, 1 h (N={tick.n} share)", share, share_cpu))
    for name, ops, step_cpu in rows:
        total, cpu = total + ops, cpu + step_cpu
        print(
            f"{name:<28} {ops.reads:>6} {ops.writes:>6} {len(ops.pubsub_request_bytes):>11} "
            f"{ops.vertex_calls:>6} {len(ops.invocations):>5} {step_cpu * 1000:>8.1f} "
            f"{dollars(ops, prices).total:>11.7f}"
        )
    priced = dollars(total, prices)
    gpu, strategy = gpu_dollars("NVIDIA_TESLA_A100", 1, hours)
    ratio = priced.total / gpu
    print(
        f"one job's life: ${priced.total:.7f} (Firestore ${priced.firestore:.7f}, Pub/Sub "
        f"${priced.pubsub:.7f}, Vertex API ${priced.vertex:.2f}, functions "
        f"${priced.functions:.7f}; CPU {cpu * 1000:.0f} ms)"
    )
    print(
        f"GPU: 1 h of 1 NVIDIA_TESLA_A100 at the cheapest price of prices.yaml ({strategy}) "
        f"${gpu:.2f}; control plane / GPU = {ratio * 100:.4f}% (target < "
        f"{TARGET_RATIO * 100:.1f}%): {verdict(ratio < TARGET_RATIO)}"
    )
    return ratio < TARGET_RATIO


# --- 2. the status page and flexjobs list at many records -------------------------------------

STATUS_FRONT_MS = 300.0
STATUS_JOB_MS = 50.0
STATUS_TOTALS_MS = 500.0
SEED_BUDGET_SECONDS = 180.0


def status_records(now: datetime, count: int) -> Any:
    """``count`` records as benchmarks/status.py builds them (the domain's ``new_record`` and
    the lifecycle's fields): a tenth active, the rest ended over the last week."""
    from datetime import timedelta

    from benchmarks.status import records

    active = count // 10
    for i, (record, attempts) in enumerate(records(now, count)):
        record["requestId"] = f"page-{i:06d}"
        if i < active:
            record["state"] = "RUNNING"
            record.pop("endedAt", None)
        else:
            record["state"] = "SUCCEEDED" if i % 7 else "FAILED"
            ended = now - timedelta(seconds=(i * 604_800 / count) % 604_800)
            record["endedAt"] = ended
            record["createdAt"] = min(record["createdAt"], ended)
        attempts[-1]["state"] = record["state"]
        yield record, attempts


def seed_status(project: str, now: datetime, count: int) -> tuple[int, float, list[Any]]:
    """Seed up to ``count`` records in batches, stopping after the seeding budget; returns how
    many, the seconds taken, and each record's (createdAt, requestId) for the cursor."""
    from google.cloud import firestore

    from shared.domain.model.ids import doc_id

    db = firestore.Client(project=project)
    t0 = time.perf_counter()
    batch, pending, seeded, keys = db.batch(), 0, 0, []
    for record, attempts in status_records(now, count):
        ref = db.collection("jobs").document(doc_id(record["requestId"]))
        batch.set(ref, record)
        for attempt in attempts:
            batch.set(ref.collection("attempts").document(str(attempt["attempt"])), attempt)
        keys.append((record["createdAt"], doc_id(record["requestId"]), record["requestId"]))
        seeded += 1
        pending += 1 + len(attempts)
        if pending >= 450:
            batch.commit()
            batch, pending = db.batch(), 0
            if time.perf_counter() - t0 > SEED_BUDGET_SECONDS:
                break
    if pending:
        batch.commit()
    return seeded, time.perf_counter() - t0, keys


#: How often the benchmark's stand-in tick syncs the watch list while the page is measured:
#: the scheduler's period, so the page reads a tally as fresh as production's, and the sync's
#: own work shares the machine with the page as it would.
TICK_PERIOD_SECONDS = 60.0


class MinuteTick:
    """The tick's watch step (``watched`` then ``save``, as ``lifecycle.reconcile`` runs it)
    once a minute in a thread, while the page is measured; its figures per sync."""

    def __init__(self, watch_store: Any, job_store: Any) -> None:
        self.watch_store = watch_store
        self.job_store = job_store
        self.syncs: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="minute-tick", daemon=True)

    def sync(self) -> dict[str, Any]:
        from shared.app.services.tick import STRAY_WATCH
        from shared.app.steps.watch import save, watched

        t0 = time.perf_counter()
        seen = watched(self.watch_store, self.job_store, datetime.now(UTC), STRAY_WATCH)
        saved = save(self.watch_store, seen)
        figures = {"how": seen.how, "reads": seen.reads, "saved": saved,
                   "seconds": time.perf_counter() - t0}  # fmt: skip
        self.syncs.append(figures)
        return figures

    def _run(self) -> None:
        while not self._stop.wait(TICK_PERIOD_SECONDS):
            self.sync()

    def __enter__(self) -> MinuteTick:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def status_at(count: int, repeats: int) -> dict[str, Any]:
    from werkzeug.test import EnvironBuilder
    from werkzeug.wrappers import Request

    from benchmarks.counting import DocumentCounter, counted_firestore
    from flexjobs.client import Client
    from shared.adapters.firestore.database import Firestore
    from shared.adapters.firestore.job_store import FirestoreJobStore
    from shared.adapters.firestore.views import FirestoreJobViews
    from shared.adapters.firestore.watch_store import FirestoreWatchStore
    from shared.adapters.packaged_prices import load_packaged_prices
    from shared.kernel.config import Settings
    from shared.status import site as pages
    from shared.status.listing import Cursor
    from shared.status.overview import tallied

    config = StackConfig(functions=(), hints=False, checkpoints=False)
    with LocalStack(config) as stack:
        stack.apply_env()
        now = datetime.now(UTC)
        seeded, seconds, keys = seed_status(config.project, now, count)
        settings = Settings.from_env()
        # The tick's first build of its watch list and tally (once, after an upgrade), read
        # through the counting client: every record it reads is billed.
        counter = DocumentCounter()
        tick_db = Firestore(settings, client=counted_firestore(settings.project, counter))
        tick = MinuteTick(FirestoreWatchStore(tick_db), FirestoreJobStore(tick_db))
        build = tick.sync()
        build["billed"] = counter.take().billed_reads
        steady = tick.sync()
        steady["billed"] = counter.take().billed_reads
        views = FirestoreJobViews(Firestore(settings))
        # The tally read for every request: the worst case (the served page reuses the
        # totals 30 s when it has no tally).
        site = pages.StatusSite(views, load_packaged_prices(), lambda: datetime.now(UTC),
                                totals_seconds=0)  # fmt: skip
        keys.sort(reverse=True)  # newest first, as the list pages
        size = site.page_size
        last = keys[-size - 1]  # the row just before the last page
        cursor = Cursor(last[0], last[2]).token()
        paths = {
            "/ (first page, totals)": "/",
            "/?state=RUNNING&age=7d (filtered)": "/?state=RUNNING&age=7d",
            "/?cursor=... (the last page)": f"/?cursor={cursor}",
            "/jobs/<id> (job page)": f"/jobs/{keys[len(keys) // 2][2]}",
        }

        def served(path: str) -> float:
            where, _, query = path.partition("?")
            environ = EnvironBuilder(path=where, query_string=query).get_environ()
            response = pages.serve(Request(environ), site)
            assert response.status_code == 200, (path, response.status_code)
            return float(response.headers["Server-Timing"].split("dur=")[1])

        def timed(step: Any) -> float:
            t0 = time.perf_counter()
            step()
            return (time.perf_counter() - t0) * 1000

        def tallied_totals() -> None:
            tally = pages._tally(site, datetime.now(UTC))
            assert tally is not None, "the tick's tally is missing or stale"
            tallied(tally, datetime.now(UTC))

        client = Client(project=config.project, settings=settings)
        runs: dict[str, list[float]] = {}
        with tick:
            for name, path in paths.items():
                for _ in range(2):
                    served(path)
                runs[name] = [served(path) for _ in range(repeats)]
            runs[TOTALS] = [timed(tallied_totals) for _ in range(repeats)]
            # Without a tally (no tick yet, or it stopped): counts and the week's ended
            # records capped at 2,001, as before the tally; a few runs, for comparison.
            runs[TOTALS_FALLBACK] = [
                timed(lambda: pages._totals(site, datetime.now(UTC))) for _ in range(3)
            ]
            client.jobs()
            runs["flexjobs list (20 rows)"] = [timed(client.jobs) for _ in range(repeats)]
            runs["flexjobs list --state RUNNING"] = [
                timed(lambda: client.jobs(states=("RUNNING",))) for _ in range(repeats)
            ]
    return {
        "asked": count,
        "seeded": seeded,
        "seconds": seconds,
        "runs": runs,
        "build": build,
        "steady": steady,
        "syncs": tick.syncs[2:],
    }


TOTALS = "the totals (the tick's tally)"
TOTALS_FALLBACK = "the totals without a tally (counts, capped)"


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def print_status(result: dict[str, Any]) -> list[bool]:
    import statistics

    print(
        f"seeded {result['seeded']} of {result['asked']} records in {result['seconds']:.0f} s "
        f"(a tenth RUNNING, the rest ended over 7 days; budget {SEED_BUDGET_SECONDS:.0f} s); "
        "server time in this process, the totals read for every request, ms"
    )
    build, steady = result["build"], result["steady"]
    print(
        f"the tick's first build of its watch list and tally: {build['billed']} billed reads, "
        f"{build['seconds']:.1f} s; a steady sync after it: {steady['billed']} billed reads, "
        f"{steady['seconds']:.2f} s; "
        f"{len(result['syncs'])} more syncs, one a minute, while the pages were measured"
    )
    print(f"{'page':<46} {'min':>8} {'median':>8} {'p95':>8}")
    runs = result["runs"]
    for name, values in runs.items():
        print(f"{name:<46} {min(values):8.1f} {statistics.median(values):8.1f} {p95(values):8.1f}")
    checks = []
    for name, target, label in (
        ("/ (first page, totals)", STATUS_FRONT_MS, "p95 of /"),
        ("/jobs/<id> (job page)", STATUS_JOB_MS, "p95 of a job page"),
        (TOTALS, STATUS_TOTALS_MS, "p95 of the totals"),
    ):
        got = p95(runs[name])
        checks.append(got < target)
        print(f"target {label}: {got:.1f} ms < {target:.0f} ms: {verdict(got < target)}")
    return checks


def main() -> int:
    exit_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--ci", action="store_true", help="small sizes (under a minute)")
    parser.add_argument("--ticks", type=int, nargs="*", help="N active jobs for the tick")
    parser.add_argument("--tick-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-tick", action="store_true", help="skip the tick")
    parser.add_argument("--no-status", action="store_true", help="skip the status page")
    parser.add_argument("--records", type=int, help="records for the status page")
    parser.add_argument("--no-cpu", action="store_true", help="skip intake CPU vs its floor")
    parser.add_argument("--no-cost", action="store_true", help="skip one job's life and cost")
    parser.add_argument("--no-admission", action="store_true", help="skip the admission line")
    parser.add_argument("--waiting", type=int, help="requests waiting for admission (10,000)")
    parser.add_argument("--no-deployments", action="store_true", help="skip the deployments")
    parser.add_argument(
        "--no-everything", action="store_true", help="skip everything at once (section 7)"
    )
    parser.add_argument(
        "--deployments", type=int, help="Spot deployments, 5 an endpoint (1,000; --ci 100)"
    )
    parser.add_argument("--cpu-requests", type=int, help="requests a side a round (2,000)")
    parser.add_argument("--cpu-rounds", type=int, help="rounds of each side (5; --ci 3)")
    parser.add_argument("--profile", type=Path, help="write py-spy profiles of the CPU sides")
    parser.add_argument(
        "--cpu-split",
        type=int,
        help="rounds of the fresh request's sides from one thread, split into the library "
        "calls and the rest (4; --ci 0)",
    )
    args = parser.parse_args()
    if args.cpu_split is not None:
        from benchmarks.floor import MAX_SPLIT_ROUNDS

        if not 0 <= args.cpu_split <= MAX_SPLIT_ROUNDS:
            parser.error(f"--cpu-split takes 0 to {MAX_SPLIT_ROUNDS} rounds")
    if args.cpu_requests is not None and args.cpu_requests < 2:
        parser.error("--cpu-requests takes 2 or more (the split runs half of them)")
    if args.tick_child:
        print(json.dumps(tick_child(args.traced)))
        return 0

    sizes = [] if args.no_tick else (args.ticks or ([200] if args.ci else [1000, 10_000]))
    size = "ci" if args.ci else "full"
    print(f"== flexjobs scale benchmark ({size} size), {os.cpu_count()} cores ==")
    print("\n-- 1. the tick at N active jobs (a fresh process per tick) --", flush=True)
    results: list[TickResult] = []
    checks: list[bool] = []
    for n in sizes:
        at_n = tick_at(n)
        results.extend(at_n)
        checks.extend(print_tick(at_n))
        sys.stdout.flush()
    print(f"\ntick targets: {sum(checks)} of {len(checks)} PASS")
    if not args.no_status:
        records = args.records or (2000 if args.ci else 100_000)
        print(f"\n-- 2. the status page and flexjobs list at {records} records --", flush=True)
        checks.extend(print_status(status_at(records, 10 if args.ci else 20)))
    life_steps: list[Step] = []
    if not args.no_cost:
        print(
            "\n-- 3. control-plane cost of one job's life (benchmarks/control_plane_prices.yaml) --"
        )
        steps = job_life()
        life_steps = steps
        steady = [r for r in results if r.label == "steady"]
        checks.append(print_cost(steps, steady[-1] if steady else None))
    if not args.no_cpu:
        from benchmarks import floor

        requests = args.cpu_requests or (200 if args.ci else 2000)
        print("\n-- 4. intake CPU per request against the client-library floor --", flush=True)
        split = args.cpu_split if args.cpu_split is not None else (0 if args.ci else 4)
        result = floor.measure(
            requests, requests, args.cpu_rounds or (3 if args.ci else 5), args.profile, split
        )
        checks.extend(floor.print_cpu(result))
    if not args.no_admission:
        from benchmarks import scale_admission

        waiting = args.waiting or (1000 if args.ci else 10_000)
        print(f"\n-- 5. the admission line at {waiting} waiting requests --", flush=True)
        checks.extend(
            scale_admission.measure(waiting, 50 if args.ci else 200, 300 if args.ci else 2000)
        )
    if not args.no_deployments:
        from benchmarks import scale_deployments

        deployments = args.deployments or (100 if args.ci else 1000)
        endpoints = max(1, deployments // scale_deployments.PER_ENDPOINT)
        print(f"\n-- 6. {deployments} Spot deployments on {endpoints} endpoints --", flush=True)
        checks.extend(scale_deployments.measure(endpoints))
    if not args.no_everything:
        from benchmarks import scale_everything

        jobs = max(sizes) if sizes else (200 if args.ci else 10_000)
        waiting = args.waiting or (1000 if args.ci else 10_000)
        deployments = args.deployments or (100 if args.ci else 1000)
        endpoints = max(1, deployments // 5)
        print(f"\n-- 7. everything at once: {jobs} active jobs, {waiting} waiting, "
              f"{deployments} deployments --", flush=True)  # fmt: skip
        life, life_log = job_life_total(life_steps)
        checks.extend(scale_everything.measure(jobs, waiting, endpoints, life, life_log))
    print(f"\nall targets: {sum(checks)} of {len(checks)} PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
