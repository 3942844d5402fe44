"""The status page's presentation: Jinja2 templates, the stylesheet, security headers and the
small renderers the routes share (money, times, state classes, JSON bodies)."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from werkzeug.wrappers import Response

from shared.domain.model.states import DeploymentState
from shared.kernel.errors import FieldError
from shared.status.display import duration, gpu_hours, usd, when
from shared.status.listing import JOB_STATES
from shared.status.overview import (
    Money,
)

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STYLESHEET = HERE / "static" / "status.css"
# Not under /static/: functions-framework's Flask app keeps that path for a folder of its own.
CSS_PATH = "/assets/status.css"

#: No script may run (there is none), styles only from this origin (the stylesheet), images
#: only from it or data: URLs, never framed, no <base>, forms post back here only.
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # For browsers that predate frame-ancestors.
    "X-Frame-Options": "DENY",
    "Cross-Origin-Resource-Policy": "same-origin",
}
#: How the charts fill (or stroke) each kind of shape: as SVG attributes, so the pictures
#: hold without CSS. The job timeline's spans; then the serving chart's replicas (on-demand
#: striped, so that it reads from Spot without colour), its shading where fewer replicas
#: served than required, the required line and the marks.
FILLS = {
    "queued": "url(#pattern-queued)",
    "running": "#2b6cb0",
    "lost": "url(#pattern-lost)",
    "spot": "#2b6cb0",
    "onDemand": "url(#pattern-on-demand)",
    "short": "#fde2e2",
    "required": "#1d2430",
    "hedge": "#c05621",
    "failed": "#c53030",
    "restore": "#276749",
}


_KNOWN_STATES = {*JOB_STATES, *(s.value for s in DeploymentState)}


def line_text(value: Any) -> str | None:
    return f"line {value}" if value is not None else None


def when_text(value: Any) -> str | None:
    return when(value) if isinstance(value, datetime) else None


def money_text(money: Money, live: bool) -> str:
    words = (
        f"{usd(money.cost_usd)} (on demand {usd(money.on_demand_usd)}, "
        f"saved {usd(money.savings_usd)})"
    )
    if live:
        words += ", so far"
    if not money.priced:
        words += "; some GPU time has no price in the table"
    return words


# --- JSON -------------------------------------------------------------------------------------


def money_json(money: Money) -> dict[str, Any]:
    return {
        "costUsd": money.cost_usd,
        "onDemandUsd": money.on_demand_usd,
        "savingsUsd": money.savings_usd,
        "priced": money.priced,
    }


def json_response(body: Any, status: int = 200) -> Response:
    text = json.dumps(body, indent=1, sort_keys=True)
    response = Response(text, status=status, content_type="application/json; charset=utf-8")
    response.headers["Cache-Control"] = "no-store"
    return response


# --- rendering --------------------------------------------------------------------------------


def _url_part(value: Any) -> str:
    """A requestId as one path segment: every reserved character escaped (``/`` too)."""
    return quote(str(value), safe="")


def _state_class(state: Any) -> str:
    """The CSS class of a state badge; a state the code does not know gets a neutral one."""
    return f"state-{state}" if state in _KNOWN_STATES else "state-unknown"


@functools.cache
def environment() -> jinja2.Environment:
    """The templates, loaded once per instance. Autoescaping is on for every template,
    whatever its name: every value from a request or a record is escaped."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,
    )
    env.filters.update(
        duration=duration,
        gpu_hours=gpu_hours,
        usd=usd,
        when=when,
        urlpart=_url_part,
        state_class=_state_class,
    )
    return env


@functools.cache
def _css() -> tuple[bytes, str]:
    data = STYLESHEET.read_bytes()
    return data, hashlib.sha256(data).hexdigest()[:12]


def stylesheet_response() -> Response:
    data, _version = _css()
    response = Response(data, content_type="text/css; charset=utf-8")
    # Its URL carries the content's hash (see html_page), so a new stylesheet is a new URL.
    response.headers["Cache-Control"] = "private, max-age=86400"
    return response


def html_page(template: str, context: Mapping[str, Any], status: int = 200) -> Response:
    css = f"{CSS_PATH}?v={_css()[1]}"
    page = environment().get_template(template).render(css=css, **context)
    response = Response(page, status=status, content_type="text/html; charset=utf-8")
    response.headers["Cache-Control"] = "no-store"
    return response


def error_page(
    status: int,
    title: str,
    message: str,
    api: bool,
    problems: Iterable[FieldError] = (),
) -> Response:
    listed = list(problems)
    if api:
        body: dict[str, Any] = {"error": title, "message": message}
        if listed:
            body["errors"] = [p.to_dict() for p in listed]
        return json_response(body, status)
    context = dict(now=None, status=status, title=title, message=message, problems=listed)
    return html_page("error.html", context, status)
