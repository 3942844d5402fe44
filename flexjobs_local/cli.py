"""The ``flexjobs`` command: submit, validate, status, list, watch, cancel, schema; and
``flexjobs local up | down | demo``, the embedded stack.

Exit codes: 0 success; 1 a request did not succeed, or an unknown requestId; 2 an invalid
request (or a usage error); 3 a configuration or connection problem; 124 ``--timeout`` passed;
130 interrupted.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from flexjobs_local import procs
from flexjobs_local.client import DEPLOYMENTS, JOBS, REJECTIONS, CliError, Config
from flexjobs_local.messages import (
    Message,
    assign_request_id,
    check,
    read_messages,
    request_id_of,
    stamp_schedule_time,
)
from flexjobs_local.views import list_view, status_view
from shared.domain.model.kinds import KINDS
from shared.domain.model.states import JobState
from shared.kernel.config import Settings
from shared.status.display import jsonable

STATE_DIR = Path(".flexjobs-local")
STATE_FILE = STATE_DIR / "stack.json"

INVALID = 2

app = typer.Typer(
    name="flexjobs",
    help="Run Vertex AI jobs on flex-start and Spot capacity, and follow them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
local_app = typer.Typer(help="The embedded stack: emulators, Vertex simulator, functions.")
app.add_typer(local_app, name="local")


# --kind's choices, one per declared kind. mypy cannot list members it does not see written
# out, so it checks the members' uses only; Typer reads the members at run time.
Kind = StrEnum("Kind", {name: name for name in KINDS})  # type: ignore[misc]


class Format(StrEnum):
    json = "json"
    jsonl = "jsonl"
    yaml = "yaml"


@dataclass
class Options:
    project: str | None = None
    debug: bool = False


def _options(ctx: typer.Context) -> Options:
    obj = ctx.find_root().obj
    return obj if isinstance(obj, Options) else Options()


def _config(ctx: typer.Context) -> Config:
    return Config.load(_options(ctx).project)


def _out() -> Console:
    # Piped output is not cut to 80 columns: a table of requestIds stays readable in a log.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def _err() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


@app.callback()
def _root(
    ctx: typer.Context,
    project: Annotated[
        str | None,
        typer.Option(
            help="Google Cloud project (default: GOOGLE_CLOUD_PROJECT).", show_default=False
        ),
    ] = None,
    debug: Annotated[bool, typer.Option(help="Show tracebacks of errors.")] = False,
) -> None:
    ctx.obj = Options(project=project, debug=debug)


FileArg = Annotated[str, typer.Argument(help="A .json, .jsonl or gcloud .yaml file; - for stdin.")]
KindOpt = Annotated[
    Kind | None,
    typer.Option(help="The file is a bare Vertex body of this kind.", show_default=False),
]
FormatOpt = Annotated[
    Format | None,
    typer.Option(
        "--format", help="File format (default: from the name; sniffed for -).", show_default=False
    ),
]


def _read(file: str, kind: Kind | None, fmt: Format | None, settings: Settings) -> list[Message]:
    if file == "-":
        data = sys.stdin.buffer.read()
    else:
        try:
            data = Path(file).read_bytes()
        except OSError as exc:
            raise CliError(f"cannot read {file}: {exc}", code=INVALID) from exc
    messages = read_messages(
        data,
        file,
        kind=kind.value if kind else None,
        fmt=fmt.value if fmt else None,
        max_bytes=settings.max_message_bytes,
    )
    if not messages:
        raise CliError(f"{file} holds no request message", code=INVALID)
    return messages


def _report(messages: list[Message], settings: Settings, now: datetime, file: str) -> bool:
    """Print every problem of every message (``path: message``); True when all are valid."""
    err = _err()
    valid = True
    for message in messages:
        for error in check(message, settings, now):
            valid = False
            err.print(message.where(error), markup=False)
    if not valid:
        err.print(f"{file}: invalid; nothing was published" if file else "invalid", markup=False)
    return valid


@app.command()
def validate(
    file: FileArg,
    kind: KindOpt = None,
    fmt: FormatOpt = None,
) -> int:
    """Check request messages offline, with exactly the function's validators.

    Prints each problem as `path: message` (`line N: ...` in a .jsonl). Exit 0 when valid, 2 when
    not. The operator guards come from the FLEXJOBS_* environment, as the function reads them.
    """
    settings = Config.load(None).settings
    messages = _read(file, kind, fmt, settings)
    now = datetime.now(UTC)
    for message in messages:
        stamp_schedule_time(message, now)
    err = _err()
    bad = 0
    for message in messages:
        for error in check(message, settings, now):
            bad += 1
            err.print(message.where(error), markup=False)
    if bad:
        err.print(f"{file}: {bad} problem(s)", markup=False)
        return INVALID
    _out().print(f"{file}: {len(messages)} valid message(s)", markup=False)
    return 0


@app.command()
def submit(
    ctx: typer.Context,
    file: FileArg,
    *,
    request_id: Annotated[
        str | None,
        typer.Option(
            help="The requestId (default: the file's, else cli-<uuid>).", show_default=False
        ),
    ] = None,
    location: Annotated[
        str | None,
        typer.Option(help="Vertex AI region (the envelope's location).", show_default=False),
    ] = None,
    kind: KindOpt = None,
    fmt: FormatOpt = None,
    wait: Annotated[bool, typer.Option(help="Follow the requests as `watch` does.")] = False,
    timeout: Annotated[
        float | None,
        typer.Option(help="With --wait: stop waiting after this many seconds.", show_default=False),
    ] = None,
) -> int:
    """Validate, then publish request messages to the requests topic; prints each requestId.

    Nothing is published when any message is invalid (exit 2). With --wait: exit 0 when all
    SUCCEEDED, 1 otherwise.
    """
    config = _config(ctx)
    messages = _read(file, kind, fmt, config.settings)
    if request_id is not None and len(messages) > 1:
        raise CliError("--request-id names one request; the file holds several", code=INVALID)
    now = datetime.now(UTC)
    for message in messages:
        if message.body is not None and location is not None:
            message.body["location"] = location
        assign_request_id(message, request_id)
        stamp_schedule_time(message, now)
    if not _report(messages, config.settings, now, file):
        return INVALID
    ids = []
    out = _out()
    for message in messages:
        assert message.body is not None
        config.publish(message.body, message.attributes)
        rid = request_id_of(message, now)
        ids.append(rid)
        out.print(rid, markup=False)
    if not wait:
        return 0
    from flexjobs_local.watch import watch as follow

    return follow(config, ids, out, timeout, published_at=now)


@app.command()
def status(
    ctx: typer.Context,
    request_id: Annotated[str, typer.Argument(metavar="ID", help="The requestId.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> int:
    """A request's record, attempts, latest checkpoint, cost and savings; exit 1 if unknown."""
    config = _config(ctx)
    record = config.get(JOBS, request_id)
    attempts = config.attempts(request_id) if record is not None else []
    if record is None:
        record = config.get(DEPLOYMENTS, request_id)
    if record is None:
        rejection = config.get(REJECTIONS, request_id)
        if rejection is not None:
            if as_json:
                _out().print_json(json.dumps(jsonable({"rejected": True, **rejection})))
            err = _err()
            err.print(f"request {request_id} was rejected:", markup=False)
            for e in rejection.get("errors") or []:
                err.print(f"  {e.get('path')}: {e.get('message')}", markup=False)
            return 1
        raise CliError(
            f"no request {request_id!r} in project {config.project}"
            " (not published yet, still in flight, or another project?)",
            code=1,
        )
    if as_json:
        sys.stdout.write(json.dumps(jsonable({**record, "attempts": attempts})) + "\n")
        return 0
    _out().print(status_view(record, attempts))
    return 0


