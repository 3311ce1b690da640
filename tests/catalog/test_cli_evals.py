"""``mol catalog eval attach|list``, ``show`` with eval reports and lineage, and
``publish --parent REF``, against a real catalog server."""

from __future__ import annotations

import json
from pathlib import Path

from mol_platform.clients.catalog import CatalogClient
from tests.catalog.test_cli import ADMIN, base, demo, mol, server

__all__ = ["base", "demo", "server"]  # module fixtures shared with test_cli
DATASET = "sha256:" + "cd" * 32


def test_attach_list_and_show(server: str, demo: Path, base: str, tmp_path: Path) -> None:
    assert mol(server, "publish", demo / "adapters" / "chat", "--name", "ev/chat", "--base",
               base, "--alias", "stable").exit_code == 0
    report = tmp_path / "report.md"
    report.write_text("# chat-suite\nall good\n")
    out = mol(server, "eval", "attach", "ev/chat@stable", "--suite", "chat-suite",
              "--suite-version", "3", "--metrics", '{"win_rate": 0.55, "pass@1": 1}',
              "--dataset-digest", DATASET, "--judge-model", "judge-7b", "--report", report)
    assert out.exit_code == 0, out.stderr
    assert out.stdout.strip() == "attached: ev/chat v1 chat-suite 3: pass@1=1, win_rate=0.55"
    again = mol(server, "eval", "attach", "ev/chat@v1", "--suite", "chat-suite",
                "--suite-version", "3", "--metrics", '{"win_rate": 0.6}')
    assert again.stdout.startswith("replaced: ")
    listed = json.loads(mol(server, "eval", "list", "ev/chat@v1", "-o", "json").stdout)
    assert [(r["suite"], r["metrics"], r["report_digest"]) for r in listed] == [
        ("chat-suite", {"win_rate": 0.6}, None)]
    shown = mol(server, "show", "ev/chat")
    assert shown.exit_code == 0, shown.stderr
    assert "evals:" in shown.stdout
    assert "chat-suite" in shown.stdout
    assert "win_rate=0.6" in shown.stdout
    data = json.loads(mol(server, "show", "ev/chat", "-o", "json").stdout)
    assert data["versions"][0]["evals"][0]["suite_version"] == "3"
    with CatalogClient(server, ADMIN) as client:
        mol(server, "eval", "attach", "ev/chat@v1", "--suite", "chat-suite", "--suite-version",
            "4", "--metrics", '{"x": 2}', "--report", report)
        assert client.eval_report_text("ev/chat", 1, "chat-suite", "4") == report.read_text()


def test_attach_refuses_bad_input_with_one_line(server: str, demo: Path, base: str) -> None:
    assert mol(server, "publish", demo / "adapters" / "chat", "--name", "ev/bad", "--base",
               base).exit_code == 0
    cases = [("--metrics", "[1, 2]"), ("--metrics", '{"m": NaN}'),
             ("--metrics", '{"m": "high"}'), ("--metrics", "not json")]
    for option, value in cases:
        r = mol(server, "eval", "attach", "ev/bad@v1", "--suite", "s", option, value)
        assert r.exit_code == 2, (value, r.stdout)
    r = mol(server, "eval", "attach", "ev/bad@v1", "--suite", "Bad Suite", "--metrics",
            '{"m": 1}')
    assert r.exit_code == 1
    assert "invalid suite name 'Bad Suite'" in r.stderr
    r = mol(server, "eval", "attach", "ev/bad@v9", "--suite", "s", "--metrics", '{"m": 1}')
    assert r.exit_code == 1
    assert "no version 9" in r.stderr


def test_publish_parent_takes_a_reference(server: str, demo: Path, base: str) -> None:
    first = mol(server, "publish", demo / "adapters" / "chat", "--name", "ev/line", "--base",
                base, "--alias", "candidate")
    assert first.exit_code == 0, first.stderr
    child = mol(server, "publish", demo / "adapters" / "coding", "--name", "ev/line", "--base",
                base, "--parent", "ev/line@candidate", "-o", "json")
    assert child.exit_code == 0, child.stderr
    assert json.loads(child.stdout)["version"] == 2
    with CatalogClient(server, ADMIN) as client:
        assert client.get_version("ev/line", 2).parent == 1
    shown = mol(server, "show", "ev/line").stdout
    assert "PARENT" in shown
    assert "v1" in shown.split("v2", 1)[1].splitlines()[0]
    other = mol(server, "publish", demo / "adapters" / "chat", "--name", "ev/line", "--base",
                base, "--parent", "ev/other@v1")
    assert other.exit_code == 1
    assert "a lineage parent is a version of ev/line itself" in other.stderr
    assert mol(server, "publish", demo / "adapters" / "chat", "--name", "ev/line", "--base",
               base, "--parent", "v1").exit_code == 0
