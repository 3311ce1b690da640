"""The GPU check: adapter load tiers, multi-LoRA throughput and TTFT, router overhead
and time to serve, on one real vLLM engine. Run it through ``bench/gpu/run.sh``.

    bench/gpu/run.sh                     # one NVIDIA GPU, vLLM's CUDA build
    bench/gpu/run.sh --dry-run --out DIR # the same steps on vLLM's CPU build, tiny model

Steps: write the random-weight base and the adapters (``gpu.plan``); start the catalog,
the engine with the resolver plugin and the router (``gpu.stack``); publish the
throughput adapters; the load tiers per rank (``gpu.tiers``); throughput and TTFT for
the base alone and for 1/8/64 distinct adapters, straight to the engine and through the
router (``gpu.traffic``); publish -> first token (``bench/time_to_serve.py``'s probes).
Figures go to OUT/gpu-check.json after every step and OUT/gpu-check.md at the end, the
services' logs to OUT/logs/.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))

import httpx  # noqa: E402

from _machine import machine_info  # noqa: E402
from _report import percentile  # noqa: E402
from gpu import report, stack, tiers, traffic  # noqa: E402
from gpu.plan import DRY_RUN, GPU, NAMESPACE, Assets, Plan, build_assets, throughput_name  # noqa: E402
from mol_platform.apps.demo.adapters import write_adapter  # noqa: E402
from mol_platform.apps.up.supervisor import Stopped, Supervisor, stop_on_signals  # noqa: E402
from mol_platform.clients.catalog import CatalogClient  # noqa: E402
from time_to_serve import RECIPE, Run, first_token, plugin_timings  # noqa: E402

DEFAULT_OUT = BENCH / "gpu" / "out"


def gpu_name(smi: str) -> str | None:
    """``name, memory`` of the first GPU from nvidia-smi, None where it gives none."""
    try:
        done = subprocess.run([smi, "--query-gpu=name,memory.total", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else None


def publish_throughput(catalog: str, base_ref: str, assets: Assets) -> float:
    """Publish the throughput adapters as ``bench/t-N@stable`` (version 1 each)."""
    start = time.perf_counter()
    with CatalogClient(catalog) as client:
        for i, folder in enumerate(assets.throughput):
            version = client.publish(folder, throughput_name(i), base=base_ref,
                                     alias="stable").version
            if version != 1:
                raise RuntimeError(f"{throughput_name(i)}: expected version 1, got {version}")
    return time.perf_counter() - start


def throughput(plan: Plan, st: stack.Stack) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows (base alone, then each count straight to the engine and through the router)
    and the router's overhead for each count."""
    def one(url: str, target: str, models: list[str], adapters: int) -> dict[str, Any]:
        got = traffic.run(url, target, models, plan.prompt, requests=plan.requests,
                          concurrency=plan.concurrency, max_tokens=plan.max_tokens)
        row = got.figures(adapters)
        print(f"throughput {target} {adapters} adapter(s): {row['tokens_per_s']} tok/s, "
              f"TTFT p50 {row['ttft_p50_s'] * 1000:.1f} ms, errors {row['errors']}",
              file=sys.stderr, flush=True)
        return row

    rows = [one(st.engine, "engine", [st.served_model], 0)]
    overhead = []
    for n in plan.adapter_counts:
        direct = one(st.engine, "engine", [f"{throughput_name(i)}@v1" for i in range(n)], n)
        routed = one(st.router, "router", [f"{throughput_name(i)}@stable" for i in range(n)], n)
        rows += [direct, routed]
        overhead.append({
            "adapters": n,
            "throughput_ratio": round(routed["tokens_per_s"] / direct["tokens_per_s"], 4)
            if direct["tokens_per_s"] else 0.0,
            "ttft_p50_added_s": round(routed["ttft_p50_s"] - direct["ttft_p50_s"], 5)})
    return rows, overhead


def time_to_serve(plan: Plan, st: stack.Stack, base: Path, work: Path) -> dict[str, Any]:
    """New adapters published one after another, each timed to its first token through
    the router (cold), with the resolver plugin's own timings from the engine log."""
    runs: list[Run] = []
    with httpx.Client(timeout=120) as client, CatalogClient(st.catalog) as catalog:
        for i in range(plan.serve_runs):
            folder = write_adapter(work / f"s-{i}", RECIPE, plan.model, base_model=str(base),
                                   seed=10_000 + i)
            name = f"{NAMESPACE}/s-{i}"
            t0 = time.perf_counter()
            version = catalog.publish(folder, name, base=st.base_ref, alias="stable").version
            published = time.perf_counter()
            total = first_token(client, st.router, f"{name}@stable")
            warm = first_token(client, st.router, f"{name}@stable")
            resolve, fetch = plugin_timings(st.engine_log, f"{name}@v{version}")
            runs.append(Run(published - t0, total, resolve, fetch, warm))

    def p50(values: list[float]) -> float:
        return round(percentile(values, 50), 5)

    return {"runs": len(runs), "p50_s": p50([r.total for r in runs]),
            "max_s": round(max(r.total for r in runs), 5),
            "resolve_p50_s": p50([r.resolve for r in runs]),
            "fetch_p50_s": p50([r.fetch for r in runs]),
            "warm_first_token_p50_s": p50([r.warm_first_token for r in runs]),
            "publish_p50_s": p50([r.publish for r in runs]),
            "samples": [{"total_s": round(r.total, 5), "resolve_s": round(r.resolve, 5),
                         "fetch_s": round(r.fetch, 5),
                         "warm_first_token_s": round(r.warm_first_token, 5)} for r in runs]}


