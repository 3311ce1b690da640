"""One reconcile of one MoLDeployment: validate, ask the catalog, build, plan, apply, status.

Order matters for "never half-updated": the spec is validated, the catalog answers
and every manifest is built before the first write; only then does the executor apply
the plan. Kopf-free, so tests and the benchmark drive it directly.
"""

from __future__ import annotations

import asyncio
import base64
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, NamedTuple

from pydantic import ValidationError

from mol_operator.adapter_health import DEFAULT_WINDOW, with_health
from mol_operator.adapter_probe import observe_adapter_health
from mol_operator.builders import (
    MANAGED,
    BuildError,
    Defaults,
    Facts,
    build_all,
    catalog_secret,
    endpoint,
    managed_objects,
    sandbox_token_secret,
)
from mol_operator.builders.common import (
    TOKEN_ID_ANNOTATION,
    TOKEN_KEY,
    TOKEN_SCOPES_ANNOTATION,
)
from mol_operator.builders.sandbox import SANDBOX_API
from mol_operator.catalog import (
    BaseRevisions,
    CatalogFacts,
    Retry,
    declare_and_resolve,
    mint_token,
    revoke_token,
    token_scopes,
)
from mol_operator.informer import ChildCache
from mol_operator.metrics import OperatorMetrics
from mol_operator.planner import OPTIONAL_APIS, Key, Plan, plan
from mol_operator.rollout import step_canaries
from mol_operator.status import canary_condition, condition, merge_conditions
from mol_operator.tokens import revoke_owner_tokens, sandbox_token, token_name
from mol_operator.warmup import Warmer
from mol_operator.warmup_plan import model_names
from mol_platform.clients.catalog_async import AsyncCatalogClient
from mol_platform.clients.kube import KubeApi, KubeError
from mol_platform.clients.tracing import Tracing
from mol_platform.contract.router_config import profile_name
from mol_platform.contract.spec import MoLDeployment

Event = tuple[str, str, str]  # (type, reason, message)
SYNC_TIMEOUT = 30.0  # how long a reconcile waits for the child cache's first lists
PROBE_TIMEOUT_S = 30.0  # one adapter probe of a running pod, inside the reconcile


class Invalid(Exception):
    """A spec the operator cannot serve; retrying will not help."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        self.message = message
        super().__init__(message)


@dataclass
class Runtime:
    """What every reconcile shares: API clients and operator-wide defaults."""

    kube: KubeApi
    catalog: AsyncCatalogClient
    children: ChildCache
    defaults: Defaults = field(default_factory=Defaults)
    retry_seconds: float = 30.0
    metrics: OperatorMetrics | None = None
    warmer: Warmer = field(default_factory=Warmer)
    max_concurrent: int = 32
    bases: BaseRevisions = field(default_factory=BaseRevisions)
    tracing: Tracing | None = None  # None: tracing off
    adapter_window: str = DEFAULT_WINDOW  # how far back the routers' adapter failures count
    _gate: asyncio.Semaphore | None = field(default=None, init=False, repr=False)
    _locks: weakref.WeakValueDictionary[str, asyncio.Lock] = field(
        default_factory=weakref.WeakValueDictionary, init=False, repr=False)

    def lock(self, uid: str) -> asyncio.Lock:
        """One reconcile per deployment at a time (the resync and canary timers run
        beside the change handlers): the later one reads the earlier one's writes."""
        held = self._locks.get(uid)
        if held is None:
            held = self._locks[uid] = asyncio.Lock()
        return held

    @property
    def gate(self) -> asyncio.Semaphore:
        """Bounds reconciles in flight (made on first use, inside the operator's loop)."""
        if self._gate is None:
            self._gate = asyncio.Semaphore(self.max_concurrent)
        return self._gate


@dataclass(frozen=True)
class Outcome:
    status: dict[str, Any]
    events: list[Event]
    plan: Plan
    seconds: float
    look_again: str = ""
    """Why the deployment should be looked at again soon although the reconcile went
    through (an adapter fails on a running pod: its heal should show without waiting
    for the resync)."""


