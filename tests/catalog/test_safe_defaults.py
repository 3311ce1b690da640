"""Safe defaults: no unauthenticated catalog on the network by accident, download URLs
never taken from the Host header, unreadable blobs indistinguishable from missing ones."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from mol_catalog.cli import app as catalog_cli
from mol_catalog.server import InsecureBind, check_exposure
from mol_platform.clients.catalog import CatalogClient, CatalogError, join_url
from mol_platform.clients.catalog_async import AsyncCatalogClient
from mol_testkit.net import free_port, stop_process, wait_port
from tests.catalog.test_api import publish, setup_base
from tests.catalog.test_auth import ADMIN, bearer, token


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.5", "::1", "[::1]", "localhost"])
def test_no_auth_is_fine_on_loopback(host: str) -> None:
    assert check_exposure(host, auth_enabled=False, insecure=False) is False


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "catalog.internal"])
def test_no_auth_on_the_network_needs_the_insecure_flag(host: str) -> None:
    with pytest.raises(InsecureBind, match="--insecure-no-auth"):
        check_exposure(host, auth_enabled=False, insecure=False)
    assert check_exposure(host, auth_enabled=False, insecure=True) is True  # serve warns
    assert check_exposure(host, auth_enabled=True, insecure=False) is False


def test_insecure_no_auth_on_the_network_warns_loudly(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOL_CATALOG_")}
    cmd = [sys.executable, "-m", "mol_platform", "catalog", "serve", "--host", "0.0.0.0",
           "--port", str(port), "--db", f"sqlite:///{tmp_path / 'c.db'}", "--blobs",
           f"file://{tmp_path / 'b'}", "--no-auth", "--insecure-no-auth",
           "--log-level", "warning"]
    with (tmp_path / "log").open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env=env)
    try:
        wait_port(port, timeout=60)
    finally:
        stop_process(proc)
    err = (tmp_path / "log").read_text()
    assert "WARNING mol_catalog: authentication is OFF on 0.0.0.0 (--insecure-no-auth)" in err
    assert "auth OFF ON A NON-LOOPBACK ADDRESS: EVERY CALLER IS ADMIN" in err


def test_serve_refuses_before_listening(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOL_CATALOG_AUTH", "on")  # serve() exports its overrides
    result = CliRunner().invoke(catalog_cli, ["serve", "--host", "0.0.0.0", "--no-auth",
                                              "--db", "sqlite:////nonexistent/x.db"])
    assert result.exit_code == 2
    assert "refusing to serve without authentication on 0.0.0.0" in result.output
    assert "--insecure-no-auth" in result.output


async def test_download_urls_ignore_the_host_header(make_client: Any, model: Any) -> None:
    plain = await make_client()
    await setup_base(plain, model)
    assert (await publish(plain, model)).status_code == 201
    r = await plain.get("/v1/resolve/acme/coding@v1", headers={"Host": "evil.example"})
    urls = [f["url"] for f in r.json()["files"]]
    assert all(u.startswith("/v1/blobs/sha256/") for u in urls), urls
    assert (await plain.get(urls[0])).status_code == 200
    public = await make_client(public_url="https://models.example.com/catalog/")
    r = await public.get("/v1/resolve/acme/coding@v1", headers={"Host": "evil.example"})
    assert all(f["url"].startswith("https://models.example.com/catalog/v1/blobs/sha256/")
               for f in r.json()["files"])


def test_clients_join_relative_urls_to_the_catalog_url() -> None:
    assert join_url("http://c:8080/cat/", "/v1/blobs/sha256/ab") == \
        "http://c:8080/cat/v1/blobs/sha256/ab"
    signed = "https://bucket.s3.example/blobs/sha256/ab?X-Amz-Signature=1"
    assert join_url("http://c:8080", signed) == signed

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={
            "adapter": "acme/coding", "version": 1, "digest": "sha256:cd", "status": "ready",
            "yank_reason": None, "base": "b@1", "verdict": None, "signature": None,
            "signed_by": None, "signer_key": None, "signer_revoked": False,
            "signature_required": False,
            "files": [{"path": "a", "digest": "sha256:ab", "size": 1,
                       "url": "/v1/blobs/sha256/ab"}]})

    with CatalogClient("http://catalog.test:8080/prefix", "t",
                       transport=httpx.MockTransport(handler)) as client:
        files = client.resolve("acme/coding@v1").files
    assert files[0].url == "http://catalog.test:8080/prefix/v1/blobs/sha256/ab"


async def test_unreadable_blob_is_a_404_naming_no_namespace(make_client: Any,
                                                            model: Any) -> None:
    admin = await make_client(auth="on", admin_token=ADMIN)
    admin.headers["Authorization"] = f"Bearer {ADMIN}"
    await setup_base(admin, model)
    assert (await publish(admin, model, path="/v1/adapters/secret-team/coding")).status_code \
        == 201
    url = (await admin.get("/v1/resolve/secret-team/coding@v1")).json()["files"][0]["url"]
    outsider = await token(admin, "other", "read:other")
    r = await admin.get(url, headers=bearer(outsider))
    assert r.status_code == 404
    assert "secret-team" not in r.text
    missing = await admin.get("/v1/blobs/sha256/" + "0" * 64, headers=bearer(outsider))
    assert missing.status_code == 404
    assert missing.json()["error"] == r.json()["error"]
    assert (await admin.get(url)).status_code == 200
    insider = await token(admin, "team", "read:secret-team")
    assert (await admin.get(url, headers=bearer(insider))).status_code == 200


async def test_a_failed_download_shows_no_signature_and_names_its_source(
        tmp_path: Path) -> None:
    """S3 down: the presigned URL the catalog gave is shown without its query (the
    signature is a credential), as given by the catalog, with the store as what failed."""
    store = f"http://127.0.0.1:{free_port()}"
    url = f"{store}/bucket/blobs/sha256/ab?X-Amz-Credential=AKIA&X-Amz-Signature=5ecre7"
    catalog_url = f"http://127.0.0.1:{free_port()}"
    with CatalogClient(catalog_url) as sync, pytest.raises(CatalogError) as caught:
        sync.download(url, tmp_path / "f")
    async with AsyncCatalogClient(catalog_url) as client:
        with pytest.raises(CatalogError) as caught_async:
            await client.download(url, tmp_path / "g")
    for message in (str(caught.value), str(caught_async.value)):
        assert "5ecre7" not in message
        assert "AKIA" not in message
        assert (f"cannot download {store}/bucket/blobs/sha256/ab?<signature redacted> (a "
                f"download URL given by the catalog at {catalog_url}): the blob store"
                in message)
