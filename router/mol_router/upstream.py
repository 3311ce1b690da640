"""Sending one request to an engine: replica choice, queueing, retries.

A request is retried on another replica after a connect error or a 5xx answer, as
long as nothing has reached the client yet; a timeout is not retried (the engine may
still be working). With no ready engine (scaled to zero, all ejected) requests wait
in a bounded queue until one is ready or the queue timeout passes (503 +
``Retry-After``); ``mol_router_pending_requests`` shows the queue so an autoscaler
can wake engines up from zero.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from mol_router.errors import RouterError
from mol_router.policy import RouteRequest
from mol_router.pool import UpstreamResponse, UpstreamUnreachable
from mol_router.runtime import Runtime
from mol_router.spans import REPLICA, RequestSpans, replica_attrs

if TYPE_CHECKING:
    from mol_platform.clients.tracing import Span

log = logging.getLogger("mol.router.upstream")
_QUEUE_POLL = 0.05
_NONE_TRIED: frozenset[str] = frozenset()


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
                   call: Span | None = None) -> tuple[UpstreamResponse, str, bool]:
        """An open response (status < 500, or the last 5xx), the endpoint it came
        from, and whether that attempt was cold (the engine did not hold the adapter:
        :meth:`EngineTracker.begin`). The caller reads it and calls :meth:`done`.
        ``limit`` bounds the whole exchange, reading the body included. With tracing
        on, the engine gets ``call``'s ``traceparent`` and each replica choice is a
        ``mol.router.pick`` span under it."""
        rt = self.rt
        tracker = rt.tracker
        pool = rt.pool
        assert tracker is not None
        tried: set[str] = set()
        error: RouterError | None = None
        attempts = rt.limits.max_attempts
        if spans is not None:
            headers = {**headers, "traceparent": spans.traceparent(call)}
        for attempt in range(attempts):
            ready = tracker.ready_endpoints()
            if not ready and not tried:
                ready = await self._wait_ready()
            pick = spans.child("mol.router.pick", call, {"mol.attempt": attempt + 1}) \
                if spans is not None else None
            endpoint = rt.policy.pick(ready, tracker.snapshot(), route,
                                      frozenset(tried) if tried else _NONE_TRIED)
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
            tried.add(endpoint)
            cold = tracker.begin(endpoint, route.adapter, route.prefix)
            try:
                resp = await pool.post(endpoint, path, payload, headers, limit=limit,
                                       connect=rt.limits.connect)
            except TimeoutError:
                tracker.end(endpoint, route.adapter)
                tracker.record_failure(endpoint)
                rt.metrics.upstream_error("timeout")
                raise RouterError(504, f"the engine did not answer within "
                                  f"{limit:g} s", "upstream_timeout") from None
            except UpstreamUnreachable as exc:
                tracker.end(endpoint, route.adapter)
                tracker.record_failure(endpoint)
                rt.metrics.upstream_error("connect")
                log.info("engine %s failed before answering (%s); attempt %d of %d",
                         endpoint, exc, attempt + 1, attempts)
                error = RouterError(502, f"could not reach an engine: {exc}",
                                    "upstream_unreachable")
                continue
            except BaseException:  # cancelled: the client went away
                tracker.end(endpoint, route.adapter)
                raise
            if resp.status >= 500 and attempt + 1 < attempts:
                resp.close()
                tracker.end(endpoint, route.adapter)
                tracker.record_failure(endpoint)
                rt.metrics.upstream_error("status")
                error = RouterError(502, f"the engine answered {resp.status}",
                                    "upstream_error")
                continue
            return resp, endpoint, cold
        raise error or RouterError(503, "no engine is ready to serve this request",
                                   "no_ready_engine", retry_after=1.0)

    def done(self, resp: UpstreamResponse, endpoint: str, adapter: str | None, *,
             ok: bool, complete: bool) -> None:
        """Release (or, when cut short, close) the response and book the outcome."""
        if complete:
            resp.release()
        else:
            resp.close()  # drops the connection: the engine aborts the request
        tracker = self.rt.tracker
        assert tracker is not None
        tracker.end(endpoint, adapter)
        if ok:
            tracker.record_success(endpoint)
        else:
            tracker.record_failure(endpoint)
