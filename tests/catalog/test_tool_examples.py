"""The ``example_runs`` check against the real sandbox service on loopback (sessions
under bubblewrap): a proposal's example runs in a fresh session at publish and its
outcome is stored beside the other checks; a failing, endless or absent example, and a
sandbox that is down or refuses the catalog, are advice in the check, never a failed
publish."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from mol_catalog.settings import CatalogSettings
from mol_platform.contract import tools as tc
from mol_sandbox.settings import SandboxSettings
from mol_testkit.net import free_port
from tests.catalog.conftest import MakeClient
from tests.catalog.test_tools import SOURCE, proposal, publish
from tests.sandbox.conftest import TOKEN_A, Sandbox, running, tokens_file


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    folder = tmp_path_factory.mktemp("sandbox")
    settings = SandboxSettings(port=free_port(), tokens_file=tokens_file(folder),
                               call_timeout=10.0)
    with running(settings) as service:
        yield service


def example_of(answer: dict[str, Any]) -> dict[str, Any]:
    (check,) = [c for c in answer["checks"] if c["name"] == tc.EXAMPLE_CHECK]
    assert answer["checks"][-1] is check  # still the last, as the contract orders them
    out: dict[str, Any] = check
    return out


async def test_the_example_runs_in_a_fresh_session(make_client: MakeClient,
                                                   sandbox: Sandbox) -> None:
    client = await make_client(sandbox_url=sandbox.url, sandbox_token=TOKEN_A)
    r = await publish(client, proposal(example={"a": 3, "b": 4}))
    assert r.status_code == 201, r.text
    check = example_of(r.json())
    assert check["ok"] is True, check
    assert "returned 5.0" in check["detail"]
    # Shown with the version as stored, and the session is gone.
    again = (await client.get("/v1/namespaces/acme/tools/hypot/versions/1")).json()
    assert example_of(again) == check
    assert not sandbox.service._sessions
    # The retry answers the stored version without running anything.
    retry = await publish(client, proposal(example={"a": 3, "b": 4}))
    assert (retry.status_code, example_of(retry.json())) == (200, check)


async def test_arguments_are_data_never_code(make_client: MakeClient,
                                             sandbox: Sandbox) -> None:
    client = await make_client(sandbox_url=sandbox.url, sandbox_token=TOKEN_A)
    source = 'async def echo(text: str) -> int:\n    """Its length."""\n    return len(text)\n'
    text = "'''\"\"\")\nimport os; os._exit(3)\n#\\u00e9é"
    schema = {"type": "object", "properties": {"text": {"type": "string"}},
              "required": ["text"]}
    r = await publish(client, proposal(source, schema, example={"text": text}), name="echo")
    check = example_of(r.json())
    assert (check["ok"], check["detail"].endswith(f"returned {len(text)}")) == (True, True)


async def test_a_failing_example_is_advice(make_client: MakeClient, sandbox: Sandbox) -> None:
    client = await make_client(sandbox_url=sandbox.url, sandbox_token=TOKEN_A)
    r = await publish(client, proposal(example={"a": "three"}))
    assert r.status_code == 201
    check = example_of(r.json())
    assert check["ok"] is False, check
    assert "TypeError" in check["detail"]
    events = (await client.get("/v1/events", params={"after": 0})).json()["items"]
    (published,) = [e for e in events if e["type"] == "tool.published"]
    assert published["data"]["failed_checks"] == [tc.EXAMPLE_CHECK]


async def test_an_endless_example_stops_at_the_catalogs_time(make_client: MakeClient,
                                                              sandbox: Sandbox) -> None:
    client = await make_client(sandbox_url=sandbox.url, sandbox_token=TOKEN_A,
                               sandbox_timeout=1.5)
    source = SOURCE.replace("return math.sqrt", "while True:\n        pass\n    return math.sqrt")
    started = time.monotonic()
    r = await publish(client, proposal(source, example={"a": 1}))
    assert r.status_code == 201
    assert time.monotonic() - started < 8
    check = example_of(r.json())
    assert check["ok"] is False
    assert "did not finish within 1.5 s" in check["detail"]
    assert not sandbox.service._sessions  # ended, its interpreter stopped


@pytest.mark.parametrize("case", ["no example", "no function"])
async def test_nothing_to_run_is_not_run(make_client: MakeClient, sandbox: Sandbox,
                                         case: str) -> None:
    client = await make_client(sandbox_url=sandbox.url, sandbox_token=TOKEN_A)
    body = proposal() if case == "no example" else proposal("x = 1\n", example={"a": 1})
    check = example_of((await publish(client, body)).json())
    assert check["ok"] is None
    assert ("no example" if case == "no example" else "does not define") in check["detail"]


@pytest.mark.parametrize("case", ["down", "wrong token", "unset"])
async def test_a_sandbox_it_cannot_use_says_so(make_client: MakeClient, sandbox: Sandbox,
                                               case: str) -> None:
    settings: dict[str, Any] = {
        "down": {"sandbox_url": f"http://127.0.0.1:{free_port()}"},
        "wrong token": {"sandbox_url": sandbox.url, "sandbox_token": "nope"},
        "unset": {}}[case]
    client = await make_client(**settings)
    r = await publish(client, proposal(example={"a": 1}))
    assert r.status_code == 201, r.text
    check = example_of(r.json())
    assert check["ok"] is None
    assert check["detail"].startswith("not run: ")
    assert {"down": "could not be reached", "wrong token": "answered 401",
            "unset": "MOL_CATALOG_SANDBOX_URL"}[case] in check["detail"]


def test_the_sandbox_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOL_CATALOG_SANDBOX_URL", "http://127.0.0.1:8090")
    monkeypatch.setenv("MOL_CATALOG_SANDBOX_TOKEN", "t")
    s = CatalogSettings()
    assert (s.sandbox_url, s.sandbox_token, s.sandbox_timeout) == (
        "http://127.0.0.1:8090", "t", 10.0)
    for bad in ("127.0.0.1:8090", "ftp://x", "http://a b"):
        monkeypatch.setenv("MOL_CATALOG_SANDBOX_URL", bad)
        with pytest.raises(ValidationError):
            CatalogSettings()
