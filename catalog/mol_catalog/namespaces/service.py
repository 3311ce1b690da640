"""Namespace policies (which aliases are protected) and the alias bindings record.

Bindings answer "which serving profiles is this alias served under?". Every resolve of
``ns/name@alias?profile=P`` (the operator resolves each expert of a deployment with its
profile, the router and pullers alike) is a binding seen now; the catalog keeps its
``last_seen`` and counts bindings seen within ``alias_binding_retention_seconds`` as
live. It needs no change in any client and follows deployments as they come and go
(one that stops resolving drops out after the window). A process writes a binding at
most once per ``refresh`` seconds, in the background: a resolve never waits for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta
from typing import Any

from mol_catalog.db import Database, ReadConn, UnitOfWork
from mol_catalog.models import utcnow
from mol_catalog.namespaces import repository
from mol_catalog.util import valid_name

log = logging.getLogger("mol_catalog.bindings")
DEFAULT_PROTECTED = ["stable"]
MAX_MEMO = 100_000  # bindings a process remembers writing (then it starts over)
MAX_PENDING = 64  # binding writes in flight; more are dropped (the next resolve retries)


class BindingRecorder:
    """Records (adapter, alias, profile) as seen, at most once per ``refresh`` seconds
    per process, in background tasks (``drain`` waits for them: shutdown and tests)."""

    def __init__(self, db: Database | None, retention_seconds: float,
                 refresh_seconds: float) -> None:
        self.db = db
        self.retention = retention_seconds
        self.refresh = refresh_seconds
        self._written: dict[tuple[str, str, str], float] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def since(self) -> datetime:
        """Bindings seen at or after this are live."""
        return utcnow() - timedelta(seconds=self.retention)

    def seen(self, adapter: str, alias: str, profile: str) -> None:
        """A resolve of ``adapter@alias`` under ``profile`` just answered."""
        key = (adapter, alias, profile)
        now = time.monotonic()
        last = self._written.get(key)
        if self.db is None or (last is not None and now - last < self.refresh):
            return
        if len(self._tasks) >= MAX_PENDING:
            return
        if len(self._written) >= MAX_MEMO:
            self._written.clear()
        self._written[key] = now
        task = asyncio.get_running_loop().create_task(self._write(key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, key: tuple[str, str, str]) -> None:
        assert self.db is not None
        try:
            await self.db.transact(lambda uow: _record(uow, *key, self.retention),
                                   attempts=3, pause=0.01)
        except Exception:  # the next resolve after the memo expires tries again
            self._written.pop(key, None)
            log.warning("could not record alias binding %s", key, exc_info=True)

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


async def _record(uow: UnitOfWork, adapter: str, alias: str, profile: str,
                  retention: float) -> None:
    """The binding seen now; the alias's bindings past the window go with it."""
    now = utcnow()
    await repository.record_binding(uow.conn, adapter, alias, profile, now)
    await repository.forget_bindings(uow.conn, adapter, alias,
                                     now - timedelta(seconds=retention))


def _record_body(namespace: str, found: Any) -> dict[str, Any]:
    if found is None:
        return {"namespace": namespace, "protected_aliases": DEFAULT_PROTECTED,
                "required_evals": [], "default": True, "updated_by": None, "updated_at": None}
    protected, who, at, required = found
    return {"namespace": namespace, "protected_aliases": protected, "required_evals": required,
            "default": False, "updated_by": who, "updated_at": at}


async def get_protected(conn: ReadConn, namespace: str) -> dict[str, Any]:
    valid_name(namespace, "namespace")
    return _record_body(namespace, await repository.policy(conn, namespace))


async def set_protected(uow: UnitOfWork, namespace: str, aliases: list[str],
                        who: str | None, required_evals: list[str] | None = None
                        ) -> dict[str, Any]:
    """Replace the namespace's protected aliases (an empty list protects none) and the
    eval suites their targets must have reports of (the body's schema checked each
    name)."""
    valid_name(namespace, "namespace")
    protected = sorted(set(aliases))
    required = sorted(set(required_evals or []))
    now = utcnow()
    await repository.set_policy(uow.conn, namespace, protected, who, now, required)
    uow.emit("policy.set", data={"namespace": namespace, "protected_aliases": protected,
                                 "required_evals": required, "by": who})
    return _record_body(namespace, (protected, who, now, required))
