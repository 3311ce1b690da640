"""The vLLM engine-args builder: a ``MoLDeploymentSpec`` -> vLLM flags and environment.

Pure functions, shared by the operator's Deployment builder, ``mol up`` and the test
engine, so a flag means the same thing in a cluster and on a laptop. ``extraArgs``
come last: vLLM's argument parser keeps the last occurrence of a flag, so a user's
extra argument wins over a derived one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from mol_platform.contract.otlp import engine_tracing_env, traces_url
from mol_platform.contract.spec import ALLOWED_MAX_LORA_RANKS, MoLDeploymentSpec

# The tool-call parser vLLM needs for the router's `handoff` tool.
HANDOFF_TOOL_CALL_PARSER = "hermes"
# KV-cache size (GiB) a CPU engine reserves unless told otherwise.
DEFAULT_CPU_KVCACHE_GIB = 1
# Seconds a SIGTERMed engine gives its requests in flight before it exits. vLLM's own
# default (0) aborts them at once: every stream on a replica being rolled would be cut.
# A pod's terminationGracePeriodSeconds must exceed its preStop wait plus this.
ENGINE_DRAIN_SECONDS = 90


@dataclass(frozen=True)
class PluginSettings:
    """Settings of the MoL resolver plugin inside the engine (env ``MOL_*``).

    ``plugins`` sets ``VLLM_PLUGINS`` (which entry points of the ``vllm.*_plugins``
    groups load): None leaves it unset (all load), an empty tuple loads none.
    ``count_loads`` has the plugin count adapter loads where the engine makes them
    (``mol_engine_adapter_loads_total``), with or without a catalog.
    """

    catalog_url: str | None = None
    catalog_token: str | None = None
    serving_profile: str | None = None
    cache_dir: str | None = None
    cache_bytes: int | None = None
    plugins: tuple[str, ...] | None = None
    count_loads: bool = True

    def env(self) -> dict[str, str]:
        if self.cache_bytes is not None and self.cache_bytes <= 0:
            raise ValueError(f"adapter cache size must be positive bytes, got {self.cache_bytes}")
        if self.plugins is not None:
            bad = [p for p in self.plugins if not p or "," in p]
            if bad:
                raise ValueError(f"plugin names must be non-empty and contain no ',': {bad}")
        values = {
            "MOL_CATALOG_URL": self.catalog_url,
            "MOL_CATALOG_TOKEN": self.catalog_token,
            "MOL_SERVING_PROFILE": self.serving_profile,
            "MOL_ADAPTER_CACHE_DIR": self.cache_dir,
            "MOL_ADAPTER_CACHE_BYTES": None if self.cache_bytes is None else str(self.cache_bytes),
            "VLLM_PLUGINS": None if self.plugins is None else ",".join(self.plugins),
            "MOL_COUNT_ADAPTER_LOADS": "true" if self.count_loads else None,
        }
        return {k: v for k, v in values.items() if v is not None}


@dataclass(frozen=True)
class EngineLaunch:
    """What to run: ``vllm serve MODEL *flags`` with ``env`` added to the environment."""

    model: str
    flags: list[str]
    env: dict[str, str] = field(default_factory=dict)

    @property
    def serve_args(self) -> list[str]:
        """Arguments after the ``vllm`` executable (or after the launcher module)."""
        return ["serve", self.model, *self.flags]


def lora_flags(
    *,
    max_loras: int,
    max_lora_rank: int,
    max_cpu_loras: int | None = None,
    lora_modules: Mapping[str, str] | None = None,
) -> list[str]:
    """The flags that turn LoRA serving on; ``lora_modules`` are preloaded name=path pairs."""
    if max_loras < 1:
        raise ValueError(f"max_loras must be at least 1, got {max_loras}")
    if max_lora_rank not in ALLOWED_MAX_LORA_RANKS:
        allowed = ", ".join(str(r) for r in ALLOWED_MAX_LORA_RANKS)
        raise ValueError(f"max_lora_rank {max_lora_rank} is not supported by vLLM; use {allowed}")
    if max_cpu_loras is not None and max_cpu_loras < max_loras:
        raise ValueError(f"max_cpu_loras ({max_cpu_loras}) must be >= max_loras ({max_loras})")
    flags = ["--enable-lora", "--max-loras", str(max_loras), "--max-lora-rank", str(max_lora_rank)]
    if max_cpu_loras is not None:
        flags += ["--max-cpu-loras", str(max_cpu_loras)]
    if lora_modules:
        flags.append("--lora-modules")
        for name, path in lora_modules.items():
            if not name or "=" in name or " " in name:
                raise ValueError(f"invalid LoRA module name {name!r}")
            flags.append(f"{name}={path}")
    return flags


def runtime_env() -> dict[str, str]:
    """Env every MoL engine gets: adapters load and unload at runtime (and via plugins)."""
    return {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}


def cpu_env(kvcache_gib: int = DEFAULT_CPU_KVCACHE_GIB) -> dict[str, str]:
    """Env for vLLM's CPU build: KV cache size, all cores, offline, no usage stats."""
    if kvcache_gib < 1:
        raise ValueError(f"CPU KV cache must be at least 1 GiB, got {kvcache_gib}")
    return {
        "VLLM_CPU_KVCACHE_SPACE": str(kvcache_gib),
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
    }


