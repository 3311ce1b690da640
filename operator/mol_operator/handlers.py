"""kopf handlers: MoLDeployments are reconciled on create, update, resume, a resync timer
and a canary timer; deletion revokes the catalog tokens before kopf releases the
finalizer; engine Pods that turn Ready get their experts' adapters warmed.

Importing this module registers the handlers on kopf's default registry. The shared
:class:`~mol_operator.reconcile.Runtime` lives in kopf's memo (``memo.runtime``), built
at startup from ``memo.settings`` (tests) or ``OperatorSettings()`` (``mol operator run``).
Timer intervals are read from the environment when this module is imported.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from mol_operator.builders.common import MANAGER
from mol_operator.canary import TERMINAL
from mol_operator.catalog import Retry, revoke_token
from mol_operator.endpoint import start_server
from mol_operator.metrics import OperatorMetrics
from mol_operator.reconcile import Invalid, Runtime, failure_status, reconcile
from mol_operator.settings import OperatorSettings
from mol_operator.status import status_patch
from mol_operator.tokens import revoke_owner_tokens, sweep_forever
from mol_operator.warmup import Warmer
from mol_operator.warmup_plan import ENGINE_POD_LABELS, pod_is_ready
from mol_operator.warmup_status import record_warmup
from mol_platform.contract.spec import GROUP, PLURAL, VERSION

MOLD = (GROUP, VERSION, PLURAL)
FINALIZER = "mol.dev/finalizer"
ENGINE_PODS = ENGINE_POD_LABELS
_IMPORT_SETTINGS = OperatorSettings()
_RESYNC = _IMPORT_SETTINGS.resync_seconds
_CANARY_TICK = _IMPORT_SETTINGS.canary_tick_seconds


def configure(settings: kopf.OperatorSettings) -> None:
    """Our finalizer and annotation names; kopf's own logs are not posted as Events;
    deletion is not held up by a timer that is running."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="mol.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="mol.dev", key="last-handled-configuration")
    settings.posting.level = logging.WARNING
    # A deletion that finds a resync or canary timer mid-run polls for its exit this
    # often (kopf's default, a minute, would hold the finalizer that long).
    settings.background.cancellation_polling = 1.0


