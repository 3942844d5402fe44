"""Cold start (issue 41), a script, not a test: run with ``./dev bench coldstart``.

A burst scales the functions out, and every new instance imports ``functions/main.py`` before
its first delivery. This prints, against ``import google.cloud.aiplatform`` (the SDK we
avoid) on the same interpreter, each in a fresh subprocess:

1. the import of ``functions/main.py`` alone (loaded from its file, as functions-framework
   loads it), and functions-framework's own import, which the host process has paid before
   it loads the module;
2. for each entry point, a fresh process that imports ``functions/main.py`` and then runs that
   entry point's first delivery with the production wiring, its real clients pointed at the
   embedded stack's emulators and the Vertex AI simulator. Its figure is import + delivery.

Every figure is the median of ``--rounds`` (5) rounds; each round runs every probe once, in an
order reversed from one round to the next, so the load of a shared machine falls on all of
them alike. Each probe times only its own import and delivery (``time.perf_counter`` inside the
process), never the interpreter's start, which is the same for both sides. Each delivery is
checked after it ran (its record written, its Vertex calls made, a 200 page): a delivery that
failed, and was acknowledged by ``pubsub_handler``, would flatter its figure. The target is
0.15x for every figure; it is printed beside each one, never asserted.

``--imports-only`` skips the stack (no emulators needed): the import figures alone.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TARGET = 0.15

#: Runs in a fresh interpreter: times ``import`` (exec'd), runs ``prep`` untimed (the event
#: functions-framework would have built), times ``deliver``, then ``check`` untimed (it sets
#: ``result``). Prints one JSON line: seconds, peak RSS, whether the GAPIC client was loaded.
#: Peak RSS is the process's ``VmHWM``: ``ru_maxrss`` would carry the parent's high-water
#: mark across the fork, and the parent holds a stack's clients.
PROBE = """
import json, sys, time
code = json.loads(sys.argv[1])
ns = {}
t0 = time.perf_counter()
exec(code["import"], ns)
t1 = time.perf_counter()
exec(code.get("prep", ""), ns)
t2 = time.perf_counter()
exec(code.get("deliver", ""), ns)
t3 = time.perf_counter()
exec(code.get("check", ""), ns)
print(json.dumps({
    "import_s": t1 - t0,
    "deliver_s": t3 - t2,
    "maxrss_mib": int(next(
        line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")
    )) / 1024,
    "gapic": "google.cloud.aiplatform_v1" in sys.modules,
    "result": ns.get("result"),
}))
"""

#: functions/main.py as functions-framework loads it: from its file, as module ``main``.
IMPORT_MAIN = (
    "import importlib.util as u; s = u.spec_from_file_location('main', 'functions/main.py');"
    " m = u.module_from_spec(s); s.loader.exec_module(m)"
)
IMPORT_SDK = "import google.cloud.aiplatform"
IMPORT_FRAMEWORK = "import functions_framework"

SDK = "import google.cloud.aiplatform (SDK)"
MAIN = "functions/main.py (cold start)"
FRAMEWORK = "of which functions-framework (the host's)"
IMPORT_ONLY = frozenset({SDK, MAIN, FRAMEWORK})


@dataclass(frozen=True)
class Probe:
    """One fresh process: what it imports, the event it builds, the delivery, its check."""

    name: str
    code: dict[str, str]


@dataclass(frozen=True)
class Figure:
    """A probe's medians over the rounds, and its ratio to the SDK's import."""

    name: str
    import_s: float
    deliver_s: float
    maxrss_mib: float
    gapic: bool
    ratio: float

    @property
    def total_s(self) -> float:
        return self.import_s + self.deliver_s


def verdict(ratio: float, target: float = TARGET) -> str:
    """PASS at or under the target.

    >>> verdict(0.15), verdict(0.151)
    ('PASS', 'FAIL')
    """
    return "PASS" if ratio <= target else "FAIL"


def round_order(names: Sequence[str], round_index: int) -> list[str]:
    """The probes' order in one round: as given, reversed every other round.

    >>> round_order(["a", "b", "c"], 0), round_order(["a", "b", "c"], 1)
    (['a', 'b', 'c'], ['c', 'b', 'a'])
    """
    return list(names) if round_index % 2 == 0 else list(reversed(names))


def run_probe(probe: Probe, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(probe.code)],
        cwd=REPO, env=dict(env if env is not None else os.environ),
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"{probe.name}: exit {out.returncode}\n{out.stderr[-4000:]}")
    lines = out.stdout.strip().splitlines()
    result: dict[str, Any] = json.loads(lines[-1])
    result["log"] = "\n".join(lines[:-1] + out.stderr.splitlines())[-4000:]
    return result


def measure(
    probes: Sequence[Probe],
    rounds: int,
    *,
    env: Mapping[str, str] | None = None,
    before: Callable[[str, int], Probe | None] | None = None,
    after: Callable[[str, int, dict[str, Any]], None] | None = None,
) -> dict[str, Figure]:
    """Each probe's medians over ``rounds`` alternating rounds, the SDK's probe among them.

    ``before(name, round)`` may give the round's own probe (fresh ids each round); ``after``
    checks a run's result and raises when its delivery did not do its work.
    """
    by_name = {probe.name: probe for probe in probes}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in by_name}
    for r in range(rounds):
        for name in round_order(list(by_name), r):
            probe = (before(name, r) if before else None) or by_name[name]
            run = run_probe(probe, env)
            if after is not None:
                after(name, r, run)
            runs[name].append(run)
    sdk = statistics.median(run["import_s"] for run in runs[SDK])
    figures: dict[str, Figure] = {}
    for name, done in runs.items():
        import_s = statistics.median(run["import_s"] for run in done)
        deliver_s = statistics.median(run["deliver_s"] for run in done)
        figures[name] = Figure(
            name=name,
            import_s=import_s,
            deliver_s=deliver_s,
            maxrss_mib=statistics.median(run["maxrss_mib"] for run in done),
            gapic=any(run["gapic"] for run in done),
            ratio=(import_s + deliver_s) / sdk,
        )
    return figures


def import_probes(extra: Mapping[str, str] | None = None) -> list[Probe]:
    """The import-only probes: the SDK, functions/main.py, functions-framework alone, and
    ``extra`` (name → import code)."""
    codes = {SDK: IMPORT_SDK, MAIN: IMPORT_MAIN, FRAMEWORK: IMPORT_FRAMEWORK, **(extra or {})}
    return [Probe(name, {"import": code}) for name, code in codes.items()]


# --- the first deliveries, on the embedded stack ---------------------------------------------

ENTRY_POINTS = (
    "handle_job_request",
    "handle_job_event",
    "handle_scheduler_tick",
    "handle_upload",
    "status_page",
)


def seed_body(request_id: str) -> dict[str, Any]:
    """The seed example (tests/events/seed_request.json), under ``request_id``."""
    from tests.events import load

    body: dict[str, Any] = load("seed_request")
    body["requestId"] = request_id
    body["customJob"]["displayName"] = request_id
    return body


def pubsub_prep(data: dict[str, Any]) -> str:
    """Probe code building the Pub/Sub CloudEvent functions-framework would hand over,
    published now (a hint published before the record's last read, the tick's, would be
    acknowledged as covered without a read)."""
    return (
        "import datetime; from tests.events import pubsub_cloud_event, published_at;"
        f" ev = published_at(pubsub_cloud_event({data!r}),"
        " datetime.datetime.now(datetime.UTC))"
    )


class Deliveries:
    """The entry points' probes on one stack, with fresh ids each round, and their checks."""

    def __init__(self, stack: Any, run: str) -> None:
        from google.cloud import firestore

        self.stack = stack
        self.run = run
        self.db = firestore.Client(project=stack.config.project)
        self.main: Any = None

    def rid(self, entry_point: str, r: int) -> str:
        return f"cold-{self.run}-{entry_point[-7:].strip('_')}-{r}"

    def seed(self, request_id: str) -> str:
        """A job created by the real handler in this process (not measured); its name.

        Each hint names a job created just before it: a job the tick read moments earlier
        is under the tick's read lease, and its hint would be acknowledged without a read.
        """
        from shared.domain.model.ids import doc_id
        from tests.events import pubsub_cloud_event

        if self.main is None:
            self.main = load_main()
        self.main.handle_job_request(pubsub_cloud_event(seed_body(request_id)))
        name = self.record(doc_id(request_id)).get("vertexJob")
        if not name:
            raise RuntimeError(f"the seed request {request_id} recorded no job")
        return str(name)

    def record(self, document: str) -> dict[str, Any]:
        snap = self.db.collection("jobs").document(document).get()
        return snap.to_dict() or {}

    def probe(self, name: str, r: int) -> Probe | None:
        if name not in ENTRY_POINTS:
            return None
        code = {"import": IMPORT_MAIN}
        if name == "handle_job_request":
            code["prep"] = pubsub_prep(seed_body(self.rid(name, r)))
            code["deliver"] = "m.handle_job_request(ev)"
        elif name == "handle_job_event":
            hinted = self.seed(f"cold-{self.run}-seed-{r}")
            code["prep"] = pubsub_prep({"jobName": hinted})
            code["deliver"] = "m.handle_job_event(ev)"
        elif name == "handle_scheduler_tick":
            code["prep"] = pubsub_prep({"tick": "now"})
            code["deliver"] = "m.handle_scheduler_tick(ev)"
        elif name == "handle_upload":
            code["prep"] = self.upload_prep(self.rid(name, r))
            code["deliver"] = "m.handle_upload(ev)"
        else:
            code["prep"] = (
                "import flask; ctx = flask.Flask('coldstart').test_request_context('/'); ctx.push()"
            )
            code["deliver"] = "page = m.status_page(flask.request)"
            code["check"] = (
                "r = flask.make_response(page);"
                " result = [r.status_code, r.get_data(as_text=True).count('cold-')]"
            )
        self.stack.simulator.clear_calls()  # the check counts this delivery's calls only
        return Probe(name, code)

    def upload_prep(self, request_id: str) -> str:
        """Probe code building the Eventarc finalize of a request file just written."""
        from tests.events import load

        config = self.stack.config
        data = json.dumps(seed_body(request_id)).encode()
        name = f"{config.upload_prefix}{request_id}.json"
        generation = self.stack.upload(name, data, content_type="application/json")
        resource = dict(load("storage_object_finalized")["data"])
        resource.update(
            name=name,
            bucket=config.bucket,
            generation=generation,
            size=str(len(data)),
            id=f"{config.bucket}/{name}/{generation}",
            contentType="application/json",
        )
        resource.pop("md5Hash", None)
        resource.pop("crc32c", None)
        return (
            f"from tests.events import storage_cloud_event; ev = storage_cloud_event({resource!r})"
        )

    def check(self, name: str, r: int, run: dict[str, Any]) -> None:
        """Raise unless the delivery did its work."""
        from shared.domain.model.ids import doc_id

        if name not in ENTRY_POINTS:
            return
        vertex = len(self.stack.simulator.calls())
        problem = ""
        if name in ("handle_job_request", "handle_upload"):
            if not self.record(doc_id(self.rid(name, r))).get("vertexJob"):
                problem = "no record with its job"
        elif name == "handle_job_event":
            if vertex == 0:
                problem = "no Vertex call (the hint read nothing)"
        elif name == "handle_scheduler_tick":
            if vertex == 0:
                problem = "no Vertex call (the tick listed nothing)"
        elif run["result"] is None or run["result"][0] != 200 or run["result"][1] == 0:
            problem = f"status page answered {run['result']}"
        if problem:
            raise RuntimeError(
                f"{name}, round {r + 1}: the first delivery failed: {problem}\n{run['log']}"
            )
        run["vertex_calls"] = vertex


