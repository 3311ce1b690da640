"""Protected aliases on SQLite and Postgres: each refusal reason, publish that stores but
does not move, admin force on record (history and events), non-admins cannot force, the
default ``stable`` protection and "served under" from the profiles resolves name."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from mol_catalog.adapters.protection import MoveFacts, Policy, ServedVerdict, refusals
from tests.catalog.conftest import AppClient, MakeClient, Model

ADAPTER = "/v1/adapters/acme/coding"
ADMIN = "mol_" + "p" * 43


async def _setup(http: httpx.AsyncClient, model: Model) -> None:
    """Base, profiles ``small`` (rank 8) and ``big`` (rank 64); v1 rank 8 at ``stable``,
    v2 rank 16 (fits ``big`` only)."""
    assert (await http.post("/v1/base-models", json=model.base_body())).status_code == 201
    for name, rank in (("small", 8), ("big", 64)):
        r = await http.put(f"/v1/serving-profiles/{name}", json={
            "base_model": f"{model.name}@{model.revision}", "engine": "vllm==0.32.0",
            "max_lora_rank": rank, "max_loras": 4})
        assert r.status_code == 201, r.text
    r = await http.post(f"{ADAPTER}/versions", files=model.files(model.adapter(rank=8)),
                        data={"alias": "stable"})
    assert r.status_code == 201, r.text
    assert r.json()["alias_refused"] is None
    r = await http.post(f"{ADAPTER}/versions", files=model.files(model.adapter(rank=16, seed=1)))
    assert r.status_code == 201, r.text


async def _aliases(http: httpx.AsyncClient) -> dict[str, int]:
    return dict((await http.get(ADAPTER)).json()["aliases"])


async def _events(http: httpx.AsyncClient, kind: str) -> list[dict[str, Any]]:
    return [e for e in (await http.get("/v1/events", params={"limit": 1000})).json()["items"]
            if e["type"] == kind]


def test_refusals_is_a_pure_function_of_facts_and_policy() -> None:
    bad = ServedVerdict("small", False, ({"code": "rank_too_large", "message": "rank 16"},))
    good = ServedVerdict("big", True, ())
    facts = MoveFacts("acme/coding", "stable", 2, "ready", None, (good, bad), "resolves")
    reasons = refusals(facts, Policy(frozenset({"stable"})))
    assert [(r["code"], r.get("profile")) for r in reasons] == [("incompatible", "small")]
    assert "rank 16" in reasons[0]["message"]
    assert "publish a version" in reasons[0]["message"]
    assert refusals(facts, Policy(frozenset({"prod"}))) == []
    yanked = MoveFacts("acme/coding", "canary", 3, "yanked", "leaks", (), "base profiles")
    assert [r["code"] for r in refusals(yanked, Policy(frozenset()))] == ["yanked"]
    # a namespace that requires signatures: a protected alias moves to signed versions only
    signing = Policy(frozenset({"stable"}), require_signatures=True)
    unsigned = MoveFacts("acme/coding", "stable", 2, "ready", None, (good,), "resolves")
    reasons = refusals(unsigned, signing)
    assert [r["code"] for r in reasons] == ["unsigned"]
    assert "--sign-key" in reasons[0]["message"]
    signed = MoveFacts("acme/coding", "stable", 2, "ready", None, (good,), "resolves", "k" * 64)
    assert refusals(signed, signing) == []
    assert refusals(unsigned, Policy(frozenset({"stable"}))) == []  # not required
    assert refusals(unsigned.__class__("acme/coding", "canary", 2, "ready", None, (good,),
                                       "resolves"), signing) == []  # not protected
    evals = Policy(frozenset({"stable"}), required_evals=frozenset({"humaneval", "mmlu"}))
    partial = MoveFacts("acme/coding", "stable", 2, "ready", None, (good,), "resolves",
                        eval_suites=frozenset({"mmlu"}))
    assert [(r["code"], r["suite"]) for r in refusals(partial, evals)] == [
        ("missing_eval", "humaneval")]
    full = MoveFacts("acme/coding", "stable", 2, "ready", None, (good,), "resolves",
                     eval_suites=frozenset({"mmlu", "humaneval", "other"}))
    assert refusals(full, evals) == []


async def test_default_stable_is_protected_and_refuses_an_incompatible_version(
        client: AppClient, model: Model) -> None:
    got = (await client.get("/v1/namespaces/acme/protected-aliases")).json()
    assert got["protected_aliases"] == ["stable"]
    assert got["default"] is True
    await _setup(client, model)
    r = await client.put(f"{ADAPTER}/aliases/stable", json={"version": 2})
    assert r.status_code == 409, r.text
    body = r.json()
    assert [(x["code"], x["profile"]) for x in body["reasons"]] == [("incompatible", "small")]
    assert "small" in body["detail"]
    assert "force" in body["detail"]
    assert await _aliases(client) == {"stable": 1}
    # An alias that is not protected moves to it.
    assert (await client.put(f"{ADAPTER}/aliases/candidate", json={"version": 2})
            ).status_code == 200
    # Stop protecting stable: the move goes ahead.
    put = await client.put("/v1/namespaces/acme/protected-aliases",
                           json={"protected_aliases": ["prod", "canary", "prod"]})
    assert put.status_code == 200
    assert put.json()["protected_aliases"] == ["canary", "prod"]
    assert not put.json()["default"]
    assert (await client.put(f"{ADAPTER}/aliases/stable", json={"version": 2})
            ).status_code == 200
    assert (await client.put(f"{ADAPTER}/aliases/prod", json={"version": 2})
            ).status_code == 409
    bad = await client.put("/v1/namespaces/acme/protected-aliases",
                           json={"protected_aliases": ["Stable"]})
    assert bad.status_code == 422


async def test_yanked_version_is_refused_with_its_reason(client: AppClient,
                                                         model: Model) -> None:
    await _setup(client, model)
    r = await client.post(f"{ADAPTER}/versions", files=model.files(model.adapter(seed=5)))
    assert r.status_code == 201
    assert (await client.post(f"{ADAPTER}/versions/3/yank", json={"reason": "leaks data"})
            ).status_code == 200
    for alias in ("stable", "candidate"):
        r = await client.put(f"{ADAPTER}/aliases/{alias}", json={"version": 3})
        assert r.status_code == 409
        assert [x["code"] for x in r.json()["reasons"]] == ["yanked"]
        assert "leaks data" in r.json()["reasons"][0]["message"]


async def test_a_required_eval_report_gates_the_move(client: AppClient, model: Model) -> None:
    """The namespace requires a ``humaneval`` report: ``stable`` does not move to a
    version without one (``candidate``, not protected, does), and moves once it is
    attached; the policy round-trips and bad suite names are 422."""
    await _setup(client, model)
    r = await client.post(f"{ADAPTER}/versions", files=model.files(model.adapter(seed=5)))
    assert r.status_code == 201  # v3, rank 8: fits every profile
    policy = "/v1/namespaces/acme/protected-aliases"
    r = await client.put(policy, json={"protected_aliases": ["stable"],
                                       "required_evals": ["humaneval", "humaneval"]})
    assert r.status_code == 200, r.text
    assert r.json()["required_evals"] == ["humaneval"]
    assert (await client.get(policy)).json()["required_evals"] == ["humaneval"]
    for bad in (["Human Eval"], ["humaneval\n"], ["a" * 64]):
        r = await client.put(policy, json={"protected_aliases": [], "required_evals": bad})
        assert r.status_code == 422, bad
    r = await client.put(f"{ADAPTER}/aliases/stable", json={"version": 3})
    assert r.status_code == 409
    reasons = r.json()["reasons"]
    assert [(x["code"], x["suite"]) for x in reasons] == [("missing_eval", "humaneval")]
    assert "eval attach acme/coding@v3 --suite humaneval" in reasons[0]["message"]
    assert (await client.put(f"{ADAPTER}/aliases/candidate", json={"version": 3})
            ).status_code == 200
    r = await client.post(f"{ADAPTER}/versions/3/evals",
                          json={"suite": "humaneval", "metrics": {"pass@1": 0.6}})
    assert r.status_code in (200, 201), r.text
    r = await client.put(f"{ADAPTER}/aliases/stable", json={"version": 3})
    assert r.status_code == 200, r.text
    assert (await _aliases(client))["stable"] == 3


async def test_publish_with_a_refused_alias_stores_the_version_only(
        client: AppClient, model: Model) -> None:
    await _setup(client, model)
    r = await client.post(f"{ADAPTER}/versions", files=model.files(model.adapter(rank=16, seed=7)),
                          data={"alias": "stable"})
    assert r.status_code == 201, r.text
    refused = r.json()["alias_refused"]
    assert refused["alias"] == "stable"
    assert [(x["code"], x["profile"]) for x in refused["reasons"]] == [("incompatible", "small")]
    assert (await client.get(f"{ADAPTER}/versions/3")).status_code == 200
    assert await _aliases(client) == {"stable": 1}
    assert [e["version"] for e in await _events(client, "alias.moved")] == [1]
    # The same content again with the alias: still refused, nothing moves.
    again = await client.post(f"{ADAPTER}/versions",
                              files=model.files(model.adapter(rank=16, seed=7)),
                              data={"alias": "stable"})
    assert again.status_code == 200
    assert again.json()["alias_refused"]["alias"] == "stable"
    assert "alias" not in again.json()["applied"]
    assert await _aliases(client) == {"stable": 1}


async def test_admin_force_is_recorded_in_history_and_events(client: AppClient,
                                                             model: Model) -> None:
    await _setup(client, model)
    r = await client.put(f"{ADAPTER}/aliases/stable", json={"version": 2, "force": True})
    assert r.status_code == 200, r.text
    assert r.json()["forced"] is True
    assert [x["code"] for x in r.json()["overridden"]] == ["incompatible"]
    top = (await client.get(f"{ADAPTER}/aliases/stable/history")).json()["items"][0]
    assert (top["version"], top["previous"], top["forced"]) == (2, 1, True)
    assert top["changed_by"] == "anonymous"
    assert top["overridden"][0]["profile"] == "small"
    moved = (await _events(client, "alias.moved"))[-1]
    assert moved["data"]["forced"] is True
    assert moved["data"]["by"] == "anonymous"
    assert moved["data"]["overridden"][0]["code"] == "incompatible"
    # A force that overrides nothing is a plain move.
    plain = await client.put(f"{ADAPTER}/aliases/stable", json={"version": 1, "force": True})
    assert plain.json()["forced"] is False
    # Publish with force: the alias moves past the reasons, on record.
    r = await client.post(f"{ADAPTER}/versions", files=model.files(model.adapter(rank=16, seed=9)),
                          data={"alias": "stable", "force": "true"})
    assert r.status_code == 201
    assert r.json()["alias_refused"] is None
    assert (await _aliases(client))["stable"] == 3
    assert (await client.get(f"{ADAPTER}/aliases/stable/history")).json()["items"][0]["forced"]


async def test_only_an_admin_may_force(make_client: MakeClient, model: Model) -> None:
    http = await make_client(auth="on", admin_token=ADMIN)
    admin = {"Authorization": f"Bearer {ADMIN}"}
    http.headers.update(admin)
    await _setup(http, model)
    token = (await http.post("/v1/tokens", json={"name": "ci", "scopes": ["publish:acme"]})
             ).json()["token"]
    publisher = {"Authorization": f"Bearer {token}"}
    r = await http.put(f"{ADAPTER}/aliases/stable", json={"version": 2, "force": True},
                       headers=publisher)
    assert r.status_code == 403
    assert "admin" in r.json()["detail"]
    r = await http.put(f"{ADAPTER}/aliases/stable", json={"version": 2}, headers=publisher)
    assert r.status_code == 409
    r = await http.post(f"{ADAPTER}/versions", files=model.files(model.adapter(rank=16, seed=4)),
                        data={"alias": "stable", "force": "true"}, headers=publisher)
    assert r.status_code == 403
    r = await http.put("/v1/namespaces/acme/protected-aliases",
                       json={"protected_aliases": []}, headers=publisher)
    assert r.status_code == 403
    assert await _aliases(http) == {"stable": 1}


@pytest.mark.parametrize(("profile", "allowed"), [("big", True), ("small", False)])
async def test_served_under_the_profiles_resolves_name(
        client: AppClient, model: Model, profile: str, allowed: bool) -> None:
    """Once ``stable`` is resolved under one profile, only that profile's verdict counts."""
    await _setup(client, model)
    r = await client.get("/v1/resolve/acme/coding@stable", params={"profile": profile})
    assert r.status_code == 200
    await client.catalog.bindings.drain()
    r = await client.put(f"{ADAPTER}/aliases/stable", json={"version": 2})
    assert (r.status_code == 200) is allowed, r.text
    if not allowed:
        assert "(resolves)" in r.json()["reasons"][0]["message"]


async def test_bindings_past_the_retention_window_fall_back_to_the_base_profiles(
        make_client: MakeClient, model: Model) -> None:
    http = await make_client(alias_binding_retention_seconds=0.001)
    await _setup(http, model)
    assert (await http.get("/v1/resolve/acme/coding@stable", params={"profile": "big"})
            ).status_code == 200
    await http.catalog.bindings.drain()
    r = await http.put(f"{ADAPTER}/aliases/stable", json={"version": 2})
    assert r.status_code == 409
    assert "(base profiles)" in r.json()["reasons"][0]["message"]
