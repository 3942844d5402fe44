"""Child processes of the embedded stack: each in its own process group, killed as a group.

The emulators' Java processes outlive their ``gcloud`` wrapper, so signalling the wrapper alone
would leave them running; killing the whole group does not.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 that were free a moment ago.

    Held together while chosen, so the kernel never hands the same one out twice. Free a
    moment ago only: anything on the machine (a client's outgoing connection included) may
    take one before the service it is meant for binds it, which :class:`PortTaken` reports.
    """
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            sock = held.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


# What a service prints when the port it was given is taken: Python's socket error, gunicorn's
# "Connection in use", the Java emulators' BindException, gRPC's "Failed to add port".
_PORT_TAKEN = (
    "Address already in use",
    "Connection in use",
    "BindException",
    "Failed to bind",
    "could not bind",
)


class PortTaken(RuntimeError):
    """A service exited at start because its port was taken between choice and bind: starting
    again on other ports succeeds, unlike any other early exit."""


@dataclass
class Child:
    """One started service: its process (the group leader) and where its output goes."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    # How it was started, so that it can be started again the same way (see restart).
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def pgid(self) -> int:
        return self.proc.pid  # start_new_session makes the child its group's leader

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def kill_groups(
    pgids: list[int], grace: float = 5.0, children: list[subprocess.Popen[bytes]] | None = None
) -> None:
    """SIGTERM every group at once, then SIGKILL whatever is left after ``grace`` seconds.

    All groups share one grace period, so stopping a stack costs one wait, not one per service.
    ``children`` are the group leaders this process started: they are reaped while waiting,
    since a zombie leader would keep its group "alive".
    """
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        for child in children or []:
            child.poll()
        if not any(_alive(p) for p in pgids):
            return
        time.sleep(0.1)
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def start(
    name: str, argv: list[str], env: dict[str, str], log_dir: Path, *, append: bool = False
) -> Child:
    """Start ``argv`` in a new session (so a new process group), output to a log file
    (appended to with ``append``, as a restarted service keeps its history)."""
    log_path = log_dir / f"{name}.log"
    with open(log_path, "ab" if append else "wb") as log:
        proc = subprocess.Popen(
            argv,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return Child(name=name, proc=proc, log_path=log_path, argv=list(argv), env=dict(env))


def crash(child: Child) -> None:
    """SIGKILL the child's whole process group at once, as a crash would end it (no
    handler runs, nothing is flushed or answered), and reap its leader."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pgid, signal.SIGKILL)
    child.proc.wait()


def restart(child: Child, log_dir: Path) -> Child:
    """Start a new process the way ``child`` was started (same argv and environment, so the
    same port), appending to its log; the caller waits until it is ready."""
    return start(child.name, child.argv, child.env, log_dir, append=True)


def wait_until(child: Child, ready: Callable[[], bool], timeout: float) -> None:
    """Poll ``ready`` until it holds; fail with the child's log when it dies or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.alive():
            tail = child.tail()
            error = PortTaken if any(m in tail for m in _PORT_TAKEN) else RuntimeError
            raise error(f"{child.name} exited early:\n{tail}")
        if ready():
            return
        time.sleep(0.2)
    raise TimeoutError(f"{child.name} not ready after {timeout:.0f}s:\n{child.tail()}")


def http_ok(url: str) -> Callable[[], bool]:
    """A readiness probe: ``url`` answers any HTTP status below 500.

    What does not answer in HTTP/1.1 is not ready either: a port chosen free and taken before
    its service bound it may hold someone else's gRPC server (HTTP/2 only). The probe then
    keeps failing until the service exits, which :func:`wait_until` reports as
    :class:`PortTaken`, and the stack starts again on new ports.
    """

    def probe() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                return int(resp.status) < 500
        except urllib.error.HTTPError as exc:
            return exc.code < 500
        except (urllib.error.URLError, OSError, http.client.HTTPException):
            return False

    return probe


def log_contains(child: Child, text: str) -> Callable[[], bool]:
    return lambda: text in child.tail(200)


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so ``with LocalStack(...)`` blocks still stop their
    children when this process is terminated (the default handler skips ``finally``)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def cpu_seconds_by_group() -> dict[int, float]:
    """CPU seconds (user + system) used so far by every live process, summed per process
    group, from Linux's /proc: the benchmarks' account of where the machine's time went.
    A process that exited is no longer counted, so take both readings while the stack runs."""
    tick = os.sysconf("SC_CLK_TCK")
    used: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                # After the command (in parentheses, which may hold spaces): state, ppid, pgrp,
                # ..., utime and stime at fields 14 and 15 of stat(5).
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        group = int(fields[2])
        used[group] = used.get(group, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return used
