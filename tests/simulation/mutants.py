"""Fixed defects put back, one line at a time, to show the simulator finds each again.

A mutant is a text edit of one function's source (the fix's line taken out, as a revert
would): :func:`installed` compiles the edited source in its module's namespace and puts the
new function wherever the old one is referenced (its module, and every module that imported
it by name), then puts the old one back. ``./dev sim --mutant NAME`` runs a controller's CI
budget on it; ``test_simulator.py`` requires each to be found within that budget.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FunctionType


@dataclass(frozen=True)
class Mutant:
    """Defect ``defect`` of issue 38 put back: in ``module``'s ``function``, ``fixed`` (the
    fix's text) becomes ``broken``; the ``controller`` scope finds it as ``invariant``."""

    name: str
    defect: int
    controller: str
    invariant: str
    module: str
    function: str
    fixed: str
    broken: str
    #: Found within the controller's CI budget (the test requires it); the others are shown
    #: with ``./dev sim --mutant NAME --full`` (docs/simulation.md has the figures).
    ci: bool = True
    #: More edits of the same function, each (fixed, broken), for a fix of more than a line.
    also: tuple[tuple[str, str], ...] = ()


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "reclaim-checked-once",
        3,
        "admission",
        "nominal-never-reclaimed",
        "shared.domain.admission.preemption",
        "choose_victims",
        # The fix asks again after each victim whether its queue still borrows.
        fixed="        if not _may_preempt(queues, usage, queue, workload, job):\n"
        "            continue\n"
        "        chosen.append(job)",
        broken="        chosen.append(job)",
    ),
    Mutant(
        "deploy-region-unchecked",
        7,
        "serving",
        "region-allowed",
        "shared.domain.request.validation.check",
        "_check_allowed_regions",
        # The fix checks where a deployModel without a location deploys: its endpoint's region.
        fixed="    named: list[tuple[str, object]] = [_where(request, guards)]",
        broken="    named: list[tuple[str, object]] = ["
        '("location", getattr(request, "location", None))]',
    ),
    Mutant(
        "sdk-service-account-dropped",
        8,
        "clients",
        "client-body-kept",
        "flexjobs.bodies",
        "vertex_body",
        # The fix fills in what the SDK's submit() takes from aiplatform.init().
        fixed="    if resource is not job:\n        _as_sdk_sends(job, kind, body)\n",
        broken="",
    ),
    Mutant(
        "durations-in-floats",
        9,
        "clients",
        "client-body-kept",
        "flexjobs.bodies",
        "_duration",
        # The fix writes a Duration's seconds exactly, as the SDK does.
        fixed="    duration = Duration()\n",
        broken='    return f"{seconds:g}s"\n    duration = Duration()\n',
    ),
    Mutant(
        "quota-first-asked-unread",
        2,
        "quota",
        "within-quota",
        "shared.app.services.admission",
        "_pass",
        # The fix reads the limits of a resource first asked for before admitting on it.
        fixed="        ledger = _read_unasked(ports, queues, ledger, waiting, now) or ledger\n",
        broken="        pass\n",
        ci=False,
    ),
    Mutant(
        "neighbour-taken-for-a-hand-edit",
        15,
        "serving",
        "pause-only-for-hand-edits",
        "shared.domain.serving.rule",
        "_edit",
        # The fix takes another flexjobs deployment's models coming and going as its doing.
        fixed="    if {m.id for m in theirs} != set(state.neighbours):\n"
        "        return None, True\n",
        broken="",
        ci=False,
    ),
    Mutant(
        "own-undeploy-is-a-hand-edit",
        12,
        "serving",
        "pause-only-for-hand-edits",
        "shared.domain.serving.rule",
        "_edit",
        # The fix recognises a model this deployment is undeploying as its own doing.
        fixed="        if ours is not None and ours.id and ours.id not in mine"
        " and ours.id not in leaving:",
        broken="        if ours is not None and ours.id and ours.id not in mine:",
        ci=False,
    ),
    Mutant(
        "hedged-before-vertex-answered",
        17,
        "serving",
        "notice-happened",
        "shared.domain.serving.rule",
        "_serve",
        # The fix owes HEDGED once the fallback's DeployModel reached Vertex, not at its claim.
        fixed="        return _Step(\n"
        '            ActionKind.CALL, hedged, reason, "hedge", call,'
        " Deploy(name, deficit, spot=False)\n"
        "        )",
        broken="        return _Step(\n"
        '            ActionKind.CALL, hedged, reason, "hedge", call,'
        " Deploy(name, deficit, spot=False),\n"
        "            notices=(HEDGED,),\n"
        "        )",
        ci=False,
    ),
    # Found by the simulator on the rebuilt serving machine itself, before it landed:
    Mutant(
        "landing-given-up-with-its-operation",
        0,
        "serving",
        # First caught by the notice (UNDEPLOYED with a DeployModel still running); the model
        # that lands afterwards breaks cancel-stops-billing later on the same path.
        "notice-happened",
        "shared.domain.serving.rule",
        "_undeploying",
        # The fix waits for a set-aside DeployModel whose operation Vertex answered.
        fixed="        and not landing.operation\n",
        broken="",
        ci=False,
        # ... and the later one (lost-deploy-given-up-while-it-runs) waits for any running
        # DeployModel that may be it: either alone keeps this trace fixed, so both go.
        also=(("        and not may_still_land(landing, observed)\n", ""),),
    ),
    Mutant(
        "lost-deploy-given-up-while-it-runs",
        0,
        "serving",
        "notice-happened",
        "shared.domain.serving.rule",
        "_undeploying",
        # The fix gives up a set-aside DeployModel whose answer was lost only once no
        # DeployModel that may be it still runs on the endpoint (ListOperations).
        fixed="        and not may_still_land(landing, observed)\n",
        broken="",
        ci=False,
    ),
    Mutant(
        "claim-known-by-its-instant",
        0,
        "serving",
        "cancel-ends-everything",
        "shared.domain.serving.rule",
        "same_claim",
        # The fix knows a claim by its kind and model too, not by its instant alone.
        fixed="        and held.kind is claim.kind\n        and held.target == claim.target\n",
        broken="",
        ci=False,
    ),
    Mutant(
        "stale-entry-ended-job",
        10,
        "quota",
        "no-stuck-record",
        "shared.app.services.tick",
        "_settle_listed",
        # The fix reads a stale entry's record fresh for an ended job of its current attempt
        # too, not only for a live one (defect 10 once more: the job ended before any tick).
        fixed="    earlier = attempt.isdigit() and int(attempt) < record.attempt\n",
        broken="    earlier = True\n",
        ci=False,
    ),
    Mutant(
        "away-region-never-given-up",
        5,
        "auto",
        "auto-meets-deadline",
        "shared.app.steps.attempts",
        "_find",
        # The fix gives an attempt up in a region it moved to that answers neither its create
        # nor the lookup, and sends it home.
        fixed="        if _given_up_away(ports, request.request_id, plan, exc):\n"
        "            raise _GivenUp from exc\n",
        broken="",
        ci=False,
    ),
    Mutant(
        "lost-run-counted-as-progress",
        4,
        "auto",
        "auto-meets-deadline",
        "shared.domain.capacity.situations",
        "situation_from_record",
        # The fix counts an ended attempt's run past its last checkpoint as lost before the
        # next plan (its workLostSeconds is written only when the next attempt is submitted).
        fixed="_with_transfer(_with_lost(AttemptOutcome.from_attempt(a), a, record), a, record)",
        broken="_with_transfer(AttemptOutcome.from_attempt(a), a, record)",
        ci=False,
    ),
    Mutant(
        "tombstone-then-a-fault",
        0,
        "serving",
        "cancel-stops-billing",
        "shared.app.services.cancel",
        "cancel_request",
        # The fix takes the deployment down when a cancel finds its own earlier tombstone.
        fixed="            record.reason == TOMBSTONE_REASON\n",
        broken="            False\n",
        ci=False,
        # ... and looks for the deployment before anything else can fail.
        also=(
            (
                "                    cancel_deployment(request_id, intake.deployments)\n"
                "                flush_outbox(request_id, store, intake.notifier)\n",
                "                    cancel_deployment(request_id, intake.deployments)\n",
            ),
            (
                '                log.info("cancel for a request not seen yet: tombstone left")\n',
                "                flush_outbox(request_id, store, intake.notifier)\n"
                '                log.info("cancel for a request not seen yet: tombstone left")\n',
            ),
        ),
    ),
    Mutant(
        "line-write-of-admission-unstamped",
        0,
        "admission",
        "line-complete",
        "shared.domain.admission.line",
        "touches_line",
        # Issue 41's line: a write of a record's admission (its intake, its admission, its
        # requeue) stamps it for the line, so the next pass's sync reads it. Without it, a
        # request entering its queue is missing from the line until the tick.
        fixed=(
            '    if any(name == "admission" or name.startswith("admission.")'
            " for name in written):\n"
        ),
        broken="    if False:\n",
    ),
    Mutant(
        "followed-entry-kept-stale",
        0,
        "serving",
        "followed-complete",
        "shared.domain.model.watch",
        "resynced",
        # Issue 41's followed list (and the admission line, synced the same way): a record
        # written since the list's mark replaces its entry. Kept as first listed instead, the
        # tick decides on a state long gone: a cancel is never seen, a hedge never followed.
        fixed="            entries[key] = project(stored, fields)\n",
        broken="            entries.setdefault(key, project(stored, fields))\n",
    ),
    Mutant(
        "traffic-move-read-stale",
        0,
        "serving-alone",
        "pause-only-for-hand-edits",
        "shared.domain.serving.rule",
        "decide",
        # The chaos soak, seed 359349, and the full budget's serving-alone seed 197: a read of
        # an older version of the endpoint than our traffic move made (or than the read the
        # move was decided on), decided on the state the move wrote: our own move was taken
        # for a hand edit, and the deployment paused for good.
        fixed="    if _older_version(state, observed, taken):\n",
        broken="    if False:\n",
        ci=False,
    ),
    Mutant(
        "own-take-lost-is-a-hand-edit",
        0,
        "serving-alone",
        "pause-only-for-hand-edits",
        "shared.domain.serving.rule",
        "_edit",
        # Our take of an endpoint with no traffic whose answer (or write) was lost: the next
        # read shows ours with all of it, the state as before; taken for a hand edit.
        fixed="    if pool == 100 and not (state.pool or state.theirs or "
        "any(state.others.values())):\n",
        broken="    if False:\n",
        ci=False,
    ),
)
BY_NAME = {m.name: m for m in MUTANTS}


