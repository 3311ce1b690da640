"""The sessions API against the real service: state, results, tenants, limits, crashes,
reaping and the caps."""

from __future__ import annotations

import time

import pytest

from mol_sandbox.errors import InsecureBind
from mol_sandbox.server import check_exposure
from mol_sandbox.settings import SandboxSettings
from tests.sandbox.conftest import Sandbox, StartSandbox


def test_state_persists_between_calls(sandbox: Sandbox) -> None:
    sid = sandbox.new()
    assert sandbox.run(sid, "x = 40\ndef f(y):\n    return x + y")["error"] is None
    assert sandbox.run(sid, "print('hello'); x += 1")["stdout"] == "hello\n"
    out = sandbox.run(sid, "f(1)")
    assert out["result"] == "42"
    assert out["fresh"] is False
    assert out["duration_ms"] > 0
    err = sandbox.run(sid, "1/0")["error"]
    assert "ZeroDivisionError" in err
    assert 'File "<cell>"' in err
    info = sandbox.a.get(f"/v1/sessions/{sid}").json()
    assert info["calls"] == 4
    assert info["state"] == "ready"
    assert info["limits"]["memory_mib"] == 512
    assert info["isolation"] == "cgroups"


def test_delete_stops_the_session(sandbox: Sandbox) -> None:
    sid = sandbox.new()
    assert sandbox.a.delete(f"/v1/sessions/{sid}").status_code == 204
    assert sandbox.a.get(f"/v1/sessions/{sid}").status_code == 404
    r = sandbox.a.post(f"/v1/sessions/{sid}/execute", json={"code": "1"})
    assert r.status_code == 404


