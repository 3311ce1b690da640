"""``mol router label`` and ``mol router labels export`` against a real catalog (uvicorn,
auth on), with decisions reported through the async client as a router would."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from mol_platform.clients.catalog import CatalogClient, CatalogError
from mol_platform.clients.catalog_async import AsyncCatalogClient
from mol_router.auto.heads.train import load_labelled
from mol_router.cli import app
from tests.catalog.conftest import LiveCatalog


def router(url: str, token: str, *args: str | Path) -> Result:
    result = CliRunner().invoke(app, [*map(str, args), "--catalog-url", url,
                                      "--token", token])
    assert "Traceback" not in result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def _decision(request_id: str, text: str, expert: str, deployment: str = "chat",
              ns: str = "acme") -> dict[str, Any]:
    return {"request_id": request_id, "namespace": ns, "deployment": deployment,
            "text": text, "expert": expert, "route": "head",
            "at": datetime.now(UTC).isoformat()}


@pytest.fixture
def tokens(catalog_server_auth: LiveCatalog) -> dict[str, str]:
    assert catalog_server_auth.admin_token is not None
    with CatalogClient(catalog_server_auth.url, catalog_server_auth.admin_token) as admin:
        return {name: admin.create_token(name, scopes).token for name, scopes in (
            ("router", ["usage:acme"]), ("reviewer", ["publish:acme"]),
            ("reader", ["read:acme"]), ("other", ["publish:globex"]))}


def test_label_and_export_for_training(catalog_server_auth: LiveCatalog,
                                       tokens: dict[str, str], tmp_path: Path) -> None:
    url = catalog_server_auth.url
    batch = {"batch_id": uuid.uuid4().hex, "decisions": [
        _decision("req-1", "Write a haiku about autumn leaves", "code"),
        _decision("req-2", "Integrate x^2 from 0 to 1", "math", deployment="other"),
        _decision("req-3", "Sort a list in Python", "code")]}

    async def report() -> tuple[Any, Any]:
        async with AsyncCatalogClient(url, tokens["router"]) as client:
            return await client.report_decisions(batch), await client.report_decisions(batch)

    first, again = asyncio.run(report())
    assert (first.recorded, first.duplicate) == (3, False)
    assert (again.recorded, again.duplicate) == (0, True)

    r = router(url, tokens["reviewer"], "label", "req-1", "creative", "-n", "acme",
               "--source", "user", "--note", "a poem")
    assert r.exit_code == 0, r.output
    assert "routed to code, right: creative (user; deployment chat)" in r.stdout
    assert "Write a haiku about autumn leaves" in r.stdout
    assert router(url, tokens["reviewer"], "label", "req-2", "math", "-n", "acme",
                  ).exit_code == 0
    with CatalogClient(url, tokens["reader"]) as client:
        shown = client.routing_decision("acme", "req-1")
    assert shown.label is not None
    assert (shown.expert, shown.label.expert, shown.label.note) == ("code", "creative", "a poem")

    out = tmp_path / "labels.jsonl"
    r = router(url, tokens["reader"], "labels", "export", "-n", "acme", "-o", out)
    assert r.exit_code == 0, r.output
    assert "2 labels of namespace acme written to" in r.stderr
    assert [(x.id, x.text, x.expert) for x in load_labelled(out)] == [
        ("req-1", "Write a haiku about autumn leaves", "creative"),
        ("req-2", "Integrate x^2 from 0 to 1", "math")]
    r = router(url, tokens["reader"], "labels", "export", "-n", "acme", "--deployment", "other")
    assert [json.loads(line)["id"] for line in r.stdout.splitlines()] == ["req-2"]
    r = router(url, tokens["reader"], "labels", "export", "-n", "acme", "--since", "2000-01-01")
    assert len(r.stdout.splitlines()) == 2
    r = router(url, tokens["reader"], "labels", "export", "-n", "acme", "--since", "2999-01-01")
    assert r.exit_code == 0
    assert r.stdout == ""
    assert "0 labels" in r.stderr


def test_refusals_are_one_line(catalog_server_auth: LiveCatalog,
                               tokens: dict[str, str]) -> None:
    url = catalog_server_auth.url
    with CatalogClient(url, tokens["router"]) as client:
        client.report_decisions({"batch_id": uuid.uuid4().hex,
                                 "decisions": [_decision("req-9", "hello", "chat")]})
    r = router(url, tokens["reviewer"], "label", "nope", "math", "-n", "acme")
    assert r.exit_code == 1
    assert "no routing decision with request id 'nope'" in r.stderr
    r = router(url, tokens["other"], "label", "req-9", "math", "-n", "acme")
    assert r.exit_code == 1
    assert "publish:acme" in r.stderr
    r = router(url, tokens["other"], "labels", "export", "-n", "acme")
    assert r.exit_code == 1
    assert "read:acme" in r.stderr
    r = router(url, tokens["reviewer"], "label", "req-9\n", "math", "-n", "acme")
    assert r.exit_code == 2
    assert "invalid request id" in r.stderr
    r = router(url, tokens["reviewer"], "label", "req-9", "Math", "-n", "acme")
    assert r.exit_code == 2
    assert "expert" in r.stderr
    r = router(url, tokens["reviewer"], "label", "req-9", "math", "-n", "acme",
               "--source", "robot")
    assert r.exit_code == 2
    r = router(url, tokens["reader"], "labels", "export", "-n", "acme", "--since", "soon")
    assert r.exit_code == 1
    assert "since" in r.stderr
    with CatalogClient(url, tokens["reader"]) as client, pytest.raises(CatalogError) as info:
        client.routing_decision("acme", "nope")
    assert info.value.status == 404
