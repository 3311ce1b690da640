"""Load generation: wrk for the read paths, an asyncio closed loop for publishing.

wrk (C, one thread, pinned) costs a few percent of a core at these rates, so it
disturbs the servers less than any Python generator would; the Lua script picks a
random request path from a file for every request and prints its latency percentiles.
Publishing needs a distinct multipart body per request, so it uses aiohttp with N
concurrent uploaders, each timing its own requests.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import struct
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from _machine import pinned
from _report import percentile

LUA = Path(__file__).resolve().parent / "wrk_paths.lua"


@dataclass(frozen=True)
class LoadResult:
    requests: int
    seconds: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    errors: int
    connections: int

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        return (f"{self.rps:8.1f} req/s  p50 {self.p50_ms:7.2f} ms  p99 {self.p99_ms:7.2f} ms  "
                f"max {self.max_ms:7.1f} ms  errors {self.errors}  (c={self.connections})")


def require_wrk() -> str:
    found = shutil.which("wrk")
    if found is None:
        raise SystemExit("wrk is not installed: run `bash scripts/system-deps.sh` (Debian: wrk)")
    return found


def run_wrk(base_url: str, paths: Path, *, connections: int, seconds: float,
            headers: Sequence[str] = (), cores: str | None = None) -> LoadResult:
    """A closed-loop wrk run: `connections` connections, 1 thread, GETs of random paths."""
    return run_wrk_script(base_url, LUA, [str(paths), *headers], connections=connections,
                          seconds=seconds, cores=cores)


def run_wrk_script(url: str, script: Path, args: Sequence[str], *, connections: int,
                   seconds: float, cores: str | None = None) -> LoadResult:
    """One wrk run (1 thread) with a Lua script whose `done` prints the JSON summary."""
    argv = [require_wrk(), "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s",
            "--timeout", "10s", "-s", str(script), url, "--", *args]
    done = subprocess.run(pinned(argv, cores), capture_output=True, text=True, check=False)
    summary = None
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            summary = json.loads(line)
            break
    if done.returncode != 0 or summary is None:
        raise RuntimeError(f"wrk failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    errors = sum(int(summary[k]) for k in ("connect", "read", "write", "status", "timeout"))
    return LoadResult(
        requests=int(summary["requests"]), seconds=summary["duration_us"] / 1e6,
        p50_ms=summary["p50"] / 1000, p90_ms=summary["p90"] / 1000,
        p99_ms=summary["p99"] / 1000, max_ms=summary["max"] / 1000,
        errors=errors, connections=connections,
    )


# --- small LoRA adapters for publishing -----------------------------------------------


def safetensors_bytes(shapes: dict[str, tuple[int, ...]], rand: Callable[[int], bytes]) -> bytes:
    """A valid F32 safetensors file with the given tensor shapes and random contents."""
    header: dict[str, Any] = {}
    offset = 0
    for name, shape in shapes.items():
        size = 4
        for dim in shape:
            size *= dim
        header[name] = {"dtype": "F32", "shape": list(shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + rand(offset)


@dataclass
class PublishResult:
    published: int
    seconds: float
    latencies_ms: list[float] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)

    @property
    def per_second(self) -> float:
        return self.published / self.seconds if self.seconds > 0 else 0.0

    def pct(self, q: float) -> float:
        return percentile(self.latencies_ms, q) if self.latencies_ms else float("nan")


async def publish_loop(base_url: str, token: str | None, *, namespace: str, prefix: str,
                       base: str, config: dict[str, Any], shapes: dict[str, tuple[int, ...]],
                       concurrency: int, seconds: float, tags: str = "bench,small"
                       ) -> PublishResult:
    """`concurrency` uploaders publish distinct new adapters until `seconds` pass."""
    result = PublishResult(0, 0.0)
    counter = iter(range(10**9))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    config_bytes = json.dumps(config).encode()
    deadline = time.monotonic() + seconds

    async def worker(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < deadline:
            i = next(counter)
            form = aiohttp.FormData()
            form.add_field("adapter_config.json", config_bytes, filename="adapter_config.json",
                           content_type="application/json")
            form.add_field("adapter_model.safetensors", safetensors_bytes(shapes, os.urandom),
                           filename="adapter_model.safetensors",
                           content_type="application/octet-stream")
            form.add_field("base", base)
            form.add_field("alias", "stable")
            form.add_field("tags", tags)
            url = f"{base_url}/v1/adapters/{namespace}/{prefix}-{i:06d}/versions"
            start = time.monotonic()
            async with session.post(url, data=form, headers=headers) as resp:
                body = await resp.read()
                took = (time.monotonic() - start) * 1000
                if resp.status == 201:
                    result.published += 1
                    result.latencies_ms.append(took)
                else:
                    key = f"{resp.status} {body[:200].decode(errors='replace')}"
                    result.failures[key] = result.failures.get(key, 0) + 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.monotonic()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        result.seconds = time.monotonic() - start
    return result
