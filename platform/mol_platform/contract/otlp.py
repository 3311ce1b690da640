"""Where OTLP/HTTP traces go: one endpoint setting, the same URL for every exporter."""

from __future__ import annotations

ENGINE_SERVICE = "mol-engine"  # the engines' service.name in traces


def traces_url(endpoint: str) -> str:
    """The collector's base URL (``http://collector:4318``) or its full traces URL ->
    the traces URL (``.../v1/traces``), which vLLM's HTTP exporter takes as given."""
    url = endpoint.rstrip("/")
    return url if url.endswith("/v1/traces") else url + "/v1/traces"


def engine_tracing_env() -> dict[str, str]:
    """vLLM's exporter speaks gRPC unless told otherwise; the platform's collectors
    take OTLP/HTTP (protobuf) on the one endpoint every component uses."""
    return {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": ENGINE_SERVICE}
