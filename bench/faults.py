"""Faults: what users of the running stack see when a part of it fails.

    .venv/bin/python bench/faults.py                  # every scenario (~8 min), writes docs
    .venv/bin/python bench/faults.py --quick --no-report --only engine-kill,adapter-fails

Drives steady traffic (16 clients; streamed and whole chat requests in turn over three
adapters resolved through the catalog; loopback only, bounded in time) through the
real processes of the local stack: the catalog (`mol catalog serve`, SQLite and a blob
folder), router replicas (`mol router serve` at its production defaults: scrape every
1 s, 3 attempts, eject after 3 failures, back in 10 s doubling, usage reports to the
catalog on) and two or more engine
replicas (the vLLM simulator, a process each, 16 tokens at 20 ms). One fault per
scenario, each a row (bench/_faults_scenarios.py; the catalog's slow, moved-then-down,
flooded and usage-outage rows in bench/_faults_catalog.py, a webhook aimed at an internal
address in bench/_faults_webhooks.py; the operator's rows, killed mid-canary and an
adapter that starts failing on a running pod, in bench/_faults_operator.py). The engine
faults (killed, stalled, an adapter failing on one replica) also through the named peer,
vLLM's own router (`vllm-router`, bench/_faults_peer.py), on the same engines and
traffic. Then the same kill on two real vLLM CPU engines, and Postgres restarted under
the catalog's publish load.

Each request is classified by what its client got (bench/_faults_load.py): answered,
clean error, cut, hung, wrong. Writes the "faults" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp
import yaml

from _faults_catalog import CATALOG_SCENARIOS
from _faults_load import Outcome, Traffic
from _faults_peer import PEER, PEER_SCENARIOS
from _faults_peer import POLICY as PEER_POLICY
from _faults_scenarios import SCENARIOS, Row, Shape, baseline, catalog_down, start_catalog
from _faults_stack import (
    retries,
    router_proc,
    router_ready_endpoints,
    seed_catalog,
    wait_router_sees,
)
from _machine import machine_info
from _report import write_section
from _vllm_router import pin
from mol_platform.apps.up.supervisor import mol_argv
from mol_platform.contract.router_config import RouterConfig
from mol_testkit.lora import SyntheticLlama
from mol_testkit.net import free_port

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"
COLUMNS = ("scenario", "kind", "requests", "answered", "clean_errors", "cut", "retried",
           "hung", "wrong", "failed_sent_after_fault", "p50_ms", "p99_ms", "baseline_p99_ms",
           "recovery_s")
PEER_VERSION = pin().split("==", 1)[1]
ALL = ["engine-kill", "engine-kill-idle", "engine-stall", "adapter-fails", "catalog-down",
       "router-restart", "router-kill", "engine-roll", "operator-restart", "real-engine-kill",
       "postgres-restart", "client-drops", "client-timeouts", "adapter-500",
       *CATALOG_SCENARIOS, "adapter-health"]


async def simulated(work: Path, only: list[str], shape: Shape, peer: bool = True) -> list[Row]:
    catalog = start_catalog(work)
    try:
        resolved = await asyncio.to_thread(seed_catalog, catalog.url)
        refs = sorted(resolved)
        expect = {r: resolved[r] for r in refs[:-1]}  # the last: never asked for before
        rows = [await baseline(work, catalog.url, expect, shape)]
        print(f"  {rows[0].scenario}: {rows[0].figures()['answered']} answered", file=sys.stderr)
        for name in only:
            if name == "catalog-down":
                row = await catalog_down(work, catalog, expect, shape)
            elif name in CATALOG_SCENARIOS:
                row = await CATALOG_SCENARIOS[name](work, catalog, expect, shape)
            elif name in SCENARIOS:
                row = await SCENARIOS[name](work, catalog.url, expect, shape)
            else:
                continue
            row.baseline_p99_ms = rows[0].figures()["p99_ms"]
            rows.append(row)
            _progress(row)
        if peer:
            for name in only:
                if name in PEER_SCENARIOS:
                    row = await PEER_SCENARIOS[name](work, expect, shape)
                    row.baseline_p99_ms = rows[0].figures()["p99_ms"]
                    rows.append(row)
                    _progress(row)
        return rows
    finally:
        catalog.stop()


def _progress(row: Row) -> None:
    f = row.figures()
    print(f"  {row.scenario}: {f['answered']}/{f['requests']} answered, "
          f"{f['clean_errors']} clean, {f['cut']} cut, {f['hung']} hung, "
          f"{f['wrong']} wrong", file=sys.stderr)


async def real_engine_kill(work: Path, shape: Shape) -> Row:
    """Two real vLLM CPU engines (the demo base; adapters preloaded under immutable
    names, no catalog) behind one router; one engine's process group SIGKILLed a third
    of the way through, eight clients."""
    from mol_platform.apps.demo.build import build_demo
    from mol_testkit.engine import find_engine_venv, running_engine

    venv = find_engine_venv()
    demo = build_demo(work / "demo", seed=0)
    names = {"real/chat@v1": "chat", "real/coding@v1": "coding"}  # served name: adapter
    env = {"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}

    def engine(port: int) -> Any:
        return running_engine(venv, demo.base, port=port, served_model_name="demo-base",
                              lora_modules={n: demo.adapters[a] for n, a in names.items()},
                              max_loras=2, env=env, log_dir=work)

    with engine(free_port()) as a, engine(free_port()) as b:
        config = work / "real-router.yaml"
        cfg = RouterConfig.model_validate({
            "deployment": "real", "profile": "local", "base_model": "demo-base",
            "default": "chat", "experts": [{"name": "chat", "adapter": "real/chat@v1"},
                                           {"name": "coding", "adapter": "real/coding@v1"}],
            "endpoints": [a.base_url, b.base_url]})
        config.write_text(yaml.safe_dump(cfg.model_dump(by_alias=True, mode="json")))
        router = router_proc(work, "real-router", config).start(wait=60)
        try:
            await asyncio.to_thread(wait_router_sees, router.url, {a.base_url, b.base_url}, 60)
            expect = {"chat": "real/chat@v1", "coding": "real/coding@v1"}  # expert: name
            traffic = Traffic(router.url, expect, concurrency=8, hung_s=shape.hung_s,
                              max_tokens=12)
            marks: dict[str, Any] = {}

            async def fault() -> None:
                while len(traffic.outcomes) < 12:  # noqa: ASYNC110 - polls another task's list
                    await asyncio.sleep(0.05)
                marks["at"] = time.monotonic()
                marks["inflight"] = traffic.inflight
                os.killpg(b.pid, signal.SIGKILL)

            await asyncio.gather(traffic.run(shape.seconds * 2), fault())
            retried = retries(router.url)
            left = await asyncio.to_thread(router_ready_endpoints, router.url)
        finally:
            router.stop()
    return Row("engine SIGKILL mid-stream, real vLLM CPU engines", "unplanned",
               traffic.outcomes, retried, fault_at=marks.get("at"),
               notes=[f"{marks.get('inflight')} requests in flight at the kill (8 clients)",
                      f"the router's ready engines at the end: {len(left)} of 2",
                      "not restarted: vLLM takes ~50 s to start on this CPU"])


async def postgres_restart(work: Path, shape: Shape) -> Row:
    """The catalog on Postgres under publish load (8 uploaders); Postgres halted (an
    immediate shutdown: connections drop) a third of the way in and started again
    after 3 s. Every publish must be a 201 or a clean 503/504, and every 201 version
    must be there afterwards, whole."""
    import httpx

    from _faults_stack import Proc
    from mol_testkit.postgres import PostgresCluster, fresh_database

    model = SyntheticLlama()
    base = f"{model.name}@{model.revision}"
    cfg, weights = model.lora_files(8, seed=1)
    durable = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
    with PostgresCluster(settings=durable) as pg:  # a crash may lose no commit
        url = fresh_database(pg, "faults", driver="asyncpg")
        port = free_port()
        argv = mol_argv("catalog", "serve", "--host", "127.0.0.1", "--port", str(port),
                        "--db", url, "--blobs", f"file://{work / 'pg-blobs'}", "--no-auth")
        catalog = Proc("catalog-pg", argv, port, work / "catalog-pg.log", "/healthz",
                       {"MOL_CATALOG_URL": "", "MOL_CATALOG_DB_TIMEOUT": "2"}).start(wait=90)
        try:
            async with httpx.AsyncClient(base_url=catalog.url, timeout=30) as c:
                (await c.post("/v1/base-models", json=model.base_body())).raise_for_status()
            outcomes: list[Any] = []
            marks: dict[str, float] = {}
            stop_at = time.monotonic() + shape.seconds

            async def uploader(http: aiohttp.ClientSession, k: int) -> None:
                i = 0
                while time.monotonic() < max(stop_at, marks.get("up", stop_at) + 5):
                    i += 1
                    form = aiohttp.FormData()
                    form.add_field("adapter_config.json", cfg, filename="adapter_config.json")
                    form.add_field("adapter_model.safetensors", weights,
                                   filename="adapter_model.safetensors")
                    form.add_field("base", base)
                    form.add_field("alias", "stable")
                    sent = time.monotonic()
                    name = f"pg/u{k}-{i}"
                    try:
                        async with http.post(f"{catalog.url}/v1/adapters/{name}/versions",
                                             data=form, timeout=aiohttp.ClientTimeout(
                                                 total=shape.hung_s)) as r:
                            body = await r.read()
                            kind = ("answered" if r.status == 201 else "clean"
                                    if r.status in (503, 504) and b'"detail"' in body
                                    else "bad")  # the catalog's errors: {error, detail}
                            detail = f"{r.status} {body[:160].decode(errors='replace')}"
                    except TimeoutError:
                        kind, detail = "hung", ""
                    except aiohttp.ClientError as exc:
                        kind, detail = "cut", type(exc).__name__
                    outcomes.append(Outcome(sent, time.monotonic(), kind, False, name, detail))

            async def outage() -> None:
                await asyncio.sleep(shape.seconds / 3)
                marks["at"] = time.monotonic()
                await asyncio.to_thread(pg.halt)
                await asyncio.sleep(3.0)
                await asyncio.to_thread(pg.resume)
                marks["up"] = time.monotonic()

            async with aiohttp.ClientSession() as http:
                await asyncio.gather(outage(), *(uploader(http, k) for k in range(8)))
            missing = 0
            async with httpx.AsyncClient(base_url=catalog.url, timeout=30) as c:
                for o in outcomes:
                    if o.kind == "answered":
                        r = await c.get(f"/v1/adapters/{o.ref}/versions/1")
                        missing += r.status_code != 200
            after = [o for o in outcomes if o.sent > marks["up"] + 2.0]
            first_ok = min((o.done for o in outcomes if o.kind == "answered"
                            and o.sent >= marks["up"]), default=None)
        finally:
            catalog.stop()
    return Row("Postgres restarted under publish load (catalog)", "dependency", outcomes, 0,
               None if first_ok is None else first_ok - marks["up"], fault_at=None,
               extra={"published_missing_afterwards": missing},
               notes=[f"halted 3 s; {sum(o.kind == 'answered' for o in after)} of {len(after)} "
                      "publishes sent 2 s after it was back succeeded; recovery: Postgres "
                      "accepting connections again -> the first publish answered 201",
                      f"{missing} published versions missing afterwards"])


def markdown(figures: list[dict[str, Any]], argv: list[str], took: float) -> str:
    lines = [
        "## Faults: what users see when a part fails (`bench/faults.py`)",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine_info().markdown()}; "
        f"{took / 60:.0f} min; command: `{' '.join(['python', 'bench/faults.py', *argv])}`.",
        "",
        "Steady traffic (16 clients, streamed and whole chat requests in turn over three "
        "catalog-resolved adapters) through the real catalog, router and engine processes "
        "on loopback, one fault per row; engines are the vLLM simulator (16 tokens at 20 ms) "
        "except where the row says real vLLM. Router at its production defaults. "
        "*answered*: 200 with the whole answer from the version the reference resolved "
        "to; *clean*: a JSON error with a code, or a stream ending with an SSE error event "
        "and `data: [DONE]`; *cut*: the connection closed with neither (the process holding "
        "it died); *hung*: no byte for 30 s; *wrong*: answered by another version; "
        "*retried*: sent again to another replica before any byte reached the client; "
        "*failed after*: failures among requests sent after the fault began. Latencies are "
        "of answered requests.",
        "",
        "| scenario | kind | requests | answered | clean | cut | retried | hung | wrong | "
        "failed after | p50 ms | p99 ms (baseline) | recovery s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for f in figures:
        base = f" ({f['baseline_p99_ms']:.0f})" if f["baseline_p99_ms"] else ""
        p99 = f"{f['p99_ms']:.0f}{base}" if f["p99_ms"] is not None else "-"
        p50 = f"{f['p50_ms']:.0f}" if f["p50_ms"] is not None else "-"
        rec = f"{f['recovery_s']:.2f}" if f["recovery_s"] is not None else "-"
        retried = "-" if f["retried"] is None else f["retried"]
        lines.append(f"| {f['scenario']} | {f['kind']} | {f['requests']} | {f['answered']} | "
                     f"{f['clean_errors']} | {f['cut']} | {retried} | {f['hung']} | "
                     f"{f['wrong']} | {f['failed_sent_after_fault']} | {p50} | {p99} | {rec} |")
    lines += ["", "Notes per row:", ""]
    lines += [f"- {f['scenario']}: {f['notes']}" for f in figures if f["notes"]]
    ours = [f for f in figures if f.get("router") != PEER]
    lines += ["", *goals(ours), "", *costs(ours), "", *against_peer(figures)]
    return "\n".join(lines).rstrip() + "\n"


def against_peer(figures: list[dict[str, Any]]) -> list[str]:
    """Each engine fault through ours and through vllm-router, side by side."""
    peer = {f["scenario"].removesuffix(f" ({PEER})"): f for f in figures
            if f.get("router") == PEER}
    if not peer:
        return []
    out = [f"Against {PEER} {PEER_VERSION} ({PEER_POLICY}, its defaults: retries and "
           "circuit breaker on), the same engines, traffic and fault (it has no catalog: "
           "requests name the immutable versions; ours resolve aliases through the "
           "catalog on top):", "",
           "| fault | failed: ours | failed: vllm-router | hung: ours / vllm-router | "
           "p99 ms: ours / vllm-router | recovery s: ours / vllm-router |",
           "|---|---|---|---|---|---|"]

    def rec(f: dict[str, Any]) -> str:
        return "-" if f["recovery_s"] is None else f"{f['recovery_s']:.2f}"

    def p99(f: dict[str, Any]) -> str:
        return "-" if f["p99_ms"] is None else f"{f['p99_ms']:.0f}"

    for f in figures:
        other = peer.get(f["scenario"])
        if other is None or f.get("router") == PEER:
            continue
        out.append(f"| {f['scenario']} | {f['requests'] - f['answered']} of {f['requests']} | "
                   f"{other['requests'] - other['answered']} of {other['requests']} | "
                   f"{f['hung']} / {other['hung']} | {p99(f)} / {p99(other)} | "
                   f"{rec(f)} / {rec(other)} |")
    return out


def costs(figures: list[dict[str, Any]]) -> list[str]:
    """What the goals do not show: the price of the faults that cost something."""
    out = ["Costs:", ""]
    base = next((f["p99_ms"] for f in figures if f["kind"] == "baseline"), None)
    for f in figures:
        if f["scenario"].startswith("engine stalled") and f["p99_ms"] and base:
            out.append(f"- {f['scenario']}: p99 {f['p99_ms']:.0f} ms against {base:.0f} ms. "
                       "Requests sent to the stalled engine before its health check timed "
                       "out wait until it runs again (answered, not failed); the router does "
                       "not re-send a request that has no first byte yet, since the engine may "
                       "still answer it and a second copy would double its work.")
        if f["cut"]:
            out.append(f"- {f['scenario']}: {f['cut']} requests cut, the connections the "
                       "killed process held. No server can answer those; a client retry "
                       "(the OpenAI SDKs retry connection errors twice by default) gets each "
                       "answered by the other router.")
        if f["scenario"].startswith("operator") and "reconcile" in f["notes"]:
            out.append(f"- {f['scenario']}: the new operator waits for the killed one's "
                       "leader lease to expire before it reconciles (see its note); serving "
                       "is not affected meanwhile.")
    return out if len(out) > 2 else []


def goals(figures: list[dict[str, Any]]) -> list[str]:
    """The issue's goals, each judged on the figures (never asserted by hand)."""
    lost = [f["scenario"] for f in figures if f["hung"] or f["wrong"] or f["bad"]]
    planned = [f["scenario"] for f in figures if f["kind"] == "planned"
               and f["answered"] != f["requests"]]
    late = [f["scenario"] for f in figures if f["kind"] == "unplanned"
            and f["failed_sent_after_fault"]]
    slow = [f["scenario"] for f in figures if f["recovery_s"] is not None
            and f["kind"] != "dependency" and f["recovery_s"] > 2.0]
    down = [f for f in figures if f["scenario"].startswith("catalog down")]

    def verdict(bad: list[str]) -> str:
        return "**met**" if not bad else f"**not met** ({', '.join(bad)})"

    out = ["Goals:", "",
           f"- 0 requests hung, 0 wrong, 0 malformed in every scenario: {verdict(lost)}",
           f"- planned operations cost 0 failed requests: {verdict(planned)}",
           f"- unplanned faults fail only requests in flight at the fault: {verdict(late)}",
           f"- recovery within 2 scrape intervals (2 s): {verdict(slow)}"]
    if down:
        out.append(f"- catalog down: already-resolved references answered: {down[0]['notes']}")
    out += [f"- {f['goal']}: {verdict([] if f.get('goal_met') else [f['scenario']])}"
            for f in figures if f.get("goal")]  # a row's own goal, judged by the row
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(ALL),
                   help=f"comma-separated scenarios (default all: {','.join(ALL)})")
    p.add_argument("--quick", action="store_true",
                   help="8 s of traffic per row, catalog down 8 s, stall 4 s (a smoke run)")
    p.add_argument("--no-peer", action="store_true",
                   help="skip vllm-router's rows (the same engine faults through the peer)")
    p.add_argument("--json", type=Path, help="also write the rows as JSON here")
    p.add_argument("--no-report", action="store_true", help="do not write docs/benchmarks.md")
    args = p.parse_args()
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(only) - set(ALL))
    if unknown:
        p.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(ALL)}")
    shape = Shape(seconds=8, catalog_down_s=8, stall_s=4) if args.quick else Shape()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mol-faults-") as tmp:
        work = Path(tmp)
        rows = asyncio.run(simulated(work, only, shape, peer=not args.no_peer))
        from _faults_operator import OPERATOR_SCENARIOS
        for name in only:
            if name in OPERATOR_SCENARIOS:
                rows.append(asyncio.run(OPERATOR_SCENARIOS[name](work / name)))
        if "real-engine-kill" in only:
            rows.append(asyncio.run(real_engine_kill(work / "real", shape)))
        if "postgres-restart" in only:
            (work / "pg").mkdir()
            rows.append(asyncio.run(postgres_restart(work / "pg", shape)))
    took = time.monotonic() - started
    body = markdown([r.figures() for r in rows], sys.argv[1:], took)
    print(body)
    if args.json is not None:
        args.json.write_text(json.dumps([r.figures() for r in rows], indent=1))
    if not args.no_report:
        write_section(DOCS, "faults", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
