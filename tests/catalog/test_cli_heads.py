"""``mol catalog head publish|list|show|alias set|alias rm`` against a real catalog
server (the one ``tests/catalog/test_cli.py`` starts with ``mol catalog serve``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mol_platform.clients.catalog import CatalogClient
from mol_router.auto.heads.model import Head, loads
from tests.catalog.test_cli import ADMIN, mol, server

__all__ = ["server"]  # the module fixture shared with test_cli


def write_head(path: Path, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    head = Head(("code", "math"), rng.normal(size=(2, 3)), rng.normal(size=2), 1.0, 0.5,
                "minilm", training={"source": "labels.jsonl",
                                    "crossValidation": {"accuracy": 0.875}})
    path.write_bytes(json.dumps(head.to_json(), indent=1).encode())  # not canonical
    return path


def test_publish_list_show_and_aliases(server: str, tmp_path: Path) -> None:
    first = write_head(tmp_path / "h1.json", 1)
    out = mol(server, "head", "publish", first, "hc/chat", "--alias", "canary")
    assert out.exit_code == 0, out.stderr
    line, moved = out.stdout.splitlines()
    assert line.startswith("published hc/chat v1 sha256:")
    digest = line.split()[-1]
    assert moved == "hc/chat@canary -> v1"
    again = mol(server, "head", "publish", first, "hc/chat")
    assert again.stdout.strip() == line  # the same file: the same version
    data = json.loads(mol(server, "head", "publish", write_head(tmp_path / "h2.json", 2),
                          "hc/chat", "-o", "json").stdout)
    assert data["version"]["version"] == 2
    assert data["alias"] is None

    r = mol(server, "head", "alias", "set", "hc/chat@stable", "v2")
    assert (r.exit_code, r.stdout.strip()) == (0, "hc/chat@stable -> v2")
    r = mol(server, "head", "alias", "set", "hc/chat@stable", "1")
    assert r.stdout.strip() == "hc/chat@stable -> v1 (was v2)"

    listed = mol(server, "head", "list", "hc")
    assert listed.exit_code == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split() == ["NAME", "LATEST", "DIGEST", "EXPERTS", "ALIASES"]
    assert row.split() == ["chat", "v2", data["version"]["digest"][:19], "code,math",
                           "canary=v1,stable=v1"]
    versions = mol(server, "head", "list", "hc/chat").stdout.splitlines()
    assert [v.split()[0] for v in versions[1:]] == ["v2", "v1"]
    assert versions[2].split()[-1] == "canary,stable"

    shown = mol(server, "head", "show", "hc/chat@stable")
    assert shown.exit_code == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == "hc/chat v1 (@stable)"
    assert f"digest:      {digest}" in shown.stdout
    assert "embedding:   minilm (3 dims)" in shown.stdout
    assert '"accuracy": 0.875' in shown.stdout
    as_json = json.loads(mol(server, "head", "show", "hc/chat@2", "-o", "json").stdout)
    assert (as_json["version"], as_json["source"]) == (2, "labels.jsonl")

    r = mol(server, "head", "alias", "rm", "hc/chat@canary")
    assert (r.exit_code, r.stdout.strip()) == (0, "removed hc/chat@canary (was v1)")
    with CatalogClient(server, ADMIN) as client:
        assert [a.alias for a in client.router_head_aliases("hc", "chat")] == ["stable"]
        document = client.router_head_document("hc", "chat", 1)
    assert loads(document).digest() == digest  # the router reads what was published


def test_bad_input_is_one_line_and_exit_1(server: str, tmp_path: Path) -> None:
    good = write_head(tmp_path / "h.json", 3)
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "mol.router.head/v1", "experts": ["code"]}')
    cases = [
        (("head", "publish", bad, "hb/chat"), "experts must be a list of 2 to 64"),
        (("head", "publish", tmp_path / "missing.json", "hb/chat"), "cannot read"),
        (("head", "publish", good, "hb"), "name the head, NS/NAME"),
        (("head", "publish", good, "hb/chat_1"), "invalid router head name 'chat_1'"),
        (("head", "show", "hb/chat"), "NS/NAME@ALIAS"),
        (("head", "show", "hb/chat@stable"), "no router head 'chat'"),
        (("head", "alias", "set", "hb/chat@3", "1"), "name an alias, not a version"),
        (("head", "alias", "rm", "hb/chat@latest"), "reserved"),
        (("head", "list", "Hb"), "invalid namespace"),
    ]
    for args, words in cases:
        r = mol(server, *args)
        assert r.exit_code == 1, (args, r.stdout)
        assert words in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert mol(server, "head", "publish", good, "hb/chat").exit_code == 0
    r = mol(server, "head", "alias", "set", "hb/chat@stable", "9")
    assert (r.exit_code, "has no version 9" in r.stderr) == (1, True)
    r = mol(server, "head", "alias", "set", "hb/chat@stable", "x")
    assert r.exit_code == 2  # a usage error: not a version
    r = mol(server, "head", "publish", good, "hb/chat", token=None)
    assert r.exit_code == 1
    assert "401" in r.stderr
