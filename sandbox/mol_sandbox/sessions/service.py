"""Sessions: who owns them, their interpreters, their limits, and their end.

A session is an id (unguessable), its tenant, and at most one live interpreter. A call
that runs past the time limit, or whose interpreter dies (its own ``os._exit``, the
memory limit, a forged reply), answers a clean error and stops the interpreter; the next
call starts a fresh one and says so. Sessions idle past their time-to-live are reaped;
their ids are remembered a while, so that their next use answers 410 rather than 404.
Another tenant's id answers exactly like an unknown one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from mol_sandbox.errors import AtCapacity, Gone, NotFound, StartFailed, TooManySessions
from mol_sandbox.isolation.bwrap import SandboxSpec
from mol_sandbox.isolation.cgroups import CgroupLimits, Cgroups
from mol_sandbox.isolation.process import DRIVER, Interpreter, InterpreterDied, root_links
from mol_sandbox.sessions.schemas import ExecuteResult, SessionInfo, SessionLimits
from mol_sandbox.settings import SandboxSettings

log = logging.getLogger("mol.sandbox")
REAPED_KEPT = 10_000  # reaped ids remembered (oldest forgotten first)


class _Reply(BaseModel):
    """What the driver writes; anything else means the interpreter cannot be trusted."""

    model_config = ConfigDict(extra="forbid", strict=True)
    stdout: str
    stderr: str
    result: str | None
    error: str | None
    truncated: bool


@dataclass(eq=False)
class Session:
    id: str
    tenant: str
    created_at: float
    last_used: float  # time.monotonic()
    last_used_at: float  # time.time()
    interp: Interpreter | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    calls: int = 0
    closed: bool = False
    notice: str | None = None  # why the next call's interpreter is fresh


class SessionService:
    def __init__(self, settings: SandboxSettings) -> None:
        self.settings = settings
        self.spec = SandboxSpec(
            bwrap=str(settings.bwrap), python=str(settings.python), driver=DRIVER,
            disk_bytes=settings.disk_bytes, memory_bytes=settings.memory_bytes,
            max_processes=settings.max_processes, output_bytes=settings.output_bytes,
            root_links=root_links())
        self.cgroups: Cgroups | None = None
        self.fallback_reason: str | None = "cgroups are off (MOL_SANDBOX_CGROUPS=off)"
        if settings.cgroups == "auto":
            cgroups = Cgroups(settings.cgroup_root, CgroupLimits(
                settings.max_processes, settings.memory_bytes, settings.cpus))
            self.fallback_reason = cgroups.probe()
            self.cgroups = None if self.fallback_reason else cgroups
        if self.cgroups is None:
            self.spec = replace(self.spec, run_as=(settings.fallback_uid, settings.fallback_gid))
        if self.fallback_reason:
            log.warning("sandbox: no per-session cgroups (%s); sessions run as uid %d with "
                        "RLIMIT_NPROC %d and RLIMIT_AS instead (a limit shared by all "
                        "sessions' processes)", self.fallback_reason, settings.fallback_uid,
                        settings.max_processes)
        self._sessions: dict[str, Session] = {}
        self._reaped: OrderedDict[str, str] = OrderedDict()  # id -> tenant
        self._starting: dict[str, int] = {}  # tenant -> sessions being started

    @property
    def isolation(self) -> str:
        return "cgroups" if self.cgroups else "rlimits"

    async def _start(self) -> Interpreter:
        s = self.settings
        try:
            return await Interpreter.start(self.spec, self.cgroups, s.start_timeout)
        except (OSError, InterpreterDied, TimeoutError) as exc:
            log.error("sandbox: cannot start an interpreter: %r", exc)
            raise StartFailed(f"cannot start an interpreter: {exc!r}", retry_after=5) from None

    # -- capacity ---------------------------------------------------------------------

    def _retry_after(self, sessions: list[Session]) -> int:
        """Seconds until the first of ``sessions`` is reaped (at least 1)."""
        if not sessions:
            return 1
        first = min(x.last_used for x in sessions) + self.settings.idle_ttl
        return max(1, math.ceil(first - time.monotonic() + self.settings.reap_interval))

    def _check_capacity(self, tenant: str) -> None:
        s = self.settings
        live = len(self._sessions) + sum(self._starting.values())
        if live >= s.max_sessions:
            raise AtCapacity(f"the sandbox holds its maximum of {s.max_sessions} sessions; "
                             "retry later", retry_after=self._retry_after(
                                 list(self._sessions.values())))
        own = [x for x in self._sessions.values() if x.tenant == tenant]
        if len(own) + self._starting.get(tenant, 0) >= s.max_sessions_per_tenant:
            raise TooManySessions(
                f"this tenant holds its maximum of {s.max_sessions_per_tenant} sessions; "
                "delete one (DELETE /v1/sessions/{id}) or retry later",
                retry_after=self._retry_after(own))

    # -- the API ----------------------------------------------------------------------

    async def create(self, tenant: str) -> Session:
        self._check_capacity(tenant)
        self._starting[tenant] = self._starting.get(tenant, 0) + 1
        try:
            interp = await self._start()
        finally:
            self._starting[tenant] -= 1
            if not self._starting[tenant]:
                del self._starting[tenant]
        now = time.time()
        session = Session(id=secrets.token_urlsafe(24), tenant=tenant, created_at=now,
                          last_used=time.monotonic(), last_used_at=now, interp=interp)
        self._sessions[session.id] = session
        return session

    def get(self, tenant: str, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        if session is None or session.tenant != tenant or session.closed:
            raise self._missing(tenant, session_id)
        return session

    def _missing(self, tenant: str, session_id: str) -> NotFound | Gone:
        if self._reaped.get(session_id) == tenant:
            return Gone(f"session {session_id} was reaped after {self.settings.idle_ttl:g} s "
                        "without a call; its variables are gone. Create a new session: "
                        "POST /v1/sessions")
        return NotFound("session not found")

    def info(self, session: Session) -> SessionInfo:
        s = self.settings
        return SessionInfo(
            id=session.id, state="ready" if session.interp else "stopped",
            created_at=session.created_at, last_used_at=session.last_used_at,
            calls=session.calls, isolation="cgroups" if self.cgroups else "rlimits",
            limits=SessionLimits(call_timeout_s=s.call_timeout, memory_mib=s.memory_mib,
                                 cpus=s.cpus, max_processes=s.max_processes,
                                 output_bytes=s.output_bytes, disk_mib=s.disk_mib,
                                 idle_ttl_s=s.idle_ttl))

    async def execute(self, tenant: str, session_id: str, code: str) -> ExecuteResult:
        session = self.get(tenant, session_id)
        async with session.lock:
            if session.closed:
                raise self._missing(tenant, session_id)
            fresh, notice = False, None
            if session.interp is None:
                session.interp = await self._start()
                fresh, notice, session.notice = True, session.notice, None
            session.calls += 1
            started = time.perf_counter()
            try:
                reply = await self._call(session, session.interp, code)
            finally:
                session.last_used, session.last_used_at = time.monotonic(), time.time()
            return ExecuteResult(**reply, duration_ms=(time.perf_counter() - started) * 1e3,
                                 fresh=fresh, notice=notice)

    async def _call(self, session: Session, interp: Interpreter, code: str) -> dict[str, Any]:
        limit = self.settings.call_timeout
        try:
            raw = await asyncio.wait_for(interp.call(code), limit)
            return _Reply.model_validate(raw).model_dump()
        except TimeoutError:
            error = (f"TimeoutError: the call ran past the {limit:g} s limit; the interpreter "
                     "was stopped and the next call starts a fresh one (variables are gone)")
            notice = (f"the previous call ran past the {limit:g} s limit and its interpreter "
                      "was stopped: this is a fresh interpreter, earlier variables are gone")
        except (InterpreterDied, ValidationError) as exc:
            if session.closed:  # deleted while it ran
                raise self._missing(session.tenant, session.id) from None
            cause = (f"the interpreter went past its {self.settings.memory_mib} MiB memory "
                     "limit" if interp.out_of_memory() else
                     "the interpreter wrote a reply that is not one"
                     if isinstance(exc, ValidationError) else str(exc))
            error = (f"InterpreterExited: {cause}; the next call starts a fresh one "
                     "(variables are gone)")
            notice = f"{cause}: this is a fresh interpreter, earlier variables are gone"
        session.interp, session.notice = None, notice
        await interp.stop()
        return {"stdout": "", "stderr": "", "result": None, "error": error, "truncated": False}

    async def delete(self, tenant: str, session_id: str) -> None:
        session = self.get(tenant, session_id)
        await self._close(session)

    async def _close(self, session: Session) -> None:
        session.closed = True
        self._sessions.pop(session.id, None)
        interp, session.interp = session.interp, None
        if interp is not None:
            await interp.stop()

    # -- background ---------------------------------------------------------------------

    async def reap_idle(self) -> int:
        """Reap sessions idle past the time-to-live (never one in a call)."""
        deadline = time.monotonic() - self.settings.idle_ttl
        idle = [x for x in self._sessions.values()
                if x.last_used < deadline and not x.lock.locked()]
        for session in idle:
            self._reaped[session.id] = session.tenant
            while len(self._reaped) > REAPED_KEPT:
                self._reaped.popitem(last=False)
            await self._close(session)
        if idle:
            log.info("sandbox: reaped %d idle session(s)", len(idle))
        return len(idle)

    async def run_reaper(self) -> None:
        while True:
            await asyncio.sleep(self.settings.reap_interval)
            try:
                await self.reap_idle()
            except Exception:  # keep reaping; a failure is logged, not fatal
                log.exception("sandbox: reaping failed")

    async def shutdown(self) -> None:
        for session in list(self._sessions.values()):
            with contextlib.suppress(Exception):
                await self._close(session)
