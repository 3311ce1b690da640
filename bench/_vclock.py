"""An asyncio event loop on a virtual clock: sleeping costs no wall time.

The routing benchmark drives simulated engines in-process; on this loop a timer
fires as soon as nothing else is runnable, with ``loop.time()`` jumped to its due
time, so a 10-minute workload replays in seconds and its timings do not depend on
how busy the machine is. Real I/O is still polled (without blocking) on every turn.
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any


class _JumpingSelector(selectors.DefaultSelector):
    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._vloop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is not None and timeout > 0:
            self._vloop.advance(timeout)
        return super().select(0)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """``time()`` is virtual and starts at 0; waiting for a timer advances it."""

    def __init__(self) -> None:
        self._now = 0.0
        super().__init__(selector=_JumpingSelector(self))

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds


def run_virtual(coro: Any) -> Any:
    """``asyncio.run`` on a fresh virtual-time loop."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()
