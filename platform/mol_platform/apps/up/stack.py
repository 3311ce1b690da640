"""What ``mol up`` starts: the catalog, then (unless ``--catalog-only``) the demo
adapters, a local vLLM engine with the resolver plugin, and the router.

The engine's flags come from :func:`mol_platform.contract.engine_args.engine_args`, the
builder the operator uses for container args; the router reads a ``RouterConfig``
built by :func:`mol_platform.contract.router_config.router_config_from_spec`, as the
operator renders it. Everything lives under the data dir (``.mol``), so a second
``mol up`` reuses the catalog, the demo files and the adapter cache.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from mol_platform.apps.embedding_model import EmbeddingModelError, model_dir
from mol_platform.apps.engine_launcher import CPU_DISTRIBUTION
from mol_platform.apps.up.auth import (
    ROUTER_TOKEN_NAME,
    RouterKeys,
    admin_token,
    mint_engine_token,
    mint_router_token,
    router_keys,
)
from mol_platform.apps.up.banner import alias_lines, catalog_banner, stack_banner
from mol_platform.apps.up.engine_log import LogFollower
from mol_platform.apps.up.sandbox import check_sandbox, sandbox_address, start_sandbox
from mol_platform.apps.up.supervisor import (
    Service,
    Supervisor,
    UpError,
    catalog_argv,
    check_port_free,
    is_loopback,
    mol_argv,
    say,
    wait_healthy,
    wait_semantic,
)
from mol_platform.contract.engine_args import PluginSettings, embedding_args, engine_args
from mol_platform.contract.router_config import (
    RouterConfig,
    profile_name,
    router_config_from_spec,
)
from mol_platform.contract.routing_feedback import MAX_TEXT_CHARS
from mol_platform.contract.spec import MoLDeployment, MoLDeploymentSpec

DEFAULT_EXAMPLE = Path("deploy/examples/macaron-local.yaml")
ENGINE_VENV_ENV = "MOL_ENGINE_VENV"
ENGINE_HINT = ("build one with `make engine` (scripts/engine-venv.sh) and pass it with "
               f"--engine-venv or {ENGINE_VENV_ENV}")


@dataclass(frozen=True)
class Ports:
    catalog: int
    engine: int
    router: int
    embedding: int = 8002  # the semantic signal's embedding engine (127.0.0.1)
    sandbox: int = 8090  # the code harness's sandbox service (127.0.0.1)


@dataclass(frozen=True)
class TraceExport:
    """``mol up --otlp-endpoint``: every process exports spans there; the router samples
    ``ratio`` of requests (the engine follows it), the catalog trusts the router's
    ``traceparent`` (only local processes call it)."""

    endpoint: str
    ratio: float = 1.0

    def catalog_env(self) -> dict[str, str]:
        return {"MOL_CATALOG_TRACING_ENDPOINT": self.endpoint,
                "MOL_CATALOG_TRACING_SAMPLE_RATIO": f"{self.ratio:g}",
                "MOL_CATALOG_TRACING_TRUST_PARENT": "true"}

    def router_env(self) -> dict[str, str]:
        return {"MOL_ROUTER_TRACING_ENDPOINT": self.endpoint,
                "MOL_ROUTER_TRACING_SAMPLE_RATIO": f"{self.ratio:g}"}


@dataclass(frozen=True)
class EngineInstall:
    """Where vLLM runs: a Python with vLLM and mol-platform (the plugin) importable."""

    python: Path
    version: str  # e.g. "0.32.0"
    cpu: bool


def find_engine(venv: Path | None) -> EngineInstall:
    """The engine venv (``--engine-venv``, ``$MOL_ENGINE_VENV``) or this Python if it has vLLM."""
    configured = venv or (Path(os.environ[ENGINE_VENV_ENV])
                          if os.environ.get(ENGINE_VENV_ENV) else None)
    if configured is None:
        if importlib.util.find_spec("vllm") is None:
            raise UpError(f"no vLLM engine: this Python has no vLLM and no engine venv is set; "
                          f"{ENGINE_HINT}")
        python = Path(sys.executable)
        site = [Path(p) for p in sys.path if p.endswith("site-packages")]
    else:
        python = configured / "bin" / "python"
        if not python.is_file():
            raise UpError(f"engine venv {configured} has no bin/python; {ENGINE_HINT}")
        site = sorted(configured.glob("lib/python3*/site-packages"))
    found: dict[str, str] = {}
    for folder in site:
        for dist in folder.glob("*.dist-info"):
            name, _, version = dist.name.removesuffix(".dist-info").partition("-")
            found[name.lower().replace("_", "-")] = version
    found_version = found.get("vllm") or found.get(CPU_DISTRIBUTION)
    if found_version is None:
        raise UpError(f"{python} has no vLLM installed; {ENGINE_HINT}")
    if "mol-platform" not in found:
        raise UpError(f"{python} has vLLM but not mol-platform (the resolver plugin); "
                      "install it there: `pip install --no-deps .` (scripts/engine-venv.sh "
                      "does it)")
    return EngineInstall(python, found_version.split("+")[0], "vllm" not in found)


def load_spec(file: Path) -> MoLDeployment:
    try:
        text = file.read_text()
    except OSError as exc:
        raise UpError(f"cannot read {file}: {exc.strerror}; pass a MoLDeployment with -f FILE "
                      f"(the example is {DEFAULT_EXAMPLE} in the source tree)") from None
    try:
        return MoLDeployment.from_yaml(text)
    except ValueError as exc:
        raise UpError(f"{file} is not a valid MoLDeployment:\n{exc}") from None


def start_catalog(sup: Supervisor, host: str, port: int, data_dir: Path,
                  router_url: str | None = None, traces: TraceExport | None = None,
                  *, auth: bool = False, router_key: str | None = None,
                  sandbox_url: str | None = None) -> tuple[str, str | None]:
    """Start the catalog; returns its URL and the admin token (None without auth, which
    is on with ``auth`` and always beyond loopback). ``router_url``: the router the
    console's stack page and playground show; ``router_key``: their API key there (and
    the catalog's token at the sandbox); ``sandbox_url``: the sandbox service that runs
    proposed tools' examples."""
    auth = auth or not is_loopback(host)
    token = admin_token(data_dir) if auth else None
    connect = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    url = f"http://{'[' + connect + ']' if ':' in connect else connect}:{port}"
    env = {"MOL_CATALOG_ADMIN_TOKEN": token} if token else {}
    if router_url:
        env["MOL_CATALOG_ROUTER_URL"] = router_url
    if router_key:
        env["MOL_CATALOG_ROUTER_API_KEY"] = router_key
    if sandbox_url:
        env["MOL_CATALOG_SANDBOX_URL"] = sandbox_url
        if router_key:
            env["MOL_CATALOG_SANDBOX_TOKEN"] = router_key
    if traces is not None:
        env.update(traces.catalog_env())
    sup.start(Service("catalog", catalog_argv(host, port, data_dir, auth=auth),
                      f"{url}/healthz", env=env, log_path=data_dir / "logs" / "catalog.log"))
    return url, token