def parse(body: Mapping[str, Any]) -> MoLDeployment:
    """The MoLDeployment, or Invalid naming each field to fix."""
    try:
        obj = MoLDeployment.model_validate({k: v for k, v in body.items() if k != "status"})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'spec'}: {err['msg']}"
            for err in exc.errors()
        )
        raise Invalid("InvalidSpec", f"the MoLDeployment is invalid: {problems}") from None
    return obj


async def observe(rt: Runtime, facts: Facts, needed: set[str]
                  ) -> tuple[dict[Key, dict[str, Any] | None], dict[str, bool]]:
    """Every child slot from the watch cache (only APIs that are served) -> observed
    objects, availability; ``needed``: the apiVersions the desired children use."""
    if not await rt.children.wait_synced(SYNC_TIMEOUT):
        raise Retry("CacheNotSynced", "the operator has not finished listing its children "
                    "yet (is the Kubernetes API reachable?); retrying", rt.retry_seconds,
                    condition="Progressing")
    available: dict[str, bool] = {}
    observed: dict[Key, dict[str, Any] | None] = {}
    for kind, name in managed_objects(facts.names):
        if kind.api_version in OPTIONAL_APIS and kind.api_version not in available:
            available[kind.api_version] = await rt.children.served(
                kind.api_version, kind.plural, needed=kind.api_version in needed,
                seconds=SYNC_TIMEOUT)
        if not available.get(kind.api_version, True):
            continue
        observed[Key(kind.api_version, kind.kind, name)] = rt.children.get(
            kind.api_version, kind.plural, facts.namespace, name)
    return observed, available


async def agent_sandbox_served(rt: Runtime, obj: MoLDeployment) -> bool:
    """Whether code-harness sessions are agent-sandbox SandboxClaims (its CRDs served)
    rather than plain pods; asked only of a deployment with the harness on."""
    if not obj.spec.harness_experts:
        return False
    if not await rt.children.wait_synced(SYNC_TIMEOUT):
        return False  # observe() says why and retries
    return await rt.children.served(SANDBOX_API, "sandboxtemplates", needed=True,
                                    seconds=SYNC_TIMEOUT)


def _token_from(secret: Mapping[str, Any] | None,
                scopes: tuple[str, ...]) -> tuple[int, str] | None:
    if secret is None:
        return None
    notes = secret.get("metadata", {}).get("annotations") or {}
    data = secret.get("data") or {}
    if notes.get(TOKEN_SCOPES_ANNOTATION) != ",".join(scopes) or TOKEN_KEY not in data:
        return None
    try:
        return int(notes[TOKEN_ID_ANNOTATION]), base64.b64decode(data[TOKEN_KEY]).decode()
    except (KeyError, ValueError):
        return None


def _held_ids(secret: Mapping[str, Any] | None) -> set[int]:
    """The id of the token a Secret holds, whatever its scopes."""
    notes = (secret or {}).get("metadata", {}).get("annotations") or {}
    try:
        return {int(notes[TOKEN_ID_ANNOTATION])}
    except (KeyError, ValueError):
        return set()


async def _execute(rt: Runtime, the_plan: Plan, namespace: str) -> list[Key]:
    plurals = {(m.api_version, m.kind): m.plural for m in MANAGED}
    missing: list[Key] = []
    for action in the_plan.actions:
        api_version, name = action.key.api_version, action.key.name
        plural = plurals[(api_version, action.key.kind)]
        try:
            if action.verb == "delete":
                await rt.kube.delete(api_version, plural, namespace, name)
                rt.children.forget(api_version, plural, namespace, name)
            else:
                assert action.manifest is not None
                written = await rt.kube.apply(action.manifest, plural)
                rt.children.remember(api_version, plural, written)
        except KubeError as exc:
            if exc.status == 404 and api_version in OPTIONAL_APIS:
                missing.append(action.key)
                continue
            raise Retry("ApplyFailed", f"{action.verb} {action.key} failed: {exc}; retrying",
                        rt.retry_seconds, condition="Progressing") from None
    return missing


async def reconcile(rt: Runtime, body: Mapping[str, Any]) -> Outcome:
    """One reconcile, waiting for the deployment's previous one to end and for a free slot
    first (``Outcome.seconds`` is the work only). ``body`` is read once both are held
    (kopf hands timers a live body, so a timer that waited sees the spec it waited for)."""
    async with rt.lock(str(body.get("metadata", {}).get("uid", ""))), rt.gate:
        if rt.tracing is None:
            return await _reconcile(rt, body)
        return await _traced(rt, rt.tracing, body)


