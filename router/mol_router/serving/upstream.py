"""Sending one request to an engine: replica choice, queueing, retries, booking.

A request is retried on another replica after a connect error, a 5xx answer or an
engine saying it could not load the request's adapter (:func:`adapter_failure`), as
long as nothing has reached the client yet; a timeout is not retried (the engine may
still be working). The hop loop (:mod:`mol_router.serving.relay`) also retries once
when an answer broke after its head but before any byte reached the client (``tried``
carries the replicas already tried, so the retry goes elsewhere); both follow the one
plan of :mod:`mol_router.replicas.attempts`, which also says whom each outcome counts
against (:meth:`Upstreams.book`: a client that went away, nobody). With no ready engine
(scaled to zero, all ejected) requests wait in a bounded queue until one is ready or
the queue timeout passes (503 +
``Retry-After``); ``mol_router_pending_requests`` shows the queue so an autoscaler
can wake engines up from zero.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

import orjson

from mol_router.errors import RouterError
from mol_router.replicas import attempts
from mol_router.replicas.policy import RouteRequest
from mol_router.replicas.pool import UpstreamBroken, UpstreamResponse, UpstreamUnreachable
from mol_router.runtime import Runtime
from mol_router.telemetry.spans import REPLICA, RequestSpans, replica_attrs

if TYPE_CHECKING:
    from mol_platform.clients.tracing import Span

log = logging.getLogger("mol.router.upstream")
_QUEUE_POLL = 0.05
_NONE_TRIED: frozenset[str] = frozenset()
_ERROR_PEEK = 64 * 1024  # an engine's error body longer than this is not an adapter's


def adapter_failure(status: int, body: bytes, adapter: str | None) -> str | None:
    """The engine's message when this answer says it could not serve ``adapter`` on
    this replica (vLLM 0.32's exact words: found but not loaded, 400; no resolver found
    it, or no such model, 404), else None. The whole message must match: a client's bad
    request that merely echoes the model name must not make a replica avoid an adapter."""
    if adapter is None or status not in (400, 404) or len(body) > _ERROR_PEEK:
        return None
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    error = obj.get("error")
    message = (error.get("message") if isinstance(error, dict) else None) or obj.get("message")
    if not isinstance(message, str):
        return None
    known = ((f"LoRA adapter '{adapter}' was found but could not be loaded.",) if status == 400
             else (f"LoRA adapter {adapter} does not exist",
                   f"The model `{adapter}` does not exist."))
    return message if message in known else None


class Upstreams:
    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.pending = 0

    async def _wait_ready(self) -> list[str]:
        """Ready endpoints once there are some, waiting in the bounded queue."""
        tracker = self.rt.tracker
        assert tracker is not None
        limits = self.rt.limits
        retry = max(1.0, limits.queue)
        if self.pending >= limits.queue_limit or limits.queue <= 0:
            self.rt.metrics.rejected("no_engine")
            raise RouterError(503, "no engine is ready to serve this request; try again later",
                              "no_ready_engine", retry_after=retry)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limits.queue
        self.pending += 1
        gauge = self.rt.metrics.pending_child
        gauge.inc()
        try:
            while True:
                await asyncio.sleep(_QUEUE_POLL)
                ready = tracker.ready_endpoints()
                if ready:
                    return ready
                if loop.time() >= deadline:
                    self.rt.metrics.rejected("no_engine")
                    raise RouterError(
                        503, f"no engine became ready within {limits.queue:g} s; the "
                        "deployment may be scaling up from zero, try again later",
                        "no_ready_engine", retry_after=retry)
        finally:
            self.pending -= 1
            gauge.dec()

    async def send(self, path: str, payload: bytes, headers: Mapping[str, str],
                   route: RouteRequest, limit: float, spans: RequestSpans | None = None,
                   call: Span | None = None, tried: set[str] | None = None
                   ) -> tuple[UpstreamResponse, str, bool]:
        """An open response (status < 500, or the last 5xx), the endpoint it came
        from, and whether that attempt was cold (the engine did not hold the adapter:
        :meth:`EngineTracker.begin`). The caller reads it and calls :meth:`finish`.
        ``limit`` bounds the whole exchange, reading the body included. ``tried``
        (updated) holds the replicas this request was sent to already: they are not
        picked again. Which tries may follow which failures, and where, is
        :mod:`mol_router.replicas.attempts`' to say. With tracing on, the engine gets
        ``call``'s ``traceparent`` and each replica choice is a ``mol.router.pick``
        span under it."""
        rt = self.rt
        tracker = rt.tracker
        pool = rt.pool
        assert tracker is not None
        tried = set() if tried is None else tried
        error: RouterError | None = None
        max_tries = rt.limits.max_attempts
        if spans is not None:
            headers = {**headers, "traceparent": spans.traceparent(call)}
        avoid = tracker.adapter_failures.avoid(route.adapter)
        last: attempts.Outcome | None = None  # how the last try ended, once one has
        for attempt in range(max_tries):
            ready = tracker.ready_endpoints()
            if not ready and not tried:
                ready = await self._wait_ready()
            exclude = attempts.excluded(tried, ready, avoid)
            pick = spans.child("mol.router.pick", call, {"mol.attempt": attempt + 1}) \
                if spans is not None else None
            endpoint = rt.policy.pick(ready, tracker.snapshot(), route, exclude)
            if pick is not None:
                pick.set_attribute("mol.policy", rt.config.policy)
                pick.set_attribute("mol.ready_endpoints", len(ready))
                if endpoint is not None:
                    pick.set_attributes(replica_attrs(endpoint))
                else:
                    pick.set_attribute(REPLICA, "")
                pick.end()
            if endpoint is None:
                break
            if last is not None:
                rt.metrics.retried(attempts.RETRY_REASON[last])
            tried.add(endpoint)
            cold = tracker.begin(endpoint, route.adapter, route.prefix)
            try:
                resp = await pool.post(endpoint, path, payload, headers, limit=limit,
                                       connect=rt.limits.connect)
            except TimeoutError:
                self.book(endpoint, route.adapter, "timeout")
                rt.metrics.upstream_error("timeout")
                raise RouterError(504, f"the engine did not answer within "
                                  f"{limit:g} s", "upstream_timeout") from None
            except UpstreamUnreachable as exc:
                last = "down" if exc.down else "connect"
                self.book(endpoint, route.adapter, last)
                rt.metrics.upstream_error("connect")
                log.info("engine %s failed before answering (%s); attempt %d of %d",
                         endpoint, exc, attempt + 1, max_tries)
                error = RouterError(502, f"could not reach an engine: {exc}",
                                    "upstream_unreachable")
                if attempts.may_retry(last, wrote=False, tries=attempt + 1,
                                      max_tries=max_tries, broken_retried=False):
                    continue
                break
            except BaseException:  # cancelled: the client went away; nobody's failure
                self.book(endpoint, route.adapter, "cancelled")
                raise
            try:
                outcome, refused = await self._judge(resp, endpoint, route.adapter)
            except BaseException:  # cancelled while reading an error body
                resp.close()
                self.book(endpoint, route.adapter, "cancelled")
                raise
            retry = attempts.may_retry(outcome, wrote=False, tries=attempt + 1,
                                       max_tries=max_tries, broken_retried=False)
            if outcome == "ok" or (outcome == "status" and not retry):
                return resp, endpoint, cold  # the last 5xx: the caller reads it
            last = outcome
            if refused is not None:  # read whole, and booked against the pair
                resp.release()
                self.book(endpoint, route.adapter, outcome)
                error = refused
            else:
                resp.close()
                self.book(endpoint, route.adapter, outcome)
                rt.metrics.upstream_error("status")
                error = RouterError(502, f"the engine answered {resp.status}",
                                    "upstream_error")
            if not retry:
                break
        raise error or RouterError(503, "no engine is ready to serve this request",
                                   "no_ready_engine", retry_after=1.0)

    async def _judge(self, resp: UpstreamResponse, endpoint: str, adapter: str | None
                     ) -> tuple[attempts.Outcome, RouterError | None]:
        """``status`` for a 5xx head; ``adapter`` when the engine says it could not load
        ``adapter`` (booked against the pair; with the error for the client); else
        ``ok`` (the body left readable)."""
        if resp.status >= 500:
            return "status", None
        if resp.status in (400, 404) and adapter is not None:
            failed = await self._adapter_failed(resp, endpoint, adapter)
            if failed is not None:
                return "adapter", failed
        return "ok", None

    async def _adapter_failed(self, resp: UpstreamResponse, endpoint: str,
                              adapter: str) -> RouterError | None:
        """When the engine's 4xx says it could not load ``adapter``: book it (the
        replica is avoided for that adapter), end the exchange and say why; else leave
        the body readable and return None."""
        tracker = self.rt.tracker
        assert tracker is not None
        try:
            data = await resp.read()
        except (UpstreamBroken, TimeoutError):
            return None  # the caller's read fails the same way and says so
        message = adapter_failure(resp.status, data, adapter)
        if message is None:
            resp.unread(data)
            return None
        wait = tracker.record_adapter_failure(endpoint, adapter)
        self.rt.metrics.adapter_failed(adapter.split("@", 1)[0])  # ns/name, as labelled
        log.warning("engine %s could not serve %s (%s); avoided there for %.0f s",
                    endpoint, adapter, message, wait)
        return RouterError(503, f"{adapter} could not be loaded on any ready replica; "
                           f"the last engine said: {message}", "adapter_unavailable",
                           retry_after=5.0)

    def another(self, tried: set[str]) -> bool:
        """Whether a ready replica not in ``tried`` is there to retry on."""
        tracker = self.rt.tracker
        return tracker is not None and bool(attempts.candidates(tried,
                                                                 tracker.ready_endpoints()))

    def finish(self, resp: UpstreamResponse, endpoint: str, adapter: str | None,
               outcome: attempts.Outcome) -> None:
        """Release the response (read whole) or close it (cut short: the engine aborts
        the request), and book the outcome."""
        if outcome in ("ok", "status"):
            resp.release()
        else:
            resp.close()
        self.book(endpoint, adapter, outcome)

    def book(self, endpoint: str, adapter: str | None, outcome: attempts.Outcome) -> None:
        """End the try in the tracker and count it against whom it blames (a client
        that went away: nobody)."""
        tracker = self.rt.tracker
        assert tracker is not None
        tracker.end(endpoint, adapter)
        blame = attempts.blame(outcome)
        if blame == "success":
            tracker.record_success(endpoint, adapter)
        elif blame in ("replica", "down"):
            tracker.record_failure(endpoint, down=blame == "down")
        elif blame == "error":
            wait = tracker.record_error(endpoint, adapter)
            if wait is not None and adapter is not None:
                self.rt.metrics.adapter_failed(adapter.split("@", 1)[0])
                log.warning("engine %s answers 5xx for %s while its other adapters "
                            "succeed there; avoided there for %.0f s", endpoint, adapter,
                            wait)
