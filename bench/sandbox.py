"""Sandbox latency: ``print(1)`` in a warm session and a new session ready, end to end
through the HTTP API of a real ``mol sandbox serve`` on loopback (bubblewrap, cgroups).

    .venv/bin/python bench/sandbox.py            # prints the table
    .venv/bin/python bench/sandbox.py --write    # and writes docs/benchmarks.md's section
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from _machine import machine_info, quiet_check
from _report import Row, percentile, render_table, write_section
from mol_testkit.net import free_port, port_open

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=300, help="print(1) calls in one session")
    p.add_argument("--sessions", type=int, default=30, help="sessions created (one by one)")
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
           "MOL_SANDBOX_MAX_SESSIONS_PER_TENANT": str(args.sessions + 1)}
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
    finally:
        server.terminate()
        server.wait(30)
    rows = [Row("print(1) in a warm session, p50", "ms", percentile(warm, 50), target=30.0),
            Row("print(1) in a warm session, p99", "ms", percentile(warm, 99)),
            Row("new session ready, p50", "ms", percentile(new, 50), target=300.0),
            Row("new session ready, p99", "ms", percentile(new, 99))]
    table = render_table(rows)
    print(table)
    if args.write:
        noisy = "" if quiet else f" Measured while busy ({seen}): the figures are noisy."
        body = ("## Sandbox latency (`bench/sandbox.py`)\n\n"
                f"`python bench/sandbox.py --write` ({args.calls} calls, {args.sessions} "
                f"sessions), {time.strftime('%Y-%m-%d')}, {machine_info().markdown()}: "
                "through the HTTP API on loopback, each session under bubblewrap in its own "
                f"cgroups. The MLflow column does not apply.{noisy}\n\n" + table + "\n")
        write_section(ROOT / "docs" / "benchmarks.md", "sandbox", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
