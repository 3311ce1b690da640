"""OpenTelemetry tracing for the platform's services (docs/observability.md).

Off unless an OTLP endpoint is configured: a service then holds ``None`` where it would
hold a :class:`Tracing`, and its request path creates no SDK object at all. On, each
service has its own tracer provider (never the process-global one, so several services
share a process in tests and benchmarks without mixing their spans), a batch processor
and an OTLP/HTTP (protobuf) exporter.

Sampling is decided here, before any SDK call: a new trace is sampled with probability
``ratio`` (:meth:`Tracing.root` returns None otherwise, so an unsampled request costs a
random number, not a span). A caller's
``traceparent`` is a parent only when the service is told to trust it
(``trust_parent``): otherwise any client could force every request into the trace
store by sending ``-01`` (or pick a trace id under the ratio's bound), so the header is
ignored and the trace starts here.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mol_platform.contract.otlp import traces_url

if TYPE_CHECKING:  # the SDK is imported only when tracing is on
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, SpanKind, Tracer

_HEX = frozenset("0123456789abcdef")
_VERSION = "mol-platform"


def traceparent_of(span: Span) -> str:
    """The W3C ``traceparent`` header that makes the receiver's spans children of
    ``span`` (sampled flag included, so an engine follows the router's decision)."""
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def valid_traceparent(value: str | None) -> bool:
    """A well-formed version-00 ``traceparent`` with non-zero ids."""
    if value is None or len(value) != 55 or value[:3] != "00-" or value[35] != "-" \
            or value[52] != "-":
        return False
    tid, sid, flags = value[3:35], value[36:52], value[53:]
    return (_HEX.issuperset(tid) and _HEX.issuperset(sid) and _HEX.issuperset(flags)
            and tid != "0" * 32 and sid != "0" * 16)


class Tracing:
    """A service's tracer, sampler and OTLP/HTTP exporter."""

    def __init__(self, service: str, endpoint: str, *, ratio: float = 1.0,
                 trust_parent: bool = False,
                 headers: Mapping[str, str] | None = None) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
        from opentelemetry.trace import SpanKind, set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"tracing sample ratio must be within 0..1, not {ratio}")
        self.service = service
        self.endpoint = endpoint
        self.ratio = ratio
        self.trust_parent = trust_parent
        # Roots reach the SDK only once sampled (root()); children follow their parent,
        # a trusted remote parent's flag included.
        self.provider: TracerProvider = TracerProvider(
            resource=Resource.create({SERVICE_NAME: service}), sampler=ParentBased(ALWAYS_ON))
        self.provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=traces_url(endpoint), headers=dict(headers or {}),
                             timeout=10)))
        self.tracer: Tracer = self.provider.get_tracer(_VERSION)
        self.SERVER = SpanKind.SERVER
        self.CLIENT = SpanKind.CLIENT
        self.INTERNAL = SpanKind.INTERNAL
        self._in_context = set_span_in_context
        self._propagator = TraceContextTextMapPropagator()

    def parent_context(self, headers: Mapping[str, str]) -> Context | None:
        """The caller's context from ``traceparent``/``tracestate`` when trusted, else
        None (the span that follows starts a trace of its own)."""
        if not self.trust_parent or not valid_traceparent(headers.get("traceparent")):
            return None
        return self._propagator.extract(headers)

    def root(self, name: str, kind: SpanKind, headers: Mapping[str, str] | None,
             attributes: Mapping[str, Any] | None = None) -> Span | None:
        """The first span of this service for a request: a child of the caller's trusted
        ``traceparent`` (recording when the caller sampled it), else a new trace with
        probability ``ratio``; None when that draw says no."""
        parent = self.parent_context(headers) if headers is not None else None
        if parent is None and random.random() >= self.ratio:
            return None
        return self.tracer.start_span(name, context=parent, kind=kind, attributes=attributes)

    def start(self, name: str, kind: SpanKind, parent: Span | None = None,
              attributes: Mapping[str, Any] | None = None, *,
              context: Context | None = None) -> Span:
        """A started span, child of ``parent``, else of ``context`` (from
        :meth:`parent_context`), else a root; the caller ends it."""
        ctx = self._in_context(parent) if parent is not None else context
        return self.tracer.start_span(name, context=ctx, kind=kind, attributes=attributes)

    def flush(self) -> None:
        """Export what is queued now (tests, before reading a receiver)."""
        self.provider.force_flush()

    def shutdown(self) -> None:
        """Export what is queued, then stop (at service stop)."""
        self.provider.shutdown()


def make_tracing(service: str, endpoint: str | None, ratio: float, trust_parent: bool,
                 headers: Mapping[str, str] | None = None) -> Tracing | None:
    """None when no endpoint is set: tracing off, no SDK object created."""
    if not endpoint:
        return None
    return Tracing(service, endpoint, ratio=ratio, trust_parent=trust_parent, headers=headers)
