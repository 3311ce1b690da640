"""``mol catalog tools publish|list|show|approve`` against a real catalog server (the one
``tests/catalog/test_cli.py`` starts with ``mol catalog serve``), auth on: a publish
token proposes, only the admin approves."""

from __future__ import annotations

import json
from pathlib import Path

from mol_platform.clients.catalog import CatalogClient
from tests.catalog.test_cli import ADMIN, mol, server

__all__ = ["server"]  # the module fixture shared with test_cli

SOURCE = 'def add(a: int, b: int) -> int:\n    """Add two integers."""\n    return a + b\n'
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"},
                                           "b": {"type": "integer"}}, "required": ["a", "b"]}


def test_publish_list_show_approve(server: str, tmp_path: Path) -> None:
    (tmp_path / "add.py").write_text(SOURCE)
    (tmp_path / "add.json").write_text(json.dumps(SCHEMA))
    with CatalogClient(server, ADMIN) as admin:
        session = admin.create_token("tool-session", ["publish:tc"]).token
    out = mol(server, "tools", "publish", tmp_path / "add.py", "tc/add", "--parameters",
              tmp_path / "add.json", "--session", "s-9", "--expert", "agent", token=session)
    assert out.exit_code == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("proposed tc/add v1 sha256:")
    assert "  pass     parses: the source parses as Python" in lines
    assert any(line.startswith("  not run  example_runs:") for line in lines)
    assert lines[-1] == "approve it (admin): mol catalog tools approve tc/add@1"

    listed = mol(server, "tools", "list", "tc").stdout.splitlines()
    assert [row.split() for row in listed] == [
        ["NAME", "LATEST", "APPROVED", "FAILED", "CHECKS", "SESSION"],
        ["add", "v1", "-", "-", "s-9"]]
    refused = mol(server, "tools", "approve", "tc/add@1", token=session)
    assert refused.exit_code == 1
    assert "needs scope 'admin'" in refused.stderr
    approved = mol(server, "tools", "approve", "tc/add@v1")
    assert (approved.exit_code, approved.stdout.strip()) == (0, "tc/add@approved -> v1")
    shown = mol(server, "tools", "show", "tc/add").stdout
    assert shown.startswith("tc/add v1 (approved)\n")
    assert "lineage:     session_id=s-9, expert=agent" in shown
    assert "    def add(a: int, b: int) -> int:" in shown
    data = json.loads(mol(server, "tools", "show", "tc/add@1", "-o", "json").stdout)
    assert (data["approved"], data["lineage"]["session_id"]) == (True, "s-9")
    gone = mol(server, "tools", "approve", "tc/add", "--withdraw")
    assert gone.stdout.strip() == "tc/add@approved withdrawn (was v1)"
    bad = mol(server, "tools", "approve", "tc/add")
    assert bad.exit_code == 1
    assert "name the version" in bad.stderr
    assert mol(server, "tools", "list", "tc/Add").exit_code == 1