def test_tenants_cannot_see_each_others_sessions(sandbox: Sandbox) -> None:
    sid = sandbox.new(sandbox.a)
    unknown = sandbox.b.get("/v1/sessions/" + "x" * 32)
    for r in (sandbox.b.get(f"/v1/sessions/{sid}"),
              sandbox.b.post(f"/v1/sessions/{sid}/execute", json={"code": "1"}),
              sandbox.b.delete(f"/v1/sessions/{sid}")):
        assert (r.status_code, r.json()) == (404, unknown.json())
    assert sandbox.run(sid, "1 + 1")["result"] == "2"  # still A's, untouched
    assert sandbox.a.post("/v1/sessions", headers={"Authorization": ""}).status_code == 401
    r = sandbox.a.post("/v1/sessions", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401
    assert r.json()["error"] == "Unauthorized"


def test_loopback_without_tokens_is_one_local_tenant(start_sandbox: StartSandbox) -> None:
    sandbox = start_sandbox(tokens_file=None)
    sid = sandbox.new(sandbox.a)
    assert sandbox.run(sid, "7 * 6", sandbox.b)["result"] == "42"  # any caller: "local"
    with pytest.raises(InsecureBind, match="without tokens"):
        check_exposure(SandboxSettings(host="0.0.0.0", tokens_file=None))
    check_exposure(SandboxSettings(host="::1", tokens_file=None))


def test_timeout_stops_the_call_and_the_next_is_fresh(start_sandbox: StartSandbox) -> None:
    sandbox = start_sandbox(call_timeout=1.0)
    sid = sandbox.new()
    sandbox.run(sid, "x = 1")
    started = time.monotonic()
    out = sandbox.run(sid, "while True:\n    pass")
    assert time.monotonic() - started < 5
    assert out["error"].startswith("TimeoutError: the call ran past the 1 s limit")
    assert sandbox.a.get(f"/v1/sessions/{sid}").json()["state"] == "stopped"
    nxt = sandbox.run(sid, "'x' in globals()")
    assert nxt["fresh"] is True
    assert "ran past the 1 s limit" in nxt["notice"]
    assert nxt["result"] == "False"
    assert sandbox.run(sid, "1")["fresh"] is False


@pytest.mark.parametrize("code", ["import os; os._exit(3)",
                                  "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
def test_a_crash_is_a_clean_error_and_the_next_call_is_fresh(sandbox: Sandbox,
                                                            code: str) -> None:
    sid = sandbox.new()
    sandbox.run(sid, "x = 1")
    out = sandbox.run(sid, code)
    assert out["error"].startswith("InterpreterExited: the interpreter exited")
    nxt = sandbox.run(sid, "'x' in globals()")
    assert (nxt["fresh"], nxt["result"]) == (True, "False")
    assert "this is a fresh interpreter" in nxt["notice"]


def test_output_is_truncated_at_the_limit(start_sandbox: StartSandbox) -> None:
    sandbox = start_sandbox(output_bytes=1024)
    sid = sandbox.new()
    out = sandbox.run(sid, "print('é' * 5000); import sys; print('e' * 10, file=sys.stderr)")
    assert out["truncated"] is True
    assert len(out["stdout"].encode()) <= 1024
    assert out["stdout"].startswith("ééé")
    assert out["stderr"] == "e" * 10 + "\n"
    big = sandbox.run(sid, "list(range(100000))")
    assert big["truncated"] is True
    assert len(big["result"]) <= 1024
    ok = sandbox.run(sid, "print('ok')")
    assert (ok["stdout"], ok["truncated"]) == ("ok\n", False)


def test_idle_sessions_are_reaped_and_say_so(start_sandbox: StartSandbox) -> None:
    sandbox = start_sandbox(idle_ttl=0.5, reap_interval=0.1)
    sid = sandbox.new()
    interp = sandbox.service.get("team-a", sid).interp
    assert interp is not None
    time.sleep(1.2)
    r = sandbox.a.post(f"/v1/sessions/{sid}/execute", json={"code": "1"})
    assert r.status_code == 410
    assert "reaped after 0.5 s without a call" in r.json()["detail"]
    assert sandbox.a.get(f"/v1/sessions/{sid}").status_code == 410
    assert sandbox.b.get(f"/v1/sessions/{sid}").status_code == 404  # not B's to know
    assert interp.proc.returncode is not None  # its interpreter was stopped


def test_session_caps_answer_429_and_503_with_retry_after(
        start_sandbox: StartSandbox) -> None:
    sandbox = start_sandbox(max_sessions=3, max_sessions_per_tenant=2)
    sandbox.new(sandbox.a)
    sandbox.new(sandbox.a)
    r = sandbox.a.post("/v1/sessions")
    assert r.status_code == 429
    assert int(r.headers["Retry-After"]) >= 1
    sandbox.new(sandbox.b)
    r = sandbox.b.post("/v1/sessions")
    assert r.status_code == 503
    assert int(r.headers["Retry-After"]) >= 1
    assert r.json()["error"] == "AtCapacity"


def test_bad_input_is_refused(sandbox: Sandbox) -> None:
    sid = sandbox.new()
    assert sandbox.a.post(f"/v1/sessions/{sid}/execute", json={}).status_code == 422
    assert sandbox.a.post(f"/v1/sessions/{sid}/execute",
                          json={"code": 1}).status_code == 422
    out = sandbox.run(sid, "def (")
    assert "SyntaxError" in out["error"]


def test_serve_refuses_a_non_loopback_address_without_tokens() -> None:
    from typer.testing import CliRunner

    from mol_sandbox.cli import app

    result = CliRunner().invoke(app, ["serve", "--host", "0.0.0.0", "--port", "1"])
    assert result.exit_code == 2
    assert "refusing to serve on 0.0.0.0 without tokens" in result.output


def test_an_interpreter_that_cannot_start_is_a_503(start_sandbox: StartSandbox) -> None:
    sandbox = start_sandbox(bwrap="/nonexistent/bwrap")
    r = sandbox.a.post("/v1/sessions")
    assert r.status_code == 503
    assert r.headers["Retry-After"] == "5"
    assert r.json()["error"] == "StartFailed"
