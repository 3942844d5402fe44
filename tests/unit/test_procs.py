"""The embedded stack's readiness probe (flexjobs_local/procs.py)."""

from __future__ import annotations

import socket
import threading

from flexjobs_local import procs


def test_a_port_that_answers_in_another_protocol_is_not_ready_and_raises_nothing():
    # What a gRPC server (HTTP/2 only) sends an HTTP/1.1 request: a settings frame, then
    # goaway. Someone else's server on a port the stack chose must read as "not ready".
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]

    def answer() -> None:
        connection, _ = server.accept()
        with connection:
            connection.recv(1024)
            connection.sendall(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00\x00\x03\x7f\xff\xff\xff")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        assert procs.http_ok(f"http://127.0.0.1:{port}/")() is False
    finally:
        thread.join(timeout=5)
        server.close()
