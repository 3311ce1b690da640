"""Several simulated replicas on loopback ports, for pytest and scripts.

``SimulatorCluster`` is a sync context manager running the replicas in a background
thread with its own event loop (for sync tests and for code under test that runs its
own loop); ``AsyncSimulatorCluster`` runs them in the caller's loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from mol_testkit.simulator.config import SimConfig
from mol_testkit.simulator.model import ReplicaState
from mol_testkit.simulator.server import LOOPBACK, SimServer

T = TypeVar("T")
START_TIMEOUT_S = 30.0


def _make_replicas(
    replicas: int | None, config: SimConfig | None, configs: Sequence[SimConfig] | None,
    host: str, base_port: int,
) -> list[SimServer]:  # fmt: skip
    if configs is not None:
        if config is not None:
            raise ValueError("pass either config (shared) or configs (one per replica), not both")
        if replicas is not None and replicas != len(configs):
            raise ValueError(f"replicas={replicas} but {len(configs)} configs were given")
        chosen = list(configs)
    else:
        count = 1 if replicas is None else replicas
        chosen = [config or SimConfig()] * count
    if not chosen:
        raise ValueError("a simulator cluster needs at least one replica")
    return [
        SimServer(cfg, name=f"sim-{i}", host=host, port=base_port + i if base_port else 0)
        for i, cfg in enumerate(chosen)
    ]


class _ClusterBase:
    """``replicas`` SimServers sharing ``config``, or one per entry of ``configs``; ports
    from ``base_port`` up (0: free ones)."""

    def __init__(
        self,
        replicas: int | None = None,
        config: SimConfig | None = None,
        *,
        configs: Sequence[SimConfig] | None = None,
        host: str = LOOPBACK,
        base_port: int = 0,
    ) -> None:
        self.replicas = _make_replicas(replicas, config, configs, host, base_port)

    @property
    def urls(self) -> list[str]:
        """Base URLs (``http://127.0.0.1:PORT``), one per replica, in replica order."""
        return [r.url for r in self.replicas]

    def __getitem__(self, index: int) -> SimServer:
        return self.replicas[index]

    def __len__(self) -> int:
        return len(self.replicas)

    def __iter__(self) -> Iterator[SimServer]:
        return iter(self.replicas)

    def _targets(self, replica: int | None) -> list[SimServer]:
        return self.replicas if replica is None else [self.replicas[replica]]

    def script_tool_call(
        self, model: str | None, name: str, arguments: dict[str, Any] | str | None = None,
        *, replica: int | None = None, **options: Any,
    ) -> None:  # fmt: skip
        """:meth:`SimServer.script_tool_call` on one replica or (None) all of them."""
        for server in self._targets(replica):
            server.script_tool_call(model, name, arguments, **options)

    def script_text(
        self, model: str | None, text: str, *, replica: int | None = None, **options: Any
    ) -> None:
        for server in self._targets(replica):
            server.script_text(model, text, **options)

    def script_failure(
        self, model: str | None, *, replica: int | None = None, **options: Any
    ) -> None:
        for server in self._targets(replica):
            server.script_failure(model, **options)

    def clear_scripts(self, replica: int | None = None) -> None:
        for server in self._targets(replica):
            server.clear_scripts()


async def _start_all(servers: list[SimServer]) -> None:
    started: list[SimServer] = []
    try:
        for server in servers:
            await server.start()
            started.append(server)
    except BaseException:
        for server in started:
            await server.stop()
        raise


async def _stop_all(servers: list[SimServer]) -> None:
    for server in servers:
        await server.stop()


class AsyncSimulatorCluster(_ClusterBase):
    """``async with AsyncSimulatorCluster(replicas=2, config=SimConfig(...)) as c:``."""

    async def __aenter__(self) -> Self:
        await _start_all(self.replicas)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        await _stop_all(self.replicas)

    def state(self, index: int = 0) -> ReplicaState:
        return self.replicas[index].state()

    def states(self) -> list[ReplicaState]:
        return [r.state() for r in self.replicas]

    async def stop_replica(self, index: int) -> None:
        """Stop one replica (connections to it are then refused)."""
        await self.replicas[index].stop()

    async def start_replica(self, index: int) -> None:
        """Start a stopped replica again on the same port, keeping its state."""
        await self.replicas[index].start()


class SimulatorCluster(_ClusterBase):
    """``with SimulatorCluster(replicas=3, config=SimConfig(...)) as c: c.urls``.

    The replicas serve from a background thread; :meth:`state` and :meth:`call`
    run in that thread so that snapshots are consistent.
    """

    def __init__(
        self,
        replicas: int | None = None,
        config: SimConfig | None = None,
        *,
        configs: Sequence[SimConfig] | None = None,
        host: str = LOOPBACK,
        base_port: int = 0,
    ) -> None:
        super().__init__(replicas, config, configs=configs, host=host, base_port=base_port)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Self:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(
            target=self._serve, args=(loop,), name="mol-simulator", daemon=True
        )
        self._thread.start()
        try:
            self.run(_start_all(self.replicas))
        except BaseException:
            self._shutdown()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        try:
            self.run(_stop_all(self.replicas))
        finally:
            self._shutdown()

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

    def _shutdown(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=START_TIMEOUT_S)
        self._loop = None
        self._thread = None

    def run(self, awaitable: Awaitable[T], timeout: float = START_TIMEOUT_S) -> T:
        """Run a coroutine in the simulator's loop and wait for its result."""
        if self._loop is None:
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise RuntimeError("the simulator cluster is not running (use it in a with block)")

        async def wrapper() -> T:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(wrapper(), self._loop).result(timeout)

    def call(self, fn: Callable[[], T]) -> T:
        """Call ``fn`` in the simulator's loop thread (for consistent reads)."""

        async def wrapper() -> T:
            return fn()

        return self.run(wrapper())

    def state(self, index: int = 0) -> ReplicaState:
        """A consistent snapshot of replica ``index``."""
        return self.call(self.replicas[index].state)

    def states(self) -> list[ReplicaState]:
        return self.call(lambda: [r.state() for r in self.replicas])

    def stop_replica(self, index: int) -> None:
        """Stop one replica (connections to it are then refused)."""
        self.run(self.replicas[index].stop())

    def start_replica(self, index: int) -> None:
        """Start a stopped replica again on the same port, keeping its state."""
        self.run(self.replicas[index].start())
