"""The resolver plugin's signature check: the light verifier (``cryptography`` only)
against the OpenSSF model-signing library in both directions, every refusal at unit
level, and the plugin refusing to hand vLLM an unsigned or altered adapter under a
profile that requires signatures (a real catalog process)."""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature

from mol_catalog.cli.signing import sign_folder
from mol_platform.apps.up.seed import demo_folders, seed_demo
from mol_platform.apps.vllm_plugin.resolver import MolResolver
from mol_platform.apps.vllm_plugin.settings import ResolverSettings
from mol_platform.apps.vllm_plugin.signatures import (
    SignatureRefused,
    SignedBy,
    check_signature,
    verify_folder,
)
from mol_platform.clients.catalog import CatalogClient, CatalogError
from mol_platform.clients.catalog_async import AsyncCatalogClient
from mol_platform.contract import model_signature as ms
from mol_platform.contract.catalog_models import Resolved
from mol_testkit.catalog import LiveCatalog, running_catalog
from mol_testkit.signing import (
    KeyPair,
    make_key,
    payload_of,
    sign_with_library,
    verify_with_library,
    with_payload,
    write_adapter,
)

FILES = (b'{"r": 8, "peft_type": "LORA"}', b"\x00weights" * 1000)


@dataclass
class Signed:
    folder: Path
    key: KeyPair
    signature: str

    def signed_by(self, key: KeyPair | None = None, revoked: bool = False) -> SignedBy:
        pem = (key or self.key).public_pem
        return SignedBy(self.signature, ms.key_id(pem), pem, revoked)


@pytest.fixture
def signed(tmp_path: Path) -> Signed:
    key = make_key(tmp_path / "keys")
    folder = write_adapter(tmp_path / "adapter", FILES)
    return Signed(folder, key, sign_with_library(folder, key))


def verify_light(folder: Path, signature: str, public_key: str) -> None:
    files = ms.verify(signature, public_key)
    verify_folder(folder, files, ["adapter_config.json", "adapter_model.safetensors"])


def test_library_signature_verifies_with_the_light_verifier(signed: Signed) -> None:
    files = check_signature(signed.signed_by())
    assert files == {"adapter_config.json": hashlib.sha256(FILES[0]).hexdigest(),
                     "adapter_model.safetensors": hashlib.sha256(FILES[1]).hexdigest()}
    verify_folder(signed.folder, files, list(files))


@pytest.mark.parametrize("curve", ["P-384", "P-521"])
def test_other_curves(tmp_path: Path, curve: str) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    key = make_key(tmp_path / "k", curve=ec.SECP384R1() if curve == "P-384" else ec.SECP521R1())
    folder = write_adapter(tmp_path / "a", FILES)
    verify_light(folder, sign_with_library(folder, key), key.public_pem)


def test_publish_signature_verifies_with_the_library(tmp_path: Path) -> None:
    """What `mol catalog publish --sign-key` uploads (the two adapter files only) is a
    signature model-signing itself accepts for those files."""
    key = make_key(tmp_path / "keys")
    folder = write_adapter(tmp_path / "adapter", FILES)
    (folder / "README.md").write_text("left out")
    signature = sign_folder(folder, key.private_path)
    verify_light(folder, signature, key.public_pem)
    only = write_adapter(tmp_path / "uploaded", FILES)  # the folder the catalog sees
    verify_with_library(only, signature, key.public_pem)


def _tampered(s: Signed) -> tuple[Path, str, str]:
    (s.folder / "adapter_model.safetensors").write_bytes(b"\x01" + FILES[1][1:])
    return s.folder, s.signature, s.key.public_pem


def _wrong_key(s: Signed) -> tuple[Path, str, str]:
    return s.folder, s.signature, make_key(s.folder.parent / "other", "other").public_pem


def _other_folder(s: Signed) -> tuple[Path, str, str]:
    other = write_adapter(s.folder.parent / "other", (b'{"r": 4}', b"other weights"))
    return other, s.signature, s.key.public_pem


