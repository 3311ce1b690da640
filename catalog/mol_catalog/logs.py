"""Logging of ``mol catalog serve``: level, text or JSON lines, and the start-up line.

One ``logging`` configuration serves uvicorn's loggers (server and access log) and the
catalog's own, so a log shipper sees one format. JSON lines carry ``time``, ``level``,
``logger`` and ``message``; access-log lines add ``client``, ``method``, ``path`` and
``status``.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

LogLevel = Literal["critical", "error", "warning", "info", "debug"]
LogFormat = Literal["text", "json"]

_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(), "logger": record.name,
            "message": record.getMessage()}
        args = record.args
        if record.name == "uvicorn.access" and isinstance(args, tuple) and len(args) == 5:
            client, method, path, _, status = args
            out.update(client=client, method=method, path=path, status=status)
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def log_config(level: LogLevel, fmt: LogFormat) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for uvicorn's ``log_config`` and the catalog."""
    formatter: dict[str, Any] = (
        {"()": f"{__name__}.JsonFormatter"} if fmt == "json" else {"format": _TEXT})
    loggers = {name: {"handlers": ["stderr"], "level": level.upper(), "propagate": False}
               for name in ("uvicorn", "uvicorn.access", "mol_catalog")}
    loggers["uvicorn.error"] = {"level": level.upper()}  # through "uvicorn"
    return {"version": 1, "disable_existing_loggers": False,
            "formatters": {"default": formatter},
            "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "default",
                                    "stream": "ext://sys.stderr"}},
            "loggers": loggers}


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def startup_line(host: str, port: int, workers: int, db_url: str, blob_url: str,
                 auth: bool, exposed: bool = False) -> str:
    """Where the catalog listens and on which backends, the password left out; ``exposed``
    (auth off on an address others can reach) says so in capitals."""
    where = f"[{host}]" if ":" in host else host
    auth_text = ("OFF ON A NON-LOOPBACK ADDRESS: EVERY CALLER IS ADMIN" if exposed
                 else "on" if auth else "off")
    return (f"mol catalog listening on http://{where}:{port} ({workers} worker"
            f"{'s' if workers != 1 else ''}); database {redact(db_url)}; blobs "
            f"{redact(blob_url)}; auth {auth_text}")
