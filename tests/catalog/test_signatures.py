"""Signed publishes (SQLite and Postgres): keys per namespace, the signature policy, and
every way a signature is refused (422 with a reason code, nothing stored)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from mol_catalog.cli.signing import sign_folder
from mol_testkit.signing import (
    KeyPair,
    make_key,
    payload_of,
    sign_with_library,
    with_payload,
    write_adapter,
)

NS = "acme"
URL = f"/v1/adapters/{NS}/coding/versions"


@pytest.fixture
async def ready(client: httpx.AsyncClient, model: Any) -> httpx.AsyncClient:
    assert (await client.post("/v1/base-models", json=model.base_body())).status_code == 201
    return client


async def add_key(client: httpx.AsyncClient, key: KeyPair, name: str = "release",
                  ns: str = NS) -> str:
    r = await client.post(f"/v1/namespaces/{ns}/keys",
                          json={"name": name, "public_key": key.public_pem})
    assert r.status_code == 201, r.text
    kid: str = r.json()["key_id"]
    return kid


async def require(client: httpx.AsyncClient, keys: list[str] | None = None) -> None:
    r = await client.put(f"/v1/namespaces/{NS}/signature-policy",
                         json={"require_signatures": True, "keys": keys})
    assert r.status_code == 200, r.text


def form(model: Any, files: tuple[bytes, bytes], signature: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"files": model.files(files)}
    if signature is not None:
        out["data"] = {"signature": signature}
    return out


async def refused(client: httpx.AsyncClient, model: Any, files: tuple[bytes, bytes],
                  signature: str | None, reason: str, tmp_path: Path) -> str:
    """Publish, expect 422 with ``reason``, and check nothing was stored."""
    r = await client.post(URL, **form(model, files, signature))
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error"] == "SignatureRejected"
    assert body["reason"] == reason, body
    assert (await client.get(f"/v1/adapters/{NS}/coding")).status_code == 404
    assert [e for e in (await client.get("/v1/events")).json()["items"]
            if e["type"] == "version.published"] == []
    blobs = tmp_path / "blobs"
    assert not blobs.exists() or not [p for p in blobs.rglob("*") if p.is_file()]
    detail: str = body["detail"]
    return detail


async def test_signed_publish_travels_with_the_version(ready: httpx.AsyncClient, model: Any,
                                                       tmp_path: Path) -> None:
    key = make_key(tmp_path / "keys")
    kid = await add_key(ready, key)
    assert kid == hashlib.sha256(key.public_pem.encode()).hexdigest()
    await require(ready)
    files = model.adapter()
    folder = write_adapter(tmp_path / "coding", files)
    (folder / "README.md").write_text("not uploaded, so not signed")
    signature = sign_folder(folder, key.private_path)
    r = await ready.post(URL, **form(model, files, signature))
    assert r.status_code == 201, r.text
    v = (await ready.get(f"{URL}/1")).json()
    assert (v["signed"], v["signed_by"], v["signature"]) == (True, kid, signature)
    item = (await ready.get(URL)).json()["items"][0]
    assert (item["signed"], item["signed_by"]) == (True, kid)
    res = (await ready.get(f"/v1/resolve/{NS}/coding@v1")).json()
    assert (res["signature"], res["signed_by"], res["signer_revoked"]) == (signature, kid,
                                                                          False)
    assert res["signer_key"] == key.public_pem
    assert res["signature_required"] is False  # no profile asked
    # Revoking the key later leaves the version signed; resolve says the key is revoked.
    r = await ready.post(f"/v1/namespaces/{NS}/keys/{kid}/revoke")
    assert r.status_code == 200
    assert r.json()["revoked_at"] is not None
    res = (await ready.get(f"/v1/resolve/{NS}/coding@v1")).json()
    assert res["signer_revoked"] is True


async def test_unsigned_publish_is_allowed_without_a_policy(ready: httpx.AsyncClient,
                                                            model: Any) -> None:
    r = await ready.post(URL, files=model.files(model.adapter()))
    assert r.status_code == 201, r.text
    v = (await ready.get(f"{URL}/1")).json()
    assert (v["signed"], v["signed_by"], v["signature"]) == (False, None, None)
    policy = (await ready.get(f"/v1/namespaces/{NS}/signature-policy")).json()
    assert policy == {"namespace": NS, "require_signatures": False, "keys": None}


async def test_missing_signature_is_refused(ready: httpx.AsyncClient, model: Any,
                                            tmp_path: Path) -> None:
    await add_key(ready, make_key(tmp_path / "keys"))
    await require(ready)
    detail = await refused(ready, model, model.adapter(), None, "missing_signature", tmp_path)
    assert "--sign-key" in detail


async def test_tampered_file_is_refused(ready: httpx.AsyncClient, model: Any,
                                        tmp_path: Path) -> None:
    key = make_key(tmp_path / "keys")
    await add_key(ready, key)
    cfg, weights = model.adapter()
    signature = sign_folder(write_adapter(tmp_path / "coding", (cfg, weights)),
                            key.private_path)
    _, other_weights = model.adapter(seed=1)  # same shapes, other values
    detail = await refused(ready, model, (cfg, other_weights), signature, "files_mismatch",
                           tmp_path)
    assert "adapter_model.safetensors differs" in detail


async def test_signature_over_a_different_folder_is_refused(
        ready: httpx.AsyncClient, model: Any, tmp_path: Path) -> None:
    key = make_key(tmp_path / "keys")
    await add_key(ready, key)
    await require(ready)
    other = sign_folder(write_adapter(tmp_path / "other", model.adapter(rank=4, seed=3)),
                        key.private_path)
    detail = await refused(ready, model, model.adapter(), other, "files_mismatch", tmp_path)
    assert "adapter_config.json differs" in detail


async def test_signature_of_more_files_is_refused(ready: httpx.AsyncClient, model: Any,
                                                  tmp_path: Path) -> None:
    """model-signing's default signs every file of the folder: a file the catalog never
    receives makes the signature not match what was published."""
    key = make_key(tmp_path / "keys")
    await add_key(ready, key)
    files = model.adapter()
    folder = write_adapter(tmp_path / "coding", files)
    (folder / "tokenizer.json").write_text("{}")
    detail = await refused(ready, model, files, sign_with_library(folder, key),
                           "files_mismatch", tmp_path)
    assert "tokenizer.json is signed but missing" in detail


async def test_wrong_key_is_refused(ready: httpx.AsyncClient, model: Any,
                                    tmp_path: Path) -> None:
    registered, stranger = make_key(tmp_path / "k", "a"), make_key(tmp_path / "k", "b")
    await add_key(ready, registered)
    files = model.adapter()
    signature = sign_folder(write_adapter(tmp_path / "coding", files), stranger.private_path)
    detail = await refused(ready, model, files, signature, "unknown_key", tmp_path)
    assert "not registered" in detail
    assert "mol catalog keys add" in detail


async def test_key_outside_the_policy_list_is_refused(ready: httpx.AsyncClient, model: Any,
                                                      tmp_path: Path) -> None:
    a, b = make_key(tmp_path / "k", "a"), make_key(tmp_path / "k", "b")
    kid_a = await add_key(ready, a, "a")
    await add_key(ready, b, "b")
    await require(ready, [kid_a])
    files = model.adapter()
    signature = sign_folder(write_adapter(tmp_path / "coding", files), b.private_path)
    await refused(ready, model, files, signature, "key_not_allowed", tmp_path)


async def test_revoked_key_is_refused(ready: httpx.AsyncClient, model: Any,
                                      tmp_path: Path) -> None:
    key = make_key(tmp_path / "keys")
    kid = await add_key(ready, key)
    assert (await ready.post(f"/v1/namespaces/{NS}/keys/{kid}/revoke")).status_code == 200
    files = model.adapter()
    signature = sign_folder(write_adapter(tmp_path / "coding", files), key.private_path)
    detail = await refused(ready, model, files, signature, "revoked_key", tmp_path)
    assert "revoked" in detail
    # Registering it again does not bring it back.
    r = await ready.post(f"/v1/namespaces/{NS}/keys",
                         json={"name": "again", "public_key": key.public_pem})
    assert r.status_code == 409
    assert "revoked" in r.json()["detail"]


async def test_forged_statement_is_refused(ready: httpx.AsyncClient, model: Any,
                                           tmp_path: Path) -> None:
    """Digests edited inside the signed statement (root digest fixed up too) no longer
    match the ECDSA signature."""
    key = make_key(tmp_path / "keys")
    await add_key(ready, key)
    cfg, weights = model.adapter()
    signature = sign_folder(write_adapter(tmp_path / "coding", (cfg, weights)),
                            key.private_path)
    _, other = model.adapter(seed=2)
    payload: Any = payload_of(signature)
    for r in payload["predicate"]["resources"]:
        if r["name"] == "adapter_model.safetensors":
            r["digest"] = hashlib.sha256(other).hexdigest()
    root = hashlib.sha256(b"".join(bytes.fromhex(r["digest"])
                                   for r in payload["predicate"]["resources"]))
    payload["subject"][0]["digest"]["sha256"] = root.hexdigest()
    await refused(ready, model, (cfg, other), with_payload(signature, payload),
                  "bad_signature", tmp_path)


@pytest.mark.parametrize(("signature", "reason"), [
    ("not json", "malformed_signature"),
    ('{"mediaType": "text/plain"}', "malformed_signature"),
])
async def test_malformed_signature_is_refused(ready: httpx.AsyncClient, model: Any,
                                              tmp_path: Path, signature: str,
                                              reason: str) -> None:
    await refused(ready, model, model.adapter(), signature, reason, tmp_path)


async def test_keys_and_policy_input_errors(ready: httpx.AsyncClient, tmp_path: Path) -> None:
    keys = f"/v1/namespaces/{NS}/keys"
    policy = f"/v1/namespaces/{NS}/signature-policy"
    r = await ready.post(keys, json={"name": "x", "public_key": "-----BEGIN nonsense"})
    assert r.status_code == 400
    assert "PEM" in r.json()["detail"]
    rsa_pub = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    pem = rsa_pub.public_bytes(serialization.Encoding.PEM,
                               serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    r = await ready.post(keys, json={"name": "x", "public_key": pem})
    assert r.status_code == 400
    assert "elliptic" in r.json()["detail"]
    r = await ready.post(keys, json={"name": "Bad Name", "public_key": pem})
    assert r.status_code == 422
    # Requiring signatures with no key to sign would lock the namespace: refused.
    r = await ready.put(policy, json={"require_signatures": True})
    assert r.status_code == 400
    assert "no active signing key" in r.json()["detail"]
    key = make_key(tmp_path / "keys", curve=ec.SECP384R1())
    kid = await add_key(ready, key)
    r = await ready.post(keys, json={"name": "dup", "public_key": key.public_pem})
    assert r.status_code == 409
    r = await ready.put(policy, json={"require_signatures": True, "keys": ["0" * 64]})
    assert r.status_code == 400
    assert "not an active key" in r.json()["detail"]
    r = await ready.put(policy, json={"require_signatures": True, "keys": ["nothex"]})
    assert r.status_code == 422
    assert (await ready.post(f"{keys}/{'0' * 64}/revoke")).status_code == 404
    assert (await ready.post(f"{keys}/XYZ/revoke")).status_code == 400
    listed = (await ready.get(keys)).json()["items"]
    assert [(k["key_id"], k["name"], k["revoked_at"]) for k in listed] == [
        (kid, "release", None)]
    r = await ready.put(policy, json={"require_signatures": True, "keys": [kid]})
    assert r.json() == {"namespace": NS, "require_signatures": True, "keys": [kid]}
    assert (await ready.get(policy)).json() == r.json()


async def test_scopes(make_client: Any, model: Any, tmp_path: Path) -> None:
    """Keys: admin or publish:<ns>; the policy: admin only; reading: read:<ns>."""
    admin_token = "mol_" + "c" * 43
    admin = await make_client(auth="on", admin_token=admin_token)
    admin.headers["Authorization"] = f"Bearer {admin_token}"

    async def bearer(*scopes: str) -> dict[str, str]:
        r = await admin.post("/v1/tokens", json={"name": "t", "scopes": list(scopes)})
        return {"Authorization": f"Bearer {r.json()['token']}"}

    publisher, reader, other = (await bearer(f"publish:{NS}"), await bearer(f"read:{NS}"),
                                await bearer("publish:other"))
    key = make_key(tmp_path / "keys")
    body = {"name": "ci", "public_key": key.public_pem}
    keys = f"/v1/namespaces/{NS}/keys"
    assert (await admin.post(keys, json=body, headers=other)).status_code == 403
    assert (await admin.post(keys, json=body, headers=reader)).status_code == 403
    r = await admin.post(keys, json=body, headers=publisher)
    assert r.status_code == 201, r.text
    kid = r.json()["key_id"]
    assert (await admin.get(keys, headers=reader)).status_code == 200
    assert (await admin.get(keys, headers=other)).status_code == 403
    policy = f"/v1/namespaces/{NS}/signature-policy"
    on = {"require_signatures": True}
    assert (await admin.put(policy, json=on, headers=publisher)).status_code == 403
    assert (await admin.put(policy, json=on)).status_code == 200
    assert (await admin.get(policy, headers=reader)).json()["require_signatures"] is True
    assert (await admin.post(f"{keys}/{kid}/revoke", headers=reader)).status_code == 403
    assert (await admin.post(f"{keys}/{kid}/revoke", headers=publisher)).status_code == 200
