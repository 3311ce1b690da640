"""A lane of catalog calls with two classes of waiters: a slot that frees goes to the
first ``urgent`` waiter, else to the first other one.

First resolutions of names of adapters already known (a new version, another alias)
are very likely real; names of adapters nobody has seen may be a flood of made-up ones.
Both share the request lane, but the first kind never queues behind the second.
"""

from __future__ import annotations

import asyncio
import collections


class Lane:
    def __init__(self, slots: int) -> None:
        self._free = slots
        self._urgent: collections.deque[asyncio.Future[None]] = collections.deque()
        self._other: collections.deque[asyncio.Future[None]] = collections.deque()

    async def acquire(self, within: float, *, urgent: bool = False) -> bool:
        """A slot within ``within`` seconds (True), or none (False); release it after."""
        if self._free > 0 and not self._urgent and (urgent or not self._other):
            self._free -= 1
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._urgent if urgent else self._other
        queue.append(waiter)
        try:
            async with asyncio.timeout(within):
                await waiter
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot as it was cancelled: pass it on
            raise
        finally:
            if waiter in queue:  # release() skips done waiters; this only tidies
                queue.remove(waiter)
        # a slot handed over just as time ran out is still ours
        return waiter.done() and not waiter.cancelled()

    def release(self) -> None:
        for queue in (self._urgent, self._other):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)  # the slot passes straight to it
                    return
        self._free += 1
