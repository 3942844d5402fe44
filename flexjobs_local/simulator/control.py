"""HTTP JSON control surface of the simulator, for tests, the demo and debugging.

Routes (bodies and answers are JSON; errors answer ``{"error": message}`` with 400 for a bad
request, 404 for an unknown job or route, 409 for a job in the wrong state):

=======  ====================  =============================================================
GET      /healthz              ``{"status": "ok"}``
GET      /capacity             ``{"defaultGpus", "pools": [{location, acceleratorType, gpus,
                               inUse, explicit}]}``
POST     /capacity             ``{"location", "acceleratorType", "gpus"}`` or
                               ``{"defaultGpus"}`` → same as GET
GET      /quota                ``{"limits": [{project, location, acceleratorType, pool, metric,
                               limit}], "usage": [{project, location, acceleratorType, pool,
                               metric, gpus, limit}]}``: GPU quota (:mod:`.quota`)
POST     /quota                ``{"location", "acceleratorType", "pool": "preemptible" or
                               "on-demand", "limit": n or null, "project"?}`` → quota (null:
                               unlimited again; no project: each project's own limit)
GET      /faults               ``{"faults": [{code, remaining, methods, message, when,
                               lateSeconds, delaySeconds}]}``
POST     /faults               ``{"code", "count", "methods"?, "when"?, "message"?,
                               "lateSeconds"?, "delaySeconds"?}`` → faults (code "OK" with
                               a delay: slow calls)
DELETE   /faults               → ``{"faults": []}``
GET      /calls[?method=M]     list of ``{method, time, simTime, request, code, message,
                               tookEffect}``
DELETE   /calls                ``{"cleared": n}``
GET      /jobs[?name=&resource=]  list of REST JSON jobs, each with a ``_sim`` block
GET      /endpoints            list of REST JSON endpoints
GET      /serving              ``{"locations": [{location, spotAvailable, placementSeconds,
                               trace: null or {startedAt, gapSeconds, steps, threshold,
                               nextChangeAt}}],
                               "deployedModels": [{endpoint, deployedModelId, location,
                               replicas, required, available, nodesDown: [{node, phase,
                               restartTries, nextAt}]}]}``: Spot deployed models only
                               (:mod:`.serving`; phase RESTARTING, WAITING or PLACING)
POST     /serving/spot         ``{"location", "available", "placementSeconds"?}`` → serving:
                               Spot serving capacity of one location goes (its Spot nodes
                               are reclaimed) or returns (placed ``placementSeconds`` later,
                               default 120, kept for the location); ends a trace replay there
POST     /serving/spot/trace   ``{"location", "trace": {"metadata": {"gap_seconds"}, "data"},
                               "threshold"?, "placementSeconds"?}`` → serving: replay a Spot
                               trace file's document as the location's Spot capacity from
                               now, cyclically (there while a value >= threshold, default 1)
POST     /serving/reclaim      ``{"endpoint", "deployedModelId", "nodes"}`` → serving:
                               reclaim that many running nodes of one Spot model now
GET      /operations           list of LRO JSON
GET      /clock                ``{"simNow", "simNowEpoch", "timeFactor"}``
POST     /time-factor          ``{"factor"}`` → clock
POST     /advance              ``{"seconds"}`` → clock (jumps simulated time)
POST     /reset                ``{"status": "ok"}`` (hint chaos is reset too)
POST     /preempt              ``{"job"}`` → job JSON
POST     /preemption-rate      ``{"ratePerHour", "seed"?}`` → the same back
POST     /fail                 ``{"job", "class", "message"?}`` → job JSON
GET      /hints                side-effect status (hints + storage counters, queue depth)
POST     /hints                ``{"enabled", "copies"?, "topic"?, "drop"?, "repeat"?,
                               "delay"?, "delaySeconds"?, "seed"?}`` → status (the last
                               five: what befalls each state change's hints, see
                               :class:`~.effects.HintChaos`)
POST     /flush                ``{"timeout"?}`` → ``{"drained": bool}`` (waits for side effects)
POST     /v2/entries:list      the Cloud Logging API's ``entries:list``: the jobs' ``ml_job``
                               entries (:mod:`.logs`) → ``{"entries", "nextPageToken"?}``
=======  ====================  =============================================================
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from flexjobs_local.simulator.common import SimError
from flexjobs_local.simulator.effects import SideEffects
from flexjobs_local.simulator.engine import Engine
from flexjobs_local.simulator.logs import BadFilter, JobLogs

_HTTP_FOR_CODE = {
    "NOT_FOUND": HTTPStatus.NOT_FOUND,
    "FAILED_PRECONDITION": HTTPStatus.CONFLICT,
    "ALREADY_EXISTS": HTTPStatus.CONFLICT,
}


class BadRequest(ValueError):
    """The control request body is missing a field or has a wrong type."""


Body = dict[str, Any]
Query = dict[str, str]
Route = Callable[[Body, Query], Any]


def _field(body: Body, name: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    if name not in body or body[name] is None:
        if default is ...:
            raise BadRequest(f"missing field {name!r}")
        return default
    value = body[name]
    # bool is an int in Python; a JSON true is not a GPU count.
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise BadRequest(f"field {name!r} has the wrong type")
    if not isinstance(value, kind):
        raise BadRequest(f"field {name!r} has the wrong type")
    return value


class ControlApp:
    """Route table over an :class:`Engine` and its :class:`SideEffects`."""

    def __init__(self, engine: Engine, effects: SideEffects, logs: JobLogs) -> None:
        self.engine = engine
        self.effects = effects
        self.logs = logs
        self.routes: dict[tuple[str, str], Route] = {
            ("GET", "/healthz"): lambda b, q: {"status": "ok"},
            ("GET", "/capacity"): lambda b, q: engine.capacity(),
            ("POST", "/capacity"): self._set_capacity,
            ("GET", "/quota"): lambda b, q: engine.quota(),
            ("POST", "/quota"): self._set_quota,
            ("GET", "/faults"): lambda b, q: engine.faults(),
            ("POST", "/faults"): self._inject_faults,
            ("DELETE", "/faults"): lambda b, q: engine.clear_faults(),
            ("GET", "/calls"): lambda b, q: engine.calls(q.get("method")),
            ("DELETE", "/calls"): lambda b, q: {"cleared": engine.clear_calls()},
            ("GET", "/jobs"): lambda b, q: engine.jobs_json(q.get("resource"), q.get("name")),
            ("GET", "/endpoints"): lambda b, q: engine.endpoints_json(),
            ("GET", "/operations"): lambda b, q: engine.operations_json(),
            ("GET", "/serving"): lambda b, q: engine.serving_json(),
            ("POST", "/serving/spot"): self._set_spot_serving,
            ("POST", "/serving/spot/trace"): self._replay_spot_trace,
            ("POST", "/serving/reclaim"): lambda b, q: engine.reclaim_nodes(
                _field(b, "endpoint", str),
                _field(b, "deployedModelId", str),
                _field(b, "nodes", int),
            ),
            ("GET", "/clock"): lambda b, q: engine.clock(),
            ("POST", "/time-factor"): self._set_time_factor,
            ("POST", "/advance"): self._advance,
            ("POST", "/reset"): self._reset,
            ("POST", "/preempt"): lambda b, q: engine.preempt(_field(b, "job", str)),
            ("POST", "/preemption-rate"): self._set_preemption_rate,
            ("POST", "/fail"): lambda b, q: engine.fail(
                _field(b, "job", str), _field(b, "class", str), _field(b, "message", str, None)
            ),
            ("GET", "/hints"): lambda b, q: effects.status(),
            ("POST", "/hints"): self._set_hints,
            ("POST", "/v2/entries:list"): self._list_entries,
            ("POST", "/flush"): lambda b, q: {
                "drained": effects.flush(float(_field(b, "timeout", (int, float), 30.0)))
            },
        }

    def _set_capacity(self, body: Body, query: Query) -> Any:
        if "defaultGpus" in body:
            return self.engine.set_default_capacity(_field(body, "defaultGpus", int))
        return self.engine.set_capacity(
            _field(body, "location", str),
            _field(body, "acceleratorType", str),
            _field(body, "gpus", int),
        )

    def _set_quota(self, body: Body, query: Query) -> Any:
        if "limit" not in body:
            raise BadRequest("missing field 'limit' (null for no limit)")
        return self.engine.set_quota(
            _field(body, "location", str),
            _field(body, "acceleratorType", str),
            _field(body, "pool", str),
            _field(body, "limit", int, None),
            _field(body, "project", str, None),
        )

    def _inject_faults(self, body: Body, query: Query) -> Any:
        methods = _field(body, "methods", list, [])
        if not all(isinstance(m, str) for m in methods):
            raise BadRequest("methods must be a list of method names")
        return self.engine.inject_faults(
            _field(body, "code", str),
            _field(body, "count", int, 1),
            methods,
            when=_field(body, "when", str, "before"),
            message=_field(body, "message", str, None),
            late_seconds=float(_field(body, "lateSeconds", (int, float), 2.0)),
            delay_seconds=float(_field(body, "delaySeconds", (int, float), 0.0)),
        )

    def _set_spot_serving(self, body: Body, query: Query) -> Any:
        placement = _field(body, "placementSeconds", (int, float), None)
        return self.engine.set_spot_serving(
            _field(body, "location", str),
            _field(body, "available", bool),
            None if placement is None else float(placement),
        )

    def _replay_spot_trace(self, body: Body, query: Query) -> Any:
        placement = _field(body, "placementSeconds", (int, float), None)
        return self.engine.replay_spot_trace(
            _field(body, "location", str),
            _field(body, "trace", dict),
            _field(body, "threshold", int, 1),
            None if placement is None else float(placement),
        )

    def _set_time_factor(self, body: Body, query: Query) -> Any:
        factor = float(_field(body, "factor", (int, float)))
        if factor < 0:
            raise BadRequest("factor must not be negative")
        return self.engine.set_time_factor(factor)

    def _advance(self, body: Body, query: Query) -> Any:
        seconds = float(_field(body, "seconds", (int, float)))
        if seconds < 0:
            raise BadRequest("seconds must not be negative")
        return self.engine.advance(seconds)

    def _reset(self, body: Body, query: Query) -> Any:
        self.engine.reset()
        self.effects.reset_chaos()
        self.logs.clear()
        return {"status": "ok"}

    def _list_entries(self, body: Body, query: Query) -> Any:
        try:
            return self.logs.list_entries(body)
        except BadFilter as exc:
            raise BadRequest(str(exc)) from exc

    def _set_preemption_rate(self, body: Body, query: Query) -> Any:
        return self.engine.set_preemption_rate(
            float(_field(body, "ratePerHour", (int, float))), _field(body, "seed", int, None)
        )

    def _set_hints(self, body: Body, query: Query) -> Any:
        def number(name: str) -> float | None:
            value = _field(body, name, (int, float), None)
            return None if value is None else float(value)

        try:
            return self.effects.configure_hints(
                _field(body, "enabled", bool),
                _field(body, "copies", int, None),
                _field(body, "topic", str, None),
                drop=number("drop"),
                repeat=number("repeat"),
                delay=number("delay"),
                delay_seconds=number("delaySeconds"),
                seed=_field(body, "seed", int, None),
            )
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc

    def dispatch(self, method: str, path: str, body: Body, query: Query) -> tuple[int, Any]:
        """Run one route; returns (HTTP status, JSON-able answer)."""
        route = self.routes.get((method, path))
        if route is None:
            known = any(p == path for _, p in self.routes)
            status = HTTPStatus.METHOD_NOT_ALLOWED if known else HTTPStatus.NOT_FOUND
            return status, {"error": f"no route {method} {path}"}
        try:
            return HTTPStatus.OK, route(body, query)
        except BadRequest as exc:
            return HTTPStatus.BAD_REQUEST, {"error": str(exc)}
        except SimError as err:
            status = _HTTP_FOR_CODE.get(err.code, HTTPStatus.BAD_REQUEST)
            return status, {"error": err.message, "code": err.code}


def _make_handler(app: ControlApp) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self, method: str) -> None:
            url = urlparse(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError as exc:
                self._answer(HTTPStatus.BAD_REQUEST, {"error": f"invalid JSON body: {exc}"})
                return
            if not isinstance(body, dict):
                self._answer(HTTPStatus.BAD_REQUEST, {"error": "the body must be a JSON object"})
                return
            status, answer = app.dispatch(method, url.path.rstrip("/") or "/", body, query)
            self._answer(status, answer)

        def _answer(self, status: int, answer: Any) -> None:
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def log_message(self, format: str, *args: Any) -> None:
            # Every control call is a test or demo step; logging each one to stderr is noise.
            return

    return Handler


class ControlServer:
    """The control surface on ``host:port`` (0 picks a free port), served on a thread."""

    def __init__(self, app: ControlApp, port: int = 0, host: str = "127.0.0.1") -> None:
        self._httpd = ThreadingHTTPServer((host, port), _make_handler(app))
        self._httpd.daemon_threads = True
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="sim-control", daemon=True
        )

    def start(self) -> None:
        """Start serving in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)
