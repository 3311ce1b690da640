"""Credentials of a local stack with authentication on (``mol up --auth``, or any
address beyond loopback): the catalog's admin token, the narrower catalog tokens the
engine's plugin and the router run with, and the router's API keys file.

Each secret is made once and kept (mode 0600) in the data dir, so a restarted ``mol
up`` prints the same admin token and API key; the component tokens are minted anew on
every start and their predecessors revoked, so none outlives its process for long.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import yaml

from mol_platform.clients.catalog import CatalogClient

ROUTER_TOKEN_NAME = "mol-up/router"
ENGINE_TOKEN_NAME = "mol-up/engine"
API_KEYS_FILE = "router-api-keys.yaml"
LOCAL_TENANT = "local"  # the key printed in the banner
CONSOLE_TENANT = "console"  # the catalog console's stack page and playground


def kept_secret(path: Path, prefix: str) -> str:
    """The secret in ``path``, made (``prefix`` + 32 random bytes) and kept 0600 when absent."""
    if path.is_file():
        return path.read_text().strip()
    value = prefix + secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(value + "\n")
    return value


def admin_token(data_dir: Path) -> str:
    """The local catalog's admin token, made once and kept (mode 0600) in the data dir."""
    return kept_secret(data_dir / "admin-token", "mol_")


def mint_token(catalog_url: str, admin: str, name: str, scopes: list[str]) -> str:
    """A fresh catalog token ``name`` with ``scopes``; earlier ones of that name are revoked."""
    with CatalogClient(catalog_url, admin) as client:
        for old in client.list_tokens(name, active=True):
            if old.name == name:
                client.revoke_token(str(old.id))
        return client.create_token(name, scopes).token


def mint_router_token(catalog_url: str, admin: str) -> str:
    """The router's catalog token: ``read`` (resolve, events) and ``usage`` (its usage
    reports), never the admin token. Tokens of earlier runs are revoked first."""
    return mint_token(catalog_url, admin, ROUTER_TOKEN_NAME, ["read", "usage"])


def mint_engine_token(catalog_url: str, admin: str) -> str:
    """The engine plugin's catalog token: ``read`` only (it resolves and downloads)."""
    return mint_token(catalog_url, admin, ENGINE_TOKEN_NAME, ["read"])


@dataclass(frozen=True)
class RouterKeys:
    """The router's API keys file and the two keys in it."""

    path: Path
    local: str  # for the user's curl calls
    console: str  # for the catalog console (MOL_CATALOG_ROUTER_API_KEY)


def router_keys(data_dir: Path) -> RouterKeys:
    """The API keys file (``ApiKeysFile`` format, 0600) for the router, from kept keys."""
    local = kept_secret(data_dir / "router-api-key", "sk-mol-")
    console = kept_secret(data_dir / "router-console-key", "sk-mol-")
    path = data_dir / API_KEYS_FILE
    body = {"keys": [{"tenant": LOCAL_TENANT, "key": local},
                     {"tenant": CONSOLE_TENANT, "key": console}]}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        yaml.safe_dump(body, out, sort_keys=False)
    return RouterKeys(path.resolve(), local, console)