async def _traced(rt: Runtime, tracing: Tracing, body: Mapping[str, Any]) -> Outcome:
    """``_reconcile`` inside a ``mol.operator.reconcile`` span (a trace of its own)."""
    meta = body.get("metadata", {})
    span = tracing.root("mol.operator.reconcile", tracing.INTERNAL, None, {
        "k8s.namespace.name": str(meta.get("namespace") or "default"),
        "mol.deployment": str(meta.get("name", "")),
        "mol.generation": int(meta.get("generation") or 0)})
    if span is None:
        return await _reconcile(rt, body)
    try:
        outcome = await _reconcile(rt, body)
    except BaseException as exc:
        span.set_attribute("error.type", type(exc).__name__)
        span.end()
        raise
    span.set_attribute("mol.plan.writes", outcome.plan.writes)
    ready = next((c for c in outcome.status.get("conditions", ())
                  if c.get("type") == "Ready"), None)
    if ready is not None:
        span.set_attribute("mol.ready", str(ready.get("status")))
        span.set_attribute("mol.reason", str(ready.get("reason", "")))
    span.end()
    return outcome


async def _reconcile(rt: Runtime, body: Mapping[str, Any]) -> Outcome:
    started = time.perf_counter()
    obj = parse(body)
    meta = body.get("metadata", {})
    uid = str(meta.get("uid", ""))
    generation = meta.get("generation")
    old_status: Mapping[str, Any] = body.get("status") or {}
    ns = obj.metadata.namespace or "default"
    profile = profile_name(obj.metadata.name, ns)
    cat = await declare_and_resolve(rt.catalog, obj, profile, delay=rt.retry_seconds,
                                    bases=rt.bases)
    scopes = token_scopes(obj)
    events: list[Event] = []
    rollout = await step_canaries(obj, cat, old_status, catalog=rt.catalog,
                                  prometheus_url=rt.defaults.prometheus_url,
                                  metrics=rt.metrics, now=datetime.now(UTC),
                                  delay=rt.retry_seconds)
    events += rollout.events
    facts = Facts(obj=obj, uid=uid, token_scopes=scopes, canary_weights=rollout.weights,
                  stable_overrides=rollout.stable_overrides, defaults=rt.defaults,
                  agent_sandbox=await agent_sandbox_served(rt, obj))
    try:  # built once, before a token is minted: an unrenderable spec gets none
        desired = build_all(facts)
    except BuildError as exc:
        raise Invalid("InvalidSpec", str(exc)) from None
    observed, available = await observe(rt, facts, {m["apiVersion"] for m in desired})
    secret = observed.get(Key("v1", "Secret", facts.names.catalog_secret))
    token = _token_from(secret, scopes)
    old_token_id = (old_status.get("catalogToken") or {}).get("id")
    minted = token is None
    if token is None:
        # A token minted before a Secret write that never happened is nobody's: revoke it
        # (keeping the one the Secret still holds, which running pods use) before minting.
        await revoke_owner_tokens(rt.catalog, uid, keep=_held_ids(secret),
                                  delay=rt.retry_seconds)
        token = await mint_token(rt.catalog, token_name(uid, ns, obj.metadata.name), scopes,
                                 delay=rt.retry_seconds)
        events.append(("Normal", "CatalogToken",
                       f"minted catalog read token {token[0]} ({', '.join(scopes)})"))
    # Only the Secrets hold the tokens: they are built again now that the tokens are known.
    facts = replace(facts, token=token[1], token_id=token[0],
                    sandbox_token=sandbox_token(facts, observed.get(
                        Key("v1", "Secret", facts.names.sandbox_token))))
    by_name = {facts.names.catalog_secret: catalog_secret,
               facts.names.sandbox_token: sandbox_token_secret}
    desired = [by_name[m["metadata"]["name"]](facts) if m["kind"] == "Secret" else m
               for m in desired]
    the_plan = plan(desired, observed, owner_uid=uid, available=available)
    if the_plan.conflicts:
        names = ", ".join(str(k) for k in the_plan.conflicts)
        raise Retry("NameConflict", f"{names} already exist(s) and belong to something else; "
                    "delete or rename them, or rename this MoLDeployment",
                    max(rt.retry_seconds, 60.0), condition="Ready")
    late_missing = await _execute(rt, the_plan, ns)
    if minted:  # the Secret holds the new token now: every other one of this owner goes
        await revoke_owner_tokens(rt.catalog, uid, keep={token[0]}, delay=rt.retry_seconds)
    if old_token_id is not None and old_token_id != token[0]:  # named by an older operator
        await revoke_token(rt.catalog, int(old_token_id), delay=rt.retry_seconds)
    for verb in ("create", "update", "delete"):
        done = [str(a.key) for a in the_plan.actions if a.verb == verb]
        if done:
            events.append(("Normal", verb.capitalize() + "d", f"{verb}d {', '.join(done)}"))
    missing = [_skipped(rt, k, who) for k, who in the_plan.missing] + [
        _skipped(rt, k, OPTIONAL_APIS[k.api_version]) for k in late_missing]
    status = compute_status(obj, generation, old_status, cat, observed, the_plan, missing,
                            token, scopes, rt.defaults, rollout.states)
    health = await observe_adapter_health(
        rt.kube, rt.defaults.prometheus_url, deployment=obj.metadata.name, namespace=ns,
        names=model_names(obj.spec, status), window=rt.adapter_window,
        probe_timeout=min(rt.warmer.timeout, PROBE_TIMEOUT_S))
    status = with_health(status, health, old_status, generation)
    events += _condition_events(old_status.get("conditions") or [], status["conditions"])
    return Outcome(status=status, events=events, plan=the_plan,
                   seconds=time.perf_counter() - started,
                   look_again=health.message if health.failing else "")


