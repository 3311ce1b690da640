"""Signing keys and model-signing signatures for tests: fresh elliptic-curve key pairs
(as ``openssl ecparam -genkey`` makes them) and folders signed with the real OpenSSF
``model-signing`` library, so verifiers are checked against what it writes."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec


@dataclass(frozen=True)
class KeyPair:
    private_path: Path  # PEM, unencrypted
    public_pem: str

    @property
    def public_path(self) -> Path:
        path = self.private_path.with_suffix(".pub")
        path.write_text(self.public_pem)
        return path


def make_key(folder: Path, name: str = "key",
             curve: ec.EllipticCurve | None = None) -> KeyPair:
    """A fresh key pair on ``curve`` (P-256 by default), the private key in ``folder``."""
    key = ec.generate_private_key(curve or ec.SECP256R1())
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.pem"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.TraditionalOpenSSL,
                                       serialization.NoEncryption()))
    pub = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    return KeyPair(path, pub.decode())


def write_adapter(folder: Path, files: tuple[bytes, bytes]) -> Path:
    """An adapter folder with (adapter_config.json, adapter_model.safetensors)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_bytes(files[0])
    (folder / "adapter_model.safetensors").write_bytes(files[1])
    return folder


def sign_with_library(folder: Path, key: KeyPair) -> str:
    """model-signing's own signature of the whole ``folder`` (its defaults)."""
    import model_signing

    out = folder.parent / f"{folder.name}.sig"
    model_signing.signing.Config().use_elliptic_key_signer(  # type: ignore[no-untyped-call]
        private_key=key.private_path).sign(folder, out)
    return out.read_text()


def verify_with_library(folder: Path, signature: str, public_key: str) -> None:
    """model-signing's own verification (raises ValueError when it fails)."""
    import model_signing

    sig = folder.parent / f"{folder.name}.check.sig"
    sig.write_text(signature)
    pub = folder.parent / f"{folder.name}.check.pub"
    pub.write_text(public_key)
    model_signing.verifying.Config().use_elliptic_key_verifier(  # type: ignore[no-untyped-call]
        public_key=pub).verify(folder, sig)


def with_payload(signature: str, payload: dict[str, object]) -> str:
    """The signature with its signed statement replaced (the old ECDSA signature kept):
    what an attacker who edits the digests produces."""
    doc = json.loads(signature)
    doc["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    return json.dumps(doc)


def payload_of(signature: str) -> dict[str, object]:
    doc = json.loads(signature)
    out: dict[str, object] = json.loads(base64.b64decode(doc["dsseEnvelope"]["payload"]))
    return out
