"""What one request carries through the proxy: its ids and what served it so far."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mol_router.auto.scores import Verdict
from mol_router.routing.resolver import Resolved
from mol_router.routing.rules import Choice
from mol_router.telemetry.spans import RequestSpans

if TYPE_CHECKING:
    from mol_router.harness.loop import Conversation

_RID_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")
_HEX = frozenset("0123456789abcdef")
_NO_TRACE = "0" * 32


def route_value(signal: str, verdict: Verdict | None, why: list[str],
                head: str | None = None) -> str:
    """The ``x-mol-route`` value: the deciding signal, the trained head whose pick it is
    (``head=ns/name@v3``), its score and lead, and why the signals before it did not
    decide (docs/router.md)."""
    parts = [signal] + ([f"head={head}"] if head else [])
    if verdict is not None:
        parts += [f"score={verdict.score:.3f}", f"margin={verdict.margin:.3f}"]
    return "; ".join(parts + why)


def request_id(value: str | None) -> str:
    if value and len(value) <= 128 and _RID_OK.issuperset(value):
        return value
    return f"{random.getrandbits(128):032x}"  # a label, not a secret: no syscall needed


def trace_id_of(traceparent: str | None, rid: str) -> str | None:
    """The exemplar's trace id: W3C ``traceparent``'s (``00-<32 hex>-<16 hex>-<2
    hex>``) when valid, else the request id (None when too long for an OpenMetrics
    exemplar, whose labels may hold 128 characters)."""
    if traceparent is not None and len(traceparent) >= 55 and traceparent[2] == "-" \
            and traceparent[35] == "-":
        tid = traceparent[3:35]
        if _HEX.issuperset(tid) and tid != _NO_TRACE:
            return tid
    return rid if len(rid) <= 64 else None


@dataclass(slots=True)
class Served:
    """What served the request so far (for headers and metrics)."""

    choice: Choice
    resolved: Resolved
    path: list[str] = field(default_factory=list)
    prompt: int = 0
    completion: int = 0
    trace: str | None = None
    spans: RequestSpans | None = None
    unsampled: str | None = None  # an untraced request's traceparent (tracing on)
    replica: str | None = None  # the engine that answered (the last hop's)
    ttft: float | None = None  # streams: arrival to the first content byte sent
    harness: Conversation | None = None  # the code interpreter's state, when asked for

    @property
    def version(self) -> str:
        return str(self.resolved.version)
