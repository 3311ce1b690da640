"""CPU per resolve of the catalog app itself, two code trees back to back.

One command (`python bench/catalog_resolve_cpu.py --tree /path/to/other/checkout`):
each round runs, in a fresh process per tree, the catalog app on SQLite in-process
(httpx's ASGI transport: no sockets, no load generator), publishes one adapter and
resolves ``ns/name@alias`` N times, reading the process's own CPU time (or, with
``--instructions``, the CPU instructions callgrind counts over those N resolves, all
threads included: a figure no other load on the machine moves). Rounds
alternate the trees' order, so a machine busy with other work slows both alike: the
figure is the process's CPU, not wall time. bench/catalog.py measures the served
catalog with Postgres; this isolates the app's own work per resolve (where a change
to the request path shows), e.g. tracing off against the code before tracing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import callgrind_total

ROOT = Path(__file__).resolve().parents[1]
_CHILD = r"""
import asyncio, json, os, subprocess, sys, time
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
            counting = os.environ.get("MOL_BENCH_CALLGRIND") == "1"
            if counting:
                subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True,
                               capture_output=True)
            cpu = time.process_time()
            for _ in range(n):
                await c.get("/v1/resolve/acme/bot@stable")
            cpu = time.process_time() - cpu
            if counting:
                subprocess.run(["callgrind_control", "-d", str(os.getpid())], check=True,
                               capture_output=True)
    print(json.dumps({"cpu_us": cpu / n * 1e6}))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])))
"""


def run(tree: Path, n: int, settings: dict[str, object], instructions: bool) -> float:
    """CPU us per resolve of ``tree``'s catalog, or its instructions per resolve."""
    paths = [str(tree / p) for p in ("platform", "catalog", "operator", "router", "testkit")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    with tempfile.TemporaryDirectory(prefix="mol-resolve-cpu-") as tmp:
        argv = [sys.executable, "-c", _CHILD, tmp, str(n), json.dumps(settings)]
        out_file = Path(tmp) / "callgrind.out"
        if instructions:
            env["MOL_BENCH_CALLGRIND"] = "1"
            argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                    f"--callgrind-out-file={out_file}", *argv]
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=3600)
        if out.returncode != 0:
            raise SystemExit(f"the run in {tree} failed:\n{out.stderr[-3000:]}")
        if instructions:
            return callgrind_total(out_file) / n
    return float(json.loads(out.stdout.strip().splitlines()[-1])["cpu_us"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", type=Path, required=True, help="the other checkout (the baseline)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--resolves", type=int, default=3000, help="resolves per measurement")
    p.add_argument("--settings", default="{}",
                   help="JSON CatalogSettings overrides for this tree's runs (e.g. tracing)")
    p.add_argument("--both-settings", default="{}",
                   help="JSON CatalogSettings overrides for both trees' runs (e.g. "
                        "'{\"webhooks\": false}': no outbox polling beside the resolves)")
    p.add_argument("--instructions", action="store_true",
                   help="count CPU instructions with callgrind instead of CPU time "
                        "(needs valgrind; ~50x slower, load independent)")
    args = p.parse_args(argv)
    if not 1 <= args.rounds <= 100 or not 1 <= args.resolves <= 1_000_000:
        p.error("--rounds must be in 1..100 and --resolves in 1..1000000")
    if args.instructions and shutil.which("callgrind_control") is None:
        p.error("--instructions needs valgrind (Debian: valgrind)")
    unit = "instructions" if args.instructions else "us CPU"
    mine: list[float] = []
    base: list[float] = []
    for i in range(args.rounds):
        order = [("this", ROOT), ("base", args.tree)]
        if i % 2:
            order.reverse()
        for name, tree in order:
            settings = {**json.loads(args.both_settings),
                        **(json.loads(args.settings) if name == "this" else {})}
            figure = run(tree, args.resolves, settings, args.instructions)
            (mine if name == "this" else base).append(figure)
            print(f"round {i + 1} {name}: {figure:,.1f} {unit} per resolve", flush=True)
    m, b = statistics.median(mine), statistics.median(base)
    print(f"this: median {m:,.1f} {unit} (range {min(mine):,.1f}-{max(mine):,.1f}); "
          f"base: median {b:,.1f} {unit} (range {min(base):,.1f}-{max(base):,.1f}); "
          f"ratio {m / b:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
