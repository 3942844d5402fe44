"""A small client for the simulator's HTTP control surface (stdlib only).

Examples:
    >>> sim = SimulatorControl("http://127.0.0.1:8599")
    >>> sim.set_capacity("us-central1", "NVIDIA_TESLA_A100", 4)
    >>> sim.inject_faults("UNAVAILABLE", count=2, methods=["CreateCustomJob"])
    >>> sim.wait_for_job(name, "JOB_STATE_RUNNING")["_sim"]["progressSeconds"]
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any


class SimulatorControlError(RuntimeError):
    """The control surface answered with an error status (``status``, ``message``)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"simulator control error {status}: {message}")
        self.status = status
        self.message = message


class SimulatorControl:
    """Typed wrapper over the control routes documented in :mod:`.control`."""

    def __init__(self, base_url: str, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        query: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> Any:
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")
            try:
                message = json.loads(text).get("error", text)
            except (json.JSONDecodeError, AttributeError):
                message = text  # not our JSON error shape; show what came back
            raise SimulatorControlError(exc.code, message) from exc

    # --- health and clock ----------------------------------------------------------------------

    def healthz(self) -> bool:
        """True when the control surface answers."""
        return bool(self._call("GET", "/healthz").get("status") == "ok")

    def clock(self) -> dict[str, Any]:
        """``{"simNow": RFC 3339, "simNowEpoch": float, "timeFactor": float}``."""
        result: dict[str, Any] = self._call("GET", "/clock")
        return result

    def set_time_factor(self, factor: float) -> dict[str, Any]:
        """Change simulated seconds per wall second (0 freezes); returns the clock."""
        result: dict[str, Any] = self._call("POST", "/time-factor", {"factor": factor})
        return result

    def advance(self, seconds: float) -> dict[str, Any]:
        """Jump simulated time forward, replaying every transition in order; returns the clock."""
        result: dict[str, Any] = self._call("POST", "/advance", {"seconds": seconds})
        return result

    def reset(self) -> None:
        """Forget jobs, endpoints, calls and faults; capacity, rate and factor to defaults."""
        self._call("POST", "/reset", {})

    # --- capacity ------------------------------------------------------------------------------

    def set_capacity(self, location: str, accelerator_type: str, gpus: int) -> dict[str, Any]:
        """Set total GPUs of a type in a location; returns the capacity view."""
        result: dict[str, Any] = self._call(
            "POST",
            "/capacity",
            {"location": location, "acceleratorType": accelerator_type, "gpus": gpus},
        )
        return result

    def set_default_capacity(self, gpus: int) -> dict[str, Any]:
        """Set GPUs of every (location, type) not set explicitly."""
        result: dict[str, Any] = self._call("POST", "/capacity", {"defaultGpus": gpus})
        return result

    def capacity(self) -> dict[str, Any]:
        """``{"defaultGpus", "pools": [{location, acceleratorType, gpus, inUse, explicit}]}``."""
        result: dict[str, Any] = self._call("GET", "/capacity")
        return result

    # --- quota ---------------------------------------------------------------------------------

    def set_quota(
        self,
        location: str,
        accelerator_type: str,
        pool: str,
        limit: int | None,
        project: str | None = None,
    ) -> dict[str, Any]:
        """Set the GPU quota of a pool ("preemptible" or "on-demand"); ``None`` removes it.

        Without ``project`` the limit applies to each project on its own. Returns the quota
        view.
        """
        body: dict[str, Any] = {
            "location": location,
            "acceleratorType": accelerator_type,
            "pool": pool,
            "limit": limit,
        }
        if project is not None:
            body["project"] = project
        result: dict[str, Any] = self._call("POST", "/quota", body)
        return result

    def quota(self) -> dict[str, Any]:
        """``{"limits": [...], "usage": [...]}``: the limits set and the GPUs jobs hold."""
        result: dict[str, Any] = self._call("GET", "/quota")
        return result

    # --- faults and the call log ---------------------------------------------------------------

    def inject_faults(
        self,
        code: str,
        count: int = 1,
        methods: Iterable[str] | None = None,
        *,
        when: str = "before",
        message: str | None = None,
        late_seconds: float | None = None,
        delay_seconds: float | None = None,
    ) -> dict[str, Any]:
        """Fail the next ``count`` matching calls with ``code``; returns armed faults.

        ``when``: "before" (no effect), "after" (effect, then the fault) or "late" (the fault at
        once, the effect ``late_seconds`` later). ``delay_seconds``: the answer comes that long
        after the call arrived; with code "OK" the calls are only slow ("before": the effect
        after the wait; "after": the effect, logged, at once, and the answer held).
        """
        body: dict[str, Any] = {"code": code, "count": count, "when": when}
        if late_seconds is not None:
            body["lateSeconds"] = late_seconds
        if delay_seconds is not None:
            body["delaySeconds"] = delay_seconds
        if methods:
            body["methods"] = list(methods)
        if message:
            body["message"] = message
        result: dict[str, Any] = self._call("POST", "/faults", body)
        return result

    def faults(self) -> list[dict[str, Any]]:
        """Armed fault rules."""
        result: list[dict[str, Any]] = self._call("GET", "/faults")["faults"]
        return result

    def clear_faults(self) -> None:
        """Disarm all faults."""
        self._call("DELETE", "/faults")

    def calls(self, method: str | None = None) -> list[dict[str, Any]]:
        """Call log entries ``{method, time, simTime, request, code, message}``, oldest first."""
        result: list[dict[str, Any]] = self._call(
            "GET", "/calls", query={"method": method} if method else None
        )
        return result

    def clear_calls(self) -> int:
        """Empty the call log; returns how many entries were dropped."""
        return int(self._call("DELETE", "/calls")["cleared"])

    # --- jobs ----------------------------------------------------------------------------------

    def jobs(self, resource: str | None = None) -> list[dict[str, Any]]:
        """Every job (REST JSON + ``_sim``), optionally one resource kind such as "CustomJob"."""
        result: list[dict[str, Any]] = self._call(
            "GET", "/jobs", query={"resource": resource} if resource else None
        )
        return result

    def job(self, name: str) -> dict[str, Any]:
        """One job by resource name (REST JSON + ``_sim``).

        Raises:
            SimulatorControlError: 404 when there is no such job.
        """
        found = self._call("GET", "/jobs", query={"name": name})
        if not found:
            raise SimulatorControlError(404, f"no job named {name}")
        result: dict[str, Any] = found[0]
        return result

    def wait_for_job(
        self, name: str, *states: str, timeout: float = 60.0, interval: float = 0.05
    ) -> dict[str, Any]:
        """Poll until the job is in one of ``states`` (JobState/PipelineState names).

        Raises:
            TimeoutError: not reached within ``timeout`` wall seconds (the last state is named).
        """
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(name)
            if job.get("state") in states:
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} is {job.get('state')}, not one of {states}")
            time.sleep(interval)

    def preempt(self, job: str) -> dict[str, Any]:
        """Preempt a RUNNING job now; returns its JSON (409 error if it is not running)."""
        result: dict[str, Any] = self._call("POST", "/preempt", {"job": job})
        return result

    def set_preemption_rate(self, rate_per_hour: float, seed: int | None = None) -> dict[str, Any]:
        """Random preemptions of RUNNING SPOT jobs, ``rate_per_hour`` per simulated hour each."""
        body: dict[str, Any] = {"ratePerHour": rate_per_hour}
        if seed is not None:
            body["seed"] = seed
        result: dict[str, Any] = self._call("POST", "/preemption-rate", body)
        return result

    def fail(self, job: str, failure_class: str, message: str | None = None) -> dict[str, Any]:
        """Fail a job with class stockout | user | infrastructure | preempted; returns its JSON."""
        body: dict[str, Any] = {"job": job, "class": failure_class}
        if message:
            body["message"] = message
        result: dict[str, Any] = self._call("POST", "/fail", body)
        return result

    # --- endpoints and operations --------------------------------------------------------------

    def endpoints(self) -> list[dict[str, Any]]:
        """Every endpoint as REST JSON."""
        result: list[dict[str, Any]] = self._call("GET", "/endpoints")
        return result

    def serving(self) -> dict[str, Any]:
        """Spot capacity per location and the nodes of every Spot deployed model."""
        result: dict[str, Any] = self._call("GET", "/serving")
        return result

    def set_spot_serving(
        self, location: str, available: bool, placement_seconds: float | None = None
    ) -> dict[str, Any]:
        """Spot serving capacity of ``location`` goes or returns now; returns :meth:`serving`."""
        body: dict[str, Any] = {"location": location, "available": available}
        if placement_seconds is not None:
            body["placementSeconds"] = placement_seconds
        result: dict[str, Any] = self._call("POST", "/serving/spot", body)
        return result

    def replay_spot_trace(
        self,
        location: str,
        path: str | Path,
        threshold: int = 1,
        placement_seconds: float | None = None,
    ) -> dict[str, Any]:
        """Replay the Spot trace file at ``path`` (``{"metadata": {"gap_seconds"}, "data"}``,
        as in ``../shared/traces``) as the Spot capacity of ``location`` from now; returns
        :meth:`serving`."""
        trace = json.loads(Path(path).read_text(encoding="utf-8"))
        body: dict[str, Any] = {"location": location, "trace": trace, "threshold": threshold}
        if placement_seconds is not None:
            body["placementSeconds"] = placement_seconds
        result: dict[str, Any] = self._call("POST", "/serving/spot/trace", body)
        return result

    def reclaim_nodes(self, endpoint: str, deployed_model_id: str, nodes: int) -> dict[str, Any]:
        """Reclaim ``nodes`` running nodes of one Spot deployed model now; returns serving."""
        body = {"endpoint": endpoint, "deployedModelId": deployed_model_id, "nodes": nodes}
        result: dict[str, Any] = self._call("POST", "/serving/reclaim", body)
        return result

    def operations(self) -> list[dict[str, Any]]:
        """Every long-running operation as JSON."""
        result: list[dict[str, Any]] = self._call("GET", "/operations")
        return result

    # --- side effects --------------------------------------------------------------------------

    def set_hints(
        self,
        enabled: bool,
        copies: int | None = None,
        topic: str | None = None,
        *,
        drop: float | None = None,
        repeat: float | None = None,
        delay: float | None = None,
        delay_seconds: float | None = None,
        seed: int | None = None,
    ) -> dict[str, Any]:
        """Toggle Pub/Sub state hints (optionally set copies per change and the topic).

        ``drop``, ``repeat``, ``delay``: per state change, the probability that its hints are
        not published at all, published twice over, or published up to ``delay_seconds``
        later (after later changes' hints); ``seed`` makes those draws reproducible. Each
        left None keeps its setting; :meth:`reset` sets them back to 0. The counters are in
        :meth:`side_effects` (``hints.chaos``).
        """
        body: dict[str, Any] = {"enabled": enabled}
        if copies is not None:
            body["copies"] = copies
        if topic:
            body["topic"] = topic
        chaos = {"drop": drop, "repeat": repeat, "delay": delay, "delaySeconds": delay_seconds}
        body.update({k: v for k, v in chaos.items() if v is not None})
        if seed is not None:
            body["seed"] = seed
        result: dict[str, Any] = self._call("POST", "/hints", body)
        return result

    def side_effects(self) -> dict[str, Any]:
        """Hint/storage settings and counters: ``{"hints": {...}, "storage": {...}, "queued"}``."""
        result: dict[str, Any] = self._call("GET", "/hints")
        return result

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until queued hints and checkpoint writes are done; False on timeout."""
        answer = self._call("POST", "/flush", {"timeout": timeout}, timeout=timeout + 10)
        return bool(answer["drained"])
