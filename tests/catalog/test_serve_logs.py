"""``mol catalog serve`` logging: level, access log, JSON lines and the start-up line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from mol_catalog.logs import redact, startup_line
from mol_catalog.settings import CatalogSettings
from mol_testkit.net import free_port, stop_process, wait_port


def test_json_lines_with_access_log_and_a_start_up_line(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOL_CATALOG_")}
    cmd = [sys.executable, "-m", "mol_platform", "catalog", "serve", "--port", str(port),
           "--db", f"sqlite:///{tmp_path / 'c.db'}", "--blobs", f"file://{tmp_path / 'b'}",
           "--no-auth", "--log-format", "json", "--access-log", "--log-level", "info"]
    with (tmp_path / "log").open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_port(port, timeout=60)
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/v1/adapters/a/b").status_code == 404
    finally:
        stop_process(proc)
    lines = [json.loads(line) for line in (tmp_path / "log").read_text().splitlines()]
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    (start,) = [line for line in lines if line["logger"] == "mol_catalog"
                and "listening" in line["message"]]
    assert start["message"] == (
        f"mol catalog listening on http://127.0.0.1:{port} (1 worker); database "
        f"sqlite:///{tmp_path / 'c.db'}; blobs file://{tmp_path / 'b'}; auth off")
    access = [(line["method"], line["path"], line["status"]) for line in lines
              if line["logger"] == "uvicorn.access"]
    assert access == [("GET", "/healthz", 200), ("GET", "/v1/adapters/a/b", 404)]


def test_the_start_up_line_leaves_passwords_out() -> None:
    line = startup_line("::1", 8080, 2, "postgresql+asyncpg://cat:s3cr%40t@db:5432/cat",
                        "s3://adapters/catalog", True)
    assert line == ("mol catalog listening on http://[::1]:8080 (2 workers); database "
                    "postgresql+asyncpg://cat:***@db:5432/cat; blobs s3://adapters/catalog; "
                    "auth on")
    assert redact("postgresql://db/cat?sslmode=require") == "postgresql://db/cat?sslmode=require"
    assert redact("postgresql://:pw@db/cat") == "postgresql://:***@db/cat"


def test_log_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOL_CATALOG_LOG_LEVEL", "WARNING")
    monkeypatch.setenv("MOL_CATALOG_LOG_FORMAT", "json")
    monkeypatch.setenv("MOL_CATALOG_ACCESS_LOG", "true")
    settings = CatalogSettings()
    assert (settings.log_level, settings.log_format, settings.access_log) == (
        "warning", "json", True)
    monkeypatch.setenv("MOL_CATALOG_LOG_LEVEL", "loud")
    with pytest.raises(ValidationError, match="log_level"):
        CatalogSettings()
    monkeypatch.delenv("MOL_CATALOG_LOG_LEVEL")
    monkeypatch.delenv("MOL_CATALOG_ACCESS_LOG")
    assert (CatalogSettings().log_level, CatalogSettings().access_log) == ("info", False)
