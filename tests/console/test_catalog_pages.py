"""The console's catalog pages in headless chromium against a real catalog: login,
search with keyset paging, adapter and version pages, publish from a folder, alias moves
with their event, yank, scopes, CSRF and logout."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Locator, Page, expect

from mol_testkit.console import ADMIN_TOKEN, ConsoleStack, login

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def assert_digest(code: Locator) -> None:
    """The element shows a whole sha256 digest and nothing else (a full match)."""
    expect(code).to_be_visible()
    assert DIGEST.fullmatch(code.inner_text()), code.inner_text()


def test_login_refuses_a_bad_token_and_pages_need_a_login(page: Page,
                                                          stack: ConsoleStack) -> None:
    page.goto(f"{stack.url}/ui/adapters/demo/coding")
    expect(page).to_have_url(re.compile(r"/ui/login\?next="))
    page.get_by_label("Token").fill("mol_not-a-token")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_contain_text("invalid or revoked token")
    page.get_by_label("Token").fill(ADMIN_TOKEN)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{stack.url}/ui/adapters/demo/coding")  # back where it began
    expect(page.get_by_role("heading", level=1)).to_have_text("demo/coding")


def test_search_filters_and_keyset_paging(admin: Page, stack: ConsoleStack) -> None:
    page = admin
    rows = page.locator("tbody tr")
    page.get_by_label("Namespace").fill("lab")
    page.get_by_role("button", name="Search").click()
    expect(rows).to_have_count(25)  # one page; 27 adapters in lab
    first_page = set(rows.locator("td:first-child").all_inner_texts())
    page.get_by_role("link", name="Next page").click()
    expect(rows).to_have_count(2)
    second_page = set(rows.locator("td:first-child").all_inner_texts())
    assert not first_page & second_page
    assert len(first_page | second_page) == 27
    expect(page.get_by_role("link", name="Next page")).to_have_count(0)

    page.goto(f"{stack.url}/ui/adapters?tag=code")
    expect(rows.locator("td:first-child")).to_have_text(["demo/coding"])
    page.goto(f"{stack.url}/ui/adapters?q=support")
    expect(rows.locator("td:first-child")).to_have_text(["acme/support"])
    page.goto(f"{stack.url}/ui/adapters?base=tiny-llama@r1&namespace=demo")
    expect(rows.locator("td:first-child")).to_have_text(["demo/chat", "demo/coding"])
    page.goto(f"{stack.url}/ui/adapters?base=nothing-like-it")
    expect(page.get_by_text("No adapter matches.")).to_be_visible()
    page.goto(f"{stack.url}/ui/adapters?tag=Bad%20Tag")  # refused as the API refuses it
    expect(page.get_by_role("alert")).to_contain_text("tag")


def test_version_page_shows_files_verdicts_and_lineage(admin: Page,
                                                       stack: ConsoleStack) -> None:
    page = admin
    page.goto(f"{stack.url}/ui/adapters/demo/coding")
    page.get_by_role("link", name="v2", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("demo/coding v2")
    files = page.get_by_role("table", name="Files of v2")
    expect(files).to_contain_text("adapter_config.json")
    expect(files).to_contain_text("adapter_model.safetensors")
    assert_digest(files.locator("code").first)
    verdicts = page.get_by_role("table", name="Verdict per serving profile")
    expect(verdicts).to_contain_text("demo.default")
    expect(verdicts).to_contain_text("compatible")
    expect(page.locator(".facts")).to_contain_text("Parent")
    page.get_by_role("link", name="v1", exact=True).click()
    expect(page.locator(".facts")).to_contain_text("s3://runs/coding-1")


def test_version_page_lists_eval_reports_and_the_feed_shows_them(admin: Page,
                                                                 stack: ConsoleStack) -> None:
    page = admin
    page.goto(f"{stack.url}/ui/adapters/acme/support/versions/1")
    expect(page.locator("main")).to_contain_text("No eval reports yet")
    page.goto(f"{stack.url}/ui/adapters/acme/support")
    expect(page.locator("#feed")).to_be_attached()
    with stack.api() as api:
        r = api.post("/v1/adapters/acme/support/versions/1/evals", json={
            "suite": "ui-bench", "suite_version": "2", "metrics": {"pass@1": 0.75},
            "judge_model": "judge-7b", "report": "fine"})
        assert r.status_code == 201, r.text
    expect(page.locator("#feed")).to_contain_text("eval.attached v1 ui-bench 2")
    page.goto(f"{stack.url}/ui/adapters/acme/support/versions/1")
    reports = page.get_by_role("table", name="Eval reports of v1")
    expect(reports).to_contain_text("ui-bench")
    expect(reports).to_contain_text("pass@1=0.75")
    expect(reports).to_contain_text("judge-7b")
    assert_digest(reports.locator("code").first)


def test_publish_a_folder_and_see_the_verdicts(admin: Page, stack: ConsoleStack,
                                               tmp_path: Path) -> None:
    page = admin
    page.goto(f"{stack.url}/ui/publish")
    page.get_by_label("Namespace").fill("demo")
    page.get_by_label("Adapter name").fill("from-folder")
    page.get_by_label("Tags (optional, comma separated)").fill("ui,folder")
    page.get_by_label("PEFT folder").set_input_files(stack.peft_folder(tmp_path / "ok", seed=50))
    expect(page.locator("#picked")).to_contain_text("Ready: ")
    page.get_by_role("button", name="Publish").click()
    expect(page.get_by_role("status")).to_contain_text("Published demo/from-folder v1")
    expect(page.locator("#result")).to_contain_text("compatible")
    expect(page.locator("#progress")).to_have_attribute("value", "100")

    # rank 32 fits the base but not the profile (max rank 16): stored, judged incompatible
    page.get_by_label("Adapter name").fill("too-wide")
    page.get_by_label("PEFT folder").set_input_files(
        stack.peft_folder(tmp_path / "wide", rank=32, seed=51))
    page.get_by_role("button", name="Publish").click()
    result = page.locator("#result")
    expect(result).to_contain_text("incompatible")
    expect(result).to_contain_text("rank_above_max")
    page.get_by_role("link", name="demo/too-wide v1").click()
    expect(page.get_by_role("table", name="Verdict per serving profile")).to_contain_text(
        "rank_above_max")

    # shaped for another base: refused before anything is stored, with the reasons
    page.goto(f"{stack.url}/ui/publish")
    page.get_by_label("Namespace").fill("demo")
    page.get_by_label("Adapter name").fill("misfit")
    other = dataclasses.replace(stack.model, hidden=128)
    misfit = tmp_path / "misfit"
    misfit.mkdir()
    cfg, weights = other.lora_files(8)
    (misfit / "adapter_config.json").write_bytes(cfg)
    (misfit / "adapter_model.safetensors").write_bytes(weights)
    page.get_by_label("PEFT folder").set_input_files(misfit)
    page.get_by_role("button", name="Publish").click()
    expect(page.get_by_role("alert")).to_contain_text(
        "Incompatible: demo/misfit does not fit base model tiny-llama@r1")
    expect(page.locator("#result li").first).to_contain_text("shape_mismatch")
    with stack.api() as api:
        assert api.get("/v1/adapters/demo/misfit").status_code == 404


def test_move_an_alias_after_confirmation_and_see_the_event(admin: Page,
                                                            stack: ConsoleStack) -> None:
    page = admin
    page.goto(f"{stack.url}/ui/adapters/demo/chat")
    page.get_by_label("Alias", exact=True).fill("candidate")
    page.get_by_role("button", name="Review the move").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Move @candidate to v1?")
    expect(page.get_by_role("table", name="Verdict per serving profile")).to_contain_text(
        "compatible")
    page.get_by_role("button", name="Move @candidate to v1").click()
    page.wait_for_url(lambda url: re.fullmatch(r".*/ui/adapters/demo/chat\?since=\d+", url)
                      is not None)
    expect(page.locator("#feed")).to_contain_text("alias.moved @candidate → v1")
    expect(page.get_by_role("heading", name="@candidate → v1")).to_be_visible()
    with stack.api() as api:
        assert api.get("/v1/adapters/demo/chat").json()["aliases"]["candidate"] == 1
        # a change made elsewhere shows up live on the open page
        api.post("/v1/adapters/demo/chat/versions/1/yank", json={"reason": "x"})
    expect(page.locator("#feed")).to_contain_text("alias")


def test_a_refused_alias_move_shows_the_catalogs_reasons(admin: Page,
                                                        stack: ConsoleStack) -> None:
    """The catalog answers 409 (here: the version was yanked while the confirmation was
    open): the confirmation comes back with the refusal, nothing moved."""
    page = admin
    with stack.api() as api:
        cfg, weights = stack.model.lora_files(8, seed=72)
        r = api.post("/v1/adapters/lab/refused/versions", files={
            "adapter_config.json": ("adapter_config.json", cfg),
            "adapter_model.safetensors": ("adapter_model.safetensors", weights)})
        assert r.status_code == 201, r.text
    page.goto(f"{stack.url}/ui/adapters/lab/refused/alias?alias=stable&version=1")
    with stack.api() as api:
        api.post("/v1/adapters/lab/refused/versions/1/yank", json={"reason": "leaks"})
    with page.expect_response(re.compile(r"/ui/adapters/lab/refused/alias$")) as answer:
        page.get_by_role("button", name="Move @stable to v1").click()
    assert answer.value.status == 409
    expect(page.get_by_role("heading", name="The catalog refused the move")).to_be_visible()
    expect(page.get_by_role("alert")).to_contain_text("v1 is yanked (leaks)")
    expect(page.get_by_role("heading", level=1)).to_have_text("Move @stable to v1?")
    with stack.api() as api:
        assert "stable" not in api.get("/v1/adapters/lab/refused").json()["aliases"]


def test_yank_from_the_version_page(admin: Page, stack: ConsoleStack, tmp_path: Path) -> None:
    page = admin
    with stack.api() as api:
        cfg, weights = stack.model.lora_files(8, seed=70)
        r = api.post("/v1/adapters/lab/yankee/versions", files={
            "adapter_config.json": ("adapter_config.json", cfg),
            "adapter_model.safetensors": ("adapter_model.safetensors", weights)})
        assert r.status_code == 201, r.text
    page.goto(f"{stack.url}/ui/adapters/lab/yankee/versions/1")
    page.get_by_label("Reason").fill("leaks the eval set")
    page.get_by_role("button", name="Yank v1").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("yanked")
    expect(page.locator(".problem")).to_contain_text("leaks the eval set")


def test_read_only_token_sees_its_namespace_and_cannot_publish(page: Page, stack: ConsoleStack,
                                                               tmp_path: Path) -> None:
    login(page, stack.url, stack.token("reader", ["read:demo"]))
    expect(page.locator("tbody tr td:first-child")).to_contain_text(["demo/chat"])
    assert all(t.startswith("demo/") for t in
               page.locator("tbody tr td:first-child").all_inner_texts())
    page.goto(f"{stack.url}/ui/adapters/acme/support")
    expect(page.get_by_role("alert")).to_contain_text("may not read namespace 'acme'")
    page.goto(f"{stack.url}/ui/adapters/demo/coding")
    expect(page.get_by_role("button", name="Review the move")).to_have_count(0)
    page.goto(f"{stack.url}/ui/publish")
    page.get_by_label("Namespace").fill("demo")
    page.get_by_label("Adapter name").fill("sneaky")
    page.get_by_label("PEFT folder").set_input_files(stack.peft_folder(tmp_path / "f"))
    page.get_by_role("button", name="Publish").click()
    expect(page.get_by_role("alert")).to_contain_text("may not publish to namespace 'demo'")
    with stack.api() as api:
        assert api.get("/v1/adapters/demo/sneaky").status_code == 404
    page.goto(f"{stack.url}/ui/adapters/demo/coding/alias?alias=stable&version=2")
    expect(page.get_by_role("alert")).to_contain_text("may not publish")


def test_forms_without_the_csrf_token_are_refused(admin: Page, stack: ConsoleStack) -> None:
    cookies = {c["name"]: c["value"] for c in admin.context.cookies()}
    assert {"mol_console", "mol_csrf"} <= set(cookies)
    session = next(c for c in admin.context.cookies() if c["name"] == "mol_console")
    assert session["httpOnly"]
    assert session["sameSite"] == "Strict"
    with httpx.Client(base_url=stack.url, cookies=cookies) as client:
        url = "/ui/adapters/demo/coding/alias"
        forged = client.post(url, data={"alias": "stable", "version": "2"})
        assert forged.status_code == 403
        assert "CSRF" in forged.text
        wrong = client.post(url, data={"alias": "stable", "version": "2", "csrf": "guess"})
        assert wrong.status_code == 403
        upload = client.post("/ui/publish/demo/x", files={"a": ("a", b"")})
        assert upload.status_code == 403
    with stack.api() as api:
        assert api.get("/v1/adapters/demo/coding").json()["aliases"]["stable"] == 1


def test_logout_ends_the_login(admin: Page, stack: ConsoleStack) -> None:
    page = admin
    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(f"{stack.url}/ui/login")
    assert "mol_console" not in {c["name"] for c in page.context.cookies()}
    page.goto(f"{stack.url}/ui/adapters")
    expect(page).to_have_url(re.compile(r"/ui/login\?next=/ui/adapters$"))


def _chat_usage(c: httpx.Client) -> tuple[int, int, int]:
    total = c.get("/v1/adapters/demo/chat/usage").json()["total"]
    return total["requests"], total["input_tokens"], total["output_tokens"]


def test_adapter_and_version_pages_show_usage(admin: Page, stack: ConsoleStack) -> None:
    """The pages show the catalog's usage totals. The stack is shared and its router
    reports other tests' requests on demo/chat in the background, so the totals are
    read from the API on both sides of the page load (again if a report landed)."""
    from datetime import UTC, datetime

    page = admin
    with httpx.Client(base_url=stack.url, timeout=30,
                      headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as c:
        before = _chat_usage(c)
        r = c.post("/v1/usage", json={"batch_id": "console-usage-1", "entries": [
            {"adapter": "demo/chat", "version": 1, "requests": 7, "input_tokens": 70,
             "output_tokens": 21, "last_used": datetime.now(UTC).isoformat()}]})
        assert r.status_code == 200, r.text
        for _ in range(5):
            total = _chat_usage(c)
            page.goto(f"{stack.url}/ui/adapters/demo/chat")
            facts = page.locator(".facts").inner_text()
            if _chat_usage(c) == total:
                break
        else:
            raise AssertionError("demo/chat's usage kept changing under the page")
    requests, tokens_in, tokens_out = total
    grew = (requests - before[0], tokens_in - before[1], tokens_out - before[2])
    assert all(g >= posted for g, posted in zip(grew, (7, 70, 21), strict=True)), grew
    assert f"{requests} requests, {tokens_in} input / {tokens_out} output tokens" in facts
    row = page.get_by_role("table", name="Versions, newest first").locator("tr", has_text="v1")
    expect(row.first).to_contain_text(str(requests))
    page.get_by_role("link", name="v1", exact=True).click()
    expect(page.locator(".facts")).to_contain_text("Use (30 days)")
    shown = re.search(r"(\d+) requests", page.locator(".facts").inner_text())
    assert shown is not None
    assert int(shown[1]) >= requests  # v1 is demo/chat's only version


LONG = "x" * 5000  # an adapter name far past the catalog's limits, as a user may paste one


@pytest.mark.parametrize("path", [
    f"/ui/adapters/demo/{LONG}",
    f"/ui/adapters/{LONG}/{LONG}",
    f"/ui/adapters/demo/{LONG}/versions/1",
    f"/ui/adapters?q={LONG}",
    f"/ui/adapters?namespace={LONG}",
    f"/ui/adapters/demo/coding/aliases/{LONG}?version=1",
])
def test_a_very_long_name_wraps_instead_of_widening_the_page(admin: Page, stack: ConsoleStack,
                                                             path: str) -> None:
    admin.set_viewport_size({"width": 1024, "height": 768})
    admin.goto(f"{stack.url}{path}")
    width = admin.evaluate("document.documentElement.scrollWidth")
    assert width <= 1024, f"{path[:60]}...: the page is {width} px wide"
