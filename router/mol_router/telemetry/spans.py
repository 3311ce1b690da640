"""One request's spans, named and attributed after OpenTelemetry's GenAI semantic
conventions (docs/observability.md).

Only created when tracing is on (``Runtime.tracing``) and the request is traced
(:meth:`RequestSpans.begin`); otherwise the request path holds ``None`` and makes no
span. A request that sampling leaves out gets a fresh ``traceparent`` flagged not
sampled instead (:func:`~mol_platform.clients.tracing.unsampled_traceparent`), which
still goes to the engine and the catalog, so an engine exporting spans of its own
follows the router's decision instead of tracing everything.

The tree of one request::

    chat auto                      SERVER  the request as the client sees it
      mol.router.classify          INTERNAL  model "auto" with a classifier
        chat demo/router@v1        CLIENT  the classifier's engine call
      mol.router.resolve           INTERNAL  reference -> immutable adapter name
      chat demo/math@v3            CLIENT  one engine call (per hop)
        mol.router.pick            INTERNAL  the replica choice (one per attempt)
      mol.router.handoff           INTERNAL  switch to the next expert
        mol.router.resolve
      chat demo/code@v2            CLIENT
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mol_platform.clients.tracing import Span, Tracing, traceparent_of

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
MAX_TOKENS = "gen_ai.request.max_tokens"
TEMPERATURE = "gen_ai.request.temperature"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
STATUS_CODE = "http.response.status_code"
ERROR_TYPE = "error.type"
# The router's own (no convention covers them).
EXPERT = "mol.expert"
ROUTE = "mol.route"
CANARY = "mol.canary"
ADAPTER_REF = "mol.adapter.ref"
REPLICA = "mol.replica"
COLD = "mol.cold"
HANDOFF_FROM = "mol.handoff.from"
HANDOFF_TO = "mol.handoff.to"
REQUEST_ID = "mol.request_id"
PROVIDER_NAME = "vllm"  # what answers: an OpenAI-compatible vLLM engine


def operation(chat: bool) -> str:
    return "chat" if chat else "text_completion"


class RequestSpans:
    """The root span of one request and the children it makes while recording."""

    __slots__ = ("op", "recording", "root", "tracing")

    def __init__(self, tracing: Tracing, root: Span, op: str) -> None:
        self.tracing = tracing
        self.op = op
        self.root = root
        self.recording = root.is_recording()

    @classmethod
    def begin(cls, tracing: Tracing, headers: Mapping[str, str], chat: bool,
              rid: str) -> RequestSpans | None:
        """The request's spans, or None when it is not traced (sampling said no and no
        trusted caller's ``traceparent`` decides)."""
        op = operation(chat)
        root = tracing.root(op, tracing.SERVER, headers,
                            {OPERATION: op, PROVIDER: PROVIDER_NAME, REQUEST_ID: rid})
        return None if root is None else cls(tracing, root, op)

    @property
    def trace_id(self) -> str | None:
        """The trace's id when it is recorded (the exemplar's and the access log's)."""
        return f"{self.root.trace_id:032x}" if self.recording else None

    def requested(self, body: Mapping[str, Any]) -> None:
        """What the client asked for: names the root ``{operation} {model}``."""
        if not self.recording:
            return
        root = self.root
        model = body.get("model")
        if isinstance(model, str):
            root.update_name(f"{self.op} {model}")
            root.set_attribute(REQUEST_MODEL, model)
        for key, attr in (("max_tokens", MAX_TOKENS), ("temperature", TEMPERATURE)):
            value = body.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                root.set_attribute(attr, value)

    def child(self, name: str, parent: Span | None = None,
              attributes: Mapping[str, Any] | None = None, *, client: bool = False
              ) -> Span | None:
        """A child of ``parent`` (default: the root); None when not recording."""
        if not self.recording:
            return None
        t = self.tracing
        return t.start(name, t.CLIENT if client else t.INTERNAL, parent or self.root,
                       attributes)

    def engine_call(self, model: str, parent: Span | None = None) -> Span | None:
        """The CLIENT span of one engine call (``chat ns/name@vN``)."""
        return self.child(f"{self.op} {model}", parent,
                          {OPERATION: self.op, PROVIDER: PROVIDER_NAME,
                           REQUEST_MODEL: model}, client=True)

    def traceparent(self, span: Span | None) -> str:
        """The header for an engine or catalog call: ``span``'s, else the root's (not
        recording: a trusted parent's context, not sampled)."""
        return traceparent_of(span if span is not None else self.root)

    def end(self, status: int, expert: str | None, adapter: str | None,
            prompt: int, completion: int) -> None:
        root = self.root
        if self.recording:
            root.set_attribute(STATUS_CODE, status)
            if expert is not None:
                root.set_attribute(EXPERT, expert)
            if adapter is not None:
                root.set_attribute(RESPONSE_MODEL, adapter)
                root.set_attribute(INPUT_TOKENS, prompt)
                root.set_attribute(OUTPUT_TOKENS, completion)
            if status >= 400:
                root.set_attribute(ERROR_TYPE, str(status))
                if status >= 500:
                    from opentelemetry.trace import StatusCode

                    root.set_status(StatusCode.ERROR)
        root.end()


def replica_attrs(endpoint: str) -> dict[str, Any]:
    """``server.address``/``server.port`` of an engine URL (``http://host:port``)."""
    hostport = endpoint.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return {SERVER_ADDRESS: hostport, REPLICA: endpoint}
    return {SERVER_ADDRESS: host.strip("[]"), SERVER_PORT: int(port), REPLICA: endpoint}


def end_engine_call(span: Span | None, status: int, endpoint: str | None,
                    response: Mapping[str, Any] | None, prompt: int, completion: int,
                    cold: bool) -> None:
    """Close an engine call's span with what the engine answered."""
    if span is None:
        return
    if endpoint is not None:
        span.set_attributes(replica_attrs(endpoint))
    span.set_attribute(STATUS_CODE, status)
    span.set_attribute(COLD, cold)
    if response is not None:
        model, rid = response.get("model"), response.get("id")
        if isinstance(model, str):
            span.set_attribute(RESPONSE_MODEL, model)
        if isinstance(rid, str):
            span.set_attribute(RESPONSE_ID, rid)
    span.set_attribute(INPUT_TOKENS, prompt)
    span.set_attribute(OUTPUT_TOKENS, completion)
    if status >= 400 or status == 0:
        span.set_attribute(ERROR_TYPE, str(status) if status else "stream")
    span.end()
