"""Sandbox latency: ``print(1)`` in a warm session and a new session ready, end to end
through the HTTP API of a real ``mol sandbox serve`` on loopback (bubblewrap, cgroups);
then the harness under load: ``--load-sessions`` sessions at once, each running
``--load-calls`` cells that burn 100 ms of CPU, with the call latency, the calls stopped
at the time limit (none may be: no session is starved past it) and the host's load.

    .venv/bin/python bench/sandbox.py            # prints the table
    .venv/bin/python bench/sandbox.py --write    # and writes docs/benchmarks.md's section
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from _machine import machine_info, quiet_check
from _report import Row, percentile, render_table, write_section
from mol_testkit.net import free_port, port_open

ROOT = Path(__file__).resolve().parents[1]
# A 100 ms cell: CPU time, not sleep, so 50 of them at once really contend for the cores.
CELL = ("import time as _t\n_s = _t.process_time()\n"
        "while _t.process_time() - _s < 0.1:\n    pass\n_t.process_time() - _s")


@dataclass
class Load:
    """What the load phase saw: every call's latency, the calls that ended in an error
    (the time limit among them), and the host's 1-minute load average before and at most."""

    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    load_before: float = 0.0
    load_max: float = 0.0
    seconds: float = 0.0


async def _session(client: httpx.AsyncClient, calls: int, load: Load) -> None:
    sid = (await client.post("/v1/sessions")).raise_for_status().json()["id"]
    try:
        for _ in range(calls):
            t0 = time.perf_counter()
            out = (await client.post(f"/v1/sessions/{sid}/execute", json={"code": CELL})
                   ).raise_for_status().json()
            load.latencies.append((time.perf_counter() - t0) * 1e3)
            if out["error"]:
                load.errors.append(out["error"].splitlines()[-1][:200])
    finally:
        await client.delete(f"/v1/sessions/{sid}")


async def _load(url: str, sessions: int, calls: int) -> Load:
    load = Load(load_before=os.getloadavg()[0])
    limits = httpx.Limits(max_connections=sessions * 2, max_keepalive_connections=sessions)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        started = time.monotonic()
        work = asyncio.gather(*(_session(client, calls, load) for _ in range(sessions)))
        while not work.done():
            load.load_max = max(load.load_max, os.getloadavg()[0])
            await asyncio.wait([work], timeout=1.0)
        await work
        load.seconds = time.monotonic() - started
    load.load_max = max(load.load_max, os.getloadavg()[0])
    return load


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=300, help="print(1) calls in one session")
    p.add_argument("--sessions", type=int, default=30, help="sessions created (one by one)")
    p.add_argument("--load-sessions", type=int, default=50,
                   help="sessions at once in the load phase (0: skip it)")
    p.add_argument("--load-calls", type=int, default=4, help="100 ms cells per session")
    p.add_argument("--write", action="store_true", help="write docs/benchmarks.md's section")
    p.add_argument("--allow-busy", action="store_true",
                   help="measure even while other processes use the CPU (noted)")
    args = p.parse_args(argv)
    quiet, seen = quiet_check(0.3)
    if not quiet and not args.allow_busy:
        print(f"the machine is busy: {seen}; --allow-busy measures anyway", file=sys.stderr)
        return 2
    port = free_port()
    env = {**os.environ, "MOL_SANDBOX_PORT": str(port), "MOL_SANDBOX_LOG_LEVEL": "warning",
           "MOL_SANDBOX_MAX_SESSIONS_PER_TENANT": str(max(args.sessions, args.load_sessions) + 1),
           "MOL_SANDBOX_MAX_SESSIONS": str(max(args.sessions, args.load_sessions) + 1)}
    server = subprocess.Popen([sys.executable, "-m", "mol_platform.apps.cli", "sandbox",
                               "serve"], env=env)
    try:
        deadline = time.monotonic() + 30
        while not port_open(port):
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("mol sandbox serve did not start")
            time.sleep(0.05)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            sid = client.post("/v1/sessions").json()["id"]
            warm = []
            for _ in range(args.calls + 10):
                t0 = time.perf_counter()
                out = client.post(f"/v1/sessions/{sid}/execute", json={"code": "print(1)"})
                warm.append((time.perf_counter() - t0) * 1e3)
                assert out.json()["stdout"] == "1\n", out.text
            warm = warm[10:]
            client.delete(f"/v1/sessions/{sid}")
            new = []
            for _ in range(args.sessions):
                t0 = time.perf_counter()
                sid = client.post("/v1/sessions").json()["id"]
                new.append((time.perf_counter() - t0) * 1e3)
                client.delete(f"/v1/sessions/{sid}")
        load = (asyncio.run(_load(f"http://127.0.0.1:{port}", args.load_sessions,
                                  args.load_calls)) if args.load_sessions else None)
    finally:
        server.terminate()
        server.wait(30)
    rows = [Row("print(1) in a warm session, p50", "ms", percentile(warm, 50), target=30.0),
            Row("print(1) in a warm session, p99", "ms", percentile(warm, 99)),
            Row("new session ready, p50", "ms", percentile(new, 50), target=300.0),
            Row("new session ready, p99", "ms", percentile(new, 99))]
    limit_ms = float(env.get("MOL_SANDBOX_CALL_TIMEOUT", 30)) * 1e3
    if load is not None:
        what = f"{args.load_sessions} sessions at once, a 100 ms cell"
        rows += [Row(f"{what}: call p50", "ms", percentile(load.latencies, 50)),
                 Row(f"{what}: call p99", "ms", percentile(load.latencies, 99)),
                 Row(f"{what}: slowest call", "ms", max(load.latencies), target=limit_ms),
                 Row(f"{what}: calls stopped or failed", "calls", float(len(load.errors)),
                     target=0.0),
                 Row(f"{what}: host load average (1 min), most seen", "",
                     load.load_max)]
    table = render_table(rows)
    print(table)
    if args.write:
        noisy = "" if quiet else f" Measured while busy ({seen}): the figures are noisy."
        under_load = "" if load is None else (
            f" Under load: {args.load_sessions} sessions made at once, each running "
            f"{args.load_calls} cells that burn 100 ms of CPU ({len(load.latencies)} calls "
            f"in {load.seconds:.1f} s); a call's latency includes its wait for a core. "
            f"The slowest call's target is the {limit_ms / 1e3:g} s call limit (no session "
            f"starved past it); the host's load average was {load.load_before:.2f} before "
            f"and at most {load.load_max:.2f} during the phase"
            + (f"; errors: {sorted(set(load.errors))[:3]}" if load.errors else "") + ".")
        body = ("## Sandbox latency (`bench/sandbox.py`)\n\n"
                f"`python bench/sandbox.py --write` ({args.calls} calls, {args.sessions} "
                f"sessions), {time.strftime('%Y-%m-%d')}, {machine_info().markdown()}: "
                "through the HTTP API on loopback, each session under bubblewrap in its own "
                f"cgroups. The MLflow column does not apply.{noisy}{under_load}\n\n"
                + table + "\n")
        write_section(ROOT / "docs" / "benchmarks.md", "sandbox", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
