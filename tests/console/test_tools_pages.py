"""The console's tools pages in headless chromium against a real catalog (auth on): a
namespace's tools with each version proposed or approved, a version's source and
checks, approval by an admin (the protected ``approved`` alias moves and the tool is
offered), a refusal with the catalog's reasons, a reader who cannot approve, and CSRF."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from mol_testkit.catalog import LiveCatalog
from mol_testkit.console import ADMIN_TOKEN, axe_violations, login
from mol_testkit.signing import make_key

SOURCE = '''def hypot(a: float, b: float = 0.0) -> float:
    """The length of the hypotenuse."""
    return (a * a + b * b) ** 0.5
'''
SCHEMA = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
          "required": ["a"]}
LINEAGE = {"session_id": "s-7a1c", "deployment": "analyst", "expert": "agent",
           "tenant": "acme"}


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    live = LiveCatalog(tmp_path_factory.mktemp("console-tools"), admin_token=ADMIN_TOKEN)
    live.start()
    try:
        with _api(live.url) as api:
            for ns, name, source in (("acme", "hypot", SOURCE),
                                     ("acme", "hypot", SOURCE.replace("0.5", "(1 / 2)")),
                                     ("acme", "broken", "def broken(:\n"),
                                     ("strict", "hypot", SOURCE)):
                r = api.post(f"/v1/namespaces/{ns}/tools/{name}/versions",
                             json={"source": source, "parameters": SCHEMA, **LINEAGE})
                assert r.status_code == 201, r.text
        yield live.url
    finally:
        live.stop()


def _api(url: str, token: str = ADMIN_TOKEN) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=30, headers={"authorization": f"Bearer {token}"})


def _approved(url: str, ns: str) -> list[dict[str, Any]]:
    with _api(url) as api:
        items: list[dict[str, Any]] = api.get(f"/v1/namespaces/{ns}/approved-tools").json()[
            "items"]
        return items


def test_an_admin_reads_a_proposal_and_approves_it(page: Page, catalog: str) -> None:
    login(page, catalog, ADMIN_TOKEN)
    page.get_by_role("link", name="Tools").click()
    page.get_by_label("Namespace", exact=True).fill("acme")
    page.get_by_role("button", name="Show tools").click()
    hypot = page.get_by_role("table", name="Versions of hypot, newest first")
    expect(hypot.locator("tbody tr")).to_have_count(2)
    expect(hypot.locator("tbody tr td:nth-child(2)")).to_have_text(["proposed", "proposed"])
    broken = page.get_by_role("table", name="Versions of broken, newest first")
    expect(broken).to_contain_text("failed: parses")
    assert axe_violations(page) == []

    hypot.get_by_role("link", name="v1").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("acme/hypot v1 proposed")
    expect(page.get_by_label("Source of hypot")).to_contain_text("return (a * a + b * b)")
    expect(page.get_by_role("table", name=re.compile("Checks of v1"))).to_contain_text(
        "names_match")
    expect(page.locator("dl.facts")).to_contain_text("s-7a1c")
    assert axe_violations(page) == []
    assert _approved(catalog, "acme") == []  # never offered before approval
    page.get_by_role("button", name="Approve v1").click()
    expect(page).to_have_url(f"{catalog}/ui/tools?namespace=acme#tool-hypot")
    expect(hypot.locator("tbody tr td:nth-child(2)")).to_have_text(["proposed", "approved"])
    expect(page.get_by_role("heading", name="acme/hypot approved v1")).to_be_visible()
    [offered] = _approved(catalog, "acme")
    assert (offered["name"], offered["version"]) == ("hypot", 1)


def test_a_refused_approval_shows_the_catalogs_reasons(page: Page, catalog: str,
                                                      tmp_path: Path) -> None:
    """strict/hypot v1 was proposed unsigned before the namespace began to require
    signatures: approving it is refused (409) until it is proposed again, signed."""
    with _api(catalog) as api:
        key = make_key(tmp_path, "release")
        r = api.post("/v1/namespaces/strict/keys", json={"name": "release",
                                                         "public_key": key.public_pem})
        assert r.status_code == 201, r.text
        r = api.put("/v1/namespaces/strict/signature-policy",
                    json={"require_signatures": True})
        assert r.status_code == 200, r.text
    login(page, catalog, ADMIN_TOKEN)
    page.goto(f"{catalog}/ui/tools/strict/hypot/versions/1")
    with page.expect_response(re.compile(r"/ui/tools/strict/hypot/approve$")) as answer:
        page.get_by_role("button", name="Approve v1").click()
    assert answer.value.status == 409
    expect(page.get_by_role("heading", name="The catalog refused the approval")).to_be_visible()
    expect(page.get_by_role("alert")).to_contain_text("requires signatures")
    assert _approved(catalog, "strict") == []


def test_a_reader_sees_proposals_but_cannot_approve(page: Page, catalog: str) -> None:
    with _api(catalog) as api:
        reader = api.post("/v1/tokens", json={"name": "tools-reader",
                                              "scopes": ["read:acme"]}).json()["token"]
    login(page, catalog, reader)
    page.goto(f"{catalog}/ui/tools/acme/hypot/versions/2")
    expect(page.get_by_role("heading", level=1)).to_have_text("acme/hypot v2 proposed")
    expect(page.get_by_role("button", name="Approve v2")).to_have_count(0)
    expect(page.get_by_text("Approving a tool needs an admin token.")).to_be_visible()
    page.goto(f"{catalog}/ui/tools?namespace=strict")
    expect(page.get_by_role("alert")).to_contain_text("may not read namespace 'strict'")
    csrf = page.locator('meta[name="csrf-token"]').get_attribute("content")
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    with httpx.Client(base_url=catalog, cookies=cookies) as client:
        url = "/ui/tools/acme/hypot/approve"
        assert client.post(url, data={"version": "2"}).status_code == 403  # no CSRF value
        refused = client.post(url, data={"version": "2", "csrf": csrf})
        assert refused.status_code == 403
        assert "needs scope &#39;admin&#39;" in refused.text
    assert [t["version"] for t in _approved(catalog, "acme")] in ([], [1])