def engine_args(
    spec: MoLDeploymentSpec,
    *,
    model: str | None = None,
    served_model_name: str | None = None,
    host: str | None = None,
    port: int | None = None,
    plugin: PluginSettings | None = None,
    cpu: bool = False,
    cpu_kvcache_gib: int = DEFAULT_CPU_KVCACHE_GIB,
    lora_modules: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    otlp_traces_endpoint: str | None = None,
) -> EngineLaunch:
    """Derive the engine command line and env from a deployment spec.

    ``model`` is where the engine reads weights (default ``baseModel.uri``; the
    operator passes the local path it mounted); ``served_model_name`` defaults to
    ``baseModel.name``. ``cpu=True`` is vLLM's CPU build (``mol up``, tests).
    ``otlp_traces_endpoint`` turns on vLLM's own spans (``--otlp-traces-endpoint``,
    OTLP/HTTP): children of the router's through the ``traceparent`` it sends.
    """
    eng = spec.engine
    flags: list[str] = ["--served-model-name", served_model_name or spec.base_model.name]
    if host is not None:
        flags += ["--host", host]
    if port is not None:
        if not 0 < port < 65536:
            raise ValueError(f"port must be in 1..65535, got {port}")
        flags += ["--port", str(port)]
    flags += lora_flags(
        max_loras=eng.max_loras,
        max_lora_rank=eng.max_lora_rank,
        max_cpu_loras=eng.max_cpu_loras,
        lora_modules=lora_modules,
    )
    if eng.max_model_len is not None:
        flags += ["--max-model-len", str(eng.max_model_len)]
    flags += [
        "--tensor-parallel-size",
        str(eng.tensor_parallel_size),
        "--gpu-memory-utilization",
        str(eng.gpu_memory_utilization),
    ]
    if spec.router.handoff.enabled:
        flags += ["--enable-auto-tool-choice", "--tool-call-parser", HANDOFF_TOOL_CALL_PARSER]
    flags += ["--shutdown-timeout", str(ENGINE_DRAIN_SECONDS)]  # SIGTERM drains
    env = runtime_env()
    if cpu:
        flags += ["--dtype", "float32"]
        env.update(cpu_env(cpu_kvcache_gib))
    if plugin is not None:
        env.update(plugin.env())
    if otlp_traces_endpoint:
        flags += ["--otlp-traces-endpoint", traces_url(otlp_traces_endpoint)]
        env.update(engine_tracing_env())
    if extra_env:
        env.update(extra_env)
    flags += list(eng.extra_args)
    return EngineLaunch(model=model or spec.base_model.uri, flags=flags, env=env)


EMBEDDING_FLAGS = ("--enforce-eager", "--distributed-executor-backend", "uni",
                   "--disable-log-stats", "--disable-uvicorn-access-log")


def embedding_args(
    model: str,
    *,
    served_model_name: str,
    host: str | None = None,
    port: int | None = None,
    cpu: bool = True,
) -> EngineLaunch:
    """The embedding engine of the semantic routing signal: vLLM's pooling runner on a
    sentence-embedding model (OpenAI ``/v1/embeddings``); no LoRA, no plugin (``mol up``,
    the operator's embedding Deployment and ``bench/auto_routing.py`` all run this).

    The flags are for one short input at a time, the routing step's shape (measured in
    docs/benchmarks.md): eager mode (torch.compile took minutes to start on a loaded
    CPU), one process for the engine core and its worker (the multiprocess executor's
    shared-memory queue spins in ``sched_yield``), no per-request access log or stats
    logging; on CPU float32 (half precision is emulated without AVX-512 and costs twice
    the CPU), and one OpenMP thread, not bound to a core: vLLM's CPU worker keeps a
    thread per core it may use, and between the short forwards those threads spin,
    taking the cores from the API server's process (8x the CPU per request on 2 cores,
    docs/benchmarks.md); a pod on a shared node must not pin a core either."""
    flags = ["--runner", "pooling", "--served-model-name", served_model_name,
             *EMBEDDING_FLAGS]
    if host is not None:
        flags += ["--host", host]
    if port is not None:
        if not 0 < port < 65536:
            raise ValueError(f"port must be in 1..65535, got {port}")
        flags += ["--port", str(port)]
    # The resolver plugin has nothing to resolve here; the worker runs in the engine core.
    env = {"VLLM_PLUGINS": "", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    if cpu:
        flags += ["--dtype", "float32"]
        env.update(cpu_env(1))
        env.update({"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"})
    return EngineLaunch(model=model, flags=flags, env=env)


def format_env(env: Mapping[str, str], keys: Sequence[str] | None = None) -> str:
    """``K=V K=V`` for logs and docs; secrets (``*TOKEN*``) are masked."""
    items = env.items() if keys is None else ((k, env[k]) for k in keys if k in env)
    return " ".join(f"{k}={'***' if 'TOKEN' in k else v}" for k, v in items)
