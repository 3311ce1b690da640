"""CPU per resolve of the catalog app itself, two code trees back to back.

One command (`python bench/catalog_resolve_cpu.py --tree /path/to/other/checkout`):
each round runs, in a fresh process per tree, the catalog app on SQLite in-process
(httpx's ASGI transport: no sockets, no load generator), publishes one adapter and
resolves ``ns/name@alias`` N times, reading the process's own CPU time. Rounds
alternate the trees' order, so a machine busy with other work slows both alike: the
figure is the process's CPU, not wall time. bench/catalog.py measures the served
catalog with Postgres; this isolates the app's own work per resolve (where a change
to the request path shows), e.g. tracing off against the code before tracing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_CHILD = r"""
import asyncio, json, sys, time
from pathlib import Path
import httpx
from mol_catalog.app import create_app
from mol_catalog.db import migrate
from mol_catalog.settings import CatalogSettings
from mol_testkit.lora import SyntheticLlama

async def main(tmp: str, n: int, settings: dict) -> None:
    migrate(f"sqlite:///{tmp}/c.db")
    app = create_app(CatalogSettings(db_url=f"sqlite:///{tmp}/c.db", blob_url=f"file://{tmp}/b",
                                     auth="off", **settings))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://catalog") as c:
            model = SyntheticLlama()
            r = await c.post("/v1/base-models", json=model.base_body())
            assert r.is_success, r.text
            cfg, weights = model.lora_files(8, seed=1)
            r = await c.post("/v1/adapters/acme/bot/versions",
                             data={"base": f"{model.name}@{model.revision}", "alias": "stable"},
                             files={"adapter_config.json": ("adapter_config.json", cfg),
                                    "adapter_model.safetensors": ("w", weights)})
            assert r.status_code == 201, r.text
            for _ in range(300):  # warm-up: caches, the first statements
                assert (await c.get("/v1/resolve/acme/bot@stable")).status_code == 200
            cpu = time.process_time()
            for _ in range(n):
                await c.get("/v1/resolve/acme/bot@stable")
            cpu = time.process_time() - cpu
    print(json.dumps({"cpu_us": cpu / n * 1e6}))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])))
"""


def run(tree: Path, n: int, settings: dict[str, object]) -> float:
    paths = [str(tree / p) for p in ("platform", "catalog", "operator", "router", "testkit")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    with tempfile.TemporaryDirectory(prefix="mol-resolve-cpu-") as tmp:
        out = subprocess.run([sys.executable, "-c", _CHILD, tmp, str(n), json.dumps(settings)],
                             env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"the run in {tree} failed:\n{out.stderr[-3000:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["cpu_us"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", type=Path, required=True, help="the other checkout (the baseline)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--resolves", type=int, default=3000, help="resolves per measurement")
    p.add_argument("--settings", default="{}",
                   help="JSON CatalogSettings overrides for this tree's runs (e.g. tracing)")
    args = p.parse_args(argv)
    mine: list[float] = []
    base: list[float] = []
    for i in range(args.rounds):
        order = [("this", ROOT), ("base", args.tree)]
        if i % 2:
            order.reverse()
        for name, tree in order:
            settings = json.loads(args.settings) if name == "this" else {}
            figure = run(tree, args.resolves, settings)
            (mine if name == "this" else base).append(figure)
            print(f"round {i + 1} {name}: {figure:.1f} us CPU per resolve", flush=True)
    m, b = statistics.median(mine), statistics.median(base)
    print(f"this: median {m:.1f} us (range {min(mine):.1f}-{max(mine):.1f}); "
          f"base: median {b:.1f} us (range {min(base):.1f}-{max(base):.1f}); "
          f"ratio {m / b:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
