"""bench/faults.py: how a client's answer is classified, how goals are judged, and one
short run of the command (an engine killed mid-stream, with the baseline) end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import faults  # noqa: E402
from _faults_load import classify  # noqa: E402
from faults import goals  # noqa: E402


def sse(*events: Any) -> bytes:
    return b"".join(b"data: " + (e if isinstance(e, bytes) else orjson.dumps(e)) + b"\n\n"
                    for e in events)


def test_answers_are_classified_by_what_the_client_got() -> None:
    chunk = {"model": "ns/a@v1", "choices": [{"delta": {"content": "hi"}}]}
    assert classify(200, sse(chunk, b"[DONE]"), True, "ns/a@v1") == ("answered", "")
    assert classify(200, sse(chunk, b"[DONE]"), True, "ns/a@v2")[0] == "wrong"
    error = {"error": {"message": "the engine failed mid-stream", "code": "upstream_error"}}
    assert classify(200, sse(chunk, error, b"[DONE]"), True, "ns/a@v1")[0] == "clean"
    assert classify(200, sse(chunk), True, "ns/a@v1")[0] == "bad"  # no [DONE]
    assert classify(200, sse(chunk, {"error": "x"}, b"[DONE]"), True, None)[0] == "bad"
    whole = orjson.dumps({"model": "ns/a@v1", "choices": [{"message": {"content": "hi"}}]})
    assert classify(200, whole, False, "ns/a@v1") == ("answered", "")
    assert classify(200, whole, False, "ns/b@v1")[0] == "wrong"
    assert classify(200, b'{"model": "ns/a@v1"}', False, "ns/a@v1")[0] == "bad"
    refused = orjson.dumps({"error": {"message": "no engine", "code": "no_ready_engine"}})
    assert classify(503, refused, False, "ns/a@v1") == ("clean", "503 no_ready_engine")
    assert classify(502, b"<html>bad gateway</html>", True, "ns/a@v1")[0] == "bad"


def figures(**kw: Any) -> dict[str, Any]:
    row = {"scenario": "s", "kind": "unplanned", "requests": 10, "answered": 10,
           "clean_errors": 0, "cut": 0, "hung": 0, "wrong": 0, "bad": 0,
           "failed_sent_after_fault": 0, "recovery_s": 0.5, "notes": ""}
    return {**row, **kw}


def test_goals_are_judged_on_the_figures() -> None:
    ok = goals([figures(), figures(kind="planned")])
    assert all("**met**" in line for line in ok if line.startswith("- "))
    lines = goals([figures(scenario="hangs", hung=1),
                   figures(scenario="roll", kind="planned", answered=9, clean_errors=1),
                   figures(scenario="late", failed_sent_after_fault=2),
                   figures(scenario="slow", recovery_s=3.0)])
    assert "**not met** (hangs)" in lines[2]
    assert "**not met** (roll)" in lines[3]
    assert "**not met** (late)" in lines[4]
    assert "**not met** (slow)" in lines[5]


def test_a_short_run_kills_an_engine_and_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "faults.py"), "--quick", "--no-report",
         "--only", "engine-kill", "--no-peer", "--json", str(out)],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = {r["scenario"]: r for r in json.loads(out.read_text())}
    assert set(rows) == {"no fault (baseline)", "engine SIGKILL mid-stream"}
    base, kill = rows["no fault (baseline)"], rows["engine SIGKILL mid-stream"]
    assert base["requests"] > 50
    assert base["answered"] == base["requests"]
    assert kill["requests"] > 50
    assert kill["hung"] == kill["wrong"] == kill["bad"] == kill["cut"] == 0
    assert kill["answered"] + kill["clean_errors"] == kill["requests"]
    assert kill["clean_errors"] <= 16  # at most the streams in flight at the kill
    assert kill["failed_sent_after_fault"] == 0
    assert kill["recovery_s"] is not None
    assert kill["recovery_s"] < 2.0  # two scrape intervals
    assert "| engine SIGKILL mid-stream | unplanned |" in run.stdout


def test_the_peer_rows_sit_beside_ours_and_stay_out_of_our_goals() -> None:
    def row(scenario: str, answered: int, hung: int = 0, **kw: Any) -> dict[str, Any]:
        return {"scenario": scenario, "kind": "unplanned", "requests": 100,
                "answered": answered, "clean_errors": 100 - answered - hung, "cut": 0,
                "retried": None, "hung": hung, "wrong": 0, "bad": 0,
                "failed_sent_after_fault": 0, "p50_ms": 10.0, "p99_ms": 20.0,
                "baseline_p99_ms": 15.0, "recovery_s": None, "notes": "", **kw}
    figures = [row("engine SIGKILL mid-stream", 96, recovery_s=0.2),
               row("engine SIGKILL mid-stream (vllm-router)", 90, hung=3,
                   router="vllm-router")]
    text = faults.markdown(figures, [], 60.0)
    assert "| engine SIGKILL mid-stream | 4 of 100 | 10 of 100 | 0 / 3 | 20 / 20 | " \
           "0.20 / - |" in text
    assert "0 requests hung, 0 wrong, 0 malformed in every scenario: **met**" in text
    assert "| - | 3 |" in text, "the peer's retries are not counted: '-'"


def test_every_scenario_table_is_runnable_by_name() -> None:
    from _faults_catalog import CATALOG_SCENARIOS
    from _faults_operator import OPERATOR_SCENARIOS
    from _faults_scenarios import SCENARIOS

    tables = {**SCENARIOS, **CATALOG_SCENARIOS, **OPERATOR_SCENARIOS}
    assert {"webhook-internal", "adapter-health"} <= set(tables)
    assert set(tables) <= set(faults.ALL), "each table's rows run by default and by --only"


def test_a_rows_own_goal_is_judged_by_the_row() -> None:
    lines = goals([figures(scenario="hook", kind="misuse", goal="hooks refused", goal_met=True),
                   figures(scenario="pod", goal="failingOn shown", goal_met=False)])
    assert "- hooks refused: **met**" in lines
    assert "- failingOn shown: **not met** (pod)" in lines


def test_webhooks_on_internal_addresses_are_refused_and_the_allowlist_lets_them_through(
        tmp_path: Path) -> None:
    import asyncio

    from _faults_scenarios import Shape, start_catalog
    from _faults_stack import seed_catalog
    from _faults_webhooks import EVENTS, webhook_internal

    catalog = start_catalog(tmp_path)
    try:
        seed_catalog(catalog.url)  # the bench's adapters: the row moves an alias of one
        row = asyncio.run(webhook_internal(tmp_path, catalog, {}, Shape())).figures()
        assert "MOL_CATALOG_WEBHOOK_ALLOW" not in catalog.env  # left as found
    finally:
        catalog.stop()
    assert row["refused_at_create"] == row["internal_urls"] >= 10
    assert row["reached_receiver_refused"] == 0
    assert row["refused_at_delivery"] == EVENTS
    assert row["delivered_allowed"] == EVENTS
    assert row["goal_met"], row["notes"]
