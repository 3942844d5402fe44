"""``python -m flexjobs_local up | down | demo`` (``./dev up | down | demo``): the embedded
stack, from the command line.

These commands start emulators and a simulator that only a clone has (the dev extras, gcloud,
Java), so they are not the product's ``flexjobs`` command: the client library never imports the
local stack. They run through the same runner as ``flexjobs`` (:func:`flexjobs.cli.app.run`:
the same error lines and exit codes), from the clone's root, where their state lives
(``.flexjobs-local/``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from flexjobs.cli.app import run
from flexjobs_local import procs

STATE_DIR = Path(".flexjobs-local")
STATE_FILE = STATE_DIR / "stack.json"

local_app = typer.Typer(
    help="The embedded stack: emulators, Vertex simulator, functions. Drive it with the"
    " flexjobs command, pointed at it by what 'up' prints.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
#: How the commands name themselves in their usage lines (``./dev up`` runs ``up``).
PROG_NAME = "python -m flexjobs_local"


TimeFactor = Annotated[float, typer.Option(help="Simulated time runs this many times faster.")]
TickSeconds = Annotated[
    float | None,
    typer.Option(
        help="Scheduler tick period (default: 60 for up, 2 for demo).", show_default=False
    ),
]


@local_app.command()
def up(time_factor: TimeFactor = 60.0, tick_seconds: TickSeconds = None) -> int:
    """Start the stack in the background and print its environment."""
    from flexjobs_local.stack import STATUS_PAGE, UPLOAD_FUNCTION, LocalStack, StackConfig

    if STATE_FILE.exists():
        print(f"a stack is already up (see {STATE_FILE}); run './dev down' first")
        return 1
    config = StackConfig(time_factor=time_factor, tick_seconds=tick_seconds or 60.0)
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
    if STATUS_PAGE in config.functions:
        print(f"status page: {stack.status_page_url}")
    print(f"logs: {stack.workdir}; stop with: ./dev down")
    return 0


@local_app.command()
def down(time_factor: TimeFactor = 60.0, tick_seconds: TickSeconds = None) -> int:
    """Stop a stack started with 'up'."""
    if not STATE_FILE.exists():
        print("no stack is up")
        return 0
    state = json.loads(STATE_FILE.read_text())
    procs.kill_groups([int(pgid) for pgid in state["groups"].values()])
    print(f"stopped {', '.join(state['groups'])}")
    STATE_FILE.unlink()
    return 0


@local_app.command()
def demo(time_factor: TimeFactor = 60.0, tick_seconds: TickSeconds = None) -> int:
    """Start the stack, run the demo, stop the stack."""
    from flexjobs_local.demo import run_demo

    # A Ctrl-C or SIGTERM still tears the stack down: the context manager's exit runs.
    procs.exit_on_sigterm()
    return int(run_demo(time_factor=time_factor, tick_seconds=tick_seconds))


def main(argv: list[str] | None = None) -> int:
    """``python -m flexjobs_local``: the local commands; returns the exit code."""
    return run(local_app, argv, PROG_NAME)


if __name__ == "__main__":
    sys.exit(main())
