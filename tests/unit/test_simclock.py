"""The simulator's clock as the embedded stack's other processes read it
(flexjobs_local/simclock.py): run forward between reads, never back, and wall times mapped
onto it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from flexjobs_local.simclock import SimulatedClock

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC).timestamp()


class Simulator:
    """The control surface's ``GET /clock``: simulated time ``factor`` times the wall's."""

    def __init__(self, wall: list[float], factor: float = 60.0) -> None:
        self.wall, self.factor, self.sim, self.reads = wall, factor, T0, 0
        self._since = wall[0]

    def _run(self) -> None:
        self.sim += (self.wall[0] - self._since) * self.factor
        self._since = self.wall[0]

    def clock(self) -> dict[str, Any]:
        self._run()
        self.reads += 1
        return {"simNowEpoch": self.sim, "timeFactor": self.factor}

    def jump(self, seconds: float) -> None:
        self._run()
        self.sim += seconds


def clock_of(sim: Simulator, wall: list[float], **kwargs: Any) -> SimulatedClock:
    return SimulatedClock(
        "http://unused", control=sim, monotonic=lambda: wall[0], wall=lambda: wall[0], **kwargs
    )


def test_between_reads_the_clock_runs_at_the_time_factor():
    wall = [1000.0]
    sim = Simulator(wall)
    clock = clock_of(sim, wall, refresh=1.0)
    assert clock.epoch() == T0
    wall[0] += 0.5
    assert clock.epoch() == T0 + 30  # extrapolated, not read
    assert sim.reads == 1
    wall[0] += 0.5
    assert clock.epoch() == T0 + 60 and sim.reads == 2  # read again after `refresh`
    assert clock.now() == datetime.fromtimestamp(T0 + 60, UTC)


def test_a_jump_is_seen_at_the_next_read_and_the_clock_never_goes_back():
    wall = [1000.0]
    sim = Simulator(wall)
    clock = clock_of(sim, wall, refresh=1.0)
    clock.epoch()
    sim.jump(600)
    wall[0] += 1.0
    assert clock.epoch() == T0 + 60 + 600
    sim.factor = 0.0  # frozen, and the simulator's answer lags what was returned
    sim.sim -= 5
    wall[0] += 1.0
    assert clock.epoch() == T0 + 660


def test_a_wall_time_maps_onto_the_simulated_clock():
    wall = [1000.0]
    sim = Simulator(wall)
    clock = clock_of(sim, wall)
    published = datetime.fromtimestamp(wall[0] - 2, UTC)  # two wall seconds ago
    assert clock.at(published) == datetime.fromtimestamp(T0 - 120, UTC)


def test_sleep_waits_simulated_seconds():
    wall = [1000.0]
    slept: list[float] = []
    clock = clock_of(Simulator(wall), wall, sleeper=slept.append, refresh=0.25)
    clock.sleep(120)
    clock.sleep(0)
    assert slept == [2.0]
    frozen = clock_of(Simulator(wall, factor=0.0), wall, sleeper=slept.append, refresh=0.25)
    frozen.sleep(120)
    assert slept == [2.0, 0.25]  # a frozen clock: the caller looks again soon


def test_the_storage_bridge_puts_an_objects_times_on_the_clock_it_is_given():
    from datetime import timedelta

    from flexjobs_local.storage_bridge import finalize_event

    stored = {
        "bucket": "b",
        "name": "requests/r.json",
        "generation": 7,
        "size": 2,
        "timeCreated": "2026-12-01T12:00:00.250000Z",
        "updated": "2026-12-01T12:00:01Z",
    }
    event = finalize_event(dict(stored), "http://127.0.0.1:1", lambda at: at + timedelta(hours=2))
    assert event.body["timeCreated"] == "2026-12-01T14:00:00.250Z"
    assert event.body["updated"] == event.headers["ce-time"] == "2026-12-01T14:00:01.000Z"
    unmapped = finalize_event(dict(stored), "http://127.0.0.1:1")
    assert unmapped.body["updated"] == unmapped.headers["ce-time"] == "2026-12-01T12:00:01Z"
