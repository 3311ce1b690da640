"""The hop loop: one request's tries and handoffs, for whole answers and streams alike.

A hop sends the request for the current expert (:meth:`Upstreams.send`, which retries
before the response head), hands the open answer to the :class:`Answer` strategy
(read whole, or relayed to the client event by event), books the try by its outcome,
and then either ends, tries once more elsewhere (an answer broken after its head before
any byte of it reached the client), or continues: with the expert a ``handoff`` call
named, or, with the code interpreter on, with the same expert once the ``python`` calls
it made ran (:mod:`mol_router.harness.loop`, which says when a limit ends the steps
instead). Which retries are allowed and whom an outcome counts against is
:mod:`mol_router.replicas.attempts`' to say; a client that went away ends the loop with
nothing booked against the engine.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from mol_router.errors import RouterError
from mol_router.harness import tool
from mol_router.harness.loop import Conversation
from mol_router.replicas import attempts
from mol_router.replicas.policy import RouteRequest
from mol_router.replicas.pool import UpstreamBroken, UpstreamResponse
from mol_router.routing import handoff
from mol_router.runtime import Runtime
from mol_router.serving.served import Served
from mol_router.serving.upstream import Upstreams
from mol_router.telemetry.spans import end_engine_call
from mol_router.tenants import Tenant

if TYPE_CHECKING:
    from mol_platform.clients.tracing import Span

R = TypeVar("R", covariant=True)


@dataclass(frozen=True, slots=True)
class Try:
    """One try at an engine, as the strategy needs it."""

    engine: Span | None  # the engine call's span (the strategy ends it)
    endpoint: str
    cold: bool
    sent_at: float  # perf_counter
    offered: frozenset[str]  # the handoff targets offered on this hop
    hops: int  # handoffs before this hop
    handoff_on: bool
    turn: int  # hops of any kind before this one (handoffs and code-interpreter steps)
    harness_on: bool

    @property
    def continues(self) -> bool:
        """Whether more hops may follow this one (their answers are merged)."""
        return self.handoff_on or self.harness_on


class Host(Protocol):
    """What the loop and its strategies use of the proxy
    (:class:`mol_router.serving.proxy.GenerationProxy`)."""

    rt: Runtime
    up: Upstreams

    def hop_body(self, body: dict[str, Any], served: Served, hops: int, handoff_on: bool,
                 client_tools: list[Any] | None, user: str | None, tenant: Tenant
                 ) -> tuple[bytes, RouteRequest, frozenset[str]]: ...

    async def hand_over(self, body: dict[str, Any], served: Served, call: handoff.Call,
                        user: str | None) -> None: ...

    def headers_for(self, served: Served, rid: str,
                    content_type: str = "application/json") -> dict[str, str]: ...

    def count(self, tenant: Tenant, served: Served, prompt: int, completion: int) -> None: ...


class Answer(Protocol[R]):
    """How a hop's answer reaches the client (:mod:`mol_router.serving.answers`)."""

    @property
    def wrote(self) -> bool:
        """Whether bytes of the current hop's answer reached the client."""
        ...

    async def take(self, resp: UpstreamResponse, t: Try) -> handoff.Call | tool.Turn | None:
        """Read or relay the answer; the handoff or the ``python`` turn it asks for, or
        None when it is the last. Raises UpstreamBroken or TimeoutError when the answer
        broke, and ends the engine call's span either way."""
        ...

    def result(self) -> R:
        """The request's result once the last hop was taken."""
        ...

    def refused(self, exc: RouterError) -> R:
        """No engine took the hop (or a handoff's target cannot be resolved)."""
        ...

    def broke(self, exc: Exception) -> R:
        """The answer broke and may not be tried again."""
        ...

    async def handed_over(self, source: str, served: Served) -> None:
        """The request continues with another expert."""
        ...

    async def stepped(self, step: tool.Step) -> None:
        """A ``python`` call ran (or was refused): show it."""
        ...

    def stopped(self, reason: str, note: str) -> R:
        """A limit ended the code interpreter's steps before a final answer."""
        ...


async def relay(proxy: Host, path: str, body: dict[str, Any], chat: bool,
                served: Served, tenant: Tenant, user: str | None, headers: dict[str, str],
                answer: Answer[R], harness: Conversation | None = None) -> R:
    """Run the request's hops through ``answer``; see the module docstring."""
    rt = proxy.rt
    handoff_on = chat and rt.config.handoff_enabled and handoff.may_offer(body)
    client_tools = body.get("tools")
    hops = turn = 0
    tried: set[str] = set()
    broken_retried = False
    while True:
        adapter = served.resolved.name
        payload, route, offered = proxy.hop_body(body, served, hops, handoff_on,
                                                 client_tools, user, tenant)
        sent_at = time.perf_counter()
        engine = served.spans.engine_call(adapter) if served.spans is not None else None
        try:
            resp, endpoint, cold = await proxy.up.send(
                path, payload, headers, route, rt.limits.upstream, served.spans, engine, tried)
        except RouterError as exc:
            end_engine_call(engine, exc.status, None, None, 0, 0, False)
            return answer.refused(exc)
        served.replica = endpoint
        if cold:
            rt.metrics.cold_request(served.resolved.adapter)
        t = Try(engine, endpoint, cold, sent_at, offered, hops, handoff_on, turn,
                harness is not None)
        outcome: attempts.Outcome = "cancelled"  # unless the take ends: the client left
        try:
            call = await answer.take(resp, t)
            outcome = attempts.answered(resp.status)
        except (UpstreamBroken, TimeoutError) as exc:
            outcome = "broken" if isinstance(exc, UpstreamBroken) else "timeout"
            rt.metrics.upstream_error("stream")
            if attempts.may_retry(outcome, wrote=answer.wrote, tries=len(tried),
                                  max_tries=rt.limits.max_attempts,
                                  broken_retried=broken_retried) \
                    and proxy.up.another(tried):
                broken_retried = True  # nothing of it reached the client: once more
                rt.metrics.retried(attempts.RETRY_REASON[outcome])
                continue
            return answer.broke(exc)
        finally:
            proxy.up.finish(resp, endpoint, adapter, outcome)
        if call is None:
            return answer.result()
        turn += 1
        tried = set()
        if isinstance(call, tool.Turn):
            assert harness is not None
            steps, messages = await harness.run(call)
            body["messages"] = [*body["messages"], *messages]
            for step in steps:
                await answer.stepped(step)
            if harness.stopped is not None:
                return answer.stopped(harness.stopped, harness.note())
            continue
        source = served.choice.expert
        hops += 1
        try:
            await proxy.hand_over(body, served, call, user)
        except RouterError as exc:  # e.g. the target's adapter is incompatible
            return answer.refused(exc)
        await answer.handed_over(source, served)
