"""Loopback helpers, and a missing tool fails with a message saying what to run."""

from __future__ import annotations

import socket

import pytest

from mol_testkit import prometheus
from mol_testkit.net import InfraError, free_port, port_open, wait_port
from mol_testkit.postgres import find_pg_bin


def test_free_port_is_bindable_and_wait_port() -> None:
    port = free_port()
    assert not port_open(port)
    with pytest.raises(InfraError, match=f"127.0.0.1:{port}"):
        wait_port(port, timeout=0.2)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        wait_port(port, timeout=2)


def test_missing_binaries_say_make_deps(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(InfraError, match="make deps"):
        prometheus.PrometheusServer().start()
    with pytest.raises(InfraError, match="make deps"):
        prometheus.promtool_check_rules(tmp_path / "rules.yaml")


def test_pg_bin_prefers_15_and_honours_override(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path) -> None:
    assert find_pg_bin().parts[-2] == "15"
    (tmp_path / "initdb").touch()
    (tmp_path / "pg_ctl").touch()
    monkeypatch.setenv("MOL_PG_BIN", str(tmp_path))
    assert find_pg_bin() == tmp_path
