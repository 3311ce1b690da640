"""The sender's transport connects to the address it checked, and TLS still verifies the
certificate against the URL's host name: a real HTTPS receiver on loopback with a
certificate for ``localhost`` only."""

from __future__ import annotations

import datetime
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from mol_catalog.webhooks.targets import Allowlist
from mol_catalog.webhooks.transport import RefusedTarget, guarded_transport


def _certificate(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


@pytest.fixture
def https_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """An HTTPS receiver on 127.0.0.1 whose certificate names localhost, trusted through
    SSL_CERT_FILE (as an operator trusts a private CA)."""
    cert_file, key_file = _certificate(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


async def _post(allow: list[str], url: str) -> int:
    async with httpx.AsyncClient(transport=guarded_transport(Allowlist.parse(allow))) as http:
        return (await http.post(url, content=b"{}")).status_code


async def test_tls_is_verified_against_the_name_while_the_checked_address_is_dialled(
        https_port: int) -> None:
    assert await _post(["localhost"], f"https://localhost:{https_port}/hook") == 204
    # The same server by address: the certificate does not name 127.0.0.1.
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        await _post(["127.0.0.1"], f"https://127.0.0.1:{https_port}/hook")


async def test_a_name_resolving_to_loopback_is_refused_before_any_connection(
        https_port: int) -> None:
    with pytest.raises(RefusedTarget, match=r"localhost resolves to \S+, a loopback"):
        await _post([], f"https://localhost:{https_port}/hook")
