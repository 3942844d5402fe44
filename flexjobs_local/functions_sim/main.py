"""The functions' entry points (``functions/main.py``, unchanged) on the simulator's clock.

The embedded stack serves this file instead of ``functions/main.py`` when
``StackConfig.sim_clock`` is set: functions-framework loads it, it loads ``functions/main.py``
and re-exports every entry point, and before any invocation it installs the contexts the
entry points use (``shared.bootstrap``'s ``override`` hooks) built by the production builders
with one change: their clock is :class:`~flexjobs_local.simclock.SimulatedClock`, the Vertex
AI simulator's (URL in ``FLEXJOBS_LOCAL_CLOCK_URL``), and their waits (the hint handler's
coalescing window) are simulated seconds too. The records' times, the status page's "now",
the AUTO policy's deadlines and the serving grace and hold periods then all run on the one
clock the simulated Vertex AI runs on.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from flexjobs_local.simclock import CLOCK_URL_ENV, SimulatedClock
from shared import bootstrap
from shared.kernel.logs import configure

_SOURCE = Path(__file__).resolve().parents[2] / "functions" / "main.py"
_NAME = "flexjobs_functions_main"


def _load_main() -> Any:
    spec = importlib.util.spec_from_file_location(_NAME, _SOURCE)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {_SOURCE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module
    spec.loader.exec_module(module)
    return module


def install(clock: SimulatedClock) -> None:
    """Build every context with the production wiring on ``clock``, and install it."""
    configure()  # what bootstrap's lazy builders do first; overrides skip them

    def ports() -> bootstrap.Ports:
        return bootstrap.Ports(sleep=clock.sleep)

    bootstrap.override(bootstrap.build_intake(clock=clock.now, ports=ports()))
    bootstrap.override_tracker(bootstrap.build_tracker(clock=clock.now, ports=ports()))
    bootstrap.override_uploads(bootstrap.build_uploads(clock=clock.now, ports=ports()))
    bootstrap.override_status_site(bootstrap.build_status_site(clock=clock.now, ports=ports()))


_main = _load_main()
install(SimulatedClock(os.environ[CLOCK_URL_ENV]))

handle_job_request = _main.handle_job_request
handle_job_event = _main.handle_job_event
handle_scheduler_tick = _main.handle_scheduler_tick
handle_upload = _main.handle_upload
status_page = _main.status_page
