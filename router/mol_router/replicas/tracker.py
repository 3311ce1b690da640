"""What the router knows about each engine replica, for replica picking.

The tracker is the stateful half of replica picking (policies are pure): it scrapes
every engine's ``/metrics`` and ``/health`` on an interval, counts the requests this
router has in flight on each, remembers which adapters it sent where (so an adapter
sent a moment ago counts as resident before the next scrape shows it), takes failing
replicas out of selection (outlier detection, below), and estimates adapter loads for
``mol_router_adapter_loads_total``.

Outlier detection. A replica is ejected at once when it is down (connection refused,
or a health check that does not answer within the probe timeout: a dead or stalled
process), and after ``eject_after_failures`` failures in a row otherwise (5xx answers,
streams cut, while ``/health`` may still pass). Ejection for failed requests is capped,
as Envoy's ``max_ejection_percent`` caps it: at most ``max_ejection_percent`` of the
replicas whose health checks pass are out for failures at a time, and never the last
of them, so failing requests alone never empty a pool that passes its checks (requests
fail for reasons of their own too: a client's overload, a bad prompt). Health checks
go on every scrape interval while it is out: one that was down is re-admitted by the
first check that passes (it came back: recovery within one interval), one ejected by
its requests only once its back-off has passed too, the back-off doubling with each
ejection that no success separates (``readmit_after`` up to ``readmit_after_max``,
:func:`mol_router.backoff.ejection`). A client that goes away is no failure of the
engine's: the proxy books nothing for it. An adapter that fails on one replica (the
engine's own words for a failed load, see
:func:`mol_router.serving.upstream.adapter_failure`, or 5xx answers confined to that
adapter while others succeed there, :meth:`AdapterFailures.confined`) is avoided there
for a back-off of its own while the other replicas serve it; one success there clears
it.
It also estimates what a policy needs to spend GPU slots well: each engine's slot
contents in least-recently-used order (what vLLM would evict next), the adapters of
its requests in flight there (running or waiting for a slot), and each adapter's share
of recent requests (``demand``).
From the same estimate it tells the proxy which sends are cold (the engine did not
hold the adapter: the request waits for a load), for the per-adapter cold metrics.

Adapter loads are estimated where this router causes them. vLLM 0.32 exports no load
counter or event (``vllm:lora_requests_info`` lists only the adapters with running
requests; its KV events cover blocks); engines with the MoL plugin count their own
(``mol_engine_adapter_loads_total``, exact), which the dashboards prefer, and this
estimate serves plain vLLM engines and the proxy's cold-send metrics. vLLM keeps an
idle adapter in its GPU slot until a newer one needs the slot (least recently used,
touched while it runs); the tracker mirrors that per engine
(``in_slots``: adapters sent there or seen running, touched again when this router's
request on one ends, never evicting one this router has in flight) and counts a load
for each send whose adapter is not in it: a cold send, whose request waits for that
load. Each router counts the loads its own sends cause, so the fleet's figure is the
sum over routers. Counting from scrapes instead (an adapter newly shown running)
missed every adapter loaded, served and evicted between two of them: -39% at the
default 1 s interval on the routing benchmark, against -1% (one router) and -6% (four)
counting sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

import aiohttp

from mol_router.backoff import Backoff, ejection
from mol_router.replicas.avoid import AdapterFailures
from mol_router.replicas.engine_metrics import EngineMetrics, parse_engine_metrics
from mol_router.replicas.engine_state import Engine, remember
from mol_router.replicas.policy.interface import Demand, FleetStats
from mol_router.replicas.policy.prefix import DEFAULT_CAPACITY, PrefixIndex

log = logging.getLogger(__name__)

class EngineTracker:
    """Per-engine state for replica picking; see the module docstring.

    ``snapshot()`` is cheap (rebuilt only for the engine that changed) and never
    mutated after it is returned, so a policy may hold it for the whole pick (its
    demand estimate and send counts are live: read at pick time).
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        scrape_interval: float = 1.0,
        eject_after_failures: int = 3,
        readmit_after: float = 10.0,
        on_adapter_load: Callable[[str], None] | None = None,
        probe_timeout: float = 2.0,
        demand_half_life: int = 2000,
        prefix_capacity: int = DEFAULT_CAPACITY,
        readmit_after_max: float | None = None,
        on_eject: Callable[[str, str], None] | None = None,
        max_ejection_percent: int = 50,
    ) -> None:
        if scrape_interval <= 0:
            raise ValueError("scrape_interval must be > 0 seconds")
        if eject_after_failures < 1:
            raise ValueError("eject_after_failures must be >= 1")
        if readmit_after < 0:
            raise ValueError("readmit_after must be >= 0 seconds")
        if probe_timeout <= 0:
            raise ValueError("probe_timeout must be > 0 seconds")
        if demand_half_life < 1:
            raise ValueError("demand_half_life must be >= 1 request")
        if not 0 <= max_ejection_percent <= 100:
            raise ValueError("max_ejection_percent must be between 0 and 100")
        self._session = session
        self.scrape_interval = scrape_interval
        self.eject_after_failures = eject_after_failures
        self.readmit_after = readmit_after
        self.backoff: Backoff = ejection(readmit_after, readmit_after_max)
        self.readmit_after_max = self.backoff.most
        self.max_ejection_percent = max_ejection_percent
        self.adapter_failures = AdapterFailures()
        self._on_adapter_load = on_adapter_load or (lambda _endpoint: None)
        self._on_eject = on_eject or (lambda _endpoint, _reason: None)
        """Called with (endpoint, "down" | "failures") on each ejection."""
        self._engines: dict[str, Engine] = {}
        self._sends = 0
        self._last_sent: dict[str, int] = {}
        self.demand = Demand(demand_half_life)
        self.prefix = PrefixIndex(prefix_capacity)
        self._snapshot = FleetStats.of({}, self.demand, self.prefix, last_sent=self._last_sent)
        self._ready: list[str] = []
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._timeout = aiohttp.ClientTimeout(total=probe_timeout)

    # Endpoint set.

    def set_endpoints(self, urls: Iterable[str]) -> None:
        """Track exactly these base URLs (``http://host:port``); state of the ones kept
        is kept; new ones are not ready until their first health check passes."""
        wanted = list(dict.fromkeys(u.rstrip("/") for u in urls))
        for gone in set(self._engines) - set(wanted):
            self.prefix.forget(gone)
            self._last_sent.pop(gone, None)
            self.adapter_failures.forget(gone)
        engines = {u: self._engines.get(u) or Engine() for u in wanted}
        added = any(u not in self._engines for u in wanted)
        self._engines = engines
        self._snapshot = FleetStats.of({u: e.stats() for u, e in engines.items()}, self.demand,
                                       self.prefix, last_sent=self._last_sent)  # fmt: skip
        self._ready = [u for u, e in engines.items() if e.ready]
        if added:
            self._wake.set()

    @property
    def endpoints(self) -> list[str]:
        return list(self._engines)

    def snapshot(self) -> FleetStats:
        """Every endpoint's stats, and each adapter's share of recent requests."""
        return self._snapshot

    def ready_endpoints(self) -> list[str]:
        """The ready endpoints in tracking order; kept between readiness changes, so
        callers must not mutate it."""
        return self._ready

    def _refresh(self, endpoint: str, engine: Engine) -> None:
        """Replace one engine's entry in a new snapshot (snapshots already handed out
        stay as they were); every readiness change passes here."""
        snap = FleetStats.of(self._snapshot, self.demand, self.prefix, last_sent=self._last_sent)
        old = snap.get(endpoint)
        stats = snap[endpoint] = engine.stats()
        self._snapshot = snap
        if old is None or old.healthy != stats.healthy:
            self._ready = [u for u, e in self._engines.items() if e.ready]

    # Bookkeeping from the proxy.

    def begin(self, endpoint: str, adapter: str | None, prefix: tuple[int, ...] = ()) -> bool:
        """A request was sent to ``endpoint`` (call ``end`` when it completes), its
        prompt's prefix keys ``prefix`` now believed cached there; True
        when it is cold: the engine holds ``adapter`` neither in its running list nor
        in the slots estimated from what this router sent there, so the request waits
        for a load (the first one after an eviction or on a fresh replica)."""
        engine = self._engines.get(endpoint)
        if engine is None:
            return False
        engine.inflight += 1
        self._sends += 1
        self._last_sent[endpoint] = self._sends
        self.prefix.record(prefix, endpoint)
        cold = False
        if adapter is not None:
            cold = adapter not in engine.in_slots
            self.demand.add(adapter)
            sent = engine.sent
            if adapter in sent:
                sent.move_to_end(adapter)  # same set: the frozen view stays valid
            else:
                remember(sent, adapter, engine.slots, ())
                engine.sent_view = frozenset(sent)
                engine.changed()
            if adapter not in engine.pending:
                engine.pending = engine.pending | {adapter}
            engine.active[adapter] = engine.active.get(adapter, 0) + 1
            self._touch(engine, adapter)
        self._refresh(endpoint, engine)
        if cold:
            self._on_adapter_load(endpoint)
        return cold

    @staticmethod
    def _touch(engine: Engine, adapter: str) -> None:
        """``adapter`` was just used on ``engine``: most recent in the slot estimate,
        evicting the least recent idle ones beyond the engine's slots."""
        if not engine.slots_view or engine.slots_view[-1] != adapter:  # order moved
            remember(engine.in_slots, adapter, engine.slots,
                      engine.active)  # fmt: skip
            engine.slots_view = tuple(engine.in_slots)
            engine.changed()

    def end(self, endpoint: str, adapter: str | None) -> None:
        engine = self._engines.get(endpoint)
        if engine is None or engine.inflight <= 0:
            return
        engine.inflight -= 1
        if adapter is not None and adapter in engine.active:
            left = engine.active[adapter] - 1
            if left:
                engine.active[adapter] = left
            else:
                del engine.active[adapter]
                engine.pending = engine.pending - {adapter}
            if adapter in engine.in_slots:  # it ran until now: the engine touched it last
                self._touch(engine, adapter)
        self._refresh(endpoint, engine)

    def record_failure(self, endpoint: str, *, down: bool = False) -> None:
        """A connect error, timeout, 5xx or cut stream from ``endpoint``; ejects it
        after ``eject_after_failures`` in a row, or at once when it is ``down``
        (nothing answers there)."""
        engine = self._engines.get(endpoint)
        if engine is None:
            return
        engine.failures += 1
        if engine.ejected_until is not None:
            engine.down = engine.down or down
            engine.ejected_until = time.monotonic() + engine.backoff  # the wait starts over
            return
        if down or (engine.failures >= self.eject_after_failures
                    and self._may_eject_for_failures()):
            self._eject(endpoint, engine, down=down)

    def _may_eject_for_failures(self) -> bool:
        """Whether one more replica may go out for failed requests: at most
        ``max_ejection_percent`` of those whose health checks pass (and never all of
        them) may be out for failures at a time."""
        passing = out = 0
        for e in self._engines.values():
            if e.probed and not e.down:
                passing += 1
                out += e.ejected_until is not None
        allowed = min(passing * self.max_ejection_percent // 100, passing - 1)
        return out < allowed

    def _eject(self, endpoint: str, engine: Engine, *, down: bool) -> None:
        engine.ejections += 1
        wait = self.backoff.after(engine.ejections)
        engine.backoff = wait
        engine.ejected_until = time.monotonic() + wait
        engine.down = down
        engine.changed()
        self.prefix.forget(endpoint)  # down, maybe restarting: its cache may be gone
        self._on_eject(endpoint, "down" if down else "failures")
        if down:
            log.warning("engine %s ejected: it does not answer; back when a health check "
                        "passes", endpoint)
        else:
            log.warning("engine %s ejected after %d consecutive failures; back in %.3g s "
                        "at the earliest", endpoint, engine.failures, wait)
        self._refresh(endpoint, engine)

    def record_success(self, endpoint: str, adapter: str | None = None) -> None:
        engine = self._engines.get(endpoint)
        if engine is not None:
            engine.failures = 0
            engine.ejections = 0
        if adapter is not None:
            self.adapter_failures.cleared(endpoint, adapter)

    def record_error(self, endpoint: str, adapter: str | None) -> float | None:
        """A 5xx answer from ``endpoint`` for ``adapter``: booked against the pair when it
        is confined to that adapter (the seconds the pair is now avoided), else against
        the replica (None)."""
        if endpoint in self._engines and adapter is not None \
                and self.adapter_failures.confined(endpoint, adapter):
            return self.adapter_failures.failed(endpoint, adapter)
        self.record_failure(endpoint)
        return None

    def record_adapter_failure(self, endpoint: str, adapter: str) -> float:
        """``adapter`` failed to load on ``endpoint``: seconds it is avoided there."""
        if endpoint not in self._engines:
            return 0.0
        return self.adapter_failures.failed(endpoint, adapter)

    # Scraping.

    def observe(self, endpoint: str, metrics: EngineMetrics) -> None:
        """Take in one scrape of ``endpoint``; counts adapter loads it reveals."""
        engine = self._engines.get(endpoint)
        if engine is None:
            return
        if metrics.prefix_queries < engine.metrics.prefix_queries:
            self.prefix.forget(endpoint)  # the counter went back: it restarted, cache empty
        engine.metrics = metrics
        running = metrics.running_adapters
        engine.running_view = frozenset(running)
        engine.changed()
        keep = engine.running_view.union(engine.active)
        for adapter in running:
            remember(engine.in_slots, adapter, engine.slots, keep)
        engine.slots_view = tuple(engine.in_slots)
        self._refresh(endpoint, engine)

    def record_health(self, endpoint: str, ok: bool, *, down: bool = False) -> None:
        """The result of one health check: a pass makes the engine ready (re-admitting
        an ejected one that was down at once, one ejected for failed requests once its
        back-off has passed); a failure ejects it at once when ``down`` (refused, or no
        answer in time), else counts toward ejection."""
        engine = self._engines.get(endpoint)
        if engine is None:
            return
        if ok:
            if engine.ejected_until is not None:
                if not engine.down and time.monotonic() < engine.ejected_until:
                    return  # passes its checks, failed its requests: the back-off runs
                log.info("engine %s re-admitted: health check passed", endpoint)
                if engine.down:  # it came back, maybe as a new process: forget its past
                    self.adapter_failures.forget(endpoint)
            engine.probed, engine.failures, engine.ejected_until = True, 0, None
            engine.down = False
            engine.changed()
            self._refresh(endpoint, engine)
        else:
            self.record_failure(endpoint, down=down)

    async def _healthy(self, endpoint: str) -> tuple[bool, bool]:
        """(passed, down): down when nothing answered (refused, or not within the
        probe timeout), as opposed to an answer other than 200."""
        try:
            async with self._session.get(f"{endpoint}/health", timeout=self._timeout) as resp:
                await resp.read()
                return resp.status == 200, False
        except (aiohttp.ClientConnectorError, TimeoutError):
            return False, True
        except aiohttp.ClientError:
            return False, False

    async def _metrics(self, endpoint: str) -> EngineMetrics | None:
        try:
            async with self._session.get(f"{endpoint}/metrics", timeout=self._timeout) as resp:
                if resp.status != 200:
                    return None
                return parse_engine_metrics(await resp.text())
        except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError):
            return None

    async def probe(self, endpoint: str) -> None:
        """One health check and scrape of ``endpoint`` (ejected ones too: that is how
        they come back). Only ``/health`` decides health; a failed scrape keeps the last
        metrics."""
        engine = self._engines.get(endpoint)
        if engine is None:
            return
        (ok, down), metrics = await asyncio.gather(self._healthy(endpoint),
                                                   self._metrics(endpoint))
        if engine is not self._engines.get(endpoint):
            return  # removed or replaced while probing
        self.record_health(endpoint, ok, down=down)
        if ok and metrics is not None:
            self.observe(endpoint, metrics)

    async def probe_all(self) -> None:
        await asyncio.gather(*(self.probe(u) for u in list(self._engines)))

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.probe_all()
            except Exception:  # never let one bad answer stop health checking
                log.exception("engine probe failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.scrape_interval)

    async def start(self) -> None:
        """Probe every engine once, then keep probing in the background."""
        if self._task is None:
            await self.probe_all()
            self._task = asyncio.create_task(self._run(), name="engine-tracker")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
