"""Automatic routing decisions, recorded for feedback (``semantic.recordDecisions``).

Each ``model: auto`` request that the semantic signal, the trained head, keywords, the
classifier or the default expert decided is reported to the catalog
(``POST /v1/routing/decisions``, :mod:`mol_platform.contract.routing_feedback`): the
request id the router answered with, the tenant's namespace, the turn exactly as the
semantic signal read it, the expert and what decided. A reviewer (or a user's
thumbs-down) then labels a request id with the right expert, and the labelled turns
come back as the next head's training set (``mol router labels export``, then
``mol router train --prompts``).

Why it is off by default: it sends users' turns out of the router, to be kept in the
catalog's database. The request path only appends a dict to a list
(:meth:`DecisionRecorder.record`: no I/O, no await); the batches travel as usage's do
(:mod:`mol_router.reporting.outbox`): at most ``MAX_BATCH_DECISIONS`` a batch, one namespace per
batch (a token lacking one namespace's scope loses only that namespace's decisions),
ids stable across retries, back-off while the catalog is down, the oldest batch
dropped past ``max_batches`` (``mol_router_decisions_dropped_total{reason="overflow"}``)
and a refused batch dropped (``reason="rejected"``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from itertools import groupby
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter

from mol_platform.contract.refs import is_dns_label
from mol_platform.contract.router_config import RouterConfig
from mol_platform.contract.routing_feedback import (
    MAX_BATCH_DECISIONS,
    MAX_TEXT_CHARS,
    DecisionsRecorded,
    Route,
)
from mol_router.reporting.outbox import Batch, Outbox
from mol_router.tenants import Tenant

log = logging.getLogger("mol.router.decisions")


class DecisionSink(Protocol):
    """Where batches go: the catalog client (``AsyncCatalogClient.report_decisions``)."""

    async def report_decisions(self, batch: dict[str, Any]) -> DecisionsRecorded: ...


def _label(name: str) -> bool:
    return is_dns_label(name)


def storable(text: str) -> bool:
    """Whether the catalog can keep ``text``: not blank, no NUL (Postgres refuses one)
    and encodable (no unpaired surrogate). A turn that is not is left out rather than
    have the catalog refuse the whole batch it travels in."""
    if "\x00" in text or not text.strip():
        return False
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def home_namespace(cfg: RouterConfig) -> str:
    """Where the decisions of requests without a tenant namespace go: the deployment's
    first adapter namespace, else the catalog namespace of its default expert's
    adapter (every deployment has one)."""
    return cfg.home_namespace


class DecisionRecorder(Outbox):
    what = "decision"

    def __init__(self, sink: Callable[[], DecisionSink | None], registry: CollectorRegistry,
                 *, interval: float = 10.0, max_batches: int = 20,
                 batch_size: int = MAX_BATCH_DECISIONS, backoff_max: float = 60.0,
                 clock: Callable[[], float] = time.time) -> None:
        dropped = Counter("mol_router_decisions_dropped", "Routing decisions never "
                          "recorded in the catalog, by reason (overflow: the outbox was "
                          "full, rejected: the catalog refused the batch)", ["reason"],
                          registry=registry)
        super().__init__(dropped, interval=interval, max_batches=max_batches,
                         batch_size=min(batch_size, MAX_BATCH_DECISIONS),
                         backoff_max=backoff_max, logger=log)
        self.recorded = Counter("mol_router_decisions_recorded", "Routing decisions the "
                                "catalog took (semantic.recordDecisions)", registry=registry)
        self._sink = sink
        self._clock = clock
        self._open: list[dict[str, Any]] = []
        self.on = False
        self.deployment = ""
        self.home = ""
        self._experts: frozenset[str] = frozenset()

    def configure(self, cfg: RouterConfig) -> None:
        """Follow a new config: on when ``semantic.recordDecisions`` is and the config
        names a catalog. Names the catalog would refuse (a deployment or expert that is
        not a DNS label) are left out here rather than failing whole batches there."""
        wanted = cfg.semantic is not None and cfg.semantic.record_decisions
        self.deployment = cfg.deployment
        self.home = home_namespace(cfg)
        self._experts = frozenset(e.name for e in cfg.experts if _label(e.name))
        self.on = wanted and cfg.catalog_url is not None and _label(cfg.deployment)
        if wanted and not self.on:
            log.error("semantic.recordDecisions is on but decisions cannot be recorded: "
                      "%s", "no catalogUrl" if cfg.catalog_url is None else
                      f"deployment name {cfg.deployment!r} is not a DNS label")
        skipped = sorted({e.name for e in cfg.experts} - self._experts)
        if self.on and skipped:
            log.warning("decisions for experts %s are not recorded: not DNS labels",
                        ", ".join(skipped))

    def namespace_of(self, tenant: Tenant) -> str:
        """The tenant's namespace: its API key's first named one; a key for any
        namespace (``*``), or no keys at all, means the deployment's (:attr:`home`)."""
        if tenant.spec is not None:
            for ns in tenant.spec.namespaces:
                if ns != "*":
                    return ns
        return self.home

    # --- the request path -------------------------------------------------------------

    def record(self, request_id: str, tenant: Tenant, text: str, expert: str, route: Route,
               head: str | None = None, candidate: dict[str, str] | None = None) -> None:
        """Keep one decision for the next batch (no I/O); ``candidate``: the other head's
        pick while a canary runs (``{"head": digest, "expert": name}``)."""
        if not self.on or expert not in self._experts:
            return
        text = text[-MAX_TEXT_CHARS:]
        if not storable(text):
            return
        self._open.append({
            "request_id": request_id, "namespace": self.namespace_of(tenant),
            "deployment": self.deployment, "text": text, "expert": expert,
            "route": route, "head": head, "at": self._clock(),  # formatted when sent
            **({"candidate": candidate} if candidate is not None
               and candidate["expert"] in self._experts else {})})
        if len(self._open) >= self.batch_size:
            self.seal()
            self.wake()

    def held(self) -> int:
        """Decisions waiting for the catalog (the open list and sealed batches)."""
        return len(self._open) + sum(len(b.entries) for b in self.outbox)

    # --- batching -----------------------------------------------------------------------

    def seal(self) -> None:
        """Move the open decisions into batches, one namespace each."""
        if not self._open:
            return
        items, self._open = self._open, []
        if self._sink() is None:  # the catalog went from the config: nobody to send to
            return
        items.sort(key=lambda d: str(d["namespace"]))  # stable: in order within each
        for _, group in groupby(items, key=lambda d: str(d["namespace"])):
            self.enqueue(list(group))

    async def deliver(self, batch: Batch) -> bool | None:
        sink = self._sink()
        if sink is None:
            return None
        # the time is formatted here, off the request path (sealing may happen there)
        decisions = [{**d, "at": datetime.fromtimestamp(d["at"], UTC).isoformat()}
                     for d in batch.entries]
        answer = await sink.report_decisions({"batch_id": batch.batch_id,
                                              "decisions": decisions})
        return answer.duplicate

    def delivered(self, batch: Batch, duplicate: bool) -> None:
        # a duplicate's decisions were recorded by an earlier try whose answer was lost
        self.recorded.inc(len(batch.entries))

    def failed(self, batch: Batch) -> None:
        return None  # retried later; the log line says so

    def rejected(self, batch: Batch) -> None:
        return None  # counted in dropped{reason="rejected"}
