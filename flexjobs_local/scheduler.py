"""A stand-in for Cloud Scheduler: publish a tick to the ticks topic every N seconds.

Run by the stack as its own process: ``python -m flexjobs_local.scheduler --every 60``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from datetime import UTC, datetime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flexjobs_local.scheduler")
    parser.add_argument("--every", type=float, required=True, help="seconds between ticks")
    parser.add_argument("--topic", default="scheduler-ticks")
    args = parser.parse_args(argv)

    from google.cloud.pubsub_v1 import PublisherClient

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    publisher = PublisherClient()
    topic = publisher.topic_path(os.environ["GOOGLE_CLOUD_PROJECT"], args.topic)
    print("SCHEDULER READY", flush=True)
    while not stop.wait(args.every):
        body = {"tick": datetime.now(UTC).isoformat(), "source": "flexjobs-local-scheduler"}
        publisher.publish(topic, json.dumps(body).encode()).result(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
