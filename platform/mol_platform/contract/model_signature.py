"""Checking OpenSSF model-signing signatures made with an elliptic-curve key.

The ``model-signing`` library signs a folder as a Sigstore bundle: a DSSE envelope
whose payload is an in-toto statement listing every file's sha256 (predicate
``https://model_signing/signature/v1.0``), signed with ECDSA over the DSSE
pre-authentication encoding, and the signer's key named by a hint (the sha256 of its
PEM SubjectPublicKeyInfo). That library pulls in sigstore, TUF and protobuf; this module
checks the same format with ``cryptography`` alone, so the catalog (at publish) and the
vLLM resolver plugin (before the engine loads an adapter) verify without it. Signing
stays with ``model-signing`` (``mol catalog publish --sign-key``); tests sign with the
library and verify here, and the other way round.

A signature checks out when the key hint names the given key, the ECDSA signature
holds over the payload, the statement's root digest matches its file list, and that
list is exactly the adapter's files (same names, same sha256).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

BUNDLE_MEDIA_PREFIX = "application/vnd.dev.sigstore.bundle"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
# Where `mol catalog publish --sign-key` writes the signature (beside the folder).
SIGNATURE_SUFFIX = ".sig"
MAX_SIGNATURE_BYTES = 64 * 1024
MAX_PUBLIC_KEY_BYTES = 4096
# The curves model-signing accepts, with the hash it signs with on each.
_CURVES: dict[str, hashes.HashAlgorithm] = {
    "secp256r1": hashes.SHA256(), "secp384r1": hashes.SHA384(), "secp521r1": hashes.SHA512()}
KEY_ID_PATTERN = r"[0-9a-f]{64}"


class SignatureError(ValueError):
    """Why a signature does not check out: a stable ``code`` and a sentence for people."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Bundle:
    """The parts of a signature file this module reads (nothing verified yet)."""

    key_hint: str | None  # sha256 hex of the signer's PEM public key
    payload: bytes
    signature: bytes


def load_public_key(pem: bytes | str) -> ec.EllipticCurvePublicKey:
    """A PEM public key on a curve model-signing supports; SignatureError otherwise."""
    raw = pem.encode() if isinstance(pem, str) else pem
    if len(raw) > MAX_PUBLIC_KEY_BYTES:
        raise SignatureError("bad_key", f"the public key is {len(raw)} bytes; at most "
                             f"{MAX_PUBLIC_KEY_BYTES} allowed")
    try:
        key = serialization.load_pem_public_key(raw)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise SignatureError("bad_key", "not a PEM public key (make one with: openssl ec "
                             "-in key.pem -pubout -out key.pub)") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name not in _CURVES:
        raise SignatureError("bad_key", "only elliptic-curve keys on P-256, P-384 or P-521 "
                             "are accepted")
    return key


