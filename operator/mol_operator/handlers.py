"""kopf handlers: MoLDeployments are reconciled on create, update, resume and a resync
timer; deletion revokes the catalog token before kopf releases the finalizer.

Importing this module registers the handlers on kopf's default registry. The shared
:class:`~mol_operator.reconcile.Runtime` lives in kopf's memo (``memo.runtime``):
``mol operator run`` builds it from settings at startup; tests may pass one in.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from mol_operator import metrics
from mol_operator.catalog import Retry, revoke_token
from mol_operator.reconcile import Invalid, Runtime, failure_status, reconcile
from mol_operator.settings import OperatorSettings
from mol_operator.status import status_patch

MOLD = ("mol.dev", "v1alpha1", "moldeployments")
FINALIZER = "mol.dev/finalizer"
_RESYNC = OperatorSettings().resync_seconds


def configure(settings: kopf.OperatorSettings) -> None:
    """Our finalizer and annotation names; kopf's own logs are not posted as Events."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="mol.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="mol.dev", key="last-handled-configuration")
    settings.posting.level = logging.WARNING


def make_runtime(settings: OperatorSettings) -> Runtime:
    from mol_operator.kube import KubeApi
    from mol_platform.catalog_client import AsyncCatalogClient

    return Runtime(
        kube=KubeApi.connect(settings.kube_url),
        catalog=AsyncCatalogClient(settings.catalog_url, settings.admin_token() or "",
                                   timeout=settings.catalog_timeout),
        defaults=settings.defaults(),
        retry_seconds=settings.retry_seconds,
    )


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    configure(settings)
    if getattr(memo, "runtime", None) is None:
        ours = OperatorSettings()
        memo.runtime = make_runtime(ours)
        memo.owns_runtime = True
        if ours.metrics_port:
            memo.metrics_server = await metrics.start_server(ours.metrics_host, ours.metrics_port)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    server = getattr(memo, "metrics_server", None)
    if server is not None:
        await server.cleanup()
    if getattr(memo, "owns_runtime", False):
        runtime: Runtime = memo.runtime
        await runtime.kube.aclose()
        await runtime.catalog.aclose()


def _emit(body: kopf.Body, events: list[tuple[str, str, str]]) -> None:
    for type_, reason, message in events:
        kopf.event(body, type=type_, reason=reason, message=message[:1000])


def _write_status(body: kopf.Body, patch: kopf.Patch, new: Mapping[str, Any]) -> None:
    for key, value in status_patch(body.get("status") or {}, new).items():
        patch.status[key] = value


async def run_reconcile(body: kopf.Body, patch: kopf.Patch, runtime: Runtime) -> None:
    """One reconcile with its status, Events and metrics; errors become kopf's."""
    old = dict(body.get("status") or {})
    generation = body.get("metadata", {}).get("generation")
    with metrics.RECONCILE_SECONDS.time():
        try:
            outcome = await reconcile(runtime, body)
        except (Retry, Invalid) as exc:
            new = failure_status(old, generation, exc)
            if new != old:
                _emit(body, [("Warning", exc.reason, exc.message)])
            _write_status(body, patch, new)
            if isinstance(exc, Invalid):
                metrics.RECONCILES.labels("invalid").inc()
                raise kopf.PermanentError(exc.message) from None
            metrics.RECONCILES.labels("retry").inc()
            raise kopf.TemporaryError(exc.message, delay=exc.delay or runtime.retry_seconds
                                      ) from None
    metrics.RECONCILES.labels("ok").inc()
    for action in outcome.plan.actions:
        metrics.WRITES.labels(action.verb).inc()
    _emit(body, outcome.events)
    _write_status(body, patch, outcome.status)


@kopf.on.resume(*MOLD)
@kopf.on.create(*MOLD)
@kopf.on.update(*MOLD)
async def reconcile_deployment(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo,
                               **_: Any) -> None:
    await run_reconcile(body, patch, memo.runtime)


@kopf.timer(*MOLD, interval=_RESYNC, initial_delay=_RESYNC, idle=_RESYNC / 2)
async def resync(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    """Drift correction and fresh readiness; an unchanged deployment causes no write."""
    if body.get("metadata", {}).get("deletionTimestamp"):
        return
    await run_reconcile(body, patch, memo.runtime)


@kopf.on.delete(*MOLD)
async def delete_deployment(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Revoke the deployment's catalog token; children go with their owner (GC)."""
    runtime: Runtime = memo.runtime
    token = (body.get("status") or {}).get("catalogToken") or {}
    if token.get("id") is None:
        return
    try:
        await revoke_token(runtime.catalog, int(token["id"]), delay=runtime.retry_seconds)
    except Retry as exc:
        raise kopf.TemporaryError(exc.message, delay=exc.delay) from None
    kopf.event(body, type="Normal", reason="CatalogTokenRevoked",
               message=f"revoked catalog read token {token['id']}")
