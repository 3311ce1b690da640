"""Names are exact on every route: a trailing newline (or any extra character) is refused
with 400 InvalidName, and aliases that read as references say why."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.catalog.test_api import ADAPTER, publish, setup_base

Model = Any


async def test_names_with_a_trailing_newline_are_refused(client: httpx.AsyncClient,
                                                         model: Model) -> None:
    await setup_base(client, model)
    assert (await publish(client, model, alias="stable")).status_code == 201
    for path in ("/v1/adapters/acme%0A/coding", "/v1/adapters/acme/coding%0A"):
        r = await publish(client, model, path=path)
        assert r.status_code == 400, r.text
        assert r.json()["error"] == "InvalidName"
        assert (await client.get(path)).status_code == 400
    r = await publish(client, model, tags="code\n,python")
    # The form splits on commas and strips blanks, so "code\n" is "code": it passes.
    assert r.status_code in (200, 201)
    r = await publish(client, model, tags="co\nde", seed=1)
    assert r.status_code == 400
    assert "tag" in r.json()["detail"]
    r = await client.put(f"{ADAPTER}/aliases/stable%0A", json={"version": 1})
    assert r.status_code == 400
    assert r.json()["error"] == "InvalidName"
    r = await client.get("/v1/adapters", params={"namespace": "acme\n"})
    assert r.status_code == 400
    assert r.json()["error"] == "InvalidName"
    r = await client.get("/v1/resolve/acme/coding@stable%0A")
    assert r.status_code == 400
    r = await client.post("/v1/tokens", json={"name": "ci", "scopes": ["publish:acme\n"]})
    assert r.status_code == 400
    assert "invalid scope" in r.json()["detail"]
    r = await client.get("/v1/adapters", params={"namespace": "acme"})
    assert [i["adapter"] for i in r.json()["items"]] == ["acme/coding"]


@pytest.mark.parametrize(("alias", "why"), [("latest", "reserved"), ("v2", "version"),
                                            ("sha256:" + "a" * 64, "digest")])
async def test_aliases_that_read_as_references(client: httpx.AsyncClient, model: Model,
                                               alias: str, why: str) -> None:
    await setup_base(client, model)
    assert (await publish(client, model)).status_code == 201
    r = await client.put(f"{ADAPTER}/aliases/{alias}", json={"version": 1})
    assert r.status_code == 400, r.text
    assert why in r.json()["detail"]
    r = await publish(client, model, alias=alias, seed=3)
    assert r.status_code == 400
    assert why in r.json()["detail"]


@pytest.mark.parametrize(("args", "why"), [
    (["token", "create", "ci", "--scope", "read:acme\n"], "invalid scope"),
    (["token", "create", "ci", "--scope", "write:acme"], "invalid scope"),
    (["alias", "set", "acme/coding@latest", "3"], "reserved"),
    (["alias", "set", "acme/coding@v2", "3"], "version"),
])
def test_cli_refuses_before_calling_the_catalog(args: list[str], why: str) -> None:
    """The CLI runs the same validators; nothing listens at the URL it is given."""
    from typer.testing import CliRunner

    from mol_catalog.cli import app
    from mol_testkit.net import free_port

    url = f"http://127.0.0.1:{free_port()}"
    result = CliRunner().invoke(app, ["--catalog-url", url, *args])
    assert result.exit_code == 1, result.output
    assert "cannot reach" not in result.output  # refused here, not by the server
    assert why in result.output