_SINCE = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str) -> timedelta:
    """``30m``, ``2h``, ``1d``, ``90s``."""
    match = _SINCE.fullmatch(text.strip())
    if not match:
        raise typer.BadParameter("a duration such as 30m, 2h or 1d", param_hint="--since")
    return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])


@app.command("list")
def list_(
    ctx: typer.Context,
    state: Annotated[
        list[str] | None, typer.Option(help="Only this state (repeatable).", show_default=False)
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Created within this long: 30m, 2h, 1d.", show_default=False)
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
) -> int:
    """Requests, newest first."""
    window = parse_since(since) if since else None
    config = _config(ctx)
    states = [s.upper() for s in state or []]
    known = set(JobState.__members__)
    if unknown := sorted(set(states) - known):
        raise typer.BadParameter(
            f"{', '.join(unknown)}; the states are {', '.join(sorted(known))}", param_hint="--state"
        )
    records = config.recent(states, window, limit, datetime.now(UTC))
    if as_json:
        sys.stdout.write(json.dumps(jsonable(records)) + "\n")
    else:
        _out().print(list_view(records))
    return 0


@app.command()
def watch(
    ctx: typer.Context,
    request_ids: Annotated[list[str], typer.Argument(metavar="ID...", help="requestIds.")],
    timeout: Annotated[
        float | None,
        typer.Option(help="Stop after this many seconds (exit 124).", show_default=False),
    ] = None,
) -> int:
    """Follow requests live (Firestore listeners) until each has ended.

    Exit 0 when all SUCCEEDED, 1 otherwise.
    """
    from flexjobs_local.watch import watch as follow

    return follow(_config(ctx), request_ids, _out(), timeout)


@app.command()
def cancel(
    ctx: typer.Context,
    request_id: Annotated[str, typer.Argument(metavar="ID", help="The requestId to cancel.")],
    wait: Annotated[bool, typer.Option(help="Follow it until it has ended.")] = False,
    timeout: Annotated[
        float | None,
        typer.Option(help="With --wait: stop waiting after this many seconds.", show_default=False),
    ] = None,
) -> int:
    """Publish {"cancel": ID}. With --wait: exit 0 only if it SUCCEEDED before the cancel."""
    if not request_id.strip():
        # Intake refuses it (a rejection), so never publish it as if it were a cancel.
        raise CliError("cancel: ID must be a non-empty requestId", code=INVALID)
    config = _config(ctx)
    config.publish({"cancel": request_id}, {"requestId": request_id})
    out = _out()
    out.print(f"cancel requested: {request_id}", markup=False)
    if not wait:
        return 0
    from flexjobs_local.watch import watch as follow

    return follow(config, [request_id], out, timeout)


@app.command()
def schema() -> int:
    """Print the JSON Schema of the request message."""
    from flexjobs_local.schema import build_schema

    sys.stdout.write(json.dumps(build_schema(), indent=2) + "\n")
    return 0


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
        print(f"a stack is already up (see {STATE_FILE}); run 'flexjobs local down' first")
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
    print(f"logs: {stack.workdir}; stop with: flexjobs local down")
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
    """Entry point of the ``flexjobs`` console script; returns the exit code."""
    command = typer.main.get_command(app)
    debug = "--debug" in (sys.argv[1:] if argv is None else argv)
    try:
        result = command.main(args=argv, prog_name="flexjobs", standalone_mode=False)
    except CliError as exc:
        if debug:
            raise
        _err().print(f"error: {exc}", markup=False)
        return exc.code
    except typer.Abort:
        return 130
    except typer.TyperException as exc:  # typer's usage errors (its vendored click's)
        show = getattr(exc, "show", None)
        if show is None:
            raise
        show()
        return int(getattr(exc, "exit_code", INVALID))
    except Exception as exc:  # the last resort: one line, the traceback only with --debug
        if debug:
            raise
        _err().print(
            f"error: {type(exc).__name__}: {exc} (rerun with --debug for details)", markup=False
        )
        return 1
    code: int = result if isinstance(result, int) else 0
    return code


if __name__ == "__main__":
    sys.exit(main())