class Skipped(NamedTuple):
    """An optional child not written: its API is not installed, or not readable."""

    key: Key
    why: str
    forbidden: bool


def _skipped(rt: Runtime, key: Key, who: str) -> Skipped:
    refused = rt.children.forbidden(key.api_version)
    if refused is None:
        return Skipped(key, f"{who} ({key.api_version}) is not installed", False)
    return Skipped(key, f"{who} ({key.api_version}) is installed but the operator may not "
                   f"read it ({refused}); grant it RBAC (the chart's values for {who}) or "
                   "uninstall it", True)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int) else 0


def compute_status(obj: MoLDeployment, generation: Any, old: Mapping[str, Any],
                   cat: CatalogFacts, observed: Mapping[Key, Mapping[str, Any] | None],
                   the_plan: Plan, missing: list[Skipped],
                   token: tuple[int, str], scopes: tuple[str, ...],
                   defaults: Defaults, canaries: Mapping[str, Mapping[str, Any]]
                   ) -> dict[str, Any]:
    facts = Facts(obj=obj, uid="", defaults=defaults)
    names = facts.names
    kserve = obj.spec.serving.mode == "kserve"
    engine_key = (Key("serving.kserve.io/v1alpha2", "LLMInferenceService", names.kserve)
                  if kserve else Key("apps/v1", "Deployment", names.engine))
    engine = observed.get(engine_key) or {}
    router = observed.get(Key("apps/v1", "Deployment", names.router)) or {}
    est = engine.get("status") or {}
    replicas = (obj.spec.effective_replicas if kserve
                else _int(est.get("replicas")))
    ready = _int(est.get("readyReplicas"))
    if kserve:
        ready = replicas if any(c.get("type") == "Ready" and c.get("status") == "True"
                                for c in est.get("conditions") or []) else 0
    router_ready = _int((router.get("status") or {}).get("readyReplicas"))
    experts: list[dict[str, Any]] = []
    bad: list[str] = []
    for e in obj.spec.experts:
        r = cat.experts[e.name]
        item: dict[str, Any] = {"name": e.name, "adapter": e.adapter, "version": r.version,
                                "digest": r.digest, "compatible": r.compatible}
        if r.reasons:
            item["reasons"] = r.reasons
        if not r.compatible:
            bad.append(f"expert {e.name} ({e.adapter} = v{r.version}): "
                       f"{'; '.join(r.reasons) or 'incompatible'}")
        c = cat.canaries.get(e.name)
        if c is not None:
            item["canary"] = dict(canaries.get(e.name) or {})
            if not c.compatible:
                bad.append(f"canary of {e.name} ({e.canary.adapter if e.canary else ''} = "
                           f"v{c.version}): {'; '.join(c.reasons) or 'incompatible'}")
        old_expert: Mapping[str, Any] = next(
            (x for x in old.get("experts") or [] if x.get("name") == e.name), {})
        for keep in ("serving", "warmupErrors"):
            if keep in old_expert and old_expert.get("version") == r.version:
                item[keep] = old_expert[keep]
        experts.append(item)
    missing_msg = "; ".join(f"{s.key} skipped: {s.why}" for s in missing)
    forbidden = any(s.forbidden for s in missing)
    workload = next((s for s in missing if s.key == engine_key), None)
    if workload is not None:
        ready_cond = condition("Ready", False, "KServeForbidden" if workload.forbidden
                               else "KServeNotInstalled", missing_msg)
    elif ready > 0 and router_ready > 0:
        ready_cond = condition("Ready", True, "Ready",
                               f"{ready}/{replicas} engines and {router_ready} routers ready")
    else:
        ready_cond = condition("Ready", False, "NotReady",
                               f"{ready}/{replicas} engines, {router_ready} routers ready")
    updated = replicas if kserve else _int(est.get("updatedReplicas"))
    rolled = the_plan.writes > 0 or updated < obj.spec.effective_replicas
    rolled_back = [e["name"] for e in experts
                   if (e.get("canary") or {}).get("phase") == "RolledBack"]
    paused = [e["name"] for e in experts if (e.get("canary") or {}).get("phase") == "Paused"]
    conds = [
        ready_cond,
        condition("AdaptersResolved", True, "Resolved",
                  f"{len(cat.experts) + len(cat.canaries)} adapter refs resolved under profile "
                  f"{cat.profile}"),
        condition("Compatible", not bad, "Incompatible" if bad else "Compatible",
                  "; ".join(bad) if bad else f"every adapter fits {cat.base}"),
        condition("Progressing", rolled, "RollingOut" if rolled else "Stable",
                  f"{updated}/{obj.spec.effective_replicas} engines updated"),
        canary_condition(experts, rolled_back, paused, bool(cat.canaries)),
        condition("OptionalApisAvailable", not missing,
                  ("Forbidden" if forbidden else "Missing") if missing else "Served",
                  missing_msg),
    ]
    summary = ", ".join(f"{e['name']} v{e['canary'].get('version')} "
                        f"{e['canary'].get('phase')} {e['canary'].get('weight', 0):g}%"
                        for e in experts if e.get("canary"))
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "conditions": merge_conditions(old.get("conditions") or [], conds, generation),
        "replicas": replicas,
        "readyReplicas": ready,
        "endpoint": endpoint(facts),
        "profile": cat.profile,
        "experts": experts,
        "expertCount": len(experts),
        "catalogToken": {"id": token[0], "secret": names.catalog_secret, "scopes": list(scopes)},
    }
    if summary:
        status["canary"] = summary
    return status


