"""Layout at a laptop's width: table headers keep their words whole (the page breaks
long user-given names anywhere, but a header's words are the page's own)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from mol_testkit.console import ConsoleStack

# Each word of each header: the rectangles of its characters lie on one line.
BROKEN_WORDS = """() => {
  const broken = [];
  for (const th of document.querySelectorAll("th")) {
    const walker = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.textContent.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set(Array.from(range.getClientRects(), (r) => Math.round(r.top)));
        if (tops.size > 1) broken.push(`${th.textContent.trim()}: ${m[0]}`);
      }
    }
    if (th.scrollWidth > th.clientWidth) broken.push(`${th.textContent.trim()}: overflows`);
  }
  return broken;
}"""

PAGES = ["/ui/adapters", "/ui/adapters/demo/coding", "/ui/adapters/demo/coding/versions/1",
         "/ui/adapters/demo/coding/alias?alias=stable&version=2", "/ui/stack"]


@pytest.mark.parametrize("width", [1280, 1024])
def test_table_headers_break_only_between_words(admin: Page, stack: ConsoleStack,
                                                width: int) -> None:
    admin.set_viewport_size({"width": width, "height": 800})
    tables = 0
    for path in PAGES:
        admin.goto(stack.url + path)
        tables += admin.locator("th").count()
        assert admin.evaluate(BROKEN_WORDS) == [], path
    assert tables > 20  # the pages did have their tables
