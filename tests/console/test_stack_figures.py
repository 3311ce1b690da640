"""The stack page's live figures, read from the router's own metrics registry: time to
first token exists only for streamed answers, so an expert that served whole answers
shows its answer time and says that no request was streamed, rather than "none yet"."""

from __future__ import annotations

from playwright.sync_api import Page, expect
from prometheus_client import generate_latest

from mol_catalog.console import stack
from mol_router.telemetry.metrics import RouterMetrics
from mol_testkit.console import ADMIN_TOKEN, login
from tests.console.fake_router import FakeRouter


def _serve(metrics: RouterMetrics, expert: str, *, streamed: bool, seconds: float = 0.4,
           ttft: float = 0.05) -> None:
    """One answered request, recorded as the router records it."""
    metrics.request_done(expert, f"demo/{expert}", "1", "local", 200, seconds, None)
    if streamed:
        metrics.first_token(expert, "1", f"demo/{expert}", "local", ttft, None)


def _figures(metrics: RouterMetrics, url: str) -> dict[str, dict[str, object]]:
    now = stack._sample(generate_latest(metrics.registry).decode())
    return {e: stack.shown(live) for e, live in stack._rates(url, now).items()}


def test_whole_answers_have_an_answer_time_and_no_ttft() -> None:
    metrics = RouterMetrics("demo")
    for _ in range(7):
        _serve(metrics, "chat", streamed=False)
    figures = _figures(metrics, "http://router.test/whole")
    chat = figures["chat"]
    assert chat["requests"] == 7
    assert chat["streamed"] == 0
    assert chat["ttft_ms"] is None
    assert chat["ttft_text"] == "no streamed requests yet"
    assert chat["latency_text"] == "400 ms"


def test_streamed_answers_have_a_ttft_and_later_scrapes_average_what_is_new() -> None:
    metrics = RouterMetrics("demo")
    url = "http://router.test/streamed"
    _serve(metrics, "coding", streamed=True, ttft=0.05)
    assert _figures(metrics, url)["coding"]["ttft_text"] == "50 ms"
    _serve(metrics, "coding", streamed=True, ttft=0.25, seconds=1.0)
    coding = _figures(metrics, url)["coding"]
    assert coding["ttft_text"] == "250 ms"  # the one answered since the previous read
    assert coding["latency_text"] == "1000 ms"
    assert isinstance(coding["rate"], float)
    assert coding["rate"] > 0
    coding = _figures(metrics, url)["coding"]  # nothing new: the mean since the start
    assert coding["ttft_text"] == "150 ms"
    assert coding["rate"] == 0


def test_an_expert_without_requests_says_so() -> None:
    assert stack.shown({"requests": 0.0, "streamed": 0.0, "rate": None, "ttft_ms": None,
                        "latency_ms": None})["ttft_text"] == "no requests yet"


def test_the_stack_page_shows_why_there_is_no_ttft(page: Page, catalog: str,
                                                   router: FakeRouter) -> None:
    for _ in range(7):
        _serve(router.metrics, "chat", streamed=False)
    _serve(router.metrics, "coding", streamed=True)
    login(page, catalog, ADMIN_TOKEN)
    page.goto(f"{catalog}/ui/stack")
    chat = page.locator('tr[data-expert="chat"]')
    expect(chat.locator(".count")).to_have_text("7")
    expect(chat.locator(".ttft")).to_have_text("no streamed requests yet")
    expect(chat.locator(".latency")).to_have_text("400 ms")
    expect(page.locator('tr[data-expert="coding"] .ttft')).to_have_text("50 ms")
    expect(page.locator('tr[data-expert="ui"] .ttft')).to_have_text("no requests yet")
    # the refresh (every 2 s) keeps the same texts
    _serve(router.metrics, "chat", streamed=False)
    expect(chat.locator(".count")).to_have_text("8")
    expect(chat.locator(".ttft")).to_have_text("no streamed requests yet")
