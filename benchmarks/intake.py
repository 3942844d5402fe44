"""Intake benchmark (a script, not a test): prints its figures; run with ``./dev bench``.

Measured in one run, side by side on this machine:
1. end-to-end intake throughput: N requests published → every record QUEUED (requests/s);
2. the raw Firestore-emulator transaction rate (get + set per transaction), the floor;
3. import time and peak RSS of functions/main.py (cold start) and of the clients an instance
   loads on its first call, against ``import google.cloud.aiplatform`` (the SDK we avoid):
   benchmarks/coldstart.py's probes, alternating; ``./dev bench coldstart`` adds each entry
   point's first delivery.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from benchmarks import coldstart
from benchmarks.coldstart import IMPORT_MAIN, Figure
from flexjobs_local.procs import exit_on_sigterm
from flexjobs_local.stack import LocalStack, StackConfig
from shared.domain.model.ids import doc_id

if TYPE_CHECKING:
    from google.cloud.firestore_v1.aggregation import AggregationQuery
    from google.cloud.firestore_v1.query import Query

REPO = Path(__file__).resolve().parent.parent

#: What an instance loads by its first call, besides functions/main.py: the three clients.
FIRST_CALL = "main.py + first-call clients (aiplatform_v1, firestore, pubsub)"


def measure_imports(repeats: int) -> dict[str, Figure]:
    extra = {
        FIRST_CALL: f"{IMPORT_MAIN}; from google.cloud import aiplatform_v1, firestore, pubsub_v1"
    }
    return coldstart.measure(coldstart.import_probes(extra), repeats)


def request(request_id: str) -> dict[str, Any]:
    return {
        "requestId": request_id,
        "customJob": {
            "displayName": request_id,
            "jobSpec": {
                "workerPoolSpecs": [
                    {
                        "machineSpec": {
                            "machineType": "g2-standard-4",
                            "acceleratorType": "NVIDIA_L4",
                            "acceleratorCount": 1,
                        },
                        "replicaCount": 1,
                        "containerSpec": {
                            "imageUri": "python:3.10",
                            "command": ["sleep"],
                            "args": ["86400"],
                        },
                    }
                ],
                "scheduling": {"maxWaitDuration": "0s"},
            },
        },
    }


def count_of(query: Query) -> int:
    """How many documents ``query`` matches, by one ``RunAggregationQuery``.

    google-cloud-firestore annotates ``Query.count()`` as returning the AggregationQuery class
    (it returns an instance) and ``AggregationQuery.get()`` as a list of results (each item is
    the list of one row's aggregations); ``stream()`` is annotated as what it yields.
    """
    aggregation = cast("AggregationQuery", query.count())
    rows = list(aggregation.stream())
    return int(rows[0][0].value)


def intake_throughput(stack: LocalStack, count: int) -> float:
    """Requests per second from the first publish to the last record QUEUED.

    The end is the last record's own ``updatedAt`` (written by the function as it records the
    submission; one machine, one clock), so how often this loop polls changes nothing but
    the Firestore load it adds: it polls seldom.
    """
    from google.cloud import firestore

    db = firestore.Client(project=stack.config.project)
    run = uuid.uuid4().hex[:6]
    ids = [f"bench-{run}-{i:04d}" for i in range(count)]
    queued = db.collection("jobs").where(filter=firestore.FieldFilter("state", "==", "QUEUED"))
    before = count_of(queued)  # earlier runs' records, in a warm stack
    started = datetime.now(UTC)
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda rid: stack.publish_request(request(rid)), ids))
    while True:
        done = count_of(queued) - before
        if done >= count:
            break
        if (datetime.now(UTC) - started).total_seconds() > 600:
            raise TimeoutError(f"only {done} of {count} records QUEUED after 600 s")
        time.sleep(1.0)
    mine = {doc_id(rid) for rid in ids}
    ends: list[datetime] = [  # Firestore timestamps read back as datetimes
        snap.get("updatedAt") for snap in queued.select(["updatedAt"]).stream() if snap.id in mine
    ]
    if len(ends) != count:
        raise RuntimeError(f"{len(ends)} of this run's {count} records are QUEUED")
    return count / (max(ends) - started).total_seconds()


def firestore_txn_rate(stack: LocalStack, count: int, workers: int) -> float:
    from google.cloud import firestore

    db = firestore.Client(project=stack.config.project)
    col = db.collection("bench-raw")

    def one(i: int) -> None:
        ref = col.document(f"doc-{i}")

        @firestore.transactional
        def txn(t: firestore.Transaction) -> None:
            ref.get(transaction=t)
            t.set(ref, {"i": i, "at": firestore.SERVER_TIMESTAMP})

        txn(db.transaction())

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, range(count)))
    return count / (time.perf_counter() - t0)


def main() -> int:
    exit_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--import-repeats", type=int, default=3)
    args = parser.parse_args()

    imports = measure_imports(args.import_repeats)
    # No hints and no checkpoints: records stay QUEUED, so the count measures intake alone.
    config = StackConfig(default_capacity=10_000, time_factor=1.0, hints=False, checkpoints=False)
    with LocalStack(config) as stack:
        stack.apply_env()
        raw_seq = firestore_txn_rate(stack, 300, workers=1)
        raw_par = firestore_txn_rate(stack, 500, workers=16)
        stack.reset_firestore()
        throughput = intake_throughput(stack, args.requests)

    print("\n== flexjobs intake benchmark ==")
    print(f"end-to-end intake, {args.requests} requests publish→QUEUED: {throughput:.1f} req/s")
    print(f"Firestore emulator transactions, 1 thread:   {raw_seq:.1f} txn/s")
    print(f"Firestore emulator transactions, 16 threads: {raw_par:.1f} txn/s")
    print(f"intake / raw 16-thread transaction rate: {throughput / raw_par:.2f}")
    for name, figure in imports.items():
        print(
            f"{name:<66} {figure.import_s * 1000:7.0f} ms ({figure.ratio:.2f}x SDK)  "
            f"peak RSS {figure.maxrss_mib:6.1f} MiB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