@contextmanager
def installed(mutant: Mutant) -> Iterator[None]:
    """``mutant`` in place for the duration (see the module docstring).

    Raises:
        ValueError: the fix's text is not in the function (the code moved: update the mutant).
    """
    module = importlib.import_module(mutant.module)
    original = getattr(module, mutant.function)
    edited = inspect.getsource(original)
    for fixed, broken in ((mutant.fixed, mutant.broken), *mutant.also):
        if fixed not in edited:
            raise ValueError(f"{mutant.name}: the fix is not in {mutant.module}.{mutant.function}")
        edited = edited.replace(fixed, broken)
    edited = textwrap.dedent(edited)
    namespace = dict(vars(module))
    # The function's own source, one line reverted, compiled where it was defined.
    exec(compile(edited, f"<mutant {mutant.name}>", "exec"), namespace)
    replacement = namespace[mutant.function]
    assert isinstance(replacement, FunctionType)
    holders = [
        (held, name)
        for held in list(sys.modules.values())
        if held is not None
        for name, value in list(vars(held).items())
        if value is original
    ]
    # A module-level table of handlers holds the function too (intake's HANDLERS).
    tables = [
        (table, key)
        for held in list(sys.modules.values())
        if held is not None and held.__name__.startswith(("shared", "functions", "flexjobs"))
        for table in list(vars(held).values())
        if isinstance(table, dict)
        for key, value in list(table.items())
        if value is original
    ]
    for held, name in holders:
        setattr(held, name, replacement)
    for table, key in tables:
        table[key] = replacement
    try:
        yield
    finally:
        for held, name in holders:
            setattr(held, name, original)
        for table, key in tables:
            table[key] = original
