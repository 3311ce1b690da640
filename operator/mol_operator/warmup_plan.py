"""Adapter warm-up, the pure half: which pods are ready and where they listen, which
immutable adapter names a deployment's status asks to warm, what an engine's refusal
says, and how a pod's warm-up outcome changes ``status.experts``.

:mod:`mol_operator.warmup` sends the requests; :mod:`mol_operator.warmup_status` writes
the outcome. The adapter health check probes pods with the same requests.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from mol_operator.builders.common import MANAGER
from mol_platform.contract.refs import AdapterRef
from mol_platform.contract.spec import MoLDeploymentSpec

ENGINE_POD_LABELS: Final = {"app.kubernetes.io/component": "engine",
                            "app.kubernetes.io/managed-by": MANAGER}
"""The labels of the engine pods the operator renders (``app.kubernetes.io/instance``
names the deployment)."""
ENGINE_PORT_NAME: Final = "http"
DEFAULT_ENGINE_PORT: Final = 8000

WarmupResult = dict[tuple[str, str], str | None]


def immutable_name(ref: str, version: int) -> str:
    """``acme/coding@stable`` resolved to version 3 -> ``acme/coding@v3``."""
    return f"{AdapterRef.parse(ref).adapter}@v{version}"


def model_names(spec: MoLDeploymentSpec, status: Mapping[str, Any]) -> dict[str, str]:
    """``{immutable name: expert}`` to warm: each expert's resolved version and, while it
    takes traffic, its canary's; incompatible or not yet resolved ones are left out."""
    by_name = {e.get("name"): e for e in status.get("experts") or () if isinstance(e, Mapping)}
    names: dict[str, str] = {}
    for expert in spec.experts:
        seen = by_name.get(expert.name) or {}
        version = seen.get("version")
        if isinstance(version, int) and seen.get("compatible") is not False:
            names.setdefault(immutable_name(expert.adapter, version), expert.name)
        canary = seen.get("canary") or {}
        if (
            expert.canary is not None
            and isinstance(canary.get("version"), int)
            and canary.get("phase") != "RolledBack"
        ):
            names.setdefault(immutable_name(expert.canary.adapter, canary["version"]), expert.name)
    return names


def pod_is_ready(pod: Mapping[str, Any]) -> bool:
    """Running, condition Ready=True, an IP, and not being deleted."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    if not status.get("podIP"):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


def _engine_port(pod: Mapping[str, Any]) -> int:
    for container in (pod.get("spec") or {}).get("containers") or ():
        for port in container.get("ports") or ():
            if port.get("name") == ENGINE_PORT_NAME and isinstance(port.get("containerPort"), int):
                return int(port["containerPort"])
    return DEFAULT_ENGINE_PORT


def pod_url(pod: Mapping[str, Any]) -> str | None:
    """``http://<podIP>:<engine port>`` of a ready pod, else None."""
    if not pod_is_ready(pod):
        return None
    ip = str(pod["status"]["podIP"])
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{_engine_port(pod)}"


def ready_pod_urls(pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """The engine URLs of the ready pods among ``pods``, sorted, without duplicates."""
    return sorted({url for pod in pods if (url := pod_url(pod)) is not None})


def error_text(status: int, text: str) -> str:
    try:
        body = json.loads(text)
    except ValueError:
        return f"HTTP {status}: {text[:200]}"
    err = body.get("error") if isinstance(body, dict) else None
    message = err.get("message") if isinstance(err, dict) else None
    if message is None and isinstance(body, dict):
        message = body.get("message") or body.get("detail") or err
    return f"HTTP {status}: {message}"


def apply_results(experts: list[dict[str, Any]], pod: str, names: Mapping[str, str],
                  errors: Mapping[str, str | None]) -> list[dict[str, Any]]:
    """New ``status.experts`` with this pod's warm-up outcome (pure)."""
    failed: dict[str, list[str]] = {}
    for name, error in errors.items():
        if error is not None:
            failed.setdefault(names[name], []).append(f"{pod}: {name}: {error}")
    out = []
    for e in experts:
        kept = [x for x in e.get("warmupErrors") or [] if not x.startswith(f"{pod}: ")]
        now = kept + failed.get(e["name"], [])
        item = {k: v for k, v in e.items() if k not in ("warmupErrors", "serving")}
        if now:
            item["warmupErrors"] = now
        item["serving"] = not now
        out.append(item)
    return out
