"""Run a kopf operator in-process against the emulator, and stop it cleanly.

``KopfRunner(url, registry=...)`` runs ``kopf.operator(...)`` in its own thread and
event loop (so it works from sync and async tests alike), standalone (no peering),
clusterwide unless ``namespaces`` are given. The operator logs in through a kopf
login handler that returns the emulator's URL (added once to the registry; the URL is
taken from a context variable so one registry serves many emulators). ``stop()``
sets kopf's stop flag and joins the thread; an operator that crashed re-raises there.

With ``lead`` (e.g. :func:`mol_operator.leader.lead` bound to a Leader) kopf runs only
while that campaign says so: ``lead(operate, stop)`` calls ``operate(halt)`` once it
leads, and returns when ``halt`` ended it or ``stop`` (set by ``stop()``) was set;
``start(wait=False)`` starts a replica that may stand by, ``result`` holds what
``lead`` returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import kopf

Operate = Callable[[asyncio.Event], Awaitable[None]]
Lead = Callable[[Operate, asyncio.Event], Awaitable[object]]

_URL: contextvars.ContextVar[str] = contextvars.ContextVar("mol_testing_kube_url")
LOGIN_HANDLER_ID = "mol-testing-emulator-login"


def _login(**_: Any) -> kopf.ConnectionInfo:
    return kopf.ConnectionInfo(server=_URL.get(), insecure=True, default_namespace="default")


# Registries given the login handler; only this module registers it, so this set says
# whether a registry has it without reading kopf's internals.
_WITH_LOGIN: weakref.WeakSet[kopf.OperatorRegistry] = weakref.WeakSet()


def ensure_login_handler(registry: kopf.OperatorRegistry) -> None:
    """Register the emulator login handler on ``registry`` unless it is there already."""
    if registry in _WITH_LOGIN:
        return
    kopf.on.login(registry=registry, id=LOGIN_HANDLER_ID)(_login)
    _WITH_LOGIN.add(registry)


def fast_settings() -> kopf.OperatorSettings:
    """Settings that keep tests quick: no CRD/namespace scanning (the resources are
    known up front), short idle/exit timeouts and backoffs."""
    settings = kopf.OperatorSettings()
    settings.scanning.disabled = True
    settings.queueing.idle_timeout = 1.0
    settings.queueing.exit_timeout = 2.0
    settings.watching.reconnect_backoff = 0.2
    settings.networking.request_timeout = 10.0
    settings.networking.error_backoffs = (0.2, 0.5, 1.0)
    return settings


class KopfRunner:
    """``start()`` waits until kopf is ready; ``stop()`` stops it and joins the thread."""

    def __init__(
        self,
        url: str,
        *,
        registry: kopf.OperatorRegistry | None = None,
        namespaces: Collection[str] = (),
        settings: kopf.OperatorSettings | None = None,
        configure: Callable[[kopf.OperatorSettings], None] | None = None,
        memo: object | None = None,
        lead: Lead | None = None,
    ) -> None:
        self.url = url
        self.registry = registry if registry is not None else kopf.get_default_registry()
        self.namespaces = list(namespaces)
        self.settings = settings if settings is not None else fast_settings()
        if configure is not None:
            configure(self.settings)
        self.memo = memo
        self.lead = lead
        self.result: object = None
        self._stop_flag = threading.Event()
        self._stop_relay: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        self._ready_flag = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self, timeout: float = 30.0, wait: bool = True) -> KopfRunner:
        """Start; with ``wait``, until kopf is ready (``wait=False``: a standby)."""
        ensure_login_handler(self.registry)
        self._thread = threading.Thread(target=self._run, name="kopf-operator", daemon=True)
        self._thread.start()
        if not wait:
            return self
        if not self._ready_flag.wait(timeout) or self.error is not None:
            self.stop(check=False)
            raise RuntimeError(f"kopf did not become ready in {timeout}s: {self.error!r}")
        return self

    def _run(self) -> None:
        _URL.set(self.url)
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by start()/stop()
            self.error = exc
            self._ready_flag.set()

    @property
    def ready(self) -> bool:
        """Whether kopf runs and is ready (a standby's is not)."""
        return self._ready_flag.is_set() and self.running

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    async def _main(self) -> None:
        if self.lead is None:
            await self._operate(self._stop_flag)
            return
        stop = asyncio.Event()
        self._stop_relay = (asyncio.get_running_loop(), stop)
        if self._stop_flag.is_set():  # stop() came before the relay existed
            stop.set()
        self.result = await self.lead(self._operate, stop)

    async def _operate(self, stop_flag: asyncio.Event | threading.Event) -> None:
        await kopf.operator(
            registry=self.registry,
            settings=self.settings,
            standalone=True,
            clusterwide=not self.namespaces,
            namespaces=self.namespaces,
            stop_flag=stop_flag,
            ready_flag=self._ready_flag,
            memo=self.memo,
        )

    def stop(self, timeout: float = 30.0, check: bool = True) -> None:
        """Stop the operator; with ``check``, re-raise what crashed it."""
        self._stop_flag.set()
        if self._stop_relay is not None:
            loop, stop = self._stop_relay
            with contextlib.suppress(RuntimeError):  # the loop has ended already
                loop.call_soon_threadsafe(stop.set)
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                raise RuntimeError(f"kopf did not stop within {timeout}s")
        if check and self.error is not None:
            raise self.error

    def __enter__(self) -> KopfRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(check=exc[0] is None)


def quiet_kopf_logs(level: int = logging.WARNING) -> None:
    """kopf logs every handler run at INFO/DEBUG; raise the threshold for test output."""
    logging.getLogger("kopf").setLevel(level)
