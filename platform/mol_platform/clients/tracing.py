"""OpenTelemetry tracing for the platform's services (docs/observability.md).

Off unless an OTLP endpoint is configured: a service then holds ``None`` where it would
hold a :class:`Tracing`, and its request path creates no SDK object at all. On, each
service has its own batch span processor and OTLP/HTTP (protobuf) exporter from the
OpenTelemetry SDK (never the process-global provider, so several services share a
process in tests and benchmarks without mixing their spans).

Sampling is decided here, before any SDK call: a new trace is sampled with probability
``ratio`` (:meth:`Tracing.root` returns None otherwise, so an unsampled request costs a
random number, not a span; :func:`unsampled_traceparent` is the header such a request
still sends on). A caller's ``traceparent`` is a parent only when the service is told
to trust it (``trust_parent``): otherwise any client could force every request into the
trace store by sending ``-01`` (or pick a trace id under the ratio's bound), so the
header is ignored and the trace starts here.

Why the spans are the platform's own (:class:`Span`), not the SDK's tracer: the SDK's
span costs about 70 us of Python to make and end here (four locks, attribute
validation, context objects; ``bench/router_instructions.py``), and a router request
makes four or five of them, more than the router's own work on the request. The
platform's spans are made only by its own code (no auto-instrumentation), with
attribute values it chose, so they need none of that: a :class:`Span` is a few slots
and a dict, and at its end it becomes the SDK's ``ReadableSpan`` and goes to the SDK's
batch processor and OTLP exporter as any span would.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mol_platform.contract.otlp import traces_url

if TYPE_CHECKING:  # the SDK is imported only when tracing is on
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanKind, StatusCode

_HEX = frozenset("0123456789abcdef")
_VERSION = "mol-platform"


def traceparent_of(span: Span) -> str:
    """The W3C ``traceparent`` header that makes the receiver's spans children of
    ``span`` (sampled flag included, so an engine follows the router's decision)."""
    return f"00-{span.trace_id:032x}-{span.span_id:016x}-{'01' if span.sampled else '00'}"


# Untraced requests' ids: a random 64-bit prefix per process and a counter. Unique, as
# W3C asks, at a fraction of the cost of 192 fresh random bits per request; nothing
# records an unsampled trace, so its ids need be unique, not unpredictable.
_UNSAMPLED_PREFIX = f"{random.getrandbits(63) | 1 << 62:016x}"
_UNSAMPLED_COUNTER = itertools.count(random.getrandbits(32) + 1)


def unsampled_traceparent() -> str:
    """A fresh trace's ``traceparent`` flagged not sampled: what a request that sampling
    left out sends on, so an engine or catalog tracing on its own follows the decision
    instead of starting traces of its own."""
    n = f"{next(_UNSAMPLED_COUNTER):016x}"
    return f"00-{_UNSAMPLED_PREFIX}{n}-{n}-00"


def valid_traceparent(value: str | None) -> bool:
    """A well-formed version-00 ``traceparent`` with non-zero ids."""
    if value is None or len(value) != 55 or value[:3] != "00-" or value[35] != "-" \
            or value[52] != "-":
        return False
    tid, sid, flags = value[3:35], value[36:52], value[53:]
    return (_HEX.issuperset(tid) and _HEX.issuperset(sid) and _HEX.issuperset(flags)
            and tid != "0" * 32 and sid != "0" * 16)


class Parent:
    """A trusted caller's span context, from its ``traceparent``/``tracestate``."""

    __slots__ = ("sampled", "span_id", "trace_id", "trace_state")

    def __init__(self, traceparent: str, tracestate: str | None) -> None:
        self.trace_id = int(traceparent[3:35], 16)
        self.span_id = int(traceparent[36:52], 16)
        self.sampled = bool(int(traceparent[53:], 16) & 1)
        self.trace_state = tracestate


class Span:
    """One span of a service: what the request path records (name, kind, ids, times,
    attributes, status). Not recording (the trace is not sampled: a trusted caller's
    decision) it only carries the ids on; at :meth:`end` a recording span goes to the
    service's batch processor as the SDK's ``ReadableSpan``."""

    __slots__ = ("_ended", "_tracing", "attributes", "kind", "name", "parent_id",
                 "parent_remote", "sampled", "span_id", "start_ns", "status",
                 "status_text", "trace_id", "trace_state")

    def __init__(self, tracing: Tracing, name: str, kind: SpanKind, trace_id: int,
                 parent_id: int | None, parent_remote: bool, sampled: bool,
                 trace_state: str | None, attributes: Mapping[str, Any] | None) -> None:
        self._tracing = tracing
        self.name = name
        self.kind = kind
        self.trace_id = trace_id
        self.span_id = random.getrandbits(64) or 1
        self.parent_id = parent_id
        self.parent_remote = parent_remote
        self.sampled = sampled
        self.trace_state = trace_state
        self.attributes: dict[str, Any] = dict(attributes) if attributes else {}
        self.status: StatusCode | None = None
        self.status_text: str | None = None
        self.start_ns = time.time_ns()
        self._ended = False

    def is_recording(self) -> bool:
        return self.sampled and not self._ended

    def set_attribute(self, key: str, value: Any) -> None:
        if value is not None:
            self.attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def update_name(self, name: str) -> None:
        self.name = name

    def set_status(self, status: StatusCode, description: str | None = None) -> None:
        self.status, self.status_text = status, description

    def end(self) -> None:
        if self._ended:
            return
        self._ended = True
        if self.sampled:
            self._tracing.export(self, time.time_ns())


class Tracing:
    """A service's sampler, spans and OTLP/HTTP exporter."""

    def __init__(self, service: str, endpoint: str, *, ratio: float = 1.0,
                 trust_parent: bool = False,
                 headers: Mapping[str, str] | None = None) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import SpanContext, SpanKind, Status, TraceFlags, TraceState

        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"tracing sample ratio must be within 0..1, not {ratio}")
        self.service = service
        self.endpoint = endpoint
        self.ratio = ratio
        self.trust_parent = trust_parent
        self._resource: Resource = Resource.create({SERVICE_NAME: service})
        self._scope: InstrumentationScope = InstrumentationScope(_VERSION)
        self._processor: BatchSpanProcessor = BatchSpanProcessor(
            OTLPSpanExporter(endpoint=traces_url(endpoint), headers=dict(headers or {}),
                             timeout=10))
        # The SDK's types, looked up once (a span's end is on the request path).
        self._readable = ReadableSpan
        self._context = SpanContext
        self._status = Status
        self._trace_state = TraceState
        self._sampled = TraceFlags(TraceFlags.SAMPLED)
        self._unset = Status()
        self.SERVER = SpanKind.SERVER
        self.CLIENT = SpanKind.CLIENT
        self.INTERNAL = SpanKind.INTERNAL

    def parent_context(self, headers: Mapping[str, str]) -> Parent | None:
        """The caller's context from ``traceparent``/``tracestate`` when trusted, else
        None (the span that follows starts a trace of its own)."""
        if not self.trust_parent:
            return None
        value = headers.get("traceparent")
        if not valid_traceparent(value):
            return None
        assert value is not None
        return Parent(value, headers.get("tracestate"))

    def root(self, name: str, kind: SpanKind, headers: Mapping[str, str] | None,
             attributes: Mapping[str, Any] | None = None) -> Span | None:
        """The first span of this service for a request: a child of the caller's trusted
        ``traceparent`` (recording when the caller sampled it), else a new trace with
        probability ``ratio``; None when that draw says no."""
        parent = self.parent_context(headers) if headers is not None else None
        if parent is not None:
            return Span(self, name, kind, parent.trace_id, parent.span_id, True,
                        parent.sampled, parent.trace_state, attributes)
        if random.random() >= self.ratio:
            return None
        return Span(self, name, kind, random.getrandbits(128) or 1, None, False, True, None,
                    attributes)

    def start(self, name: str, kind: SpanKind, parent: Span | None = None,
              attributes: Mapping[str, Any] | None = None, *,
              context: Parent | None = None) -> Span:
        """A started span, child of ``parent``, else of ``context`` (from
        :meth:`parent_context`), else a new sampled trace; the caller ends it."""
        if parent is not None:
            return Span(self, name, kind, parent.trace_id, parent.span_id, False,
                        parent.sampled, parent.trace_state, attributes)
        if context is not None:
            return Span(self, name, kind, context.trace_id, context.span_id, True,
                        context.sampled, context.trace_state, attributes)
        return Span(self, name, kind, random.getrandbits(128) or 1, None, False, True, None,
                    attributes)

    def export(self, span: Span, end_ns: int) -> None:
        """Hand an ended span to the batch processor as the SDK's ``ReadableSpan``."""
        context_of, flags = self._context, self._sampled
        state = self._trace_state.from_header([span.trace_state]) if span.trace_state \
            else None
        context = context_of(span.trace_id, span.span_id, False, flags, state)
        parent = None if span.parent_id is None else context_of(
            span.trace_id, span.parent_id, span.parent_remote, flags, state)
        status = self._unset if span.status is None else \
            self._status(span.status, span.status_text)
        self._processor.on_end(self._readable(
            name=span.name, context=context, parent=parent, resource=self._resource,
            attributes=span.attributes, kind=span.kind, status=status,
            start_time=span.start_ns, end_time=end_ns, instrumentation_scope=self._scope))

    def flush(self) -> None:
        """Export what is queued now (tests, before reading a receiver)."""
        self._processor.force_flush()

    def shutdown(self) -> None:
        """Export what is queued, then stop (at service stop)."""
        self._processor.shutdown()  # type: ignore[no-untyped-call]


def make_tracing(service: str, endpoint: str | None, ratio: float, trust_parent: bool,
                 headers: Mapping[str, str] | None = None) -> Tracing | None:
    """None when no endpoint is set: tracing off, no SDK object created."""
    if not endpoint:
        return None
    return Tracing(service, endpoint, ratio=ratio, trust_parent=trust_parent, headers=headers)
