"""How console pages show a refused request (the catalog's error shape: ``detail`` and
``reasons``): every reason, once, with its code, whatever the error class."""

from __future__ import annotations

from html.parser import HTMLParser

from mol_catalog.console.render import refusal, templates
from mol_catalog.errors import Conflict, NotFound


class _Items(HTMLParser):
    """The text of each <li> and of the alert's first <p>."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[str] = []
        self.paragraphs: list[str] = []
        self._open: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("li", "p"):
            self._open = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("li", "p") and self._open is not None:
            (self.items if tag == "li" else self.paragraphs).append("".join(self._open).strip())
            self._open = None

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open.append(data)


def _shown(exc: Conflict | NotFound) -> _Items:
    parser = _Items()
    parser.feed(templates.get_template("refusal.html").render(**refusal(exc)))
    return parser


def test_a_409_with_reasons_lists_each_reason_with_its_code() -> None:
    exc = Conflict("alias stable of acme/chat is protected", reasons=[
        {"code": "protected_alias", "message": "stable moves only through a rollout"},
        {"code": "verdict_failed", "message": "v3 is incompatible with gpu-a <b>"}])
    shown = _shown(exc)
    assert shown.paragraphs == ["alias stable of acme/chat is protected"]
    assert shown.items == ["protected_alias stable moves only through a rollout",
                           "verdict_failed v3 is incompatible with gpu-a <b>"]  # escaped


def test_a_refusal_without_reasons_shows_its_detail_only() -> None:
    shown = _shown(Conflict("acme/chat v1 is yanked (x): an alias may not point at it"))
    assert shown.paragraphs == ["acme/chat v1 is yanked (x): an alias may not point at it"]
    assert shown.items == []


def test_reasons_of_another_shape_are_shown_as_text_or_dropped() -> None:
    exc = NotFound("gone", reasons=["plain words", 7, {"message": "no code"}])
    assert _shown(exc).items == ["plain words", "no code"]
    assert refusal(NotFound("gone", reasons="not a list"))["reasons"] == []
