"""Counter and histogram families for the metrics every request touches.

prometheus_client's children take a lock and validate exemplars on every call
(about 4 us per histogram observation, 15 us with an exemplar, on the machines in
docs/benchmarks.md), which a request that updates a dozen series cannot afford. The
router runs on one event loop, so these families are plain tables: a row per label
tuple, updated with a dict lookup and a list increment, turned into Prometheus
families only when ``/metrics`` is scraped (a ``prometheus_client`` collector). Rows
can be dropped (an adapter leaving the top K) so ``/metrics`` does not grow.

Histograms keep the latest exemplar per bucket (OpenMetrics: a trace id and the
observed value), shown when the scraper asks for OpenMetrics.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator

from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString

from mol_router.telemetry.ranking import OTHER

Key = tuple[str, ...]
Index = dict[str, list[tuple["_Family", Key]]]
"""Adapter name -> the rows that carry it as a label, so they can be dropped."""
_UNINDEXED = frozenset({"", OTHER})


class _Family:
    __slots__ = ("_at", "_index", "doc", "labelnames", "name")

    def __init__(self, name: str, doc: str, labelnames: Iterable[str],
                 index: tuple[Index, str] | None) -> None:
        """``index``: the shared index and the label whose value names an adapter."""
        self.name, self.doc, self.labelnames = name, doc, tuple(labelnames)
        self._index: Index | None = index[0] if index else None
        self._at = self.labelnames.index(index[1]) if index else -1

    def _new_row(self, key: Key) -> None:
        if self._index is not None and key[self._at] not in _UNINDEXED:
            self._index.setdefault(key[self._at], []).append((self, key))

    def forget(self, key: Key) -> None:
        raise NotImplementedError


class Counters(_Family):
    """One counter family: label values -> count."""

    __slots__ = ("rows",)

    def __init__(self, name: str, doc: str, labelnames: Iterable[str],
                 index: tuple[Index, str] | None = None) -> None:
        super().__init__(name, doc, labelnames, index)
        self.rows: dict[Key, float] = {}

    def inc(self, key: Key, amount: float = 1.0) -> None:
        rows = self.rows
        value = rows.get(key)
        if value is None:
            self._new_row(key)
            value = 0.0
        rows[key] = value + amount

    def forget(self, key: Key) -> None:
        self.rows.pop(key, None)

    def family(self) -> Metric:
        fam = CounterMetricFamily(self.name, self.doc, labels=self.labelnames)
        for key, value in self.rows.items():
            fam.add_metric(key, value)
        return fam


class _Row:
    __slots__ = ("counts", "exemplars", "total")

    def __init__(self, buckets: int) -> None:
        self.counts = [0] * buckets
        self.exemplars: list[tuple[str, float] | None] = [None] * buckets
        self.total = 0.0


class Histograms(_Family):
    """One histogram family: label values -> bucket counts, sum, exemplars."""

    __slots__ = ("_les", "bounds", "rows")

    def __init__(self, name: str, doc: str, labelnames: Iterable[str],
                 bounds: tuple[float, ...], index: tuple[Index, str] | None = None) -> None:
        if list(bounds) != sorted(set(bounds)):
            raise ValueError(f"{name}: bucket bounds must increase")
        super().__init__(name, doc, labelnames, index)
        self.bounds = bounds
        self._les = [*map(floatToGoString, bounds), "+Inf"]
        self.rows: dict[Key, _Row] = {}

    def observe(self, key: Key, value: float, trace: str | None = None) -> None:
        row = self.rows.get(key)
        if row is None:
            self._new_row(key)
            row = self.rows[key] = _Row(len(self.bounds) + 1)
        i = bisect_left(self.bounds, value)  # le: value <= bound
        row.counts[i] += 1
        row.total += value
        if trace is not None:
            row.exemplars[i] = (trace, value)

    def forget(self, key: Key) -> None:
        self.rows.pop(key, None)

    def family(self) -> Metric:
        fam = HistogramMetricFamily(self.name, self.doc, labels=self.labelnames)
        les = self._les
        for key, row in self.rows.items():
            buckets: list[tuple[str, float] | tuple[str, float, Exemplar]] = []
            running = 0
            for le, n, ex in zip(les, row.counts, row.exemplars, strict=True):
                running += n
                if ex is None:
                    buckets.append((le, running))
                else:
                    buckets.append((le, running, Exemplar({"trace_id": ex[0]}, ex[1])))
            fam.add_metric(key, buckets, row.total)
        return fam


Family = Counters | Histograms


def drop(index: Index, adapter: str) -> None:
    """Remove every row labelled with ``adapter``."""
    for fam, key in index.pop(adapter, ()):
        fam.forget(key)


class FamilyCollector(Collector):
    """Exposes the tables through a prometheus_client registry."""

    def __init__(self, families: Iterable[Family]) -> None:
        self.families = tuple(families)

    def collect(self) -> Iterator[Metric]:
        for fam in self.families:
            yield fam.family()

    def describe(self) -> Iterator[Metric]:
        for fam in self.families:
            if isinstance(fam, Counters):
                yield CounterMetricFamily(fam.name, fam.doc, labels=fam.labelnames)
            else:
                yield HistogramMetricFamily(fam.name, fam.doc, labels=fam.labelnames)
