"""Time to serve: publish a new adapter -> its first token through the router.

    MOL_ENGINE_VENV=... .venv/bin/python bench/time_to_serve.py            # 10 runs
    .venv/bin/python bench/time_to_serve.py --runs 20 --allow-busy

Starts the local stack the way `mol up` does (catalog on the embedded default, one
vLLM CPU engine with the resolver plugin, the router), then, once the engine is up,
for each run: writes a new adapter (never seen by the engine or its cache), publishes
it as `bench/a-N@stable`, and streams a one-token completion for `bench/a-N@stable`
through the router, timing publish-answered -> first token (cold). The breakdown:
the plugin's own timings from the engine log (catalog resolve; download + sha256 +
rename into the cache), the first token of the same request once the adapter is
loaded (warm), and the remainder (vLLM loading the adapter, plus the router's own
resolve and forwarding). Writes the "time-to-serve" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import machine_info, quiet_check
from _report import percentile, write_section
from mol_platform.apps.demo.adapters import DEMO_ADAPTERS, write_adapter
from mol_platform.apps.demo.model import DemoModelConfig
from mol_platform.apps.up.stack import Ports, start_stack
from mol_platform.apps.up.supervisor import Supervisor
from mol_platform.clients.catalog import CatalogClient
from mol_testkit.engine import find_engine_venv
from mol_testkit.net import free_port

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"
TARGET_P50_S = 1.0
RECIPE = DEMO_ADAPTERS[0]  # rank 8 on q_proj/v_proj, ~70 KB
PLUGIN_LINE = re.compile(
    r"MoL resolver: (\S+) -> \S+ \(.*; resolve ([\d.]+) ms, fetch ([\d.]+) ms\)")


@dataclass(frozen=True)
class Run:
    publish: float
    total: float  # publish answered -> first token, cold
    resolve: float
    fetch: float
    warm_first_token: float

    @property
    def remainder(self) -> float:
        return max(0.0, self.total - self.resolve - self.fetch - self.warm_first_token)


def spec(base: Path) -> dict[str, object]:
    return {
        "apiVersion": "mol.dev/v1alpha1", "kind": "MoLDeployment",
        "metadata": {"name": "bench", "namespace": "default"},
        "spec": {"baseModel": {"name": "tiny-llama", "uri": str(base)},
                 "engine": {"maxLoras": 2, "maxLoraRank": 16, "maxCpuLoras": 4,
                            "maxModelLen": 512},
                 "adapterNamespaces": ["bench", "demo"],
                 "experts": [{"name": "chat", "adapter": "demo/chat@stable"}],
                 "router": {"mode": "explicit", "default": "chat"}},
    }


def first_token(client: httpx.Client, router: str, model: str) -> float:
    """Seconds from sending a streamed one-token completion to its first content chunk."""
    body = {"model": model, "prompt": "Hello", "max_tokens": 1, "temperature": 0,
            "stream": True}
    start = time.perf_counter()
    with client.stream("POST", f"{router}/v1/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{model}: HTTP {response.status_code}: {response.read()!r}")
        for line in response.iter_lines():
            if (line.startswith("data: ") and line != "data: [DONE]"
                    and json.loads(line[6:]).get("choices")):
                return time.perf_counter() - start
    raise RuntimeError(f"{model}: the stream ended without a token")


def plugin_timings(log: Path, name: str, timeout: float = 10.0) -> tuple[float, float]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in PLUGIN_LINE.finditer(log.read_text(errors="replace")):
            if m[1] == name:
                return float(m[2]) / 1000, float(m[3]) / 1000
        time.sleep(0.1)
    raise RuntimeError(f"no resolver line for {name} in {log}")


def measure(work: Path, runs: int, engine_venv: Path) -> tuple[list[Run], float]:
    data = work / "stack"
    (data / "logs").mkdir(parents=True)
    spec_file = work / "bench.yaml"
    spec_file.write_text(yaml.safe_dump(spec(data / "demo" / "tiny-llama")))
    ports = Ports(catalog=free_port(), engine=free_port(), router=free_port())
    sup = Supervisor()
    router = f"http://127.0.0.1:{ports.router}"
    catalog_url = f"http://127.0.0.1:{ports.catalog}"
    results: list[Run] = []
    try:
        started = time.perf_counter()
        start_stack(sup, file=spec_file, host="127.0.0.1", ports=ports, data_dir=data,
                    engine_venv=engine_venv)
        startup = time.perf_counter() - started
        base = data / "demo" / "tiny-llama"
        with httpx.Client(timeout=120) as client, CatalogClient(catalog_url) as catalog:
            first_token(client, router, "chat")  # the engine's first request compiles
            for i in range(runs):
                folder = write_adapter(work / "adapters" / f"a-{i}", RECIPE, DemoModelConfig(),
                                       base_model=str(base), seed=10_000 + i)
                name = f"bench/a-{i}"
                t0 = time.perf_counter()
                version = catalog.publish(folder, name, alias="stable").version
                published = time.perf_counter()
                total = first_token(client, router, f"{name}@stable")
                warm = first_token(client, router, f"{name}@stable")
                resolve, fetch = plugin_timings(data / "logs" / "engine.log", f"{name}@v{version}")
                results.append(Run(published - t0, total, resolve, fetch, warm))
                print(f"run {i + 1}/{runs}: {total * 1000:.0f} ms (resolve {resolve * 1000:.1f}, "
                      f"fetch {fetch * 1000:.1f}, warm first token {warm * 1000:.0f})",
                      file=sys.stderr)
    finally:
        sup.stop()
    return results, startup


def report(results: list[Run], startup: float, argv: list[str], noisy: str | None) -> str:
    def row(label: str, values: list[float]) -> str:
        return (f"| {label} | {percentile(values, 50) * 1000:.1f} ms | "
                f"{max(values) * 1000:.1f} ms |")

    totals = [r.total for r in results]
    p50 = percentile(totals, 50)
    met = "met" if p50 <= TARGET_P50_S else "NOT met"
    lines = [
        "## Time to serve a new adapter (`bench/time_to_serve.py`)",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine_info().markdown()}; "
        f"vLLM CPU build, the demo model; {len(results)} runs; "
        f"command: `{' '.join(['python', 'bench/time_to_serve.py', *argv])}`.",
        "",
        "Publish a new adapter (rank 8, q/v, ~70 KB) as `bench/a-N@stable`, then stream a "
        "one-token completion for it through the router on the already-running engine: "
        "cold (the engine and its adapter cache have never seen it).",
        "",
        "| step | p50 | max |",
        "|---|---|---|",
        row("**publish answered -> first token (cold)**", totals),
        row("plugin: catalog resolve", [r.resolve for r in results]),
        row("plugin: download + sha256 + rename into the cache", [r.fetch for r in results]),
        row("first token once loaded (warm)", [r.warm_first_token for r in results]),
        row("remainder: vLLM loads the adapter, router resolve and forwarding",
            [r.remainder for r in results]),
        row("publish itself (upload + compatibility check)", [r.publish for r in results]),
        "",
        f"Target p50 <= {TARGET_P50_S:.0f} s: **{met}** ({p50 * 1000:.0f} ms). The stack "
        f"(catalog, engine, router) took {startup:.0f} s to start.",
    ]
    if noisy:
        lines += ["", f"Figures are noisy: {noisy} when the run started."]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=10, help="adapters published and served (10)")
    p.add_argument("--allow-busy", action="store_true",
                   help="run even while other processes use the CPU (figures marked noisy)")
    p.add_argument("--busy-limit", type=float, default=0.3,
                   help="cores other processes may use before the run refuses (0.3)")
    p.add_argument("--no-report", action="store_true", help="do not write docs/benchmarks.md")
    args = p.parse_args()
    if not 1 <= args.runs <= 1000:
        p.error("--runs must be within 1..1000")
    ok, seen = quiet_check(args.busy_limit)
    if not ok and not args.allow_busy:
        print(f"refusing to measure: {seen}; stop them or pass --allow-busy", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mol-tts-") as tmp:
        results, startup = measure(Path(tmp), args.runs, find_engine_venv())
    body = report(results, startup, sys.argv[1:], None if ok else seen)
    print(body)
    if not args.no_report:
        write_section(DOCS, "time-to-serve", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
