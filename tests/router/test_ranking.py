"""The top-K adapter ranking and the metric rows it keeps bounded: one-off adapters
earn no label, heavy hitters do, members do not flap, traffic decays with time, and
an adapter leaving the top K takes its series off ``/metrics``."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

from mol_router.telemetry.metrics import RouterMetrics
from mol_router.telemetry.ranking import OTHER, TopAdapters


def test_one_off_adapters_never_get_a_label() -> None:
    top = TopAdapters(10)
    for i in range(10_000):
        top.add(f"acme/a{i}", 0.0)
    assert top.members == set()
    assert top.label("acme/a1") == OTHER


def test_heavy_hitters_get_labels_among_a_stream_of_one_offs() -> None:
    left: list[str] = []
    top = TopAdapters(5, on_leave=left.append)
    for i in range(20_000):
        top.add(f"hot/h{i % 5}", i * 0.001)
        top.add(f"acme/a{i}", i * 0.001)
    assert top.members == {f"hot/h{n}" for n in range(5)}
    assert top.label("hot/h3") == "hot/h3"
    assert left == []


def test_members_are_replaced_as_traffic_moves_on() -> None:
    left: list[str] = []
    top = TopAdapters(2, half_life=10.0, on_leave=left.append)
    for i in range(100):
        top.add("old/a", i * 0.01)
        top.add("old/b", i * 0.01)
    assert top.members == {"old/a", "old/b"}
    # An hour later (360 half-lives) two other adapters carry the traffic.
    for i in range(100):
        top.add("new/c", 3600 + i * 0.01)
        top.add("new/d", 3600 + i * 0.01)
    assert top.members == {"new/c", "new/d"}
    assert sorted(left) == ["old/a", "old/b"]


def test_nearly_equal_adapters_do_not_swap_labels() -> None:
    left: list[str] = []
    top = TopAdapters(1, on_leave=left.append)
    for _ in range(50):
        top.add("acme/x", 0.0)
    for i in range(2_000):  # y slightly busier than x from now on
        top.add("acme/y", 0.0)
        if i % 10:
            top.add("acme/x", 0.0)
    assert top.members == {"acme/x"}
    assert left == []


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="k must be"):
        TopAdapters(-1)
    with pytest.raises(ValueError, match="half_life"):
        TopAdapters(3, half_life=0)


def _series(metrics: RouterMetrics) -> list[str]:
    text = generate_latest(metrics.registry).decode()
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_series_of_an_adapter_leaving_the_top_k_are_removed() -> None:
    m = RouterMetrics("demo", top_k=2, half_life=1.0)

    def request(adapter: str, now: float) -> None:
        m.saw(adapter, now)
        m.cold_request(adapter)
        m.count_tokens("anonymous", "adapter", adapter, 3, 5)
        m.first_token("adapter", "1", adapter, "anonymous", 0.01, "t1")
        m.request_done("adapter", adapter, "1", "anonymous", 200, 0.02, "t1")

    for _ in range(3):
        request("acme/a", 0.0)
        request("acme/b", 0.0)
    lines = _series(m)
    assert any('adapter="acme/a"' in line for line in lines)
    assert any('adapter="acme/b"' in line for line in lines)
    with_two = len(lines)
    for i in range(40):  # much later: c and d take over
        request("acme/c", 100.0 + i)
        request("acme/d", 100.0 + i)
    lines = _series(m)
    assert not any('adapter="acme/a"' in line or 'adapter="acme/b"' in line for line in lines)
    assert any('adapter="acme/c"' in line for line in lines)
    # c and d replaced a and b; "other" took their first requests: nothing grew but it.
    others = sum('adapter="other"' in line for line in lines)
    assert len(lines) - others <= with_two
    assert ('mol_router_requests_total{adapter="other",code="200",deployment="demo",'
            'expert="adapter",version=""}') in "\n".join(lines)


def test_expert_versions_stay_when_their_adapter_folds() -> None:
    """Canary analysis reads mol_router_requests_total by expert and version."""
    m = RouterMetrics("demo", top_k=0)
    m.saw("demo/coding", 0.0)
    m.request_done("coding", "demo/coding", "4", "anonymous", 200, 0.1, None)
    text = generate_latest(m.registry).decode()
    assert ('mol_router_requests_total{adapter="other",code="200",deployment="demo",'
            'expert="coding",version="4"} 1.0') in text


def test_every_latency_histogram_carries_the_trace_as_exemplar() -> None:
    m = RouterMetrics("demo", top_k=5)
    for _ in range(2):
        m.saw("acme/a", 0.0)
    m.first_token("adapter", "1", "acme/a", "acme", 0.2, "trace-1")
    m.cold_started("acme/a", 1.5, "trace-1")
    m.request_done("adapter", "acme/a", "1", "acme", 200, 0.3, "trace-1")
    text = openmetrics(m.registry).decode()  # type: ignore[no-untyped-call]
    for family, le in (("mol_router_request_duration_seconds", "0.5"),
                       ("mol_router_time_to_first_token_seconds", "0.25"),
                       ("mol_router_adapter_request_duration_seconds", "0.5"),
                       ("mol_router_adapter_time_to_first_token_seconds", "0.25"),
                       ("mol_router_adapter_cold_start_seconds", "2.5"),
                       ("mol_router_tenant_request_duration_seconds", "0.5"),
                       ("mol_router_tenant_time_to_first_token_seconds", "0.25")):
        line = next(x for x in text.splitlines()
                    if x.startswith(family + "_bucket{") and f'le="{le}"' in x)
        assert '# {trace_id="trace-1"}' in line, line
    # Only the bucket the value fell in carries it; the text format never does.
    assert not any("trace_id" in x for x in text.splitlines() if 'le="0.1"' in x)
    assert "trace_id" not in generate_latest(m.registry).decode()
