"""One request's code-interpreter state: its sandbox session, its steps and its limits.

The hop loop (:mod:`mol_router.serving.relay`) hands each ``python`` turn of the model
here; the code runs in the conversation's session, the conversation gains the
assistant's calls and one ``tool`` message per call, and the loop asks the expert again.
It stops at the final answer, at ``maxSteps`` or when ``budgetSeconds`` is spent (the
step the model asked for then is refused with outcome ``limit``).

Sessions follow the conversation through ``x-mol-session``: made on first use, checked
before the first byte when the client names one (another tenant's id, or one deleted,
is a 404 like an unknown one), and made anew when the service reaped it, which the step
says. A sandbox that cannot be used never fails the request: the step says the sandbox
is unavailable, and the model answers without it.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Literal

from mol_router.errors import RouterError
from mol_router.harness import tool
from mol_router.harness.sandbox import SandboxClient, SandboxError, SessionReaped, SessionUnknown
from mol_router.routing.rules import Choice
from mol_router.runtime import Runtime
from mol_router.tenants import Tenant

log = logging.getLogger("mol.router.harness")
_REAPED = ("the previous sandbox session expired (idle past its time-to-live) and a new "
           "one was started: earlier variables are gone")
_LOST = ("the previous sandbox session is gone and a new one was started: earlier "
         "variables are gone")

StopReason = Literal["step_limit", "time_budget"]


def sandbox_auth(rt: Runtime, authorization: str | None) -> str | None:
    """What the router shows the sandbox: the caller's own API key when the router has
    keys (the sandbox reads the same keys file, so the session is the caller's
    tenant's), else its own token, if any."""
    if rt.keys.enabled:
        return authorization
    token = rt.settings.sandbox_token
    return f"Bearer {token.get_secret_value()}" if token is not None else None


def begin(rt: Runtime, body: dict[str, Any], headers: Any, choice: Choice,
          tenant: Tenant, chat: bool) -> Conversation | None:
    """The request's conversation when it asks for the code interpreter, else None.
    400 when the expert has no harness or ``x-mol-session`` is malformed."""
    if not chat or not tool.requested(body.get("tools")):
        return None
    cfg = rt.config
    expert = cfg.expert(choice.expert) if choice.mode != "adapter" else None
    if expert is None or not expert.harness or cfg.harness is None:
        rt.metrics.rejected("no_harness")
        raise RouterError(400, f"{choice.expert!r} does not offer the code interpreter: "
                          "tools of type code_interpreter need an expert with harness "
                          "enabled", "harness_unavailable", param="tools")
    session = headers.get(tool.SESSION_HEADER)
    if session is not None and not tool.valid_session(session):
        rt.metrics.rejected("bad_session")
        raise RouterError(400, f"{tool.SESSION_HEADER} must be a session id from an "
                          "earlier answer (16 to 64 of A-Z a-z 0-9 _ -)", "invalid_session")
    assert rt.session is not None
    h = cfg.harness
    client = SandboxClient(rt.session, h.sandbox_url,
                           sandbox_auth(rt, headers.get("authorization")),
                           h.call_timeout_seconds)
    body["tools"] = tool.offered_tools(body["tools"])
    return Conversation(rt, client, choice.expert, session)


class Conversation:
    def __init__(self, rt: Runtime, client: SandboxClient, expert: str,
                 session: str | None) -> None:
        h = rt.config.harness
        assert h is not None
        self.rt, self.client, self.expert = rt, client, expert
        self.session = session
        self.max_steps, self.budget = h.max_steps, h.budget_seconds
        self.result_chars = h.result_chars
        self.deadline = time.monotonic() + h.budget_seconds
        self.steps: list[tool.Step] = []
        self.stopped: StopReason | None = None
        self._notice: str | None = None  # said by the next step (a session made anew)

    async def prepare(self) -> None:
        """Check the client's session before the first byte: unknown -> 404; reaped ->
        a new one on first use, said by that step; unusable -> the steps will say."""
        if self.session is None:
            return
        try:
            await self.client.check(self.session)
        except SessionUnknown:
            self.rt.metrics.rejected("unknown_session")
            raise RouterError(404, f"unknown {tool.SESSION_HEADER}: no such session for "
                              "this caller", "session_not_found") from None
        except SessionReaped:
            self.session, self._notice = None, _REAPED
        except SandboxError as exc:
            log.warning("sandbox check failed: %s", exc)

    async def run(self, turn: tool.Turn) -> tuple[list[tool.Step], list[dict[str, Any]]]:
        """Run the turn's calls in order: the steps, and the messages the conversation
        gains. Sets :attr:`stopped` when a limit refused a call."""
        done: list[tool.Step] = []
        for call in turn.calls:
            step = await self._step(call, len(self.steps) + len(done) + 1)
            done.append(step)
        self.steps += done
        return done, tool.messages_for(turn, done, self.result_chars)

    def note(self) -> str:
        assert self.stopped is not None
        return tool.stop_note(self.stopped, self.max_steps, self.budget)

    async def _step(self, call: tool.Call, index: int) -> tool.Step:
        code = call.code if call.code is not None else ""
        left = self.deadline - time.monotonic()
        if self.stopped is not None or index > self.max_steps or left <= 0:
            self.stopped = self.stopped or ("step_limit" if index > self.max_steps
                                            else "time_budget")
            why = ("the step limit was reached" if self.stopped == "step_limit"
                   else "the time budget was spent")
            return self._count(tool.Step(index, call.id, code, "limit",
                                         error=f"not run: {why}", session=self.session), 0.0)
        if call.code is None:
            return self._count(tool.Step(
                index, call.id, code, "error", session=self.session,
                error='the arguments must be a JSON object {"code": "<python source>"}'), 0.0)
        started = time.monotonic()
        step = await self._execute(index, call, min(left, self.client.timeout))
        return self._count(step, time.monotonic() - started)

    async def _execute(self, index: int, call: tool.Call, limit: float) -> tool.Step:
        code = call.code or ""
        notice = None
        try:
            for attempt in (1, 2):
                if self.session is None:
                    self.session = await self.client.create()
                try:
                    out = await self.client.execute(self.session, code, limit)
                    break
                except (SessionReaped, SessionUnknown) as exc:
                    if attempt == 2:
                        raise SandboxError("the new session was lost at once") from None
                    self.session = None
                    self._notice = _REAPED if isinstance(exc, SessionReaped) else _LOST
            notice, self._notice = self._notice, None
        except TimeoutError:
            return tool.Step(index, call.id, code, "timeout", session=self.session,
                             error=f"TimeoutError: no answer from the sandbox within "
                             f"{limit:g} s")
        except SandboxError as exc:
            log.warning("step %d: %s", index, exc)
            return tool.Step(index, call.id, code, "sandbox_unavailable",
                             session=self.session,
                             error=f"The code was not run: the sandbox is unavailable "
                             f"({exc}). Answer without running code.")
        error = out.get("error") if isinstance(out.get("error"), str) else None
        said = out.get("notice") if isinstance(out.get("notice"), str) else None
        return tool.Step(
            index, call.id, code, tool.outcome_of(error),
            stdout=_text(out.get("stdout")), stderr=_text(out.get("stderr")),
            result=out.get("result") if isinstance(out.get("result"), str) else None,
            error=error, notice="; ".join(n for n in (notice, said) if n) or None,
            duration_ms=float(out.get("duration_ms") or 0.0),
            truncated=out.get("truncated") is True, session=self.session)

    def _count(self, step: tool.Step, seconds: float) -> tool.Step:
        self.rt.metrics.harness_step(self.expert, step.outcome, seconds)
        return step


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