def public_pem(key: ec.EllipticCurvePublicKey) -> str:
    """The key's canonical PEM (what its id is computed over)."""
    return key.public_bytes(serialization.Encoding.PEM,
                            serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def key_id(pem: bytes | str) -> str:
    """The key's id: sha256 hex of its PEM SubjectPublicKeyInfo, which is the hint
    model-signing writes into the signature, so a signature names its key."""
    return hashlib.sha256(public_pem(load_public_key(pem)).encode()).hexdigest()


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise SignatureError("malformed_signature", f"the signature's {what} is not a string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError("malformed_signature",
                             f"the signature's {what} is not base64") from None


def parse_bundle(raw: bytes | str) -> Bundle:
    """The envelope of a model-signing signature file (a Sigstore bundle, JSON)."""
    data = raw.encode() if isinstance(raw, str) else raw
    if len(data) > MAX_SIGNATURE_BYTES:
        raise SignatureError("malformed_signature", f"the signature is {len(data)} bytes; at "
                             f"most {MAX_SIGNATURE_BYTES} allowed")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        raise SignatureError("malformed_signature", "the signature is not JSON (expected "
                             "the Sigstore bundle model-signing writes)") from None
    if not isinstance(doc, dict) or not str(doc.get("mediaType", "")).startswith(
            BUNDLE_MEDIA_PREFIX):
        raise SignatureError("malformed_signature", "the signature is not a Sigstore bundle")
    env = doc.get("dsseEnvelope")
    if not isinstance(env, dict) or env.get("payloadType") != PAYLOAD_TYPE:
        raise SignatureError("malformed_signature",
                             f"the bundle holds no DSSE envelope of {PAYLOAD_TYPE}")
    sigs = env.get("signatures")
    if not isinstance(sigs, list) or len(sigs) != 1 or not isinstance(sigs[0], dict):
        raise SignatureError("malformed_signature", "the envelope must hold one signature")
    material = doc.get("verificationMaterial")
    hint = None
    if isinstance(material, dict) and isinstance(material.get("publicKey"), dict):
        found = material["publicKey"].get("hint")
        hint = found if isinstance(found, str) and found else None
    return Bundle(hint, _b64(env.get("payload"), "payload"), _b64(sigs[0].get("sig"), "sig"))


def pae(payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what the key signs."""
    head = f"DSSEv1 {len(PAYLOAD_TYPE)} {PAYLOAD_TYPE} {len(payload)} ".encode()
    return head + payload


def _statement_files(payload: bytes) -> dict[str, str]:
    """The statement's files (name -> sha256 hex), checked against its root digest."""
    bad = "malformed_signature"
    try:
        st = json.loads(payload)
    except (ValueError, RecursionError):
        raise SignatureError(bad, "the signed payload is not JSON") from None
    if not isinstance(st, dict) or st.get("_type") != STATEMENT_TYPE:
        raise SignatureError(bad, f"the signed payload is not an {STATEMENT_TYPE}")
    if st.get("predicateType") != PREDICATE_TYPE:
        raise SignatureError(bad, f"predicate {st.get('predicateType')!r} is not "
                             f"{PREDICATE_TYPE} (sign with model-signing 1.x)")
    subjects, predicate = st.get("subject"), st.get("predicate")
    if not isinstance(subjects, list) or len(subjects) != 1 or not isinstance(predicate, dict):
        raise SignatureError(bad, "the statement must have one subject and a predicate")
    ser = predicate.get("serialization")
    if not isinstance(ser, dict) or ser.get("method") != "files" or ser.get(
            "hash_type") != "sha256":
        raise SignatureError(bad, "only signatures over whole files hashed with sha256 are "
                             "accepted (model-signing's default)")
    resources = predicate.get("resources")
    if not isinstance(resources, list):
        raise SignatureError(bad, "the predicate lists no resources")
    root = hashlib.sha256()
    files: dict[str, str] = {}
    for r in resources:
        if not (isinstance(r, dict) and r.get("algorithm") == "sha256"
                and isinstance(r.get("name"), str) and isinstance(r.get("digest"), str)):
            raise SignatureError(bad, "a resource is not {name, algorithm: sha256, digest}")
        try:
            root.update(bytes.fromhex(r["digest"]))
        except ValueError:
            raise SignatureError(bad, f"the digest of {r['name']!r} is not hex") from None
        files[r["name"]] = r["digest"].lower()
    subject = subjects[0]
    digest = subject.get("digest") if isinstance(subject, dict) else None
    if not isinstance(digest, dict) or digest.get("sha256") != root.hexdigest():
        raise SignatureError(bad, "the statement's root digest does not match its files")
    return files


def verify(raw: bytes | str, public_key: bytes | str) -> dict[str, str]:
    """The signed files (name -> sha256 hex) when ``raw`` is a valid signature by
    ``public_key``; SignatureError (code ``wrong_key``, ``bad_signature`` or
    ``malformed_signature``) otherwise."""
    bundle = parse_bundle(raw)
    key = load_public_key(public_key)
    kid = hashlib.sha256(public_pem(key).encode()).hexdigest()
    if bundle.key_hint is not None and bundle.key_hint != kid:
        raise SignatureError("wrong_key", f"signed by key {bundle.key_hint[:16]}…, not by "
                             f"key {kid[:16]}…")
    try:
        key.verify(bundle.signature, pae(bundle.payload), ec.ECDSA(_CURVES[key.curve.name]))
    except InvalidSignature:
        raise SignatureError("bad_signature", f"the signature does not verify with key "
                             f"{kid[:16]}… (the signed statement was altered, or another "
                             "key signed it)") from None
    return _statement_files(bundle.payload)


def check_files(signed: dict[str, str], actual: dict[str, str]) -> None:
    """SignatureError (``files_mismatch``) unless ``actual`` (name -> sha256 hex) holds
    exactly the signed files with the signed digests."""
    problems = []
    for name in sorted(set(signed) | set(actual)):
        if name not in actual:
            problems.append(f"{name} is signed but missing")
        elif name not in signed:
            problems.append(f"{name} is not covered by the signature")
        elif signed[name] != actual[name].lower():
            problems.append(f"{name} differs from the signed file (sha256 {actual[name][:12]}… "
                            f"!= {signed[name][:12]}…)")
    if problems:
        raise SignatureError("files_mismatch", "the files do not match the signature: "
                             + "; ".join(problems))
