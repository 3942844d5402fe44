"""Helpers for integration tests."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from flexjobs_local.stack import LocalStack, StackConfig


def upload_id(stack: LocalStack, name: str, data: bytes | str, line: int | None = None) -> str:
    """The requestId an upload gives a message that names none: from its bytes (its line's
    in a ``.jsonl``)."""
    from shared.domain.request.files import StoredObject

    raw = data.encode() if isinstance(data, str) else data
    return StoredObject(stack.config.bucket, name, "").request_id(raw, line)


def wait_for(predicate: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
    """Poll until ``predicate`` returns something truthy; fail with ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Receiver:
    """An HTTP endpoint standing in for a function: records each POST; answers the statuses
    queued in ``answers`` first, then 204, each after ``delay`` seconds; ``peak`` is the most
    POSTs it held at once."""

    def __init__(self, port: int = 0, delay: float = 0.0) -> None:
        self.posts: list[tuple[dict[str, str], bytes]] = []
        self.times: list[float] = []  # time.monotonic() of each POST's arrival
        self.answers: list[int] = []
        self.delay = delay
        self.peak = 0
        self._held = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    receiver.posts.append((dict(self.headers.items()), body))
                    receiver.times.append(time.monotonic())
                    status = receiver.answers.pop(0) if receiver.answers else 204
                    receiver._held += 1
                    receiver.peak = max(receiver.peak, receiver._held)
                time.sleep(receiver.delay)
                with receiver._lock:
                    receiver._held -= 1
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextlib.contextmanager
def running_stack(config: StackConfig, workdir: Path | None = None) -> Iterator[LocalStack]:
    """A started stack, with this process's Google clients pointed at it (its environment);
    once it stops, the environment is as it was."""
    saved = dict(os.environ)
    with LocalStack(config, workdir=workdir) as stack:
        stack.apply_env()
        try:
            yield stack
        finally:
            os.environ.clear()
            os.environ.update(saved)
