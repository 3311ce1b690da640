"""Screenshots of every console page for docs/console.md (``make screenshots``).

Starts the same seeded stack as the browser tests (catalog, simulated engine, router;
mol_testkit.console), walks the pages in headless chromium and writes
docs/img/console/<page>.png. Needs the dev venv and Debian's chromium.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from playwright.sync_api import Page, expect

from mol_testkit.console import ADMIN_TOKEN, ConsoleStack, chromium, console_stack, login

OUT = Path(__file__).resolve().parents[1] / "docs" / "img" / "console"
VIEWPORT = {"width": 1280, "height": 860}


def shoot(page: Page, name: str) -> None:
    path = OUT / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"wrote {path.relative_to(OUT.parents[2])}")


def walk(page: Page, stack: ConsoleStack, work: Path) -> None:
    base = stack.url
    page.goto(f"{base}/ui/login")
    shoot(page, "login")
    login(page, base, ADMIN_TOKEN)
    page.goto(f"{base}/ui/adapters?namespace=lab")
    shoot(page, "adapters")
    page.goto(f"{base}/ui/adapters/demo/coding")
    shoot(page, "adapter")
    page.goto(f"{base}/ui/adapters/demo/coding/versions/2")
    shoot(page, "version")
    page.goto(f"{base}/ui/adapters/demo/coding/alias?alias=stable&version=2")
    shoot(page, "alias-move")
    page.get_by_role("button", name="Move @stable to v2").click()
    expect(page.locator("#feed")).to_contain_text("alias.moved")
    shoot(page, "adapter-event")
    page.goto(f"{base}/ui/publish")
    page.get_by_label("Namespace").fill("demo")
    page.get_by_label("Adapter name").fill("summarize")
    page.get_by_label("Alias (optional)").fill("stable")
    page.get_by_label("PEFT folder").set_input_files(stack.peft_folder(work / "summarize"))
    page.get_by_role("button", name="Publish").click()
    expect(page.get_by_role("status")).to_contain_text("Published")
    shoot(page, "publish")
    page.goto(f"{base}/ui/playground")
    page.get_by_label("Expert, auto or adapter").select_option("coding")
    page.get_by_role("button", name="Send").click()
    expect(page.locator("#chat-status")).to_contain_text("Done")
    shoot(page, "playground")
    page.goto(f"{base}/ui/stack")
    expect(page.locator('tr[data-expert="coding"] .ttft')).to_contain_text("ms")
    page.wait_for_timeout(2500)  # one refresh of the live figures
    shoot(page, "stack")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mol-console-") as tmp:
        work = Path(tmp)
        with console_stack(work / "stack") as stack, chromium() as browser:
            context = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
            context.set_default_timeout(20_000)
            walk(context.new_page(), stack, work)
            context.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
