"""Leader election on a ``coordination.k8s.io/v1`` Lease, so several operator replicas
run and exactly one of them works.

The operator's work is not only kopf's handlers: its startup builds the child watch
cache (the informer) and the catalog token sweep, and timers drive canaries. kopf's own
peering pauses handlers only (and pauses every replica when two share a priority), so
instead the whole kopf operator runs under the Lease: a standby replica campaigns and
starts nothing, neither kopf's watches nor the informer, canary timers, warm-ups or
sweeps. When the leader stops it releases the Lease and a standby takes over within a
retry period; when it dies, the Lease expires after ``duration`` seconds. A leader that
cannot renew within ``renew_deadline`` stops all its work (kopf shuts down, which stops
the informer and the sweep) before another can take over, and ``mol operator run``
exits so Kubernetes restarts it as a standby.

Expiry is judged the way client-go judges it: by how long this replica has seen the
same Lease record unchanged, not by the holder's clock, so clock skew between nodes
does not matter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from mol_operator.endpoint import start_server
from mol_operator.settings import OperatorSettings
from mol_platform.clients.kube import KubeApi, KubeError

log = logging.getLogger(__name__)
LEASE_API, LEASE_PLURAL = "coordination.k8s.io/v1", "leases"


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Leader:
    """One replica's side of the election on Lease ``namespace/name``."""

    def __init__(self, kube: KubeApi, *, namespace: str, name: str, identity: str,
                 duration: float = 15.0) -> None:
        if duration <= 0:
            raise ValueError("the lease duration must be positive")
        self.kube = kube
        self.namespace, self.name, self.identity = namespace, name, identity
        self.duration = duration
        self.renew_deadline = duration * 2 / 3  # give up leading well before it expires
        self.retry = duration / 7.5  # 2 s for the default 15 s, as client-go
        self.lost = False
        self.holder: str | None = None  # the holder last read from the Lease
        self._seen: tuple[Any, float] | None = None  # (the holder's record, when first seen)

    def _spec(self, holder: str, previous: dict[str, Any]) -> dict[str, Any]:
        now = _micro_time()
        taking = previous.get("holderIdentity") != holder
        transitions = int(previous.get("leaseTransitions") or 0) + int(taking and bool(previous))
        return {"holderIdentity": holder, "leaseDurationSeconds": max(1, round(self.duration)),
                "acquireTime": now if taking else previous.get("acquireTime", now),
                "renewTime": now, "leaseTransitions": transitions}

    def _expired(self, spec: dict[str, Any]) -> bool:
        record = (spec.get("holderIdentity"), spec.get("renewTime"),
                  spec.get("leaseDurationSeconds"))
        now = time.monotonic()
        if self._seen is None or self._seen[0] != record:
            self._seen = (record, now)
        seconds = float(spec.get("leaseDurationSeconds") or self.duration)
        return now - self._seen[1] > seconds

    async def try_acquire(self) -> bool:
        """Take or renew the Lease once; whether this replica holds it now."""
        try:
            lease = await self.kube.get(LEASE_API, LEASE_PLURAL, self.namespace, self.name)
            if lease is None:
                await self.kube.create({
                    "apiVersion": LEASE_API, "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(self.identity, {})}, LEASE_PLURAL)
                return True
            spec = dict(lease.get("spec") or {})
            holder = self.holder = spec.get("holderIdentity")
            if holder and holder != self.identity and not self._expired(spec):
                return False
            lease["spec"] = self._spec(self.identity, spec)
            await self.kube.replace(lease, LEASE_PLURAL)
            return True
        except KubeError as exc:
            if exc.status != 409:  # 409: another replica wrote first
                log.warning("leader election: lease %s/%s: %s", self.namespace, self.name, exc)
            return False

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Campaign until this replica leads (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            if await self.try_acquire():
                log.info("leader election: %s leads (lease %s/%s)", self.identity,
                         self.namespace, self.name)
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.retry)
        return False

    async def keep(self, halt: asyncio.Event) -> None:
        """Renew every retry period; when another replica holds the Lease, or no renewal
        succeeded for ``renew_deadline``, mark leadership lost and set ``halt``."""
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(self.retry)
            if await self.try_acquire():
                renewed = time.monotonic()
            elif self.holder not in (None, self.identity) or (
                    time.monotonic() - renewed > self.renew_deadline):
                log.error("leader election: %s lost lease %s/%s (held by %s, or not renewed "
                          "for %.1fs); stopping all work", self.identity, self.namespace,
                          self.name, self.holder, self.renew_deadline)
                self.lost = True
                halt.set()
                return

    async def release(self) -> None:
        """Hand the Lease over at once (a standby need not wait for it to expire)."""
        with contextlib.suppress(KubeError):
            lease = await self.kube.get(LEASE_API, LEASE_PLURAL, self.namespace, self.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"] = {**lease["spec"], "holderIdentity": None,
                             "leaseDurationSeconds": 1, "renewTime": _micro_time()}
            await self.kube.replace(lease, LEASE_PLURAL)
            log.info("leader election: %s released lease %s/%s", self.identity,
                     self.namespace, self.name)


Work = Callable[[asyncio.Event], Awaitable[object]]


async def lead(leader: Leader, work: Work, stop: asyncio.Event | None = None) -> bool:
    """Wait to lead, then ``await work(halt)``: ``halt`` is set when leadership is lost
    or ``stop`` is set, and ``work`` must then wind down and return. The Lease is
    released afterwards unless it was lost. True when leadership was lost."""
    stop = stop if stop is not None else asyncio.Event()
    if not await leader.acquire(stop):
        return False
    halt = asyncio.Event()
    keeper = asyncio.create_task(leader.keep(halt), name="lease renewal")
    relay = asyncio.create_task(_relay(stop, halt), name="lease stop relay")
    try:
        await work(halt)
    finally:
        for task in (keeper, relay):
            task.cancel()
        await asyncio.gather(keeper, relay, return_exceptions=True)
        if not leader.lost:
            await leader.release()
    return leader.lost


async def _relay(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()


async def elected(settings: OperatorSettings) -> bool:
    """kopf's operator (the handlers imported beforehand) for ``settings``, under the
    Lease when leader election is on; True when leadership was lost. A standby answers
    ``/healthz`` on the metrics port, so it counts as ready (rollouts and the
    PodDisruptionBudget see two healthy replicas) while doing nothing else."""
    import kopf

    async def operate(halt: asyncio.Event | None) -> None:
        await kopf.operator(standalone=True, clusterwide=not settings.namespaces,
                            namespaces=settings.namespaces, stop_flag=halt)

    if not settings.leader_election:
        await operate(None)
        return False
    kube = KubeApi.connect(settings.kube_url)
    identity = settings.lease_identity or f"{socket.gethostname()}-{secrets.token_hex(3)}"
    leader = Leader(kube, namespace=settings.lease_namespace_or_default(),
                    name=settings.lease_name, identity=identity,
                    duration=settings.lease_duration_seconds)
    standby: list[web.AppRunner] = []
    if settings.metrics_port:
        standby.append(await start_server(CollectorRegistry(), settings.metrics_host,
                                          settings.metrics_port))

    async def work(halt: asyncio.Event) -> None:
        while standby:  # the operator's own endpoint takes the port over
            await standby.pop().cleanup()
        await operate(halt)

    try:
        return await lead(leader, work)
    finally:
        while standby:
            await standby.pop().cleanup()
        await kube.aclose()