def keep_logs(logs: Path, out: Path) -> None:
    """The catalog's, the engine's and the router's logs beside the figures."""
    if logs.is_dir():
        out.mkdir(parents=True, exist_ok=True)
        for log in logs.glob("*.log"):
            shutil.copyfile(log, out / log.name)


def measure(plan: Plan, out: Path, engine_venv: Path, figures: dict[str, Any]) -> None:
    """Every step, the figures written after each one; raises on the first failure."""
    def phase(name: str) -> None:
        figures["status"] = f"running: {name}"
        report.write_json(out, figures)
        print(f"gpu check: {name} ...", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="mol-gpu-check-") as tmp:
        work = Path(tmp)
        phase("building the base model and adapters")
        t0 = time.perf_counter()
        assets = build_assets(plan, work / "assets")
        figures["build_s"] = round(time.perf_counter() - t0, 3)
        phase("starting the catalog, the engine and the router")
        sup = Supervisor()
        try:
            st = stack.start(sup, plan, assets.base, assets.throughput[0], work / "stack",
                             engine_venv)
            figures["vllm_version"] = st.vllm_version
            figures["startup_s"] = {k: round(v, 3) for k, v in st.startup_s.items()}
            phase("publishing the throughput adapters")
            figures["publish_s"] = round(publish_throughput(st.catalog, st.base_ref, assets), 3)
            figures["published"] = len(assets.throughput)
            phase("adapter load tiers")
            fillers = [f"{throughput_name(i)}@v1" for i in range(plan.max_loras)]
            figures["load_tiers"] = tiers.measure(st.engine, st.served_model, assets.by_rank,
                                                  fillers, plan.prompt, plan.repeats)
            phase("throughput and TTFT")
            figures["throughput"], figures["router_overhead"] = throughput(plan, st)
            phase("time to serve")
            figures["time_to_serve"] = time_to_serve(plan, st, assets.base, work / "serve")
        finally:
            sup.stop()
            keep_logs(work / "stack" / "logs", out / "logs")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true",
                   help="vLLM's CPU build and the tiny demo model (not performance figures)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help=f"folder for gpu-check.json and gpu-check.md ({DEFAULT_OUT})")
    p.add_argument("--engine-venv", type=Path, required=True,
                   help="a venv with vLLM and mol-platform (run.sh passes it)")
    p.add_argument("--gpu-smi", default="nvidia-smi", help="nvidia-smi, to name the GPU")
    args = p.parse_args()
    plan = DRY_RUN if args.dry_run else GPU
    out = args.out.resolve()
    figures: dict[str, Any] = {
        "mode": plan.mode,
        "label": report.DRY_RUN_LABEL if args.dry_run else report.GPU_LABEL,
        "measured_at": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "machine": machine_info().markdown(),
        "gpu": None if args.dry_run else gpu_name(args.gpu_smi),
        "plan": {"model": plan.describe(), "ranks": list(plan.ranks),
                 "adapter_counts": list(plan.adapter_counts), "max_loras": plan.max_loras,
                 "max_lora_rank": plan.max_lora_rank, "max_cpu_loras": plan.max_cpu_loras,
                 "requests": plan.requests, "concurrency": plan.concurrency,
                 "max_tokens": plan.max_tokens, "prompt_words": plan.prompt_words,
                 "engine_args": list(plan.engine_args)},
        "status": "starting",
    }
    started = time.perf_counter()
    code = 0
    with stop_on_signals():
        try:
            measure(plan, out, args.engine_venv, figures)
            figures["status"] = "complete"
        except Stopped as stop:
            figures["status"] = f"stopped by {stop} ({figures['status']})"
            code = 124
        except Exception as exc:  # the figures so far are kept, with what went wrong
            figures["status"] = f"failed ({figures['status']}): {type(exc).__name__}: {exc}"
            code = 1
    figures["elapsed_s"] = round(time.perf_counter() - started, 3)
    path = report.write_json(out, figures)
    md = report.write_markdown(out, figures)
    print(f"gpu check: {figures['status']}; figures in {path} and {md}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