def _forged(s: Signed) -> tuple[Path, str, str]:
    payload: dict[str, object] = payload_of(s.signature)
    resources = payload["predicate"]["resources"]  # type: ignore[index]
    resources[0]["digest"] = "00" * 32
    payload["subject"][0]["digest"]["sha256"] = hashlib.sha256(  # type: ignore[index]
        b"".join(bytes.fromhex(r["digest"]) for r in resources)).hexdigest()
    return s.folder, with_payload(s.signature, payload), s.key.public_pem


@pytest.mark.parametrize("case", [_tampered, _wrong_key, _other_folder, _forged],
                         ids=["tampered-file", "wrong-key", "other-folder", "forged"])
def test_both_verifiers_refuse_the_same_signatures(signed: Signed, case: object) -> None:
    folder, signature, public_key = case(signed)  # type: ignore[operator]
    # The library raises bare ValueErrors, or InvalidSignature for a forged statement.
    with pytest.raises((ValueError, InvalidSignature)):
        verify_with_library(folder, signature, public_key)
    with pytest.raises((SignatureRefused, ms.SignatureError)):
        verify_light(folder, signature, public_key)


def test_refusal_reasons(signed: Signed, tmp_path: Path) -> None:
    def reason(s: SignedBy, trusted: frozenset[str] = frozenset()) -> str:
        with pytest.raises(SignatureRefused) as info:
            check_signature(s, trusted)
        return info.value.code

    ok = signed.signed_by()
    assert reason(SignedBy(None, None, None)) == "missing_signature"
    assert reason(signed.signed_by(revoked=True)) == "revoked_key"
    other = make_key(tmp_path / "other", "other")
    assert reason(signed.signed_by(other)) == "wrong_key"
    # A catalog naming one key id but handing over another key.
    assert reason(SignedBy(ok.signature, ms.key_id(other.public_pem), ok.public_key)) == (
        "wrong_key")
    assert reason(ok, frozenset({ms.key_id(other.public_pem)})) == "untrusted_key"
    assert check_signature(ok, frozenset({ok.key_id or ""}))
    files = check_signature(ok)
    (signed.folder / "extra.bin").write_bytes(b"x")
    with pytest.raises(SignatureRefused, match=r"extra\.bin is not covered"):
        verify_folder(signed.folder, files, [*files, "extra.bin"])
    (signed.folder / "adapter_config.json").unlink()
    with pytest.raises(SignatureRefused, match=r"adapter_config\.json is signed but missing"):
        verify_folder(signed.folder, files, list(files))


# --- the plugin against a real catalog -------------------------------------------------

SIGNED_PROFILE = "signed"
NS = "sig"


@dataclass
class SignedCatalog:
    live: LiveCatalog
    key: KeyPair


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SignedCatalog]:
    root = tmp_path_factory.mktemp("catalog")
    with running_catalog(root / "data") as live:
        seeded = seed_demo(live.url, root / "demo", profile="local")
        _, folders = demo_folders(root / "demo")
        key = make_key(root / "keys")
        with CatalogClient(live.url) as client:
            client.set_profile(SIGNED_PROFILE, base_model=seeded.base, max_lora_rank=16,
                               max_loras=4, engine="vllm", require_signatures=True)
            client.add_key(NS, "release", key.public_pem)
            chat = folders["chat"]
            client.publish(chat, f"{NS}/chat", signature=sign_folder(chat, key.private_path))
            client.publish(folders["agent"], f"{NS}/plain")
        yield SignedCatalog(live, key)


def make(url: str, cache: Path, **settings: object) -> MolResolver:
    return MolResolver(ResolverSettings(catalog_url=url, serving_profile=SIGNED_PROFILE,
                                        adapter_cache_dir=cache, adapter_cache_bytes=10**8,
                                        **settings))  # type: ignore[arg-type]


