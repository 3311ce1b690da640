"""A real Prometheus scrapes an exporter on loopback and answers PromQL; promtool
checks rule files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, start_http_server

from mol_testkit.prometheus import (
    PrometheusServer,
    by_label,
    promtool_check_rules,
    scalar,
)

pytestmark = pytest.mark.prometheus


@pytest.fixture
def exporter() -> Iterator[tuple[str, Counter]]:
    registry = CollectorRegistry()
    requests = Counter("mol_test_requests", "requests", ["route"], registry=registry)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield f"127.0.0.1:{server.server_port}", requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_scrape_and_query(prometheus: PrometheusServer, exporter: tuple[str, Counter]) -> None:
    target, requests = exporter
    requests.labels(route="resolve").inc(3)
    requests.labels(route="publish").inc(4)
    prometheus.configure(targets=[target], job="exporter")
    promql = 'sum by (route) (mol_test_requests_total{job="exporter"})'
    result = prometheus.wait_for(promql, lambda r: len(r) == 2)
    assert by_label(result, "route") == {"resolve": 3.0, "publish": 4.0}
    requests.labels(route="resolve").inc(10)
    prometheus.wait_for("sum(mol_test_requests_total)", lambda r: scalar(r) == 17.0)
    rate = prometheus.wait_for('rate(mol_test_requests_total{route="resolve"}[5s])',
                               lambda r: bool(r) and scalar(r) > 0)
    assert scalar(rate) > 0


def test_recording_rules_are_loaded(
    prometheus: PrometheusServer, exporter: tuple[str, Counter], tmp_path: Path
) -> None:
    target, requests = exporter
    requests.labels(route="resolve").inc(5)
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "groups:\n- name: mol\n  rules:\n  - record: mol:test_requests:sum\n"
        "    expr: sum(mol_test_requests_total)\n"
    )
    prometheus.configure(targets=[target], rule_files=[rules])
    prometheus.wait_for("mol:test_requests:sum", lambda r: bool(r) and scalar(r) == 5.0)


def test_bad_promql_is_an_error(prometheus: PrometheusServer) -> None:
    with pytest.raises(ValueError, match="parse error"):
        prometheus.query("sum by (")


def test_promtool_check_rules(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        "groups:\n- name: mol\n  rules:\n  - alert: RouterErrors\n"
        "    expr: sum(rate(mol_router_upstream_errors_total[5m])) > 1\n"
        "    for: 5m\n"
    )
    assert "SUCCESS" in promtool_check_rules(good)
    bad = tmp_path / "bad.yaml"
    bad.write_text("groups:\n- name: mol\n  rules:\n  - alert: Broken\n    expr: sum(rate(\n")
    with pytest.raises(ValueError, match=r"bad\.yaml"):
        promtool_check_rules(bad)
