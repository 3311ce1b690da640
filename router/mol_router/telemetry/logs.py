"""The router's logging: the access log and quiet libraries (docs/observability.md).

The access log is one JSON object per request on logger ``mol.router.access`` (on
with ``MOL_ROUTER_ACCESS_LOG=true``), built only when that logger would emit it. The
HTTP libraries log every call at INFO, and the catalog's event feed is a long poll, so
without this their lines would drown the router's own; they log warnings and errors
only unless the log level is DEBUG.
"""

from __future__ import annotations

import logging

import orjson

access = logging.getLogger("mol.router.access")
LIBRARIES = ("httpx", "httpcore", "aiohttp.access", "aiohttp.client", "urllib3",
             "opentelemetry")


def configure(level: str, access_log: bool) -> None:
    """Root level, the libraries' level and the access log switch (``serve`` calls it
    once; embedders configure logging themselves)."""
    level = level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet = logging.NOTSET if level == "DEBUG" else logging.WARNING
    for name in LIBRARIES:
        logging.getLogger(name).setLevel(quiet)
    access.disabled = not access_log


def access_line(method: str, path: str, status: int, duration: float, *, rid: str,
                tenant: str, expert: str | None, adapter: str | None, version: int | None,
                replica: str | None, ttft: float | None, route: str | None,
                handoffs: list[str] | None, prompt: int, completion: int,
                trace_id: str | None) -> None:
    """Log one answered request (durations in seconds, 4 decimals)."""
    if not access.isEnabledFor(logging.INFO):
        return
    line = {"method": method, "path": path, "status": status, "request_id": rid,
            "tenant": tenant, "expert": expert, "adapter": adapter, "version": version,
            "replica": replica, "route": route,
            "ttft_s": round(ttft, 4) if ttft is not None else None,
            "duration_s": round(duration, 4), "prompt_tokens": prompt,
            "completion_tokens": completion}
    if handoffs is not None and len(handoffs) > 1:
        line["handoffs"] = ">".join(handoffs)
    if trace_id is not None:
        line["trace_id"] = trace_id
    access.info("%s", orjson.dumps(line).decode())
