"""The stack page and the playground against a real router in front of the simulator,
and the accessibility of every page (axe-core: no serious or critical violation)."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import Page, expect

from mol_testkit.console import ConsoleStack, axe_violations


def test_playground_streams_an_answer_with_the_routing_headers(admin: Page,
                                                               stack: ConsoleStack) -> None:
    page = admin
    page.goto(f"{stack.url}/ui/playground")
    options = page.get_by_label("Expert, auto or adapter").locator("option")
    expect(options).to_contain_text(["chat", "coding", "auto", "acme/support@latest"])
    page.get_by_label("Expert, auto or adapter").select_option("chat")
    page.get_by_role("button", name="Send").click()
    expect(page.locator("#h-expert")).to_have_text("chat")
    expect(page.locator("#h-version")).to_have_text("demo/chat@v1")
    expect(page.locator("#h-route")).to_have_text("model")
    expect(page.locator("#chat-status")).to_contain_text("Done: first token after")
    assert page.locator("#answer").inner_text().strip()

    page.get_by_label("Expert, auto or adapter").select_option("acme/support@latest")
    page.get_by_role("button", name="Send").click()
    expect(page.locator("#h-version")).to_have_text("acme/support@v1")
    expect(page.locator("#h-route")).to_have_text("adapter")
    expect(page.locator("#chat-status")).to_contain_text("Done")


def test_playground_shows_a_handoff_between_experts(admin: Page, stack: ConsoleStack) -> None:
    """chat calls the router's handoff tool (scripted on the engine): the streamed answer
    comes from coding, and the playground says the request was handed over."""
    rule = {"model": "demo/chat@v1", "when_prompt_contains": "hand this over", "times": 1,
            "tool_call": {"name": "handoff",
                          "arguments": {"expert": "coding", "summary": "wants a parser"}}}
    httpx.post(f"{stack.engine_url}/sim/script", json=rule, timeout=10).raise_for_status()
    page = admin
    page.goto(f"{stack.url}/ui/playground")
    page.get_by_label("Expert, auto or adapter").select_option("chat")
    page.get_by_label("Message").fill("please hand this over to whoever writes parsers")
    with page.expect_response(re.compile("/ui/playground/chat")) as answer:
        page.get_by_role("button", name="Send").click()
    expect(page.locator("#chat-status")).to_contain_text("Done: first token after")
    expect(page.locator("#h-handoff")).to_have_text(
        re.compile(r"^chat → coding \(demo/coding@v[12]\)$"))
    assert page.locator("#answer").inner_text().strip()
    assert answer.value.headers["x-mol-expert"] == "chat"  # headers leave before the hop
    scripts = httpx.get(f"{stack.engine_url}/sim/script", timeout=10).json()
    assert not scripts["rules"]  # the rule was used (times=1), so the tool call did happen
    # the next request is not handed off: the display starts from "none" again
    page.get_by_label("Message").fill("hello")
    page.get_by_role("button", name="Send").click()
    expect(page.locator("#chat-status")).to_contain_text("Done")
    expect(page.locator("#h-handoff")).to_have_text("none")


def test_playground_shows_the_routers_refusal(admin: Page, stack: ConsoleStack) -> None:
    with admin.expect_response(re.compile("/ui/playground/chat")) as answer:
        status = admin.evaluate("""async () => {
            const csrf = document.querySelector('meta[name="csrf-token"]');
            const r = await fetch('/ui/playground/chat', {method: 'POST',
              headers: {'content-type': 'application/json', 'x-csrf-token': csrf.content},
              body: JSON.stringify({model: 'nobody', messages: [{role: 'user', content: 'hi'}]})});
            return r.status; }""")
    assert status == 404
    assert "nobody" in answer.value.text()


def test_stack_page_shows_experts_versions_rates_and_engines(admin: Page,
                                                             stack: ConsoleStack) -> None:
    page = admin
    page.goto(f"{stack.url}/ui/stack")
    coding = page.locator('tr[data-expert="coding"]')
    expect(coding).to_contain_text("demo/coding@stable → demo/coding@v1")
    expect(coding).to_contain_text("demo/coding@v2")
    expect(coding).to_contain_text("at 20.0%")
    engines = page.get_by_role("table", name="Engine replicas and their resident adapters")
    expect(engines).to_contain_text("127.0.0.1")
    expect(engines.locator("tbody tr td").nth(1)).to_have_text("yes")
    # traffic through the router shows up in the live figures
    page.evaluate("""async () => {
        const csrf = document.querySelector('meta[name="csrf-token"]').content;
        for (let i = 0; i < 3; i++) {
          const r = await fetch('/ui/playground/chat', {method: 'POST',
            headers: {'content-type': 'application/json', 'x-csrf-token': csrf},
            body: JSON.stringify({model: 'coding', max_tokens: 4, stream: true,
                                  messages: [{role: 'user', content: 'hi'}]})});
          await r.text();
        } }""")
    expect(coding.locator(".ttft")).to_have_text(re.compile(r"^\d+ ms$"))
    expect(coding.locator(".count")).not_to_have_text("0")
    expect(engines).to_contain_text("demo/coding@v")


PAGES = ["/ui/login", "/ui/adapters", "/ui/adapters?namespace=lab",
         "/ui/adapters/demo/coding", "/ui/adapters/demo/coding/versions/1",
         "/ui/adapters/demo/coding/alias?alias=stable&version=2", "/ui/publish", "/ui/stack",
         "/ui/playground", "/ui/adapters/nobody/here"]


@pytest.mark.parametrize("path", PAGES)
def test_no_serious_accessibility_violations(admin: Page, stack: ConsoleStack,
                                             path: str) -> None:
    if path == "/ui/login":
        admin.context.clear_cookies()
    admin.goto(stack.url + path)
    found = axe_violations(admin)
    assert not found, [(v["id"], v["impact"], [n["target"] for n in v["nodes"]])
                       for v in found]


LOADED = {"document", "script", "stylesheet", "fetch", "xhr", "font"}


def test_api_docs_load_offline(page: Page, stack: ConsoleStack) -> None:
    """/docs and /redoc load every script and style from the catalog itself (ReDoc's
    footer logo, an image, comes from its CDN and is only missing offline)."""
    foreign: list[str] = []
    page.on("request", lambda r: foreign.append(r.url) if r.resource_type in LOADED
            and not r.url.startswith((stack.url, "blob:")) else None)
    page.goto(f"{stack.url}/docs")
    expect(page.locator(".swagger-ui .opblock").first).to_be_visible()
    expect(page.get_by_text("/v1/adapters/{ns}/{name}/versions").first).to_be_visible()
    page.goto(f"{stack.url}/redoc")
    expect(page.get_by_text("MoL catalog").first).to_be_visible()
    assert foreign == []
