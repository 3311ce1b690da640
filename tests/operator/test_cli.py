"""`mol operator` verbs and the operator's HTTP endpoint."""

from __future__ import annotations

import httpx
import pytest
from typer.testing import CliRunner

from mol_operator.cli import app
from mol_operator.crd import crd_yaml
from mol_operator.endpoint import start_server
from mol_operator.metrics import OperatorMetrics
from mol_testkit.net import free_port

runner = CliRunner()


def test_crd_verb_prints_the_generated_crd() -> None:
    result = runner.invoke(app, ["crd"])
    assert result.exit_code == 0
    assert result.output == crd_yaml()


def test_run_help_lists_the_settings() -> None:
    result = runner.invoke(app, ["run", "--help"])
    assert result.exit_code == 0
    for flag in ("--namespace", "--catalog-url", "--catalog-token-file", "--prometheus-url",
                 "--router-image", "--metrics-port", "--resync-seconds", "MOL_OPERATOR_"):
        assert flag in result.output


def test_run_refuses_bad_settings_with_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOL_OPERATOR_RETRY_SECONDS", "-5")
    result = runner.invoke(app, ["run"])
    assert result.exit_code == 2
    assert "retry_seconds" in result.output


async def test_metrics_and_health_endpoint() -> None:
    metrics = OperatorMetrics()
    metrics.reconcile.labels("ok").inc()
    metrics.canary("shop", "coding", 25.0, "advanced")
    port = free_port()
    server = await start_server(metrics.registry, "127.0.0.1", port)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            assert (await client.get("/healthz")).json() == {"status": "ok"}
            text = (await client.get("/metrics")).text
    finally:
        await server.cleanup()
    assert 'mol_operator_reconcile_total{result="ok"} 1.0' in text
    assert 'mol_canary_weight{deployment="shop",expert="coding"} 25.0' in text
    assert ('mol_operator_canary_transitions_total{deployment="shop",expert="coding",'
            'result="advanced"} 1.0') in text
