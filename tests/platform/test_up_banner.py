"""The stack's banner leads with what to try next (the console, a ``model: auto``
request, how to read what decided, ``mol router explain``), then the endpoint and each
part's details."""

from __future__ import annotations

import shlex
from pathlib import Path

from mol_platform.apps.up.banner import AUTO_PROMPT, stack_banner
from mol_platform.apps.up.stack import load_spec
from mol_platform.contract.spec import MoLDeployment

EXAMPLE = Path(__file__).parents[2] / "deploy" / "examples" / "macaron-local.yaml"
ROUTER, ENGINE, CATALOG = "http://127.0.0.1:8000", "http://127.0.0.1:8001", \
    "http://127.0.0.1:8080"


def _banner(obj: MoLDeployment, data_dir: Path) -> list[str]:
    text = stack_banner(obj, ROUTER, ENGINE, CATALOG, data_dir, None,
                        {"demo/chat@stable": 1}, False, "http://127.0.0.1:8002", None, "demo")
    return [line.strip() for line in text.splitlines()]


def _index(lines: list[str], start: str) -> int:
    return next(i for i, line in enumerate(lines) if line.startswith(start))


def test_what_to_try_next_comes_before_the_details(tmp_path: Path) -> None:
    lines = _banner(load_spec(EXAMPLE), tmp_path)
    assert lines[1].startswith("MoL Platform is up: macaron-local")
    assert lines[2].startswith(f"try next  the console: {CATALOG}/ui ")
    auto = _index(lines, "curl ")
    assert '"model": "auto"' in lines[auto]
    assert '"router"' not in lines[auto]
    assert lines[auto - 1].startswith(
        "# the router picks (semantic-then-classifier mode: keywords first")
    assert "x-mol-route: what decided" in lines[auto + 1]
    explain = _index(lines, "# why:") + 1
    argv = shlex.split(lines[explain])
    assert argv[1:] == ["router", "explain", "-c", str(tmp_path.resolve() / "router.yaml"),
                        AUTO_PROMPT]
    named = _index(lines, f"endpoint  {ROUTER}/v1")
    assert explain < named < _index(lines, "engine ") < _index(lines, "catalog ")
    assert '"router": "coding"' in lines[named + 2]
    assert sum(line.startswith("curl ") for line in lines) == 3  # two chats, the catalog
    assert sum("/ui" in line for line in lines) == 1  # the console once, at the top


def test_without_the_semantic_signal_there_is_nothing_to_explain(tmp_path: Path) -> None:
    obj = load_spec(EXAMPLE)
    plain = obj.model_copy(update={"spec": obj.spec.model_copy(update={
        "router": obj.spec.router.model_copy(update={"semantic": None})})})
    lines = _banner(plain, tmp_path)
    assert not any("router explain" in line for line in lines)
    assert lines[2].startswith("try next  the console:")