def load_main() -> Any:
    """functions/main.py in this process (to seed the stack), as the probes load it."""
    from benchmarks.floor import functions_main

    return functions_main()


def measure_deliveries(rounds: int) -> dict[str, Figure]:
    """The import figures and every entry point's import + first delivery, on one stack."""
    from flexjobs_local.stack import LocalStack, StackConfig

    # No function servers (each probe is the function), no hints or checkpoints (the probes
    # deliver what they measure), capacity enough that every job runs.
    config = StackConfig(
        functions=(), hints=False, checkpoints=False, default_capacity=10_000, time_factor=1.0
    )
    probes = import_probes() + [Probe(name, {"import": IMPORT_MAIN}) for name in ENTRY_POINTS]
    with LocalStack(config) as stack:
        stack.apply_env()
        env = dict(os.environ)
        deliveries = Deliveries(stack, uuid.uuid4().hex[:6])
        deliveries.seed(f"cold-{deliveries.run}-first")  # the tick and the page have a job
        return measure(probes, rounds, env=env, before=deliveries.probe, after=deliveries.check)


def report(figures: Mapping[str, Figure]) -> list[str]:
    """The lines printed: each figure beside the target, with PASS/FAIL."""
    sdk = figures[SDK]
    lines = [f"{SDK:<52} {sdk.import_s * 1000:8.0f} ms{'':31}peak RSS {sdk.maxrss_mib:6.1f} MiB"]
    for name, fig in figures.items():
        if name == SDK:
            continue
        parts = f"{fig.import_s * 1000:8.0f} ms"
        if name not in IMPORT_ONLY:
            parts += f" + {fig.deliver_s * 1000:6.0f} ms delivery"
        else:
            parts += " " * 18
        target = "" if name == FRAMEWORK else f"target <= {TARGET}x {verdict(fig.ratio)}"
        gapic = " aiplatform_v1" if fig.gapic else ""
        lines.append(
            f"{name:<52} {parts}  {fig.ratio:5.3f}x SDK  peak RSS {fig.maxrss_mib:6.1f} MiB"
            f"  {target}{gapic}"
        )
    return lines


def main() -> int:
    from flexjobs_local.procs import exit_on_sigterm

    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (medians)")
    parser.add_argument(
        "--imports-only", action="store_true", help="no stack: the import figures alone"
    )
    args = parser.parse_args()
    if args.imports_only:
        figures = measure(import_probes(), args.rounds)
    else:
        figures = measure_deliveries(args.rounds)
    print(f"\n== cold start (issue 41): medians of {args.rounds} alternating rounds ==")
    for line in report(figures):
        print(line)
    print(
        "entry points: a fresh process imports functions/main.py, then runs that entry "
        "point's first delivery; 'aiplatform_v1': it loaded the GAPIC client"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
