"""Choosing what serves a request: the tenant its API key names (and its rate limit),
the expert for ``model: auto`` (semantic signal, classifier expert, default) and the
immutable adapter version a choice resolves to (a canary falling back to stable). The
proxy (:mod:`mol_router.serving.proxy`) asks; this module decides and moves no bytes of the
request itself."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from mol_platform.contract.routing_feedback import Route
from mol_platform.contract.spec_router import CLASSIFIER_MODES
from mol_router.auto.scores import Verdict
from mol_router.auto.semantic import Decided
from mol_router.errors import RouterError
from mol_router.httpd.wire import Request
from mol_router.routing.resolver import Resolved, Unresolved
from mol_router.routing.rules import ADAPTER_LABEL, Choice, Routing
from mol_router.runtime import Runtime
from mol_router.serving.classify import classify, request_text
from mol_router.serving.served import route_value
from mol_router.serving.upstream import Upstreams
from mol_router.telemetry.spans import ADAPTER_REF, CANARY, EXPERT, RequestSpans
from mol_router.tenants import OPEN, Tenant

if TYPE_CHECKING:
    from mol_platform.clients.tracing import Span

log = logging.getLogger("mol.router")


class Chooser:
    """The decisions of one router runtime, made for each request."""

    def __init__(self, runtime: Runtime, upstreams: Upstreams) -> None:
        self.rt = runtime
        self.up = upstreams

    def tenant(self, request: Request) -> Tenant:
        """The API key's tenant (the open one without keys), admitted by its rate limit."""
        keys = self.rt.keys
        tenant = OPEN
        if keys.enabled:
            auth = request.headers.get("authorization")
            found = keys.lookup(auth)
            if found is None:
                self.rt.metrics.rejected("unauthorized")
                raise RouterError(401, "missing API key: send Authorization: Bearer <key>"
                                  if not auth else "invalid API key", "invalid_api_key")
            tenant = found
        wait = tenant.admit()
        if wait > 0:
            self.rt.metrics.rejected("rate_limited")
            raise RouterError(429, f"rate limit of tenant {tenant.name!r} reached; retry in "
                              f"{wait:.1f} s", "rate_limit_exceeded", retry_after=wait)
        return tenant

    async def auto(self, routing: Routing, body: dict[str, Any], chat: bool,
                    user: str | None, headers: dict[str, str],
                    spans: RequestSpans | None, rid: str = "", tenant: Tenant = OPEN
                    ) -> Choice:
        """``model: auto``: the semantic signal (semantic modes), then the classifier
        expert (classifier modes), then the default expert; ``route`` says why. With
        ``semantic.recordDecisions`` the decision is kept for the catalog under the
        request id ``rid`` (:mod:`mol_router.reporting.decisions`)."""
        cfg = routing.config
        rt = self.rt
        why: list[str] = []
        semantic = rt.semantic
        text = request_text(body, chat)
        if semantic is not None and rt.session is not None:
            decided = await semantic.decide(rt.session, text, user)
            verdict, error = decided.verdict, decided.error
            if error is not None:
                rt.metrics.embedding_error(error.reason)
                log.info("embedding unavailable (%s); falling back", error)
                why.append(f"embedding={error.reason}")
            if verdict.expert is not None:
                self._decided(rid, tenant, text, decided, verdict.expert)
                if decided.role == "candidate":
                    why.append("head=candidate")
                label = decided.head.label if decided.head is not None else None
                return routing.expert_choice(verdict.expert, cfg.mode, user, verdict.signal,
                                             route_value(verdict.signal, verdict, why, label))
            why.append(f"semantic={verdict.reason}")
        if cfg.mode in CLASSIFIER_MODES and cfg.classifier is not None:
            span = spans.child("mol.router.classify") if spans is not None else None
            picked = await classify(rt, self.up, body, chat, headers, spans, span)
            if span is not None:
                span.set_attribute(EXPERT, picked or "")
                span.end()
            if picked is not None:
                self._record(rid, tenant, text, picked, "classifier")
                return routing.expert_choice(picked, cfg.mode, user, "classifier",
                                             route_value("classifier", None, why))
            why.append("classifier=no-answer")
        self._record(rid, tenant, text, cfg.default, "default")
        return routing.expert_choice(cfg.default, cfg.mode, user, "default",
                                     route_value("default", None, why))

    def _decided(self, rid: str, tenant: Tenant, text: str, decided: Decided,
                 expert: str) -> None:
        """A semantic pick: counted per head, and while a canary runs compared with the
        other head's pick off the request path; recorded (with the other pick) once
        that comparison is in, or at once without one."""
        rt = self.rt
        loaded = decided.head
        route: Route = "keywords" if decided.verdict.signal == "keywords" else \
            "head" if loaded is not None else "semantic"
        digest = loaded.digest if loaded is not None else None
        if loaded is not None:
            rt.metrics.head_decided(decided.role, loaded.label, expert)
        other, semantic = decided.other, rt.semantic
        if loaded is None or other is None or semantic is None or rt.session is None:
            self._record(rid, tenant, text, expert, route, digest)
            return

        def compared(verdict: Verdict) -> None:
            picked = verdict.expert
            rt.metrics.head_compared("undecided" if picked is None else
                                     "agree" if picked == expert else "disagree")
            self._record(rid, tenant, text, expert, route, digest,
                         {"head": other.digest, "expert": picked} if picked else None)

        if not semantic.shadow(rt.session, text, other, compared):
            rt.metrics.head_compared("skipped")
            self._record(rid, tenant, text, expert, route, digest)

    def _record(self, rid: str, tenant: Tenant, text: str, expert: str, route: Route,
                head: str | None = None, candidate: dict[str, str] | None = None) -> None:
        """Keep the decision for the catalog when recording is on (no I/O): the turn as
        the semantic signal read it, and the other head's pick during a canary."""
        recorder = self.rt.decisions
        semantic = self.rt.semantic
        if recorder.on and rid and semantic is not None:
            recorder.record(rid, tenant, semantic.turn(text), expert, route, head, candidate)

    async def resolve(self, choice: Choice, spans: RequestSpans | None,
                       parent: Span | None = None, *, unsampled: str | None = None,
                       tenant: str = "") -> tuple[Choice, Resolved]:
        """The immutable adapter for a choice. A canary that cannot be served (unknown,
        catalog down, incompatible) falls back to the stable version rather than failing
        its users; anything else that cannot be served is refused. ``unsampled``: the
        untraced request's ``traceparent`` for the catalog; ``tenant``: whose unknown
        names count against its cap."""
        traceparent, span = unsampled, None
        if spans is not None:
            span = spans.child("mol.router.resolve", parent, {
                ADAPTER_REF: choice.ref, EXPERT: choice.expert, CANARY: choice.canary})
            traceparent = spans.traceparent(span)
        try:
            resolved = await self.rt.resolver.resolve(choice.ref, traceparent, tenant=tenant)
        except Unresolved as exc:
            if span is not None:
                span.set_attribute("error.type", str(exc.status or "unreachable"))
                span.end()
            if not choice.canary:
                raise _unresolved(choice, exc) from None
            resolved = None
        else:
            if span is not None:
                assert resolved is not None
                span.set_attribute("mol.adapter.name", resolved.name)
                span.set_attribute("mol.adapter.compatible", resolved.compatible)
                span.end()
        if choice.canary and (resolved is None or not resolved.compatible):
            log.warning("canary %s of expert %s cannot be served; using the stable version",
                        choice.ref, choice.expert)
            stable = dataclasses.replace(
                choice, ref=self.rt.routing.experts[choice.expert].adapter, canary=False)
            return await self.resolve(stable, spans, parent, unsampled=unsampled,
                                      tenant=tenant)
        assert resolved is not None
        if not resolved.compatible:
            self.rt.metrics.rejected("incompatible")
            reasons = "; ".join(str(r.get("message", r)) for r in resolved.reasons)
            raise RouterError(422, f"{resolved.name} is not compatible with serving profile "
                              f"{self.rt.config.profile!r}: {reasons}", "adapter_incompatible",
                              extra={"reasons": list(resolved.reasons)})
        return choice, resolved


def _unresolved(choice: Choice, exc: Unresolved) -> RouterError:
    if choice.expert == ADAPTER_LABEL and exc.status == 404:
        return RouterError(404, f"adapter {choice.ref}: {exc.detail}", "model_not_found",
                           param="model")
    if exc.status == 429:
        return RouterError(429, exc.detail, "too_many_unknown_adapters", param="model",
                           retry_after=exc.retry_after)
    return RouterError(503, f"cannot resolve {choice.ref} for expert {choice.expert!r}: "
                       f"{exc.detail}", "catalog_unavailable",
                       retry_after=exc.retry_after or 5.0)