def _condition_events(old: list[Mapping[str, Any]], new: list[Mapping[str, Any]]) -> list[Event]:
    """A Warning for each condition that turned bad, a Normal one when Ready turned True."""
    before = {c.get("type"): c.get("status") for c in old}
    out: list[Event] = []
    for c in new:
        if before.get(c["type"]) == c["status"]:
            continue
        if c["status"] == "False" and c["type"] not in ("Progressing", "Ready"):
            out.append(("Warning", str(c["reason"]), str(c["message"])))
        elif c["type"] == "Ready" and c["status"] == "True":
            out.append(("Normal", "Ready", str(c["message"])))
    return out


def failure_status(old: Mapping[str, Any], generation: Any, exc: Retry | Invalid
                   ) -> dict[str, Any]:
    """The status after a failed reconcile: the failing condition (and Ready) set, the
    others kept; the same failure twice yields the same status (no write)."""
    cond_type = exc.condition if isinstance(exc, Retry) else "Ready"
    failing = {cond_type, "Ready"}
    old_conds = list(old.get("conditions") or [])
    fresh = merge_conditions(old_conds, [condition(t, False, exc.reason, exc.message)
                                         for t in sorted(failing)], generation)
    kept = [dict(c) for c in old_conds if c.get("type") not in failing]
    return {**old, "conditions": kept + fresh}
