"""A virtual wall clock for lab runs (time-machine).

The whole process (LangGraph checkpoints, the Stripe-compatible server, moto's SQS, the
OpenTelemetry SDK) reads `time.time()` / `datetime.now()`, which time-machine moves. By default
the clock ticks with real time, and where the real program would wait (a 30 s client timeout, a
6-minute visibility timeout, a model turn) the lab shifts it by the nominal wait instead of
waiting. `tick=False` is the repeatable clock: it stands still between the lab's own moves, so
a run's times depend on its seed only, never on how busy the machine was (see
`twice.lab.repeatable`).
"""

from __future__ import annotations

import datetime as dt
import threading

import time_machine


class VirtualClock:
    """`with VirtualClock(start) as clock: ... clock.advance(30)`."""

    def __init__(self, start: dt.datetime, *, tick: bool = True) -> None:
        if start.tzinfo is None:
            raise ValueError("start must be timezone-aware")
        self.start = start
        self.tick = tick
        self._travel = time_machine.travel(start, tick=tick)
        self._traveller: time_machine.Traveller | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> VirtualClock:
        self._traveller = self._travel.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._travel.stop()
        self._traveller = None

    def advance(self, seconds: float) -> None:
        """Move virtual time forward, as if the program had waited `seconds`."""
        if seconds <= 0:
            return
        if self._traveller is None:
            raise RuntimeError("VirtualClock is not running")
        with self._lock:
            self._traveller.shift(dt.timedelta(seconds=seconds))

    def move_to(self, when: dt.datetime) -> None:
        """Move virtual time to `when`, backwards too: a run that happened earlier in the same
        window (another thread of a busy day) runs at its own time."""
        if self._traveller is None:
            raise RuntimeError("VirtualClock is not running")
        with self._lock:
            self._traveller.shift(when - self.now())

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)
