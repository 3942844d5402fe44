"""The embedded stack starts again on new ports when one it chose is taken before its service
binds it (anything on the machine may take a free port in between), and only then."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from flexjobs_local import procs
from flexjobs_local.stack import LocalStack, StackConfig

pytestmark = pytest.mark.integration


def _held_port() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def _bind(port: int) -> list[str]:
    return [sys.executable, "-c", f"import socket; socket.socket().bind(('127.0.0.1', {port}))"]


def test_a_service_whose_port_is_taken_says_so(tmp_path: Path) -> None:
    with _held_port() as held:
        child = procs.start("binder", _bind(held.getsockname()[1]), {}, tmp_path)
        with pytest.raises(procs.PortTaken, match="Address already in use"):
            procs.wait_until(child, lambda: False, 30)


def test_any_other_early_exit_is_not_a_taken_port(tmp_path: Path) -> None:
    child = procs.start("failing", [sys.executable, "-c", "raise SystemExit('no')"], {}, tmp_path)
    with pytest.raises(RuntimeError, match="failing exited early") as raised:
        procs.wait_until(child, lambda: False, 30)
    assert not isinstance(raised.value, procs.PortTaken)


def test_free_ports_holds_every_port_until_all_are_chosen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Held together, the kernel cannot hand one port out twice; one at a time (each closed
    # before the next is chosen), it may.
    held = {"now": 0, "most": 0}
    real = socket.socket

    class Counted(real):  # type: ignore[misc,valid-type]
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            held["now"] += 1
            held["most"] = max(held["most"], held["now"])

        def close(self) -> None:
            if self.fileno() != -1:
                held["now"] -= 1
            super().close()

    monkeypatch.setattr(socket, "socket", Counted)  # the module procs binds with
    ports = procs.free_ports(8)
    assert len(set(ports)) == 8
    assert held == {"now": 0, "most": 8}


def test_the_stack_starts_again_when_a_chosen_port_is_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chosen: list[list[int]] = []
    real = procs.free_ports

    with _held_port() as held:
        taken = held.getsockname()[1]

        def first_one_taken(count: int) -> list[int]:
            ports = real(count)
            if not chosen:
                # The simulator's control port (fifth in start's order) is already bound.
                ports[4] = taken
            chosen.append(ports)
            return ports

        monkeypatch.setattr(procs, "free_ports", first_one_taken)
        config = StackConfig(project="flexjobs-ports", functions=(), hints=False, checkpoints=False)
        with LocalStack(config) as stack:
            assert len(chosen) == 2
            assert stack.ports["vertex_control"] != taken
            assert stack.ports["vertex_control"] == chosen[1][4]
            # The second attempt's simulator answers on its control port.
            assert stack.simulator.set_capacity("us-central1", "NVIDIA_L4", 4)
            assert [c.name for c in stack.children] == ["pubsub", "firestore", "storage", "vertex"]
            assert all(c.alive() for c in stack.children)
        assert stack.children == []
