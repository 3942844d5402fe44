"""``python -m flexjobs_local.simulator``: run the simulator until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from types import FrameType

from flexjobs_local.simulator import serve


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m flexjobs_local.simulator", description="Vertex AI simulator"
    )
    parser.add_argument("--grpc-port", type=int, required=True, help="0 picks a free port")
    parser.add_argument("--control-port", type=int, required=True, help="0 picks a free port")
    parser.add_argument(
        "--time-factor", type=float, default=60.0, help="sim seconds per wall second"
    )
    parser.add_argument("--project", default="flexjobs-local", help="project for hints and storage")
    parser.add_argument("--default-capacity", type=int, default=16, help="GPUs per location+type")
    parser.add_argument("--default-run-seconds", type=float, default=300.0)
    parser.add_argument(
        "--queue-seconds", type=float, default=5.0, help="sim seconds a new job is QUEUED"
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--events-topic", default=None, help="Pub/Sub topic for state hints")
    parser.add_argument("--hint-copies", type=int, default=3)
    parser.add_argument("--storage", action="store_true", help="write simulated checkpoints")
    parser.add_argument("--checkpoint-every", type=int, default=None, help="sim seconds")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse flags, serve, print the READY line, and block until a stop signal."""
    args = _parser().parse_args(argv)
    if args.events_topic and not os.environ.get("PUBSUB_EMULATOR_HOST"):
        print("simulator: --events-topic needs PUBSUB_EMULATOR_HOST", file=sys.stderr)
        return 2
    if args.storage and not os.environ.get("STORAGE_EMULATOR_HOST"):
        print("simulator: --storage needs STORAGE_EMULATOR_HOST", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    handle = serve(
        args.grpc_port,
        args.control_port,
        time_factor=args.time_factor,
        project=args.project,
        default_capacity=args.default_capacity,
        default_run_seconds=args.default_run_seconds,
        queue_seconds=args.queue_seconds,
        seed=args.seed,
        events_topic=args.events_topic,
        hint_copies=args.hint_copies,
        storage=args.storage,
        checkpoint_every=args.checkpoint_every,
    )
    try:
        print(
            f"SIMULATOR READY grpc={handle.grpc_endpoint} control={handle.control_url}", flush=True
        )
        stop.wait()
    finally:
        handle.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
