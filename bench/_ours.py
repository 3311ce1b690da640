"""Our catalog under test: S3 (moto, its own process), the service, its bases and profiles."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from _machine import Proc, pinned, wait_http
from _seed import BASE_NAMES, TAGS
from _shapes import BIG_BASE, LLAMA_3_8B, SMALL, base_config, base_tensors

ENGINE = "vllm==0.32.0"
MAX_RANK = 64
BUCKET = "mol-bench"
S3_ENV = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
          "AWS_DEFAULT_REGION": "us-east-1"}


def start_s3(port: int, workdir: Path, cores: str | None) -> Proc:
    """moto's S3 server in its own process (not in the generator's interpreter)."""
    moto = Path(sys.executable).with_name("moto_server")
    argv = [str(moto), "-H", "127.0.0.1", "-p", str(port)]
    env = {**os.environ, **S3_ENV}
    proc = Proc("moto_server", pinned(argv, cores), env=env, log=workdir / "moto.log")
    wait_http(f"http://127.0.0.1:{port}/", proc, timeout=60)
    import boto3

    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}",
                          aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"],
                          region_name=S3_ENV["AWS_DEFAULT_REGION"])
    client.create_bucket(Bucket=BUCKET)
    client.close()
    return proc


def start_catalog(db_url: str, s3_port: int, port: int, workers: int, token: str,
                  workdir: Path, cores: str | None) -> Proc:
    """`mol catalog serve` with auth on, Postgres, S3 blobs; the schema is already migrated."""
    env = {**os.environ, **S3_ENV,
           "MOL_CATALOG_S3_ENDPOINT_URL": f"http://127.0.0.1:{s3_port}",
           "MOL_CATALOG_ADMIN_TOKEN": token, "MOL_CATALOG_MIGRATE": "false"}
    argv = [sys.executable, "-m", "mol_platform", "catalog", "serve", "--host", "127.0.0.1",
            "--port", str(port), "--db", db_url, "--blobs", f"s3://{BUCKET}/blobs",
            "--workers", str(workers)]
    proc = Proc("catalog", pinned(argv, cores), env=env, log=workdir / "catalog.log")
    wait_http(f"http://127.0.0.1:{port}/readyz", proc, timeout=120)
    return proc


class Api:
    """Tiny JSON client (stdlib) for setup calls; the load itself comes from wrk/aiohttp."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url
        self.token = token

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            f"{self.base_url}{path}", data=data, method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            exc.close()
            raise RuntimeError(f"{method} {path} -> {exc.code}: {detail}") from None


def register_bases(api: Api, count: int) -> list[tuple[str, str, str]]:
    """Base models and one serving profile each, through the API: (name, revision, profile)."""
    out = []
    for name in BASE_NAMES[:count]:
        revision = "r1"
        dims = LLAMA_3_8B if name == BIG_BASE else SMALL
        api.call("POST", "/v1/base-models", {
            "name": name, "revision": revision, "architecture": "LlamaForCausalLM",
            "config": base_config(dims), "tensors": base_tensors(dims)})
        profile = f"{name}-pool"
        api.call("PUT", f"/v1/serving-profiles/{profile}", {
            "base_model": f"{name}@{revision}", "engine": ENGINE, "max_lora_rank": MAX_RANK,
            "max_loras": 4})
        out.append((name, revision, profile))
    return out


def deep_cursors(api: Api, bases: list[str], depth: int, limit: int) -> list[tuple[str, int]]:
    """Walk base+tag listings `depth` items deep; (path of a deep page, its depth) pairs."""
    queries = [{"base": base, "tag": tag} for base in bases for tag in TAGS[:4]]
    return [(f"/v1/adapters?{urllib.parse.urlencode({**q, 'limit': limit})}", seen)
            for q, seen in deep_pages(api, queries, depth)]


def deep_pages(api: Api, queries: list[dict[str, str]],
               depth: int) -> list[tuple[dict[str, str], int]]:
    """Walk each filtered listing up to `depth` items deep (or to its end, when it holds
    fewer): (the filters with the cursor of the deepest page reached, its depth) pairs.
    Listings that end within their first page have no deep page and are left out."""
    out: list[tuple[dict[str, str], int]] = []
    for filters in queries:
        seen, cursor, last = 0, None, None
        while seen < depth:
            query = {**filters, "limit": "500"}
            if cursor:
                query["cursor"] = cursor
            page = api.call("GET", "/v1/adapters?" + urllib.parse.urlencode(query))
            seen += len(page["items"])
            cursor = page.get("next_cursor")
            if not cursor:
                break
            last = (cursor, seen)
        if last is not None:
            out.append(({**filters, "cursor": last[0]}, last[1]))
    return out


def time_by_filter(base_url: str, token: str, queries: list[dict[str, str]],
                   per_kind: int = 12) -> dict[str, tuple[float, float, int]]:
    """Console list pages one at a time, grouped by which filters they set ("base+tag",
    "namespace+q", "+cursor" for deep pages): (p50 ms, max ms, pages) per group, to see
    which shape of listing a slow percentile comes from."""
    import statistics
    import time

    kinds: dict[str, list[dict[str, str]]] = {}
    for q in queries:
        kinds.setdefault("+".join(sorted(k for k in q if k != "cursor"))
                         + ("+cursor" if "cursor" in q else ""), []).append(q)
    out: dict[str, tuple[float, float, int]] = {}
    for kind, items in sorted(kinds.items()):
        times = []
        for q in items[:per_kind]:
            req = urllib.request.Request(f"{base_url}/ui/adapters?{urllib.parse.urlencode(q)}",
                                         headers={"Cookie": f"mol_console={token}"})
            start = time.perf_counter()
            with urllib.request.urlopen(req, timeout=60) as resp:
                resp.read()
            times.append((time.perf_counter() - start) * 1000)
        out[kind] = (statistics.median(times), max(times), len(times))
    return out
