"""``flexjobs local up | down | demo``: the embedded stack from the command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from flexjobs_local import procs
from flexjobs_local.stack import UPLOAD_FUNCTION, LocalStack, StackConfig

STATE_DIR = Path(".flexjobs-local")
STATE_FILE = STATE_DIR / "stack.json"


def _up(args: argparse.Namespace) -> int:
    if STATE_FILE.exists():
        print(f"a stack is already up (see {STATE_FILE}); run 'flexjobs local down' first")
        return 1
    config = StackConfig(time_factor=args.time_factor, tick_seconds=args.tick_seconds or 60.0)
    stack = LocalStack(config, workdir=STATE_DIR / "run")
    stack.__enter__()  # starts everything, or stops what it started and raises
    state = {
        "env": stack.env,
        "ports": stack.ports,
        "groups": {c.name: c.pgid for c in stack.children},
        "logs": str(stack.workdir),
    }
    STATE_FILE.write_text(json.dumps(state, indent=2))
    print("flexjobs local stack is up. Point your shell at it with:")
    for key, value in stack.env.items():
        print(f"export {key}={value}")
    print(f"simulator control: {stack.simulator.base_url}")
    print(f"upload requests to: {stack.upload_uri} (FLEXJOBS_UPLOAD_PREFIX={config.upload_prefix})")
    if UPLOAD_FUNCTION in config.functions:
        print(
            f"every object finalize in gs://{config.bucket} is delivered to {UPLOAD_FUNCTION} as"
            " Eventarc would (a CloudEvent, binary mode, retried until acknowledged);"
            f" delivered events: {stack.storage_events_path}"
        )
    print(f"logs: {stack.workdir}; stop with: flexjobs local down")
    return 0


def _down(args: argparse.Namespace) -> int:
    if not STATE_FILE.exists():
        print("no stack is up")
        return 0
    state = json.loads(STATE_FILE.read_text())
    procs.kill_groups([int(pgid) for pgid in state["groups"].values()])
    print(f"stopped {', '.join(state['groups'])}")
    STATE_FILE.unlink()
    return 0


def _demo(args: argparse.Namespace) -> int:
    from flexjobs_local.demo import run_demo

    # A Ctrl-C or SIGTERM still tears the stack down: the context manager's exit runs.
    procs.exit_on_sigterm()
    return run_demo(time_factor=args.time_factor, tick_seconds=args.tick_seconds)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``flexjobs`` console script."""
    parser = argparse.ArgumentParser(prog="flexjobs")
    groups = parser.add_subparsers(dest="group", required=True)
    local = groups.add_parser("local", help="the embedded stack")
    verbs = local.add_subparsers(dest="verb", required=True)
    for verb, fn, text in (
        ("up", _up, "start the stack in the background and print its environment"),
        ("down", _down, "stop a stack started with 'up'"),
        ("demo", _demo, "start the stack, run the demo, stop the stack"),
    ):
        sub = verbs.add_parser(verb, help=text)
        sub.add_argument("--time-factor", type=float, default=60.0)
        sub.add_argument(
            "--tick-seconds", type=float, default=None, help="default: 60 for up, 2 for demo"
        )
        sub.set_defaults(fn=fn)
    args = parser.parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
