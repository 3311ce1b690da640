"""Command line: run simulated vLLM replicas until interrupted, printing their URLs.

``python -m mol_testkit.simulator --replicas 3 --port 0 --dynamic-loras``
prints one base URL per line (then a blank line once all listen), so a script or an
out-of-process test can read them from stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence

from mol_testkit.simulator.cluster import AsyncSimulatorCluster
from mol_testkit.simulator.config import SimConfig
from mol_testkit.simulator.server import LOOPBACK


def _lora_module(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not name:
        raise argparse.ArgumentTypeError(f"expected NAME or NAME=PATH, got {text!r}")
    return name, path if sep and path else f"/sim/adapters/{name}"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mol_testkit.simulator",
        description="Fake vLLM engines (OpenAI API, LoRA slots, vLLM metrics) on loopback.",
    )
    p.add_argument("--replicas", type=int, default=1, help="number of replicas (default 1)")
    p.add_argument("--host", default=LOOPBACK, help="address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--port", type=int, default=0,
        help="first port; replicas use PORT, PORT+1, ...; 0 picks free ports (default)",
    )  # fmt: skip
    p.add_argument("--model", default="base-model", help="served base model name")
    p.add_argument(
        "--model-path", default=None,
        help="model folder: root of the base model card; its tokenizer.json and chat "
        "template count prompt tokens (default: count words)",
    )  # fmt: skip
    p.add_argument(
        "--lora-modules", nargs="*", type=_lora_module, default=[], metavar="NAME[=PATH]",
        help="adapters registered at start, like vLLM's --lora-modules",
    )  # fmt: skip
    p.add_argument(
        "--dynamic-loras", action="store_true",
        help="accept any adapter name, as if a resolver plugin found it",
    )  # fmt: skip
    p.add_argument("--max-loras", type=int, default=4)
    p.add_argument("--max-cpu-loras", type=int, default=None)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument(
        "--lora-load-s", type=float, default=0.0,
        help="engine stall when an adapter enters a GPU slot from host memory (seconds; "
        "~0.01 for an 8B rank-16 LoRA on an H100)",
    )  # fmt: skip
    p.add_argument(
        "--lora-disk-load-s", type=float, default=0.0,
        help="further stall when the adapter is not in host memory and is read from disk "
        "(seconds; ~0.1 for the same LoRA from NVMe)",
    )  # fmt: skip
    p.add_argument(
        "--prefill-s-per-token", type=float, default=0.0,
        help="engine time per prompt token not in the prefix cache (seconds; ~5e-5 for "
        "Llama-3-8B BF16 on one H100 SXM)",
    )  # fmt: skip
    p.add_argument(
        "--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
        help="automatic prefix caching, as vLLM v1 (default on)",
    )  # fmt: skip
    p.add_argument("--ttft-s", type=float, default=0.0, help="time to first token")
    p.add_argument("--itl-s", type=float, default=0.0, help="inter-token latency")
    p.add_argument("--output-tokens", type=int, default=16, help="reply length in tokens")
    p.add_argument("--block-size", type=int, default=16, help="KV-cache block size in tokens")
    p.add_argument(
        "--kv-cache-blocks", type=int, default=4096,
        help="KV-cache blocks (vLLM's num_gpu_blocks); kv_cache_usage_perc is their share in use",
    )  # fmt: skip
    p.add_argument(
        "--tool-call-parser", default="hermes",
        help="as vLLM's --tool-call-parser; 'none' answers requests with tools 400, like vLLM "
        "without --enable-auto-tool-choice (default hermes)",
    )  # fmt: skip
    p.add_argument(
        "--scheduler-metrics-only", action="store_true",
        help="/metrics carries only the scheduler families (cheaper scrapes, many replicas)",
    )  # fmt: skip
    p.add_argument(
        "--check-adapter-paths", action=argparse.BooleanOptionalAction, default=True,
        help="loading an adapter needs PATH/adapter_config.json on disk, 404 otherwise, as "
        "vLLM (default on; --no-check-adapter-paths accepts any path)",
    )  # fmt: skip
    return p


def config_from_args(args: argparse.Namespace) -> SimConfig:
    return SimConfig(
        model=args.model,
        lora_modules=dict(args.lora_modules),
        dynamic_loras=args.dynamic_loras,
        max_loras=args.max_loras,
        max_cpu_loras=args.max_cpu_loras,
        max_num_seqs=args.max_num_seqs,
        max_model_len=args.max_model_len,
        lora_load_s=args.lora_load_s,
        lora_disk_load_s=args.lora_disk_load_s,
        prefill_s_per_token=args.prefill_s_per_token,
        enable_prefix_caching=args.enable_prefix_caching,
        ttft_s=args.ttft_s,
        itl_s=args.itl_s,
        output_tokens=args.output_tokens,
        model_path=args.model_path,
        block_size=args.block_size,
        kv_cache_blocks=args.kv_cache_blocks,
        tool_call_parser=None if args.tool_call_parser == "none" else args.tool_call_parser,
        check_adapter_paths=args.check_adapter_paths,
        detailed_metrics=not args.scheduler_metrics_only,
    )


async def serve(config: SimConfig, replicas: int, host: str, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with AsyncSimulatorCluster(replicas, config, host=host, base_port=port) as cluster:
        print("\n".join(cluster.urls), flush=True)
        print(flush=True)
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.replicas < 1:
        parser.error("--replicas must be >= 1")
    try:
        config = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        asyncio.run(serve(config, args.replicas, args.host, args.port))
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
