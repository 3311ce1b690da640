"""The stack the GPU check measures: catalog (embedded SQLite), vLLM with the MoL
resolver plugin, the router; built from the pieces ``mol up`` uses.

``mol up`` (``start_stack``) seeds the demo and serves it; here the base is the plan's,
so the same steps run with that base registered, the serving profile on it and the
engine sized for the plan (GPU slots for the largest batch of distinct adapters, a host
cache that holds every adapter the check loads). The engine's flags come from the same
builder the operator uses (``engine_args``), so the figures are for the flags a cluster
would run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from gpu.plan import NAMESPACE, Plan
from mol_platform.apps.up.stack import find_engine, start_catalog
from mol_platform.apps.up.supervisor import Service, Supervisor, mol_argv
from mol_platform.clients.catalog import CatalogClient
from mol_platform.contract.engine_args import PluginSettings, engine_args
from mol_platform.contract.router_config import profile_name, router_config_from_spec
from mol_platform.contract.spec import MoLDeployment
from mol_testkit.net import free_port

DEPLOYMENT = "gpu-check"
EXPERT = f"{NAMESPACE}/expert"
LAUNCHER = "mol_platform.apps.engine_launcher"
# A GPU machine for the check may have no network: nothing may wait on a hub or stats.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}


@dataclass(frozen=True)
class Stack:
    catalog: str
    engine: str
    router: str
    engine_log: Path
    served_model: str  # the base model's name on the engine
    base_ref: str  # name@revision in the catalog
    vllm_version: str
    startup_s: dict[str, float]


def deployment(plan: Plan, model_dir: Path) -> MoLDeployment:
    spec = {
        "apiVersion": "mol.dev/v1alpha1", "kind": "MoLDeployment",
        "metadata": {"name": DEPLOYMENT, "namespace": "default"},
        "spec": {"baseModel": {"name": plan.base_name, "uri": str(model_dir)},
                 "engine": {"maxLoras": plan.max_loras, "maxLoraRank": plan.max_lora_rank,
                            "maxCpuLoras": plan.max_cpu_loras,
                            "maxModelLen": plan.max_model_len,
                            "gpuMemoryUtilization": plan.gpu_memory_utilization,
                            "extraArgs": list(plan.engine_args)},
                 "adapterNamespaces": [NAMESPACE],
                 "experts": [{"name": "expert", "adapter": f"{EXPERT}@stable"}],
                 "router": {"mode": "explicit", "default": "expert"}},
    }
    return MoLDeployment.from_yaml(yaml.safe_dump(spec))


def start(sup: Supervisor, plan: Plan, model_dir: Path, expert: Path, data: Path,
          engine_venv: Path) -> Stack:
    """Start everything under ``sup`` (stopped by the caller); ``expert`` is the adapter
    the router's one expert serves (the router needs one; the check names adapters)."""
    engine = find_engine(engine_venv)
    logs = data / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    obj = deployment(plan, model_dir)
    profile = profile_name(obj.metadata.name, obj.metadata.namespace or "default")
    times: dict[str, float] = {}

    t0 = time.perf_counter()
    catalog, _token = start_catalog(sup, "127.0.0.1", free_port(), data)  # loopback: no auth
    with CatalogClient(catalog) as client:
        base = client.register_base(model_dir, plan.base_name)
        base_ref = f"{plan.base_name}@{base.revision}"
        client.set_profile(profile, base_model=base_ref, max_lora_rank=plan.max_lora_rank,
                           max_loras=plan.max_loras, engine=f"vllm=={engine.version}")
        client.publish(expert, EXPERT, base=base_ref, alias="stable")
    times["catalog"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    port = free_port()
    engine_url = f"http://127.0.0.1:{port}"
    launch = engine_args(
        obj.spec, model=str(model_dir), host="127.0.0.1", port=port, cpu=engine.cpu,
        plugin=PluginSettings(catalog_url=catalog, serving_profile=profile,
                              cache_dir=str((data / "adapter-cache").resolve())),
        extra_env=OFFLINE_ENV)
    engine_log = logs / "engine.log"
    sup.start(Service("engine", [str(engine.python), "-m", LAUNCHER, *launch.serve_args],
                      f"{engine_url}/health", env=launch.env, log_path=engine_log),
              timeout=plan.engine_timeout_s)
    times["engine"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    config = router_config_from_spec(obj, endpoints=[engine_url], catalog_url=catalog)
    config_path = data / "router.yaml"
    config_path.write_text(yaml.safe_dump(config.model_dump(mode="json", by_alias=True,
                                                            exclude_none=True), sort_keys=False))
    router = f"http://127.0.0.1:{free_port()}"
    sup.start(Service("router", mol_argv("router", "serve", "--config", str(config_path),
                                         "--host", "127.0.0.1",
                                         "--port", router.rsplit(":", 1)[1]),
                      f"{router}/healthz", log_path=logs / "router.log"))
    times["router"] = time.perf_counter() - t0
    return Stack(catalog, engine_url, router, engine_log, plan.base_name, base_ref,
                 engine.version, times)