async def test_signed_adapter_loads_and_unsigned_one_is_refused(
        catalog: SignedCatalog, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    resolver = make(catalog.live.url, tmp_path / "cache")
    try:
        found = await resolver.resolve(f"{NS}/chat@v1")
        assert found is not None
        with caplog.at_level(logging.INFO):
            assert await resolver.resolve(f"{NS}/plain@v1") is None
    finally:
        await resolver.aclose()
    assert f"not serving '{NS}/plain@v1'" in caplog.text
    assert "signature required" in caplog.text
    assert "missing_signature" in caplog.text
    assert "mol catalog publish --sign-key" in caplog.text
    # Without the requirement (another profile, no env) the unsigned one loads.
    loose = MolResolver(ResolverSettings(catalog_url=catalog.live.url, serving_profile="local",
                                         adapter_cache_dir=tmp_path / "loose"))
    try:
        assert await loose.resolve(f"{NS}/plain@v1") is not None
    finally:
        await loose.aclose()


async def test_file_changed_in_the_cache_is_refused(
        catalog: SignedCatalog, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    first = make(catalog.live.url, cache)
    try:
        found = await first.resolve(f"{NS}/chat@v1")
        assert found is not None
        path = found.path
    finally:
        await first.aclose()
    weights = path / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    restarted = make(catalog.live.url, cache)  # an engine restarted on the same cache
    try:
        with caplog.at_level(logging.INFO):
            assert await restarted.resolve(f"{NS}/chat@v1") is None
    finally:
        await restarted.aclose()
    assert "files_mismatch" in caplog.text
    assert "adapter_model.safetensors differs from the signed file" in caplog.text


async def test_env_requirement_and_pinned_signers(
        catalog: SignedCatalog, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """MOL_REQUIRE_SIGNATURES applies without a profile; MOL_TRUSTED_SIGNERS pins keys."""
    kid = ms.key_id(catalog.key.public_pem)
    strict = MolResolver(ResolverSettings(catalog_url=catalog.live.url,
                                          adapter_cache_dir=tmp_path / "a",
                                          require_signatures=True, trusted_signers=kid))
    pinned_elsewhere = make(catalog.live.url, tmp_path / "b", trusted_signers="ab" * 32)
    try:
        assert await strict.resolve(f"{NS}/chat@v1") is not None
        with caplog.at_level(logging.INFO):
            assert await strict.resolve(f"{NS}/plain@v1") is None
            assert await pinned_elsewhere.resolve(f"{NS}/chat@v1") is None
    finally:
        await strict.aclose()
        await pinned_elsewhere.aclose()
    assert "untrusted_key" in caplog.text
    shutil.rmtree(tmp_path / "a")


def test_the_plugin_never_imports_model_signing() -> None:
    """The engine image installs no model-signing or sigstore: the plugin's modules must
    load without them."""
    code = ("import sys; import mol_platform.apps.vllm_plugin.resolver; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('model_signing', 'sigstore', 'sigstore_models', 'tuf', 'in_toto_attestation')); "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr


class Unreachable(AsyncCatalogClient):
    """The catalog down: every resolve fails as a refused connection does."""

    async def resolve(self, ref: str, profile: str | None = None, *,
                      traceparent: str | None = None) -> Resolved:
        raise CatalogError(0, "Unreachable", "connection refused")


async def test_offline_loads_are_verified_too(
        catalog: SignedCatalog, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """While the catalog is unreachable, a cached adapter is checked against the signature
    kept in the cache entry: intact it loads, altered it is refused."""
    cache = tmp_path / "cache"
    online = make(catalog.live.url, cache)
    try:
        found = await online.resolve(f"{NS}/chat@v1")
        assert found is not None
    finally:
        await online.aclose()
    offline_settings = ResolverSettings(catalog_url=catalog.live.url,
                                        serving_profile=SIGNED_PROFILE,
                                        adapter_cache_dir=cache, require_signatures=True)
    offline = MolResolver(offline_settings, client=Unreachable(catalog.live.url))
    try:
        assert await offline.resolve(f"{NS}/chat@v1") is not None
        config = found.path / "adapter_config.json"
        config.write_bytes(config.read_bytes() + b" ")
        with caplog.at_level(logging.INFO):
            assert await offline.resolve(f"{NS}/chat@v1") is None
    finally:
        await offline.aclose()
    assert "adapter_config.json differs from the signed file" in caplog.text
