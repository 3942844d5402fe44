"""The ``flexjobs`` command's commands: validate, submit, status, list, watch, cancel, logs,
queues, schema.

Built on the client library (:mod:`flexjobs`): every command that reaches flexjobs calls it,
and :func:`flexjobs.cli.output.exit_code` maps its errors to the documented exit codes. The
embedded stack's commands are not here: they run from a clone (``python -m flexjobs_local``,
``./dev up``), and the client library never imports the local stack.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from flexjobs import Client
from flexjobs.bodies import request_body
from flexjobs.cli.files import read_messages
from flexjobs.cli.output import (
    INVALID,
    NOT_SUCCEEDED,
    CliError,
    FormatOpt,
    InputFormat,
    JsonOpt,
    OutputFormat,
    chosen,
    emit,
    err,
    exit_code,
    out,
)
from flexjobs.cli.views import (
    deployment_view,
    list_view,
    queues_view,
    rejection_lines,
    status_json,
    status_view,
)
from flexjobs.messages import Message
from shared.domain.model.kinds import KINDS
from shared.domain.model.states import DeploymentState, JobState
from shared.kernel.errors import FlexjobsError

app = typer.Typer(
    name="flexjobs",
    help="Run Vertex AI jobs on flex-start and Spot capacity, and follow them.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)


# --kind's choices, one per declared kind. mypy cannot list members it does not see written
# out, so it checks the members' uses only; Typer reads the members at run time.
Kind = StrEnum("Kind", {name: name for name in KINDS})  # type: ignore[misc]


@dataclass
class Options:
    project: str | None = None
    debug: bool = False


def _options(ctx: typer.Context) -> Options:
    obj = ctx.find_root().obj
    return obj if isinstance(obj, Options) else Options()


def _client(ctx: typer.Context | None = None) -> Client:
    """The library's client, as the command configures it: ``--project``, else the
    environment, else ``google.auth.default()``; requestIds it names start ``cli-``."""
    project = _options(ctx).project if ctx is not None else None
    return Client(project, id_prefix="cli")


@app.callback()
def _root(
    ctx: typer.Context,
    project: Annotated[
        str | None,
        typer.Option(
            help="Google Cloud project (default: GOOGLE_CLOUD_PROJECT, else gcloud config's"
            " project through Application Default Credentials).",
            show_default=False,
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
InputFormatOpt = Annotated[
    InputFormat | None,
    typer.Option(
        "--input-format",
        help="File format (default: from the name; sniffed for -).",
        show_default=False,
    ),
]
# Before gcloud's convention was taken, --format named the input format of validate and
# submit: kept, hidden, for scripts that pass it (neither command prints records).
OldFormatOpt = Annotated[
    InputFormat | None,
    typer.Option("--format", hidden=True, help="Deprecated: --input-format.", show_default=False),
]


def _read(file: str, kind: Kind | None, fmt: InputFormat | None, client: Client) -> list[Message]:
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
        max_bytes=client.settings.max_message_bytes,
    )
    if not messages:
        raise CliError(f"{file} holds no request message", code=INVALID)
    return messages


def _problems(messages: list[Message], client: Client) -> int:
    """Print every problem of every message (``path: message``); how many there were."""
    console = err()
    bad = 0
    for message in messages:
        for error in client.check(message):
            bad += 1
            console.print(message.where(error), markup=False)
    return bad


@app.command()
def validate(
    file: FileArg,
    kind: KindOpt = None,
    input_format: InputFormatOpt = None,
    old_format: OldFormatOpt = None,
) -> int:
    """Check request messages offline, with exactly the function's validators.

    Prints each problem as `path: message` (`line N: ...` in a .jsonl). Exit 0 when valid, 2 when
    not. The operator guards come from the FLEXJOBS_* environment, as the function reads them.
    """
    client = _client()
    messages = _read(file, kind, input_format or old_format, client)
    for message in messages:
        client.prepare(message, None)
    if bad := _problems(messages, client):
        err().print(f"{file}: {bad} problem(s)", markup=False)
        return INVALID
    out().print(f"{file}: {len(messages)} valid message(s)", markup=False)
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
    region: Annotated[
        str | None,
        typer.Option(
            "--region",
            "--location",
            help="Vertex AI region (the envelope's location).",
            show_default=False,
        ),
    ] = None,
    display_name: Annotated[
        str | None,
        typer.Option(help="The job's displayName (the body's).", show_default=False),
    ] = None,
    kind: KindOpt = None,
    input_format: InputFormatOpt = None,
    old_format: OldFormatOpt = None,
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
    client = _client(ctx)
    messages = _read(file, kind, input_format or old_format, client)
    if request_id is not None and len(messages) > 1:
        raise CliError("--request-id names one request; the file holds several", code=INVALID)
    published_at = client.clock()
    for message in messages:
        if message.body is not None and not _is_cancel(message):
            message.body = request_body(message.body, region=region, display_name=display_name)
        client.prepare(message, request_id)
    if _problems(messages, client):
        err().print(f"{file}: invalid; nothing was published", markup=False)
        return INVALID
    ids = []
    console = out()
    for message in messages:
        rid = client.publish(message)
        ids.append(rid)
        console.print(rid, markup=False)
    if not wait:
        return 0
    from flexjobs.cli.watch import watch as follow

    return follow(client, ids, console, timeout, published_at=published_at)


def _is_cancel(message: Message) -> bool:
    from shared.domain.request.reading import is_cancel

    return message.body is not None and is_cancel(message.body)


@app.command()
def status(
    ctx: typer.Context,
    request_id: Annotated[str, typer.Argument(metavar="ID", help="The requestId.")],
    fmt: FormatOpt = OutputFormat.table,
    as_json: JsonOpt = False,
) -> int:
    """A request's record, attempts, latest checkpoint, cost and savings (a deployment's
    serving: phase, hedges, fallback, call in flight, newest changes); exit 1 if unknown."""
    client = _client(ctx)
    found = client.status(request_id)
    fmt = chosen(fmt, as_json)
    if found.rejected:
        if fmt is not OutputFormat.table:
            emit({"rejected": True, **found.record}, fmt, lambda: "")
        console = err()
        for line in rejection_lines(found):
            console.print(line, markup=False)
        return NOT_SUCCEEDED
    if found.collection == "deployments":
        now = client.clock()
        emit(status_json(found), fmt, lambda: deployment_view(found.record, now))
        return 0
    attempts = [a.document for a in found.attempts]
    body = status_json(found)
    place = _admission_place(client, found.record)
    if place is not None:
        body["admissionPlace"] = place[0]
    words = place[1] if place is not None else None
    emit(body, fmt, lambda: status_view(found.record, attempts, words))
    return 0


def _admission_place(
    client: Client, record: Mapping[str, Any]
) -> tuple[dict[str, Any], str] | None:
    """A request waiting for admission: its place in the last tick's line (``{}`` when not
    listed) and the same in words; None when it is not waiting."""
    from shared.domain.admission.summary import place_of
    from shared.status.queues import waiting_text

    admission = record.get("admission")
    if not isinstance(admission, Mapping) or admission.get("stage") != "WAITING":
        return None
    summary = client.queues()
    place = place_of(summary, str(record.get("requestId"))) if summary else None
    return (place or {}), waiting_text(admission, place, summary)


@app.command()
def queues(
    ctx: typer.Context,
    fmt: FormatOpt = OutputFormat.table,
    as_json: JsonOpt = False,
) -> int:
    """Each admission queue's quota, usage, borrowed GPUs, waiting requests and oldest wait,
    and the project's quota with its source, as of the last tick; exit 1 when there is no
    summary (admission off, or no tick since it was turned on)."""
    summary = _client(ctx).queues()
    if summary is None:
        err().print(
            "no admission summary: admission is off (no FLEXJOBS_QUEUES), or no scheduler"
            " tick has run since it was turned on",
            markup=False,
        )
        return NOT_SUCCEEDED
    emit(summary, chosen(fmt, as_json), lambda: queues_view(summary))
    return 0


_SINCE = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_STATES = sorted(set(JobState.__members__) | set(DeploymentState.__members__))


def parse_since(text: str) -> timedelta:
    """``30m``, ``2h``, ``1d``, ``90s``."""
    match = _SINCE.fullmatch(text.strip())
    if not match:
        raise typer.BadParameter("a duration such as 30m, 2h or 1d", param_hint="--since")
    return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])


@app.command("list")
def list_(
    ctx: typer.Context,
    *,
    state: Annotated[
        list[str] | None, typer.Option(help="Only this state (repeatable).", show_default=False)
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Created within this long: 30m, 2h, 1d.", show_default=False)
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many.")] = 20,
    fmt: FormatOpt = OutputFormat.table,
    as_json: JsonOpt = False,
) -> int:
    """Requests and deployments, newest first."""
    window = parse_since(since) if since else None
    states = [s.upper() for s in state or []]
    if unknown := sorted(set(states) - set(_STATES)):
        raise typer.BadParameter(
            f"{', '.join(unknown)}; the states are {', '.join(_STATES)}", param_hint="--state"
        )
    from flexjobs.cli.views import newest

    client = _client(ctx)
    rows = newest(client, tuple(states), window, limit)
    emit(rows, chosen(fmt, as_json), lambda: list_view(rows))
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
    from flexjobs.cli.watch import watch as follow

    return follow(_client(ctx), request_ids, out(), timeout)


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
    client = _client(ctx)
    client.cancel(request_id)
    console = out()
    console.print(f"cancel requested: {request_id}", markup=False)
    if not wait:
        return 0
    from flexjobs.cli.watch import watch as follow

    return follow(client, [request_id], console, timeout)


@app.command()
def logs(
    ctx: typer.Context,
    request_id: Annotated[str, typer.Argument(metavar="ID", help="The requestId.")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep reading until the request has ended.")
    ] = False,
    interval: Annotated[
        float, typer.Option(min=0.5, help="With --follow: seconds between reads.")
    ] = 2.0,
) -> int:
    """The Cloud Logging entries of a training request's Vertex jobs (resource.type ml_job),
    attempt by attempt. With --follow: exit 0 when it SUCCEEDED, 1 otherwise."""
    from flexjobs.cli.logs import show_logs

    console = out()
    return show_logs(
        _client(ctx),
        request_id,
        lambda line: console.print(line, markup=False),
        follow=follow,
        interval=interval,
    )


@app.command()
def schema() -> int:
    """Print the JSON Schema of the request message."""
    from flexjobs.schema import schema_text

    sys.stdout.write(schema_text())
    return 0


def run(typer_app: typer.Typer, argv: list[str] | None, prog_name: str) -> int:
    """Run a Typer app of commands that return their exit code, with the command's error
    policy: a library or CLI error is one line and its documented code, a usage error is
    Click's message and code, Ctrl-C is 130, anything else one line (the traceback with
    ``--debug``). The embedded stack's commands (``python -m flexjobs_local``) run through it
    too."""
    command = typer.main.get_command(typer_app)
    debug = "--debug" in (sys.argv[1:] if argv is None else argv)
    try:
        result = command.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except (CliError, FlexjobsError) as exc:
        if debug:
            raise
        err().print(f"error: {exc}", markup=False)
        return exc.code if isinstance(exc, CliError) else exit_code(exc)
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
        err().print(
            f"error: {type(exc).__name__}: {exc} (rerun with --debug for details)", markup=False
        )
        return 1
    code: int = result if isinstance(result, int) else 0
    return code


def main(argv: list[str] | None = None) -> int:
    """The ``flexjobs`` command (:func:`flexjobs.cli.main` calls it once Typer and Rich are
    found); returns the exit code."""
    return run(app, argv, "flexjobs")


__all__ = ["app", "main", "parse_since", "run"]

if __name__ == "__main__":
    sys.exit(main())