def make_runtime(settings: OperatorSettings) -> Runtime:
    from mol_operator.builders import MANAGED
    from mol_operator.informer import ChildCache
    from mol_operator.planner import OPTIONAL_APIS
    from mol_platform.clients.catalog_async import AsyncCatalogClient
    from mol_platform.clients.kube import KubeApi
    from mol_platform.clients.tracing import make_tracing

    kube = KubeApi.connect(settings.kube_url, field_manager=MANAGER)
    return Runtime(
        kube=kube,
        catalog=AsyncCatalogClient(settings.catalog_url, settings.admin_token() or "",
                                   timeout=settings.catalog_timeout),
        children=ChildCache(kube, dict.fromkeys((m.api_version, m.plural) for m in MANAGED),
                            settings.namespaces, optional=OPTIONAL_APIS),
        defaults=settings.defaults(),
        retry_seconds=settings.retry_seconds,
        max_concurrent=settings.max_concurrent_reconciles,
        metrics=OperatorMetrics(),
        warmer=Warmer(timeout=settings.warmup_timeout),
        adapter_window=settings.adapter_failure_window,
        tracing=make_tracing("mol-operator", settings.tracing_endpoint,
                             settings.tracing_sample_ratio, False),
    )


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf's own connection: ``--kube-url`` when given, else in-cluster or kubeconfig
    through the ``kubernetes`` package (kopf's default, which a login handler replaces)."""
    url = OperatorSettings().kube_url
    if url:
        return kopf.ConnectionInfo(server=url, insecure=url.startswith("http:"))
    try:
        info: kopf.ConnectionInfo | None = kopf.login_via_client(**kwargs)
    except Exception:  # no cluster config: another login handler may still provide one
        return None
    return info


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    configure(settings)
    if getattr(memo, "runtime", None) is None:
        ours: OperatorSettings = getattr(memo, "settings", None) or OperatorSettings()
        runtime = make_runtime(ours)
        runtime.children.start()
        memo.runtime = runtime
        memo.token_sweep = asyncio.create_task(sweep_forever(
            runtime.catalog, runtime.kube, ours.namespaces, every=ours.token_sweep_seconds,
            delay=runtime.retry_seconds), name="catalog token sweep")
        if ours.metrics_port and runtime.metrics is not None:
            memo.metrics_server = await start_server(runtime.metrics.registry,
                                                     ours.metrics_host, ours.metrics_port)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    server = getattr(memo, "metrics_server", None)
    if server is not None:
        await server.cleanup()
    sweep: asyncio.Task[None] | None = getattr(memo, "token_sweep", None)
    if sweep is not None:
        sweep.cancel()
        await asyncio.gather(sweep, return_exceptions=True)
    runtime: Runtime | None = getattr(memo, "runtime", None)
    if runtime is not None:
        await runtime.children.stop()
        await runtime.kube.aclose()
        await runtime.catalog.aclose()
        if runtime.tracing is not None:
            await asyncio.to_thread(runtime.tracing.shutdown)


def _emit(body: kopf.Body, events: list[tuple[str, str, str]]) -> None:
    for type_, reason, message in events:
        kopf.event(body, type=type_, reason=reason, message=message[:1000])


def _write_status(body: kopf.Body, patch: kopf.Patch, new: dict[str, Any]) -> None:
    for key, value in status_patch(body.get("status") or {}, new).items():
        patch.status[key] = value


async def run_reconcile(body: kopf.Body, patch: kopf.Patch, runtime: Runtime) -> None:
    """One reconcile with its status, Events and metrics; errors become kopf's."""
    old = dict(body.get("status") or {})
    generation = body.get("metadata", {}).get("generation")
    m = runtime.metrics
    try:
        outcome = await reconcile(runtime, body)
    except (Retry, Invalid) as exc:
        new = failure_status(old, generation, exc)
        if new != old:
            _emit(body, [("Warning", exc.reason, exc.message)])
        _write_status(body, patch, new)
        if isinstance(exc, Invalid):
            if m is not None:
                m.reconcile.labels("invalid").inc()
            raise kopf.PermanentError(exc.message) from None
        if m is not None:
            m.reconcile.labels("retry").inc()
        raise kopf.TemporaryError(exc.message, delay=exc.delay or runtime.retry_seconds
                                  ) from None
    if m is not None:
        m.reconcile.labels("ok").inc()
        m.reconcile_duration.observe(outcome.seconds)
        for action in outcome.plan.actions:
            m.writes.labels(action.verb).inc()
    _emit(body, outcome.events)
    _write_status(body, patch, outcome.status)
    if outcome.look_again:  # the status is written with the patch all the same
        raise kopf.TemporaryError(outcome.look_again, delay=runtime.retry_seconds)


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


def canary_running(body: kopf.Body, **_: Any) -> bool:
    """A canary in the spec whose rollout (as status says) is not finished."""
    if body.get("metadata", {}).get("deletionTimestamp"):
        return False
    states = {e.get("name"): e.get("canary") or {}
              for e in (body.get("status") or {}).get("experts") or []}
    return any(e.get("canary") and states.get(e.get("name"), {}).get("phase") not in TERMINAL
               for e in (body.get("spec") or {}).get("experts") or [])


@kopf.timer(*MOLD, interval=_CANARY_TICK, initial_delay=_CANARY_TICK, when=canary_running)
async def canary_tick(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    """Advance (or roll back) running canaries between spec changes."""
    await run_reconcile(body, patch, memo.runtime)


@kopf.on.delete(*MOLD)
async def delete_deployment(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Revoke every catalog token of the deployment (also one minted by a reconcile that
    never wrote its Secret) before the finalizer goes; children go with their owner (GC).
    Waits for a reconcile in flight, so a token it mints is revoked too."""
    runtime: Runtime = memo.runtime
    uid = str(body.get("metadata", {}).get("uid", ""))
    noted = (body.get("status") or {}).get("catalogToken") or {}
    async with runtime.lock(uid):
        try:
            gone = await revoke_owner_tokens(runtime.catalog, uid, delay=runtime.retry_seconds)
            if noted.get("id") is not None and int(noted["id"]) not in gone:
                await revoke_token(runtime.catalog, int(noted["id"]), delay=runtime.retry_seconds)
                gone.append(int(noted["id"]))
        except Retry as exc:
            raise kopf.TemporaryError(exc.message, delay=exc.delay) from None
    if gone:
        kopf.event(body, type="Normal", reason="CatalogTokenRevoked",
                   message=f"revoked catalog read token(s) {', '.join(map(str, gone))}")


@kopf.on.event("", "v1", "pods", labels=ENGINE_PODS)
async def engine_pod(type: str, body: kopf.Body, memo: kopf.Memo,  # noqa: A002 (kopf's name)
                     **_: Any) -> None:
    """Warm each expert's adapter on an engine pod once it is Ready (never before)."""
    runtime: Runtime = memo.runtime
    uid = str(body.get("metadata", {}).get("uid", ""))
    if type == "DELETED":
        runtime.warmer.forget(uid)
        return
    if not pod_is_ready(body):
        return
    await record_warmup(runtime, body)
