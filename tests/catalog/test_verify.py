"""``mol catalog verify`` / ``POST /v1/admin/verify`` against a real server, and a
publish storing a lost blob again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from mol_catalog.blobs import verify
from mol_catalog.cli import app
from mol_platform.clients.catalog import CatalogClient
from tests.blob_helpers import digest_of


def _mol(live: Any, *args: str) -> Any:
    return CliRunner().invoke(app, ["--catalog-url", live.url, "--token", live.admin_token,
                                    "verify", *args])


def test_verify_reports_missing_and_damaged_blobs(catalog_server_auth: Any, model: Any,
                                                  tmp_path: Path) -> None:
    live = catalog_server_auth
    headers = {"Authorization": f"Bearer {live.admin_token}"}
    assert httpx.post(f"{live.url}/v1/base-models", json=model.base_body(),
                      headers=headers).status_code == 201
    folders = []
    for seed in (1, 2):
        folder = tmp_path / f"a{seed}"
        folder.mkdir()
        cfg, weights = model.adapter(seed=seed)
        (folder / "adapter_config.json").write_bytes(cfg)
        (folder / "adapter_model.safetensors").write_bytes(weights)
        folders.append((folder, cfg, weights))
    with CatalogClient(live.url, live.admin_token) as client:
        for i, (folder, _, _) in enumerate(folders):
            client.publish(folder, f"acme/a{i}")
    blob_dir = live.blob_dir / "blobs" / "sha256"
    clean = _mol(live)
    assert clean.exit_code == 0, clean.output
    assert "checked 3 of 3 referenced blobs: 0 missing, 0 damaged" in clean.stdout

    lost = digest_of(folders[0][2])
    (blob_dir / lost[7:]).unlink()
    missing = _mol(live)
    assert missing.exit_code == 1
    assert f"{lost}: missing; used by acme/a0@v1" in missing.stdout
    report = json.loads(_mol(live, "-o", "json", "--no-content").stdout)
    assert [(b["digest"], b["versions"]) for b in report["missing"]] == [(lost, ["acme/a0@v1"])]
    assert report["ok"] is False
    assert json.loads(_mol(live, "-o", "json", "--sample", "1").stdout)["checked"] == 1

    with CatalogClient(live.url, live.admin_token) as client:
        again = client.publish(folders[0][0], "acme/a0")  # same files: heals the blob
        assert again.created is False
        assert client.verify().ok is True

    shared = digest_of(folders[0][1])  # both versions' config
    path = blob_dir / shared[7:]
    path.write_bytes(b"x" * path.stat().st_size)
    damaged = _mol(live)
    assert damaged.exit_code == 1
    assert f"{shared}: content hashes to" in damaged.stdout
    assert "acme/a0@v1, acme/a1@v1" in damaged.stdout
    assert _mol(live, "--no-content").exit_code == 0  # same size: only hashing tells
    denied = httpx.post(f"{live.url}/v1/admin/verify")
    assert denied.status_code == 401


async def test_verify_pages_through_every_blob(client: httpx.AsyncClient, model: Any,
                                               tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """In key-ordered batches (here of two) on both databases, sample or full."""
    monkeypatch.setattr(verify, "BATCH", 2)
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201
    pairs = [model.adapter(seed=s) for s in (1, 2, 3)]
    for i, pair in enumerate(pairs):
        r = await client.post(f"/v1/adapters/acme/a{i}/versions", files=model.files(pair))
        assert r.status_code == 201, r.text
    full = (await client.post("/v1/admin/verify")).json()
    assert (full["referenced"], full["checked"], full["ok"]) == (4, 4, True)
    lost = digest_of(pairs[2][1])
    (tmp_path / "blobs" / "blobs" / "sha256" / lost[7:]).unlink()
    full = (await client.post("/v1/admin/verify")).json()
    assert [(b["digest"], b["versions"], b["version_count"]) for b in full["missing"]] == [
        (lost, ["acme/a2@v1"], 1)]
    sampled = (await client.post("/v1/admin/verify", params={"sample": 3})).json()
    assert sampled["checked"] == 3