def start_catalog_only(sup: Supervisor, *, host: str, port: int, data_dir: Path,
                       demo: bool, traces: TraceExport | None = None,
                       auth: bool = False) -> str:
    from mol_platform.apps.up.seed import catalog_aliases, seed_demo, seed_note

    check_port_free(host, port, "--catalog-port")
    url, token = start_catalog(sup, host, port, data_dir, traces=traces, auth=auth)
    lines = ["", "MoL Platform catalog is up (embedded default).", catalog_banner(url, data_dir,
                                                                                  token)]
    first: dict[str, int] = {}
    if demo:
        say(seed_note(data_dir / "demo"))
        seeded = seed_demo(url, data_dir / "demo", token=token)
        lines.append(f"demo      base {seeded.base}, serving profile '{seeded.profile}'")
        first = seeded.adapters
    aliases, more = catalog_aliases(url, first, token=token)
    lines += alias_lines(aliases, more)
    return "\n".join(lines)


def start_stack(sup: Supervisor, *, file: Path, host: str, ports: Ports, data_dir: Path,
                engine_venv: Path | None, traces: TraceExport | None = None,
                auth: bool = False) -> str:
    """Everything: catalog, demo adapters, engine with the plugin, router. With ``auth``
    (always beyond loopback) the catalog needs tokens and the router API keys."""
    from mol_platform.apps.up.seed import catalog_aliases, seed_demo, seed_note

    obj = load_spec(file)
    engine = find_engine(engine_venv)
    check_port_free(host, ports.catalog, "--catalog-port")
    check_port_free("127.0.0.1", ports.engine, "--engine-port")
    check_port_free(host, ports.router, "--router-port")
    spec = obj.spec
    semantic = spec.router.semantic
    own_embedding = semantic is not None and semantic.embeddings_url is None
    if own_embedding and semantic is not None:
        try:  # fail before starting anything (a derived model is written once, ~1 s)
            embedding_dir = model_dir(semantic.model, data_dir / "embedding")
        except EmbeddingModelError as exc:
            raise UpError(str(exc)) from None
        check_port_free("127.0.0.1", ports.embedding, "--embedding-port")
    check_sandbox(spec, ports.sandbox)
    router_url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{ports.router}"
    auth = auth or not is_loopback(host)
    keys: RouterKeys | None = router_keys(data_dir) if auth else None
    url, token = start_catalog(sup, host, ports.catalog, data_dir, router_url, traces,
                               auth=auth, router_key=keys.console if keys else None,
                               sandbox_url=sandbox_address(spec, ports.sandbox))
    profile = profile_name(obj.metadata.name, obj.metadata.namespace or "default")
    say(seed_note(data_dir / "demo"))
    seeded = seed_demo(url, data_dir / "demo", token=token, profile=profile,
                       max_lora_rank=spec.engine.max_lora_rank, max_loras=spec.engine.max_loras,
                       engine=f"vllm=={engine.version}")
    engine_url = f"http://127.0.0.1:{ports.engine}"
    launch = engine_args(
        spec, model=str(local_model(spec.base_model.uri, seeded.model_dir)),
        host="127.0.0.1", port=ports.engine, cpu=engine.cpu,
        plugin=PluginSettings(catalog_url=url, serving_profile=profile,
                              catalog_token=mint_engine_token(url, token) if token else None,
                              cache_dir=str((data_dir / "adapter-cache").resolve())),
        otlp_traces_endpoint=traces.endpoint if traces is not None else None)
    logs = data_dir / "logs"
    engine_log = logs / "engine.log"
    engine_log.write_bytes(b"")
    embedding: Service | None = None
    embeddings_url = None
    if own_embedding and spec.router.semantic is not None:  # beside the LLM engine
        embeddings_url = f"http://127.0.0.1:{ports.embedding}"
        emb = embedding_args(str(embedding_dir), served_model_name=spec.router.semantic.model,
                             host="127.0.0.1", port=ports.embedding, cpu=engine.cpu)
        embedding = Service("embedding", [str(engine.python), "-m",
                                          "mol_platform.apps.engine_launcher", *emb.serve_args],
                            f"{embeddings_url}/health", env=emb.env,
                            log_path=logs / "embedding.log")
        sup.launch(embedding)

    say("the engine takes about a minute on a laptop CPU; vLLM's own log goes to its file")
    follow = LogFollower(engine_log, say, quiet=30.0)  # a heartbeat, not a line per 15 s
    started = time.monotonic()
    sup.start(Service("engine", [str(engine.python), "-m", "mol_platform.apps.engine_launcher",
                                 *launch.serve_args], f"{engine_url}/health",
                      env=launch.env, log_path=engine_log), timeout=600, progress=follow,
              every=1.0)
    say(f"engine ready after {time.monotonic() - started:.0f}s; its log: {engine_log}")
    if embedding is not None:
        wait_healthy(embedding, 600, lambda t: say(f"embedding engine starting ({t:.0f}s)"))
    weights = {e.name: float(e.canary.steps[0]) for e in spec.experts if e.canary is not None}
    config = router_config_from_spec(obj, endpoints=[engine_url], catalog_url=url,
                                     canary_weights=weights, embeddings_url=embeddings_url,
                                     sandbox_url=start_sandbox(sup, spec, ports.sandbox,
                                                               data_dir, keys))
    config = record_locally(config, spec)
    if keys is not None:
        config = config.model_copy(update={"api_keys_file": str(keys.path)})
    config_path = data_dir / "router.yaml"
    config_path.write_text(yaml.safe_dump(config.model_dump(mode="json", by_alias=True,
                                                            exclude_none=True), sort_keys=False))
    router_token = mint_router_token(url, token) if token else None
    env = {"MOL_CATALOG_TOKEN": router_token} if router_token else {}
    # On a laptop the router's log is read, not shipped: one line per request in it.
    env["MOL_ROUTER_ACCESS_LOG"] = "true"
    if traces is not None:
        env.update(traces.router_env())
    sup.start(Service("router", mol_argv("router", "serve", "--config", str(config_path),
                                         "--host", host, "--port", str(ports.router)),
                      f"{router_url}/healthz", env=env, log_path=logs / "router.log"))
    if config.semantic is not None:
        wait_semantic(f"{router_url}/readyz", 120.0, say)
    aliases, more = catalog_aliases(url, seeded.adapters, token=token)
    recorded = config.semantic is not None and config.semantic.record_decisions
    return stack_banner(obj, router_url, engine_url, url, data_dir, token, aliases, more,
                        embeddings_url, keys.local if keys else None,
                        config.home_namespace if recorded else None)


