"""One seeded stack (catalog with auth on, simulated engine, router) for the session and
one headless chromium per test module; each test gets a fresh browser context (no
cookies). Tests of what a real router does not do on demand (a stream that breaks, an
HTML answer) use a router stand-in and a catalog of their own in front of it.

The browser is not kept for the whole session: Playwright's sync API runs an event
loop in the main thread while it lives, and the async tests of the modules that follow
could not start theirs. A launch costs about a second."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from mol_testkit.catalog import LiveCatalog
from mol_testkit.console import ADMIN_TOKEN, ConsoleStack, chromium, console_stack, login
from tests.console.fake_router import FakeRouter, fake_router

# Two shared cores: ReDoc's first render of the whole schema may take several seconds.
expect.set_options(timeout=15_000)


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleStack]:
    with console_stack(tmp_path_factory.mktemp("console")) as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context()
    context.set_default_timeout(15_000)
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture
def admin(page: Page, stack: ConsoleStack) -> Page:
    """A page logged in with the admin token."""
    login(page, stack.url, ADMIN_TOKEN)
    return page


@pytest.fixture(scope="module")
def router() -> Iterator[FakeRouter]:
    """The router stand-in (tests/console/fake_router.py)."""
    with fake_router() as running:
        yield running


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory, router: FakeRouter) -> Iterator[str]:
    """A catalog (auth on, nothing published) whose console shows ``router``; its URL."""
    live = LiveCatalog(tmp_path_factory.mktemp("console-fake-router"), admin_token=ADMIN_TOKEN,
                       env={"MOL_CATALOG_ROUTER_URL": router.url})
    live.start()
    try:
        yield live.url
    finally:
        live.stop()