__all__ = ["ROUTER_TOKEN_NAME", "Ports", "TraceExport", "mint_router_token", "start_catalog",
           "start_catalog_only", "start_stack"]


def record_locally(config: RouterConfig, spec: MoLDeploymentSpec) -> RouterConfig:
    """``semantic.recordDecisions`` on, unless the spec sets it: under ``mol up`` the
    turns stay on this machine (the local catalog), and recording them is what lets
    ``mol router label`` and a retrain run on the demo (train, publish, label, train
    again) without editing YAML. In a cluster it stays off unless asked for: there
    users' turns would leave the router."""
    sem = config.semantic
    spec_sem = spec.router.semantic
    if sem is None or spec_sem is None or "record_decisions" in spec_sem.model_fields_set \
            or sem.max_chars > MAX_TEXT_CHARS:
        return config
    return config.model_copy(update={"semantic": sem.model_copy(
        update={"record_decisions": True})})


def local_model(uri: str, demo_base: Path) -> Path:
    """The weights folder: the spec's local path, else the demo model mol up built."""
    path = Path(uri.removeprefix("file://"))
    if (path / "config.json").is_file():
        return path.resolve()
    if "://" in uri and not uri.startswith("file://"):
        raise UpError(f"baseModel.uri {uri!r}: mol up serves local weights; use a folder path")
    return demo_base
